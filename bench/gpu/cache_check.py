#!/usr/bin/env python3
"""Prompt-cache hits against cold runs, on any server (loopback only): a prompt sent twice (the second time all but
its last token is a hit, its tail copied from a cached block) and a second turn that continues the first (prompt +
reply + more), each against a server without the cache (`--cold URL`).

    python3 bench/gpu/cache_check.py --url URL --cold COLD_URL [--exact]
Prints one JSON line per check: the hit's cached tokens and how many characters of the greedy answers agree.
Exits 1 when a hit is smaller than it must be, when the first generated tokens differ, or (with --exact, for a
batch-invariant engine: the CPU build) when the answers differ at all. The CUDA build does not claim batch
invariance (a hit computes its last tokens in another kernel shape than a cold prefill), and a random checkpoint's
flat logits turn such low-bit differences into different greedy tokens after a few steps."""
import argparse, json, sys, urllib.parse, urllib.request


def complete(url, prompt, n):
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        v = json.load(r)
    u = v.get("usage", {})
    return v["choices"][0]["text"], u.get("prompt_tokens"), (u.get("prompt_tokens_details") or {}).get("cached_tokens")


def agree(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--cold", required=True)
    ap.add_argument("--exact", action="store_true")
    a = ap.parse_args()
    for u in (a.url, a.cold):
        if urllib.parse.urlparse(u).hostname not in ("127.0.0.1", "localhost"):
            raise SystemExit("loopback servers only")
    base = "The history of the printing press begins in the fifteenth century, when a goldsmith from Mainz " \
           "combined movable metal type, oil-based ink and a wooden press adapted from wine making. " * 3
    ok = True
    first, n, _ = complete(a.url, base, 24)
    again, _, cached = complete(a.url, base, 24)
    cold, _, _ = complete(a.cold, base, 24)
    print(json.dumps({"check": "same prompt twice", "prompt_tokens": n, "cached": cached,
                      "chars_agreeing": agree(again, cold), "of": len(cold), "cold_run_repeats": first == cold}))
    ok &= cached == n - 1 and agree(again, cold) >= 4 and (again == cold or not a.exact)
    turn2 = base + first + " Who printed the first Bible, and where?"
    hit, n2, cached2 = complete(a.url, turn2, 24)
    cold2, _, _ = complete(a.cold, turn2, 24)
    print(json.dumps({"check": "second turn", "prompt_tokens": n2, "cached": cached2,
                      "chars_agreeing": agree(hit, cold2), "of": len(cold2)}))
    ok &= cached2 is not None and cached2 >= n - 4 and agree(hit, cold2) >= 4 and (hit == cold2 or not a.exact)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
