#!/usr/bin/env bash
# Paired A/B of hearth's GPU levers on the 8B-shaped checkpoint, one server per variant, same machine, same run.
#   bench/gpu/device_ab.sh OUT_DIR CONC "name|ENV=1 ENV2=0|--serve-args[|BINARY.xz]" ...
# e.g. bench/gpu/device_ab.sh /tmp/ab 1,32 "default||" "unfused|HEARTH_GPU_FUSED=0|"
# A fourth field runs that variant on another packed build (a before/after A/B of two builds in one call):
#   bench/gpu/device_ab.sh /tmp/ab 1,32 "old|||.gpu/base/hearth.xz" "new||" "old2|||.gpu/base/hearth.xz" "new2||"
# Each variant: hearth serve (--device cuda --batch 64), a warm-up request, then bench/load.py at each CONC level
# (512-token random prompts, 256 tokens, ignore_eos; requests = concurrency, 3 at concurrency 1), with the
# level's per-step host/device split from /stats (bench/gpu/stats_delta.py) in OUT_DIR/steps.jsonl.
# KV_BUDGET sets --kv-budget in GiB (default 40). MODEL serves another model (default /tmp/llama8b, made if missing). PREFILL2K=1 adds three 2,048-token prompts (1 output token) per variant: prefill time = their TTFT.
set -uo pipefail
OUT="$1"; CONC="$2"; shift 2
mkdir -p "$OUT" /tmp/hbin
[ -x /tmp/hbin/hearth ] || { xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth; }
MODEL="${MODEL:-/tmp/llama8b}"
[ "$MODEL" != /tmp/llama8b ] || [ -f /tmp/llama8b/.complete ] || python3 bench/gpu/make_llama8b.py /tmp/llama8b
PORT=18500
for spec in "$@"; do
  IFS='|' read -r name envs args packed <<< "$spec"
  PORT=$((PORT + 1))
  bin=/tmp/hbin/hearth
  if [ -n "${packed:-}" ]; then
    bin=/tmp/hbin/$(echo "$packed" | tr '/.' '__')
    [ -x "$bin" ] || { xz -dc "$packed" > "$bin" && chmod +x "$bin"; }
  fi
  env $envs "$bin" serve -m "$MODEL" --device cuda --port $PORT --batch 64 --kv-budget ${KV_BUDGET:-40} $args \
    > "$OUT/serve_$name.log" 2>&1 &
  SP=$!
  for _ in $(seq 1 900); do curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.2; done
  L="python3 bench/load.py --url http://127.0.0.1:$PORT --prompt-tokens 512 --max-tokens 256 --label $name"
  $L --concurrency 1 --requests 1 --max-tokens 16 > /dev/null
  for c in ${CONC//,/ }; do
    n=$c; [ "$c" = 1 ] && n=3
    curl -s http://127.0.0.1:$PORT/stats > "$OUT/stats0.json"
    $L --concurrency $c --requests $n | tee -a "$OUT/ab.jsonl"
    curl -s http://127.0.0.1:$PORT/stats > "$OUT/stats1.json"
    python3 bench/gpu/stats_delta.py "$OUT/stats0.json" "$OUT/stats1.json" "$name c$c" | tee -a "$OUT/steps.jsonl"
  done
  if [ -n "${PREFILL2K:-}" ]; then  # PREFILL2K=1: also three 2,048-token prompts, one output token each
    python3 bench/load.py --url http://127.0.0.1:$PORT --prompt-tokens 2048 --max-tokens 1 --concurrency 1 \
      --requests 3 --label "$name-prefill2k" | tee -a "$OUT/ab.jsonl"
  fi
  # Greedy continuation of one fixed prompt, for a same-output check across variants.
  curl -s http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' \
    -d '{"prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"max_tokens":24,"temperature":0,"ignore_eos":true}' \
    | python3 -c "import sys,json; print('$name greedy:', json.load(sys.stdin)['choices'][0]['text'][:120].encode())" | tee -a "$OUT/greedy.txt"
  kill $SP; wait $SP 2>/dev/null
done
