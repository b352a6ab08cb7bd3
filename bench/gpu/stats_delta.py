#!/usr/bin/env python3
"""Per-step host/device split between two /stats snapshots of a hearth server.

    python3 bench/gpu/stats_delta.py BEFORE.json AFTER.json LABEL

Prints one JSON line: steps, and per step the ms spent issuing the forward (host), waiting for the device's
output after issuing, and sampling + bookkeeping on the host (the scheduler's step counters); with
HEARTH_CUDA_STEP_TIMING=1 also the device's time per step and the gap between steps (CUDA events).
"""
import json
import sys


def main() -> None:
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
    steps = b["steps_total"] - a["steps_total"]
    out = {"label": sys.argv[3] if len(sys.argv) > 3 else "", "steps": steps}
    for k in ("step_issue_ms_total", "step_wait_ms_total", "step_sample_ms_total"):
        out[k.replace("_total", "_per_step").replace("step_", "")] = round((b[k] - a[k]) / max(steps, 1), 3)
    # HEARTH_CUDA_STEP_TIMING=1: device time per step and the gap between steps (CUDA events).
    if b.get("step_device_ms_total", 0) > a.get("step_device_ms_total", 0):
        out["device_ms_per_step"] = round((b["step_device_ms_total"] - a["step_device_ms_total"]) / max(steps, 1), 3)
        gaps = b["step_gaps_total"] - a["step_gaps_total"]
        out["gap_ms_per_step"] = round((b["step_gap_ms_total"] - a["step_gap_ms_total"]) / max(gaps, 1), 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
