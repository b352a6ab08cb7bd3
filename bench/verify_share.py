#!/usr/bin/env python3
"""The SSD tier's data check as a share of a restore: reads the JSON lines of bench/prompt_cache.py reattach runs
labelled "verify on" / "verify off" (bench/prompt_cache.sh restore-verify, bench/gpu/device_restore_verify.sh) and
prints each side's TTFTs and median, and (median on - median off) / median on.
    python3 bench/verify_share.py RESTORE.jsonl"""
import json, statistics, sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
med = {}
for v in ("on", "off"):
    side = [r for r in rows if r.get("label") == f"verify {v}"]
    med[v] = statistics.median(r["ttft_ms"] for r in side)
    print(json.dumps({"verify": v, "ttft_ms": [r["ttft_ms"] for r in side], "median_ms": med[v],
                      "cached_tokens": [r.get("cached_tokens") for r in side]}))
print(json.dumps({"check_share_of_restore": round((med["on"] - med["off"]) / med["on"], 4)}))
