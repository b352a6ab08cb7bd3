#!/usr/bin/env bash
# On the GPU machine (repo root, .gpu carried): speculative decoding's machinery on 8B-shaped random checkpoints
# (random weights make drafts meaningless, so the drafts are given): batch 1 on the steady checkpoint
# (make_llama8b.py --steady: a greedy path rounding cannot change), the same greedy request with speculation off,
# with its own greedy answer's token ids as `prediction` (drafts kept), and with a prediction of unrelated text
# (drafts rejected), at --spec-tokens 4 and 8; then, on the plain random checkpoint, 32 streams with --speculative
# auto vs off, and a 2-layer draft model of the same width (`--draft-model`, its drafts mostly rejected: the draft
# path's cost).
#   bench/gpu/device_spec.sh OUT_DIR     (PARTS="batch1 streams draft" and KS="4 8" pick what runs; MODEL_DIR
#   serves another checkpoint in every part)
set -uo pipefail
OUT="$1"; mkdir -p "$OUT" /tmp/hbin
[ -x /tmp/hbin/hearth ] || { xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth; }
PARTS="${PARTS:-batch1 streams draft}"
has() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
if [ -z "${MODEL_DIR:-}" ]; then
  has batch1 && { [ -f /tmp/llama8b-steady/.complete ] || python3 bench/gpu/make_llama8b.py /tmp/llama8b-steady --steady > "$OUT/make-steady.log" 2>&1; }
  { has streams || has draft; } && { [ -f /tmp/llama8b/.complete ] || python3 bench/gpu/make_llama8b.py /tmp/llama8b > "$OUT/make.log" 2>&1; }
fi
PORT=18660
serve() {
  local log; log="$OUT/serve$(echo "$*" | tr -c 'a-zA-Z0-9\n' '-').log"
  /tmp/hbin/hearth serve -m "${MODEL_DIR:-$CKPT}" --device cuda --port $PORT --batch 64 "$@" > "$log" 2>&1 &
  SP=$!
  for _ in $(seq 1 900); do curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.2; done
  python3 bench/load.py --url http://127.0.0.1:$PORT --concurrency 1 --requests 1 --max-tokens 16 > /dev/null
}
CKPT=/tmp/llama8b-steady
for k in ${KS:-4 8}; do
  has batch1 || break
  serve --speculative ngram --spec-tokens $k
  python3 - "$PORT" "$k" <<'PY' | tee -a "$OUT/batch1.jsonl"
import json, statistics, sys
sys.path.insert(0, "bench")
from prompt_cache import post_stream
port, k = int(sys.argv[1]), int(sys.argv[2])
import urllib.request
BODY = {"prompt": "The history of the printing press", "max_tokens": 256, "ignore_eos": True, "temperature": 0}
def ask(extra):
    body = dict(BODY, **extra)
    ttft, total, text, usage = post_stream("127.0.0.1", port, "/v1/completions", body, 600)
    return text, (usage["completion_tokens"] - 1) / (total - ttft), usage
answer, _, _ = ask({"speculative": False})
# the ids of the answer as the timed requests get it (their prompt cached, as it is now)
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", headers={"Content-Type": "application/json"},
                             data=json.dumps(dict(BODY, speculative=False, return_token_ids=True)).encode())
ids = json.load(urllib.request.urlopen(req, timeout=600))["choices"][0]["token_ids"]
junk = " ".join(f"word{i}" for i in range(400))
rates = {"off": [], "own answer": [], "unrelated": []}
for r in range(3):
    for name, extra in [("off", {"speculative": False}), ("own answer", {"prediction": {"type": "content", "content": ids}}),
                        ("unrelated", {"prediction": {"type": "content", "content": junk}})]:
        text, rate, usage = ask(extra)
        rates[name].append(rate)
        d = usage.get("completion_tokens_details") or {}
        print(json.dumps({"k": k, "variant": name, "round": r, "decode_tok_s": round(rate, 1), "same": text == answer,
                          "accepted": d.get("accepted_prediction_tokens"), "rejected": d.get("rejected_prediction_tokens")}))
base = statistics.median(rates["off"])
for name, xs in rates.items():
    print(json.dumps({"summary": name, "k": k, "decode_tok_s": round(statistics.median(xs), 1), "vs_off": round(statistics.median(xs) / base, 3)}))
PY
  kill $SP; wait $SP 2>/dev/null
done
CKPT=/tmp/llama8b
for mode in off auto; do
  has streams || break
  serve --speculative $mode
  python3 bench/load.py --url http://127.0.0.1:$PORT --concurrency 32 --requests 64 --max-tokens 128 --label "32 streams $mode" | tee -a "$OUT/streams.jsonl"
  kill $SP; wait $SP 2>/dev/null
done
has draft || exit 0
[ -f /tmp/llama8b-draft/.complete ] || python3 bench/gpu/make_llama8b.py /tmp/llama8b-draft --layers 2 > "$OUT/make-draft.log" 2>&1
for mode in off draft; do
  serve --speculative $mode --draft-model /tmp/llama8b-draft
  python3 bench/load.py --url http://127.0.0.1:$PORT --concurrency 1 --requests 3 --max-tokens 256 --label "batch 1, draft model, $mode" | tee -a "$OUT/draft.jsonl"
  curl -s http://127.0.0.1:$PORT/metrics | grep spec_decode >> "$OUT/draft.jsonl"
  kill $SP; wait $SP 2>/dev/null
done
