#!/usr/bin/env python3
"""Time to first token added by compiling a JSON schema: the same chat request with and without
`response_format` json_schema (llama.cpp's `json_schema` field for llama-server), alternating, on one server.
Request 0 (free, then the first schema request after start: the cold compiler) is reported apart; the medians are
over the rest.

  python3 bench/schema_ttft.py --url http://127.0.0.1:8080 [--repeats 5] [--label hearth] [--llama]

Prints one JSON line per request and a summary line (medians).
"""
import argparse
import json
import statistics
import sys
import urllib.parse

sys.path.insert(0, __import__("os").path.dirname(__file__))
from prompt_cache import post_stream  # noqa: E402

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
          "properties": {"name": {"const": "search"},
                         "arguments": {"type": "object", "additionalProperties": False, "required": ["query", "limit"],
                                       "properties": {"query": {"type": "string", "maxLength": 80},
                                                      "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                                                      "sites": {"type": "array", "items": {"type": "string"}}}}}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--label", default="")
    ap.add_argument("--llama", action="store_true", help="send llama.cpp's `json_schema` field instead")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    if u.hostname not in ("127.0.0.1", "localhost"):
        raise SystemExit("loopback only")
    ttft = {"free": [], "schema": []}
    for i in range(a.repeats + 1):
        for kind in ("free", "schema"):
            body = {"model": "m", "max_tokens": 4, "temperature": 0,
                    "messages": [{"role": "user", "content": f"Search the web for lighthouses ({i})."}]}
            if kind == "schema":
                if a.llama:
                    body["json_schema"] = SCHEMA
                else:
                    body["response_format"] = {"type": "json_schema", "json_schema": {"name": "call", "schema": SCHEMA}}
            t, total, text, _ = post_stream(u.hostname, u.port, "/v1/chat/completions", body, 120)
            t = total if t is None else t  # no text at all (4 tokens of nothing): the whole request
            cold = i == 0 and kind == "schema"
            print(json.dumps({"label": a.label, "kind": kind, "request": i, "cold": cold,
                              "ttft_ms": round(t * 1e3, 1), "text": text[:40]}), flush=True)
            if i > 0:
                ttft[kind].append(t * 1e3)
    f, s = statistics.median(ttft["free"]), statistics.median(ttft["schema"])
    print(json.dumps({"label": a.label, "summary": True, "free_ttft_ms_median": round(f, 1),
                      "schema_ttft_ms_median": round(s, 1), "added_ms": round(s - f, 1)}), flush=True)


if __name__ == "__main__":
    main()
