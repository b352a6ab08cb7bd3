#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda --tests here; carry .gpu): one call that re-measures
# the H200 numbers docs/benchmarks.md reports against transformers, in order:
#   1. the GPU kernel tests (paged attention incl. the tensor-core prompt kernel, the cluster decode kernel, argmax,
#      add+RMSNorm, gemv; the kernels over encoded KV caches against the CPU's);
#   2. bench/gpu/device_bench.sh without transformers (roofline, 1/8/32/64 streams, 2k prefill);
#   3. bench/gpu/device_ab.sh with the default build at 1, 32, 32, 32 streams (repeats for medians);
#   4. transformers + static cache + torch.compile at batch 1 and 32 (bench/gpu/hf_reference.py), same machine
#      (HF=0 skips it: the whole script then fits in one 10-minute device call).
# The GPU model-parity tests need the SmolLM2 GGUF staged on the machine: bench/gpu/device_parity.sh runs them.
#   [HF=0] bench/gpu/device_final.sh OUT_DIR
set -uo pipefail
OUT="$1"; mkdir -p "$OUT" /tmp/hbin
xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth
for t in .gpu/tests/*.xz; do n=$(basename "$t" .xz); xz -dc "$t" > "/tmp/hbin/$n"; chmod +x "/tmp/hbin/$n"; done
timeout 240 /tmp/hbin/gpu_kernels --test-threads 1 paged_kernel decode_cluster argmax add_rmsnorm gemv \
  > "$OUT/kernel_tests.log" 2>&1
grep -E "^test |test result" "$OUT/kernel_tests.log"
timeout 240 /tmp/hbin/gpu_kv_encodings --test-threads 1 > "$OUT/kv_encodings.log" 2>&1
grep -E "^test |test result" "$OUT/kv_encodings.log"
HFB=none bench/gpu/device_bench.sh "$OUT/bench" > "$OUT/bench.log" 2>&1
cat "$OUT/bench/roofline.json"; cut -c1-260 "$OUT/bench/loads.jsonl"
bench/gpu/device_ab.sh "$OUT/ab" 1,32,32,32 "default||" > "$OUT/ab.log" 2>&1
cut -c1-260 "$OUT/ab/ab.jsonl"; cat "$OUT/ab/steps.jsonl"
[ "${HF:-1}" = 0 ] && exit 0
PYTHONUNBUFFERED=1 timeout 300 python3 bench/gpu/hf_reference.py /tmp/llama8b --batches 1,32 2>&1 | grep -v Warning \
  | tail -6 | tee "$OUT/hf.json"
