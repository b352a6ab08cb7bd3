#!/usr/bin/env python3
"""Summarize an `ncu --csv --page raw --metrics gpu__time_duration.sum` log: time per kernel name per step.

    python3 bench/gpu/ncu_summary.py NCU_CSV [--steps N]
"""
import argparse, collections, csv, io


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=1)
    a = ap.parse_args()
    text = open(a.csv, errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        print("no kernel rows in", a.csv)
        print(text[-2000:])
        return
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    col = next((c for c in rows[0] if c.startswith("gpu__time_duration")), None) if rows else None
    total = collections.Counter()
    count = collections.Counter()
    for r in rows:
        try:
            v = float(str(r[col]).replace(",", ""))
        except (TypeError, ValueError):
            continue  # the units row
        name = r.get("Kernel Name", "?")[:90]
        total[name] += v
        count[name] += 1
    unit = "ns"
    all_t = sum(total.values())
    print(f"{len(rows)} kernel launches over {a.steps} steps; GPU time per step {all_t / a.steps / 1e3:.1f} us ({unit} read as ns)")
    for name, t in total.most_common(25):
        print(f"{t / a.steps / 1e3:9.1f} us/step {count[name] / a.steps:7.1f} launches/step  {name}")


if __name__ == "__main__":
    main()
