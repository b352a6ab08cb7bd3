#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda --tests here; carry .gpu): the GPU kernel tests, then a
# paired A/B of levers on the 8B-shaped checkpoint (bench/gpu/device_ab.sh), in one device call.
#   bench/gpu/device_levers.sh OUT_DIR CONC "name|ENV|args" ...
# The kernel tests (gpu_kernels) run with the default launches (PDL on a Hopper GPU) and with HEARTH_CUDA_PDL=0.
set -uo pipefail
OUT="$1"; CONC="$2"; shift 2
mkdir -p "$OUT" /tmp/hbin
xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth
for t in .gpu/tests/*.xz; do n=$(basename "$t" .xz); xz -dc "$t" > "/tmp/hbin/$n"; chmod +x "/tmp/hbin/$n"; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
( python3 bench/gpu/make_llama8b.py /tmp/llama8b > "$OUT/make.log" 2>&1 ) &
MK=$!
K="paged_kernel decode_cluster argmax add_rmsnorm gemv"
timeout 200 /tmp/hbin/gpu_kernels --test-threads 1 $K > "$OUT/kernel_tests.log" 2>&1
HEARTH_CUDA_PDL=0 timeout 200 /tmp/hbin/gpu_kernels --test-threads 1 $K > "$OUT/kernel_tests_nopdl.log" 2>&1
grep -hE "^test |test result|panicked" "$OUT"/kernel_tests*.log
wait $MK; tail -2 "$OUT/make.log"
bench/gpu/device_ab.sh "$OUT/ab" "$CONC" "$@" > "$OUT/ab.log" 2>&1
cut -c1-300 "$OUT/ab/ab.jsonl"; cat "$OUT/ab/steps.jsonl" "$OUT/ab/greedy.txt"
for f in "$OUT"/ab/serve_*.log; do grep -iE "error|panic" "$f" | head -3; done
