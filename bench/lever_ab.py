#!/usr/bin/env python3
"""Paired A/B of one lever on `hearth generate` (CPU): the variants alternate round by round on one machine.

Usage (from the repo root, after scripts/fetch-models and `cargo build --release -p hearth-cli`):
    python3 bench/lever_ab.py HEARTH_K_QUANT gemma3-270m [--rounds 5] [--values 1,0] [--threads 2]
                              [--prompt-file bench/prompts/long.txt] [--gen 128]

Each round runs `hearth generate --raw --ignore-eos --json` once per value of the lever (order alternating
between rounds) and records its own prefill and decode tok/s. Prints one markdown row per value: medians, and
every round's numbers, for docs/benchmarks.md. Without --prompt-file the prompt is "Once upon a time" (decode at
short context). Stdlib only.
"""
import argparse, json, os, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEARTH = os.environ.get("HEARTH_BIN") or os.path.join(ROOT, "target/release/hearth")


def run(lever, value, a):
    env = dict(os.environ, **{lever: value})
    cmd = [HEARTH, "generate", "-m", a.model, "--device", "cpu", "--threads", str(a.threads), "--raw",
           "--max-tokens", str(a.gen), "--ignore-eos", "--json"]
    cmd += ["--prompt-file", a.prompt_file] if a.prompt_file else ["Once upon a time"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({lever}={value}):\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)["timings"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lever")
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--values", default="1,0")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--prompt-file")
    a = ap.parse_args()
    if not os.path.exists(HEARTH):
        sys.exit(f"missing {HEARTH}: cargo build --release -p hearth-cli")
    values = a.values.split(",")
    res = {v: [] for v in values}
    for r in range(a.rounds):
        order = values if r % 2 == 0 else values[::-1]
        for v in order:
            res[v].append(run(a.lever, v, a))
    print(f"| {a.model}, {a.prompt_file or 'short prompt'} | prompt tokens | prefill tok/s (median; rounds) | "
          f"decode tok/s (median; rounds) |")
    print("|---|---|---|---|")
    for v in values:
        t = res[v]
        pf = [x["prefill_tok_s"] for x in t]
        dc = [x["decode_tok_s"] for x in t]
        print(f"| `{a.lever}={v}` | {t[0]['prompt_tokens']} | {statistics.median(pf):.1f} "
              f"({' / '.join(f'{x:.1f}' for x in pf)}) | {statistics.median(dc):.1f} "
              f"({' / '.join(f'{x:.1f}' for x in dc)}) |", flush=True)


if __name__ == "__main__":
    main()
