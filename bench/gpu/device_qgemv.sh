#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda --tests and bench/gpu/prepare_gguf.sh here; carry .gpu):
# the quantized-matmul tests, then the 8B-shaped checkpoint written as a quantized GGUF on the device and a paired
# A/B of hearth's quantized kernels (gpu::qgemv) against candle's, with f32 and bf16 activations, in one call.
#   bench/gpu/device_qgemv.sh OUT_DIR [TYPE (q4_0)] [CONC (1,8,32)] [VARIANT ...]
# VARIANTs as bench/gpu/device_ab.sh takes them; default: hearth's kernels and candle's, each in f32 and bf16.
# Prints the copy bandwidth (bench/gpu/roofline.py) and the GGUF's bytes: its batch-1 roofline is bytes / bandwidth.
set -uo pipefail
OUT="$1"; TYPE="${2:-q4_0}"; CONC="${3:-1,8,32}"; shift 3 2>/dev/null || shift $#
mkdir -p "$OUT" /tmp/hbin
xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth
for t in .gpu/tests/*.xz; do n=$(basename "$t" .xz); xz -dc "$t" > "/tmp/hbin/$n"; chmod +x "/tmp/hbin/$n"; done
python3 -c 'import gguf' 2>/dev/null || pip install --quiet --no-index --no-deps .gpu/wheels/gguf-*.whl
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
GG=/tmp/llama8b-$TYPE.gguf
( python3 bench/gpu/make_llama8b.py /tmp/llama8b && \
  python3 bench/gpu/make_gguf.py /tmp/llama8b "$GG" --type "$TYPE" --vocab .gpu/tokenizer.gguf ) > "$OUT/make.log" 2>&1 &
MK=$!
timeout 240 /tmp/hbin/gpu_quant_matmul --test-threads 1 --nocapture > "$OUT/qgemv_tests.log" 2>&1
# The dense one-row kernels and the tiny models, when their binaries were carried too.
[ -x /tmp/hbin/gpu_kernels ] && timeout 120 /tmp/hbin/gpu_kernels --test-threads 1 gemv add_rmsnorm > "$OUT/kernel_tests.log" 2>&1
[ -x /tmp/hbin/gpu_parity ] && timeout 120 /tmp/hbin/gpu_parity --test-threads 1 tiny_ > "$OUT/parity_tests.log" 2>&1
grep -hE "^test |test result|panicked" "$OUT"/*_tests.log
grep -E "vs candle" "$OUT/qgemv_tests.log" | sort -t' ' -k7 -g | tail -3
wait $MK; tail -3 "$OUT/make.log"
python3 bench/gpu/roofline.py /tmp/llama8b 2>&1 | tail -1 | tee "$OUT/roofline.json"
echo "{\"gguf\": \"$GG\", \"bytes\": $(stat -c %s "$GG")}" | tee "$OUT/gguf.json"
[ $# -gt 0 ] || set -- "qgemv-f32||" "candle-f32|HEARTH_GPU_QGEMV=0|" "qgemv-bf16||--dtype bf16" \
  "candle-bf16|HEARTH_GPU_QGEMV=0|--dtype bf16"
MODEL="$GG" bench/gpu/device_ab.sh "$OUT/ab" "$CONC" "$@" > "$OUT/ab.log" 2>&1
cut -c1-260 "$OUT/ab/ab.jsonl"; cut -c1-200 "$OUT/ab/steps.jsonl"; cat "$OUT/ab/greedy.txt"
for f in "$OUT"/ab/serve_*.log; do grep -iE "error|panic" "$f" | head -3; done
