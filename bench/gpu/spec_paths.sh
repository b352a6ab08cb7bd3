#!/usr/bin/env bash
# On the GPU machine, after bench/gpu/device_spec.sh made /tmp/llama8b: where the greedy path of the 8B-shaped random
# checkpoint diverges (token index, None: never) between a cold and a cached prompt, two cached ones, and a run given
# the cached answer's ids as `prediction`; with the prompt cache on and off. MODEL_DIR picks the checkpoint (e.g. the
# steady one, /tmp/llama8b-steady, that make_llama8b.py --steady makes).
#   bench/gpu/spec_paths.sh
set -u
[ -x /tmp/hbin/hearth ] || { mkdir -p /tmp/hbin && xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth; }
PORT=18661
diag() {
  /tmp/hbin/hearth serve -m "${MODEL_DIR:-/tmp/llama8b}" --device cuda --port $PORT --batch 64 "$@" > /tmp/diag.log 2>&1 &
  SP=$!
  for _ in $(seq 1 900); do curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.2; done
  python3 - $PORT "$*" <<'PY'
import json, sys, urllib.request
port, label = int(sys.argv[1]), sys.argv[2]
def ids(extra):
    body = dict({"prompt": "The history of the printing press", "max_tokens": 48, "ignore_eos": True, "temperature": 0, "return_token_ids": True}, **extra)
    r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", headers={"Content-Type": "application/json"}, data=json.dumps(body).encode())
    v = json.load(urllib.request.urlopen(r, timeout=300))
    return v["choices"][0]["token_ids"], v["usage"].get("completion_tokens_details")
a, _ = ids({"speculative": False}); b, _ = ids({"speculative": False}); c, _ = ids({"speculative": False})
d, u = ids({"prediction": {"type": "content", "content": b}})
first = lambda x, y: next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), None)
print(label, "cold vs cached:", first(a, b), "cached vs cached:", first(b, c), "pred vs cached:", first(d, b), u)
print("b", b[:12]); print("d", d[:12])
PY
  kill $SP; wait $SP 2>/dev/null
}
diag --speculative ngram
diag --speculative ngram --prompt-cache 0
