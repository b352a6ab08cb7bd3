#!/usr/bin/env python3
"""Per-step host/device split between two /stats snapshots of a hearth server.

    python3 bench/gpu/stats_delta.py BEFORE.json AFTER.json LABEL

Prints one JSON line: steps, and per step the ms spent issuing the forward (host), waiting for the device's
output after issuing, and sampling + bookkeeping on the host (the scheduler's step counters).
"""
import json
import sys


def main() -> None:
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
    steps = b["steps_total"] - a["steps_total"]
    out = {"label": sys.argv[3] if len(sys.argv) > 3 else "", "steps": steps}
    for k in ("step_issue_ms_total", "step_wait_ms_total", "step_sample_ms_total"):
        out[k.replace("_total", "_per_step").replace("step_", "")] = round((b[k] - a[k]) / max(steps, 1), 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
