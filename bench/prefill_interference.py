#!/usr/bin/env python3
"""Inter-token latency of a running stream while a long (~4k-token) prompt arrives, and /health latency under load.

    python3 bench/prefill_interference.py --url http://127.0.0.1:8080 [--long-tokens 4000]

1. Starts one greedy stream (ignore_eos, 400 tokens) and records the arrival time of every token.
2. After 40 tokens, submits a completion whose prompt is ~long-tokens tokens (max_tokens 1), and records when it
   was sent and when it finished.
3. Reports the running stream's inter-token gaps before and during the long prefill (p50, p95, max), and the
   long request's time. With chunked prefill the running stream keeps ticking; without it, one gap swallows
   the whole prefill.
4. Then runs 8 concurrent streams and polls GET /health and GET /stats every 20 ms meanwhile: p50/p99/max.
Stdlib only, loopback only.
"""
import argparse, http.client, json, statistics, threading, time, urllib.parse


def stream_times(host, port, body, times, started):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    buf = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if line.startswith(b"data: ") and line[6:] != b"[DONE]":
                    obj = json.loads(line[6:])
                    if obj.get("choices") and obj["choices"][0].get("text"):
                        times.append(time.perf_counter())
                        started.set()
    conn.close()


def post(host, port, path, body):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def get_latency(host, port, path):
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", path)
    conn.getresponse().read()
    conn.close()
    return time.perf_counter() - t0


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def ms(x):
    return round(x * 1e3, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--long-tokens", type=int, default=4000)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    if u.hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit("loopback only")
    host, port = u.hostname, u.port

    # A ~4k-token prompt: count with the server's own tokenizer.
    unit = "The quick brown fox jumps over the lazy dog near the quiet river bank. "
    _, toks = post(host, port, "/tokenize", {"content": unit})
    per = max(1, len(json.loads(toks)["tokens"]))
    long_prompt = unit * (a.long_tokens // per)

    times, started = [], threading.Event()
    body = {"prompt": "Count from one to one thousand: one, two,", "max_tokens": 400, "temperature": 0,
            "stream": True, "ignore_eos": True}
    t = threading.Thread(target=stream_times, args=(host, port, body, times, started))
    t.start()
    started.wait(600)
    while len(times) < 40:
        time.sleep(0.005)
    t_send = time.perf_counter()
    status, data = post(host, port, "/v1/completions", {"prompt": long_prompt, "max_tokens": 1, "temperature": 0})
    t_done = time.perf_counter()
    t.join()
    usage = json.loads(data).get("usage", {}) if status == 200 else {"error": data[:200].decode(errors="replace")}
    gaps_before = [b - a_ for a_, b in zip(times, times[1:]) if b <= t_send]
    gaps_during = [b - a_ for a_, b in zip(times, times[1:]) if a_ >= t_send and b <= t_done]
    # The gap spanning the moment the long request arrived counts as "during".
    gaps_during += [b - a_ for a_, b in zip(times, times[1:]) if a_ < t_send < b]
    print(json.dumps({
        "long_prompt_tokens": usage.get("prompt_tokens"), "long_request_s": round(t_done - t_send, 2),
        "itl_before_ms": {"p50": ms(q(gaps_before, 50)), "p95": ms(q(gaps_before, 95)), "max": ms(max(gaps_before))},
        "itl_during_ms": {"n": len(gaps_during), "p50": ms(q(gaps_during, 50)), "p95": ms(q(gaps_during, 95)),
                          "max": ms(max(gaps_during)) if gaps_during else None},
    }))

    # /health and /stats latency while 8 streams run.
    stop = threading.Event()
    lat = {"/health": [], "/stats": []}

    def poll():
        while not stop.is_set():
            for p in lat:
                lat[p].append(get_latency(host, port, p))
            time.sleep(0.02)

    streams = [threading.Thread(target=stream_times, args=(host, port, dict(body, max_tokens=128), [], threading.Event()))
               for _ in range(8)]
    for s in streams:
        s.start()
    poller = threading.Thread(target=poll)
    poller.start()
    for s in streams:
        s.join()
    stop.set()
    poller.join()
    print(json.dumps({p: {"n": len(v), "p50_ms": ms(q(v, 50)), "p99_ms": ms(q(v, 99)), "max_ms": ms(max(v))}
                      for p, v in lat.items()}))


if __name__ == "__main__":
    main()
