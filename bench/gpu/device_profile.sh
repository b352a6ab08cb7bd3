#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda here; carry .gpu): where a decode step's GPU time goes.
#   bench/gpu/device_profile.sh OUT_DIR [ROWS ...]    (default ROWS: 1 32; `prefill`: one 2048-token prompt)
# For each ROWS: serves the 8B-shaped checkpoint under Nsight Compute (ncu --profile-from-start off, one metric:
# gpu__time_duration) with HEARTH_CUDA_PROFILE=ROWS:3 (prefill:1), which opens the profiling window for the first
# 3 steps that decode exactly ROWS rows (the first step carrying >= 1024 prompt tokens); drives it with ROWS concurrent streams (bench/load.py, 512-token prompts) and
# prints each kernel's time per step (bench/gpu/ncu_summary.py). ncu serializes kernels, so only the kernel
# times are meaningful here, not the wall clock.
# MODEL serves another model (default /tmp/llama8b, made if missing); PROFILE_ENV ("A=1 B=0") and PROFILE_ARGS
# (extra serve arguments) set a variant; LABEL names the output files (default: ROWS).
set -uo pipefail
OUT="$1"; shift
ROWS_LIST="${*:-1 32}"
mkdir -p "$OUT" /tmp/hbin
[ -x /tmp/hbin/hearth ] || { xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth; }
MODEL="${MODEL:-/tmp/llama8b}"
[ "$MODEL" != /tmp/llama8b ] || [ -f /tmp/llama8b/.complete ] || python3 bench/gpu/make_llama8b.py /tmp/llama8b > "$OUT/make.log" 2>&1
PORT=18600
for rows in $ROWS_LIST; do
  PORT=$((PORT + 1))
  steps=3; [ "$rows" = prefill ] && steps=1
  tag="${LABEL:+${LABEL}_}$rows"
  env ${PROFILE_ENV:-} HEARTH_CUDA_PROFILE=$rows:$steps ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
    --csv --page raw --log-file "$OUT/ncu_$tag.csv" \
    /tmp/hbin/hearth serve -m "$MODEL" --device cuda --port $PORT --batch 64 --kv-budget ${KV_BUDGET:-40} \
    ${PROFILE_ARGS:-} > "$OUT/serve_$tag.log" 2>&1 &
  SP=$!
  for _ in $(seq 1 900); do curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.2; done
  if [ "$rows" = prefill ]; then
    python3 bench/load.py --url http://127.0.0.1:$PORT --prompt-tokens 2048 --max-tokens 1 --concurrency 1 \
      --requests 1 --label "profile-$rows" > "$OUT/load_$tag.json"
  else
    python3 bench/load.py --url http://127.0.0.1:$PORT --prompt-tokens 512 --max-tokens 24 --concurrency "$rows" \
      --requests "$rows" --label "profile-$rows" > "$OUT/load_$tag.json"
  fi
  pkill -INT -x hearth; wait $SP 2>/dev/null
  python3 bench/gpu/ncu_summary.py "$OUT/ncu_$tag.csv" --steps $steps | tee "$OUT/summary_$tag.txt"
done
