#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (hearth, llama.cpp's llama-server), loopback only, bounded.

    python3 bench/load.py --url http://127.0.0.1:8080 --concurrency 1,4,8,16 --requests 16 --max-tokens 128

For each concurrency C it runs `--requests` streaming /v1/completions requests (greedy, ignore_eos, a fixed
prompt behind a distinct opening word per request, so no prompt cache can serve it; or, with
`--prompt-tokens N`, exactly N random token ids per request) with at most C in flight, and reports aggregate output tok/s (all tokens / wall time), TTFT p50/p95 and
inter-token latency p50/p95 (gaps between SSE content chunks). Prints one JSON line per level (and a markdown
row with --markdown). Stdlib only; refuses non-loopback URLs.
"""
import argparse, http.client, json, os, random, statistics, threading, time, urllib.parse


OPENERS = ["Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf", "Hotel", "India", "Juliet", "Kilo",
           "Lima", "Mike", "November", "Oscar", "Papa", "Quebec", "Romeo", "Sierra", "Tango", "Uniform", "Victor"]


RUN_NONCE = os.urandom(3).hex()


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def token_prompt(n, vocab, seed):
    """A prompt of exactly n token ids, distinct per seed (no prompt cache can serve it)."""
    rng = random.Random(seed)
    return [rng.randrange(100, vocab) for _ in range(n)]


def one_request(host, port, prompt, max_tokens, timeout, extra=None):
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "ignore_eos": True, **(extra or {})}).encode()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    times = []
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    conn.close()
                    return t0, times
                obj = json.loads(data)
                if "error" in obj:
                    raise RuntimeError(obj["error"])
                ch = obj.get("choices") or []
                if ch and ch[0].get("text"):
                    times.append(time.perf_counter())
    conn.close()
    return t0, times


def run_level(host, port, prompt, conc, n_req, max_tokens, timeout, prompt_tokens=0, vocab=0, extra=None):
    lock = threading.Lock()
    results, errors = [], []
    todo = list(range(n_req))

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            try:
                # A distinct opening per request (unique across levels and runs), so no server can answer
                # from a cached prompt prefix.
                opener = f"{OPENERS[i % len(OPENERS)]} {RUN_NONCE}-{conc}-{i}."
                body_prompt = (token_prompt(prompt_tokens, vocab, opener) if prompt_tokens
                               else f"{opener} {prompt}")
                r = one_request(host, port, body_prompt, max_tokens, timeout, extra)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(len(ts) for _, ts in results)
    ttft = [ts[0] - s for s, ts in results if ts]
    itl = [b - a for _, ts in results for a, b in zip(ts, ts[1:])]
    return {
        "concurrency": conc, "requests": len(results), "errors": len(errors), "tokens": tokens,
        "wall_s": round(wall, 2), "agg_tok_s": round(tokens / wall, 1),
        "ttft_p50_ms": round(pct(ttft, 50) * 1e3, 1), "ttft_p95_ms": round(pct(ttft, 95) * 1e3, 1),
        "itl_p50_ms": round(pct(itl, 50) * 1e3, 1), "itl_p95_ms": round(pct(itl, 95) * 1e3, 1),
        "first_error": errors[0] if errors else None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--concurrency", default="1,4,8,16")
    ap.add_argument("--requests", type=int, default=16, help="requests per level (bounded)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt", default="Write a short story about a lighthouse keeper who finds a message in a bottle.")
    ap.add_argument("--prompt-tokens", type=int, default=0,
                    help="send a prompt of exactly N random token ids (distinct per request) instead of --prompt")
    ap.add_argument("--vocab", type=int, default=49152, help="token ids for --prompt-tokens are drawn below this")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--label", default="")
    ap.add_argument("--extra", default="", help="JSON object merged into every request body "
                    "(e.g. a response_format, to measure constrained decoding)")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("load.py only talks to loopback servers")
    if a.prompt_tokens and a.vocab <= 100:
        raise SystemExit("--vocab must exceed 100")
    if a.requests > 256:
        raise SystemExit("--requests is capped at 256")
    extra = json.loads(a.extra) if a.extra else None
    if extra is not None and not isinstance(extra, dict):
        raise SystemExit("--extra must be a JSON object")
    for c in [int(x) for x in a.concurrency.split(",")]:
        r = run_level(u.hostname, u.port or 80, a.prompt, c, max(a.requests, c), a.max_tokens, a.timeout,
                      a.prompt_tokens, a.vocab, extra)
        if a.prompt_tokens:
            r["prompt_tokens"] = a.prompt_tokens
        r["label"] = a.label
        print(json.dumps(r), flush=True)
        if a.markdown:
            print(f"| {a.label} | {c} | {r['agg_tok_s']} | {r['ttft_p50_ms']} | {r['ttft_p95_ms']} | "
                  f"{r['itl_p50_ms']} | {r['itl_p95_ms']} | {r['errors']} |", flush=True)


if __name__ == "__main__":
    main()
