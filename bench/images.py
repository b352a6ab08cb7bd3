#!/usr/bin/env python3
"""TTFT of a request with one image and of the next turn about the same image, on an OpenAI-compatible server
(hearth, llama-server), loopback only, bounded.

    python3 bench/images.py --url URL [--pairs 3] [--size 448] [--label NAME] [--markdown]

Each pair uses a new image (a deterministic pattern of SIZE x SIZE pixels as a PNG data: URL, never sent before):
turn 1 is [image, question] and turn 2 the same conversation with turn 1's answer and a new question. Both ask
for one greedy token, so a request's latency is its time to the first token (TTFT), whatever the token decodes to
(a random checkpoint's may decode to nothing, which a streamed TTFT could not see). Turn 1 pays the image's encoding
and the whole prompt's prefill; turn 2 only what a server cannot reuse. A text-only request warms the server up
first. `--text-only` sends the same two turns with a 150-word text in the image's place (the prefill of turn 2
without any image work). Prints one JSON line per turn and the medians; where the server has hearth's `/stats`, the image encoder's
time per image too. Stdlib only (the PNG is written by zlib).
"""
import argparse
import base64
import json
import statistics
import struct
import sys
import time
import urllib.parse
import urllib.request
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prompt_cache import post_json  # noqa: E402


def png(size: int, seed: int) -> bytes:
    """A SIZE x SIZE RGB PNG: smooth ramps and a hashed texture that differ with `seed`."""
    rows = bytearray()
    for y in range(size):
        rows.append(0)
        for x in range(size):
            h = ((x * 73856093) ^ (y * 19349663) ^ (seed * 83492791)) & 0xFFFFFFFF
            rows += bytes(((x * 255 // size + seed * 37) % 256, (y * 255 // size) % 256, (h >> 8) & 255))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    head = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(bytes(rows), 6)) + chunk(
        b"IEND", b"")


def stats(url: str):
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/stats", timeout=10) as r:
            return json.loads(r.read()).get("images")
    except Exception:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--size", type=int, default=448)
    ap.add_argument("--label", default="")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--text-only", action="store_true")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port
    path = "/v1/chat/completions"
    base = {"model": "m", "max_tokens": 1, "temperature": 0}

    def ask(messages):
        t0 = time.perf_counter()
        r = post_json(host, port, path, dict(base, messages=messages), a.timeout)
        return time.perf_counter() - t0, r["choices"][0]["message"].get("content") or "", r.get("usage") or {}

    ask([{"role": "user", "content": "Hello"}])
    before = stats(a.url)
    first, second = [], []
    for i in range(a.pairs):
        if a.text_only:
            words = " ".join(f"w{j}" for j in range(150))
            q1 = [{"type": "text", "text": f"case {i} {words}"}, {"type": "text", "text": "Describe this text."}]
        else:
            data = "data:image/png;base64," + base64.b64encode(png(a.size, 1000 + i)).decode()
            q1 = [{"type": "image_url", "image_url": {"url": data}}, {"type": "text", "text": "Describe this image."}]
        msgs = [{"role": "user", "content": q1}]
        t1, answer, u1 = ask(msgs)
        msgs += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Which colors are in it?"}]
        t2, _, u2 = ask(msgs)
        first.append(t1)
        second.append(t2)
        for turn, t, usage in ((1, t1, u1), (2, t2, u2)):
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            print(json.dumps({"label": a.label, "pair": i, "turn": turn, "ttft_ms": round(t * 1000, 1),
                              "prompt_tokens": usage.get("prompt_tokens"), "cached_tokens": cached}), flush=True)
    after = stats(a.url)
    m1, m2 = statistics.median(first) * 1000, statistics.median(second) * 1000
    summary = {"label": a.label, "size": a.size, "pairs": a.pairs, "ttft_first_ms": round(m1, 1),
               "ttft_second_ms": round(m2, 1), "ratio": round(m1 / m2, 1)}
    if before and after and after["encoded_total"] > before["encoded_total"]:
        n = after["encoded_total"] - before["encoded_total"]
        summary["encode_ms_per_image"] = round((after["encode_ms_total"] - before["encode_ms_total"]) / n, 1)
        summary["encoder_cache_hits"] = after["cache_hits_total"] - before["cache_hits_total"]
    print(json.dumps(summary), flush=True)
    if a.markdown:
        enc = summary.get("encode_ms_per_image", "")
        print(f"| {a.label} | {a.size}x{a.size} | {m1:,.0f} | {m2:,.0f} | {m1 / m2:.1f}x | {enc} |")


if __name__ == "__main__":
    main()
