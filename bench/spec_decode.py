#!/usr/bin/env python3
"""Speculative decoding on one server, paired: the same greedy requests with speculation off (`"speculative":
false`), with the server's own drafts (prompt lookup under `hearth serve --speculative ngram`), and with the
source file as OpenAI's `prediction`, alternating, ROUNDS times; decode tok/s = completion tokens / (total - TTFT).

  python3 bench/spec_decode.py --url http://127.0.0.1:8080 [--workload edit|chat] [--rounds 3]
      [--variants off,spec,prediction] [--max-tokens 700] [--llama]

`edit`: a ~400-token Python file in the prompt and an instruction to rename one identifier; the answer is the
file again (the case agents hit when they rewrite a file). `chat`: short questions with ~200-token answers.
`--llama`: the server is llama-server (its own speculation is whatever it was started with; `speculative` and
`prediction` are not sent: `off` and `spec` are the server as started). `spec`: the server's own speculation.
Prints one JSON line per request and a summary line per variant (medians of decode tok/s).
"""
import argparse
import json
import statistics
import sys
import urllib.parse

sys.path.insert(0, __import__("os").path.dirname(__file__))
from prompt_cache import post_stream  # noqa: E402


def source_file():
    """A ~400-token module in which `total_count` appears throughout."""
    parts = ['"""Inventory helpers."""\n\nfrom dataclasses import dataclass\n\n\n@dataclass\nclass Item:\n'
             '    name: str\n    price: float\n    quantity: int\n\n']
    for i, (verb, op) in enumerate([("add", "+"), ("remove", "-"), ("scale", "*")]):
        parts.append(
            f"def {verb}_items(items, amount):\n"
            f"    \"\"\"{verb.capitalize()} `amount` to every item's quantity and return the new total.\"\"\"\n"
            f"    total_count = 0\n"
            f"    for item in items:\n"
            f"        item.quantity = item.quantity {op} amount\n"
            f"        total_count += item.quantity\n"
            f"    if total_count < 0:\n"
            f"        raise ValueError(f\"negative total: {{total_count}}\")\n"
            f"    return total_count\n\n\n")
    parts.append("def report(items):\n    total_count = sum(item.quantity for item in items)\n"
                 "    value = sum(item.price * item.quantity for item in items)\n"
                 "    return f\"{total_count} items worth {value:.2f}\"\n")
    return "".join(parts)


CHAT = ["Explain how a hash map handles collisions.", "What is the difference between a process and a thread?",
        "Why is binary search O(log n)?", "Describe what a mutex is used for, with an example."]


def requests(workload):
    if workload == "edit":
        src = source_file()
        msg = ("Rename the variable `total_count` to `item_total` everywhere in this file. Reply with the whole "
               f"updated file only, in one ```python block.\n\n```python\n{src}```")
        return [(msg, src)]
    return [(q, None) for q in CHAT]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--workload", default="edit", choices=["edit", "chat"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default="off,spec,prediction")
    ap.add_argument("--max-tokens", type=int, default=700)
    ap.add_argument("--llama", action="store_true")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    rates = {v: [] for v in a.variants.split(",")}
    for r in range(a.rounds):
        for v in rates:
            for i, (msg, src) in enumerate(requests(a.workload)):
                body = {"messages": [{"role": "user", "content": msg}], "max_tokens": a.max_tokens,
                        "temperature": 0}
                if not a.llama:
                    if v == "off":
                        body["speculative"] = False
                    if v == "prediction" and src:
                        body["prediction"] = {"type": "content", "content": f"```python\n{src}```"}
                ttft, total, text, usage = post_stream(u.hostname, u.port, "/v1/chat/completions", body, 600)
                n = (usage or {}).get("completion_tokens", 0)
                rate = (n - 1) / (total - ttft) if total > ttft and n > 1 else 0.0
                details = (usage or {}).get("completion_tokens_details") or {}
                rates[v].append(rate)
                print(json.dumps({"variant": v, "round": r, "request": i, "completion_tokens": n,
                                  "ttft_s": round(ttft, 3), "total_s": round(total, 3), "decode_tok_s": round(rate, 2),
                                  "accepted": details.get("accepted_prediction_tokens"),
                                  "rejected": details.get("rejected_prediction_tokens")}), flush=True)
    base = statistics.median(rates["off"]) if rates.get("off") else None
    for v, xs in rates.items():
        med = statistics.median(xs)
        print(json.dumps({"summary": v, "workload": a.workload, "decode_tok_s_median": round(med, 2),
                          "vs_off": round(med / base, 2) if base else None, "n": len(xs)}))


if __name__ == "__main__":
    main()
