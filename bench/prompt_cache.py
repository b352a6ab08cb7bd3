#!/usr/bin/env python3
"""Prompt-cache workloads for OpenAI-compatible servers (hearth, llama-server), loopback only, bounded.

    python3 bench/prompt_cache.py reattach  --url URL --tokens 8000 [--seed S]   # one long prompt, sent twice
    python3 bench/prompt_cache.py agents    --url URL --agents 8 --system 2000 --turns 3 --max-tokens 64
    python3 bench/prompt_cache.py multiturn --url URL --turns 20 --max-tokens 48
    python3 bench/prompt_cache.py turn20    --url URL [--repeats 7]

reattach: a prompt of exactly N random token ids (a long agent conversation), twice: TTFT of the first (cold, or
whatever the server already holds) and the second (the server's cache). Run it again after a restart to measure
a restore. Prints one JSON line per request (ttft_ms, cached_tokens when the server reports them).

agents: A agents share one system prompt of S random token ids and each has its own 64-token task. Every turn all
agents send concurrently; turn k+1 appends the agent's reply (tokenized by the server) and a 48-token tool result.
Prints one JSON line per turn: TTFT mean/p50/max and aggregate completion tok/s (tokens / wall time).

multiturn: one chat of T turns on /v1/chat/completions (the server's chat template), after one unrelated warm-up
request: every turn appends the reply and a new user message; prints per turn TTFT, prompt_tokens and
cached_tokens.

turn20: a fixed 19-turn chat (the replies written out, so every server and build sees the same tokens): TTFT of
turn 1 (a new chat each time) and of turn 20 (the whole history cached, a new last message each time), medians
of --repeats, and their ratio.

Every request is greedy; `ignore_eos` keeps completion lengths fixed where the server honours it. Stdlib only.
"""
import argparse, http.client, json, random, statistics, threading, time, urllib.parse

TOPICS = ["the printing press", "lighthouses", "the Roman road network", "tidal power", "bread baking",
          "the history of chess", "honey bees", "glass making", "paper maps", "wind mills", "clock towers",
          "river bridges", "salt trade", "silk weaving", "ice harvesting", "early photography", "canal locks",
          "sundials", "copper mining", "lace making"]


def post_stream(host, port, path, body, timeout):
    """POST a streaming request; returns (ttft_s, total_s, text, usage)."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    ttft, text, usage, buf = None, [], None, b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if not line.startswith(b"data: ") or line[6:] == b"[DONE]":
                    continue
                obj = json.loads(line[6:])
                if "error" in obj:
                    raise RuntimeError(obj["error"])
                usage = obj.get("usage") or usage
                for ch in obj.get("choices") or []:
                    piece = ch.get("text") or (ch.get("delta") or {}).get("content") or ""
                    if piece:
                        if ttft is None:
                            ttft = time.perf_counter() - t0
                        text.append(piece)
    conn.close()
    return ttft, time.perf_counter() - t0, "".join(text), usage or {}


def post_json(host, port, path, body, timeout=60):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {data[:300]!r}")
    return json.loads(data)


def cached(usage):
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


def tokenize(host, port, text):
    r = post_json(host, port, "/tokenize", {"content": text, "add_special": False})
    toks = r.get("tokens", [])
    return [t["id"] if isinstance(t, dict) else t for t in toks]


def completion(host, port, prompt, max_tokens, timeout):
    return post_stream(host, port, "/v1/completions", {"model": "m", "prompt": prompt, "max_tokens": max_tokens,
                                                       "temperature": 0, "ignore_eos": True,
                                                       "cache_prompt": True}, timeout)


def ids(n, vocab, rng):
    return [rng.randrange(100, vocab) for _ in range(n)]


def reattach(a, host, port):
    prompt = ids(a.tokens, a.vocab, random.Random(a.seed))
    for i in range(a.repeats):
        ttft, total, _, usage = completion(host, port, prompt, a.max_tokens, a.timeout)
        print(json.dumps({"workload": "reattach", "label": a.label, "request": i, "prompt_tokens": a.tokens,
                          "ttft_ms": round(ttft * 1e3, 1), "total_ms": round(total * 1e3, 1),
                          "cached_tokens": cached(usage)}), flush=True)


def agents(a, host, port):
    rng = random.Random(a.seed)
    system = ids(a.system, a.vocab, rng)
    prompts = [system + ids(64, a.vocab, rng) for _ in range(a.agents)]
    for turn in range(a.turns):
        results = [None] * a.agents

        def run(i):
            results[i] = completion(host, port, prompts[i], a.max_tokens, a.timeout)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=run, args=(i,)) for i in range(a.agents)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        ttfts = [r[0] for r in results]
        print(json.dumps({"workload": "agents", "label": a.label, "turn": turn + 1, "agents": a.agents,
                          "prompt_tokens_mean": round(statistics.mean(len(p) for p in prompts)),
                          "ttft_mean_ms": round(statistics.mean(ttfts) * 1e3, 1),
                          "ttft_p50_ms": round(statistics.median(ttfts) * 1e3, 1),
                          "ttft_max_ms": round(max(ttfts) * 1e3, 1), "wall_s": round(wall, 2),
                          "agg_tok_s": round(a.agents * a.max_tokens / wall, 1),
                          "cached_tokens": [cached(r[3]) for r in results]}), flush=True)
        for i, r in enumerate(results):
            prompts[i] = prompts[i] + tokenize(host, port, r[2]) + ids(48, a.vocab, rng)


def multiturn(a, host, port):
    # A warm-up request that shares nothing with the chat: turn 1 then measures a cold prompt, not a cold server.
    warm = "Warm-up. " + " ".join(f"{n} bottles of juice stand on the shelf." for n in range(12, 0, -1))
    post_stream(host, port, "/v1/completions", {"model": "m", "prompt": warm, "max_tokens": 4, "temperature": 0},
                a.timeout)
    rng = random.Random(a.seed)
    messages = [{"role": "system", "content": "You are a helpful assistant who answers briefly."}]
    for turn in range(a.turns):
        topic = TOPICS[turn % len(TOPICS)]
        messages.append({"role": "user", "content": f"Tell me one fact about {topic}, then ask me a question "
                                                    f"(turn {turn + 1}, note {rng.randrange(1000)})."})
        ttft, total, text, usage = post_stream(host, port, "/v1/chat/completions",
                                               {"model": "m", "messages": messages, "max_tokens": a.max_tokens,
                                                "temperature": 0, "cache_prompt": True}, a.timeout)
        messages.append({"role": "assistant", "content": text})
        print(json.dumps({"workload": "multiturn", "label": a.label, "turn": turn + 1,
                          "ttft_ms": round(ttft * 1e3, 1), "prompt_tokens": usage.get("prompt_tokens"),
                          "cached_tokens": cached(usage)}), flush=True)


def turn20(a, host, port):
    def ttft(msgs):
        t, _, _, u = post_stream(host, port, "/v1/chat/completions",
                                 {"model": "m", "messages": msgs, "max_tokens": 1, "temperature": 0}, a.timeout)
        return t * 1e3, u
    system = {"role": "system", "content": "You are a helpful assistant who answers briefly."}
    chat = [system]
    for i in range(19):
        topic = TOPICS[i]
        chat.append({"role": "user", "content": f"Tell me one fact about {topic}, then ask me a question "
                                                f"(turn {i + 1}, note {i * 37 % 1000})."})
        chat.append({"role": "assistant", "content": f"{topic.capitalize()} have a long history: people used them "
                                                     f"for centuries in many places, and they changed how towns "
                                                     f"grew. What do you know about {topic}?"})
    ask = lambda k, turn, topic: {"role": "user", "content": f"{k} Tell me one fact about {topic}, then ask me a "
                                                             f"question (turn {turn}, note {k})."}
    first = [ttft([system, ask(k, 1, TOPICS[0])])[0] for k in range(a.repeats)]
    ttft(chat + [{"role": "user", "content": "Hello."}])  # the history into the cache
    last, usage = [], {}
    for k in range(a.repeats):
        t, usage = ttft(chat + [ask(k, 20, "lace making")])
        last.append(t)
    t1, t20 = statistics.median(first), statistics.median(last)
    print(json.dumps({"workload": "turn20", "label": a.label, "turn1_ttft_ms": round(t1, 1),
                      "turn20_ttft_ms": round(t20, 1), "ratio": round(t20 / t1, 2),
                      "turn20_prompt_tokens": usage.get("prompt_tokens"), "turn20_cached_tokens": cached(usage)}),
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["reattach", "agents", "multiturn", "turn20"])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--label", default="")
    ap.add_argument("--tokens", type=int, default=8000, help="reattach: prompt length")
    ap.add_argument("--repeats", type=int, default=2, help="reattach: times the prompt is sent")
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--system", type=int, default=2000, help="agents: shared system prompt length")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("prompt_cache.py only talks to loopback servers")
    if a.agents > 64 or a.turns > 64 or a.tokens > 200_000:
        raise SystemExit("bounded: at most 64 agents, 64 turns, 200k tokens")
    if a.workload == "turn20":
        a.repeats = max(a.repeats, 7)
    {"reattach": reattach, "agents": agents, "multiturn": multiturn, "turn20": turn20}[a.workload](
        a, u.hostname, u.port or 80)


if __name__ == "__main__":
    main()
