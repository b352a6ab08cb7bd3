#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda here; carry .gpu): the KV-cache encodings on the
# Llama-3.1-8B-shaped checkpoint (bench/gpu/make_llama8b.py, in /tmp/llama8b), one server per encoding, every one
# in the same KV budget, same machine, same run.
#   bench/gpu/device_kv.sh OUT_DIR ENCODING...        e.g. bench/gpu/device_kv.sh /tmp/kv bf16 q8_0 turbo:k8v4 turbo:k8v3
# Each encoding: `hearth serve --kv-cache-dtype ENC --kv-budget $KV_GB --batch 64` (KV_GB default 4), its capacity
# from /stats, then with bench/load.py (random-token prompts, ignore_eos, greedy):
#   1. batch 1: three 4,096-token prompts of 256 output tokens, one at a time (decode at 4k depth), then three of
#      512 tokens;
#   2. streams: as many 4,096-token prompts of 256 output tokens as the capacity holds (4,368 tokens each), all at
#      once — the aggregate tok/s there.
# Results: OUT_DIR/kv.jsonl (load.py's lines, labelled ENC-b1-4k, ENC-b1-512, ENC-streamsN) and OUT_DIR/capacity.txt.
set -uo pipefail
OUT="$1"; shift
mkdir -p "$OUT" /tmp/hbin
[ -x /tmp/hbin/hearth ] || { xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth; }
[ -f /tmp/llama8b/.complete ] || python3 bench/gpu/make_llama8b.py /tmp/llama8b > "$OUT/make.log" 2>&1
PORT=18700
for enc in "$@"; do
  PORT=$((PORT + 1))
  name=${enc//:/-}
  /tmp/hbin/hearth serve -m /tmp/llama8b --device cuda --port $PORT --batch 64 --kv-budget "${KV_GB:-4}" \
    --kv-cache-dtype "$enc" > "$OUT/serve_$name.log" 2>&1 &
  SP=$!
  for _ in $(seq 1 900); do curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.2; done
  cap=$(curl -s http://127.0.0.1:$PORT/stats | python3 -c 'import sys, json; print(json.load(sys.stdin)["kv_capacity_tokens"])')
  streams=$((cap / 4368))
  echo "$enc kv_capacity_tokens $cap streams_of_4k $streams" | tee -a "$OUT/capacity.txt"
  L="python3 bench/load.py --url http://127.0.0.1:$PORT --max-tokens 256"
  $L --prompt-tokens 64 --concurrency 1 --requests 1 --max-tokens 8 > /dev/null  # warm-up
  $L --prompt-tokens 4096 --concurrency 1 --requests 3 --label "$name-b1-4k" | tee -a "$OUT/kv.jsonl"
  $L --prompt-tokens 512 --concurrency 1 --requests 3 --label "$name-b1-512" | tee -a "$OUT/kv.jsonl"
  [ "$streams" -gt 0 ] && $L --prompt-tokens 4096 --concurrency "$streams" --requests "$streams" \
    --label "$name-streams$streams" | tee -a "$OUT/kv.jsonl"
  grep -iE "error|panic" "$OUT/serve_$name.log" | head -3
  kill $SP; wait $SP 2>/dev/null
done
