#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda --tests and bench/gpu/prepare_gguf.sh here; carry .gpu):
# the quantized-matmul tests, then the 8B-shaped checkpoint written as GGUFs on the device (bench/gpu/make_gguf.py
# writes the first TYPE, `hearth quantize` makes the others from it) and a paired A/B per GGUF of hearth's quantized kernels
# (gpu::qgemv) against candle's, in one call.
#   bench/gpu/device_qgemv.sh OUT_DIR [TYPES (q4_0,q4_k_m)] [CONC (1,8,32)]
# Variants (bench/gpu/device_ab.sh's form) from VARIANTS (newline-separated), default: hearth's kernels (opt-in)
# with f32 and bf16 activations, candle's with f32 (the default).
# PROFILE="1" (rows, device_profile.sh's form) also profiles the first GGUF's decode steps, hearth's kernels (bf16)
# and candle's, kernel by kernel.
# SHAPE (make_llama8b.py --shape: 8b, smollm2-135m, qwen2.5-0.5b) measures another shape of the same family, in
# /tmp/llama-SHAPE; the small ones are bound by launches, not bytes.
# Rerunning into the same OUT_DIR skips what is done (GGUFs, tests, a type's A/B).
# Prints the copy bandwidth (bench/gpu/roofline.py) and each GGUF's bytes: its batch-1 roofline is bytes / bandwidth.
set -uo pipefail
OUT="$1"; TYPES="${2:-q4_0,q4_k_m}"; CONC="${3:-1,8,32}"
mkdir -p "$OUT" /tmp/hbin
xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth
for t in .gpu/tests/*.xz; do n=$(basename "$t" .xz); xz -dc "$t" > "/tmp/hbin/$n"; chmod +x "/tmp/hbin/$n"; done
# gguf is pure Python: imported from its wheel (the device's pip refuses system-wide installs).
python3 -c 'import gguf' 2>/dev/null || export PYTHONPATH="$(ls "$PWD"/.gpu/wheels/gguf-*.whl)${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
# The first type is written by make_gguf.py (f16 first, then quantized by hearth, where it is a k-quant); the
# others are quantized by hearth from it (random weights: requantizing changes nothing a speed test sees).
FIRST="${TYPES%%,*}"
SHAPE="${SHAPE:-8b}"; CK=/tmp/llama8b; [ "$SHAPE" = 8b ] || CK=/tmp/llama-$SHAPE
case "$FIRST" in q4_0|q4_1|q5_0|q8_0) SRC_T=$FIRST ;; *) SRC_T=f16 ;; esac
( python3 bench/gpu/make_llama8b.py $CK --shape $SHAPE && \
  { [ -f $CK-$SRC_T.gguf ] || \
    python3 bench/gpu/make_gguf.py $CK $CK-$SRC_T.gguf --type $SRC_T --vocab .gpu/tokenizer.gguf; } && \
  for t in ${TYPES//,/ }; do [ -f $CK-$t.gguf ] || \
    /tmp/hbin/hearth quantize $CK-$SRC_T.gguf $CK-$t.gguf -t $t 2>&1 | tail -1; done
) >> "$OUT/make.log" 2>&1 &
MK=$!
[ -s "$OUT/qgemv_tests.log" ] || timeout 240 /tmp/hbin/gpu_quant_matmul --test-threads 1 --nocapture > "$OUT/qgemv_tests.log" 2>&1
# The dense one-row kernels and the tiny models, when their binaries were carried too.
[ -x /tmp/hbin/gpu_kernels ] && timeout 120 /tmp/hbin/gpu_kernels --test-threads 1 gemv add_rmsnorm > "$OUT/kernel_tests.log" 2>&1
[ -x /tmp/hbin/gpu_parity ] && timeout 120 /tmp/hbin/gpu_parity --test-threads 1 tiny_ > "$OUT/parity_tests.log" 2>&1
grep -hE "^test |test result|panicked" "$OUT"/*_tests.log | head -20
grep -E "vs candle" "$OUT/qgemv_tests.log" | sort -t' ' -k7 -g | tail -2
wait $MK; tail -4 "$OUT/make.log"
python3 bench/gpu/roofline.py $CK 2>&1 | tail -1 | tee "$OUT/roofline.json"
V="${VARIANTS:-qgemv-f32|HEARTH_GPU_QGEMV=1|
qgemv-bf16|HEARTH_GPU_QGEMV=1|--dtype bf16
candle-f32||}"
mapfile -t VS <<< "$V"
for t in ${TYPES//,/ }; do
  GG=$CK-$t.gguf
  [ -s "$OUT/ab_$t/ab.jsonl" ] && continue  # done by an earlier run into the same OUT_DIR
  echo "{\"gguf\": \"$GG\", \"bytes\": $(stat -c %s "$GG")}" | tee -a "$OUT/gguf.json"
  MODEL="$GG" bench/gpu/device_ab.sh "$OUT/ab_$t" "$CONC" "${VS[@]}" > "$OUT/ab_$t.log" 2>&1
  cut -c1-230 "$OUT/ab_$t/ab.jsonl"; cut -c1-160 "$OUT/ab_$t/steps.jsonl"; cat "$OUT/ab_$t/greedy.txt"
  for f in "$OUT"/ab_$t/serve_*.log; do grep -iE "error|panic" "$f" | head -3; done
done
if [ -n "${PROFILE:-}" ]; then
  export MODEL=$CK-$FIRST.gguf KV_BUDGET=20
  LABEL=qgemv PROFILE_ENV=HEARTH_GPU_QGEMV=1 PROFILE_ARGS="--dtype bf16" bench/gpu/device_profile.sh "$OUT/prof" $PROFILE \
    > "$OUT/prof_qgemv.log" 2>&1
  LABEL=candle bench/gpu/device_profile.sh "$OUT/prof" $PROFILE > "$OUT/prof_candle.log" 2>&1
  for f in "$OUT"/prof/summary_*.txt; do echo "== $f"; head -16 "$f"; done
fi
