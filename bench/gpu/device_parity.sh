#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda --tests here and the SmolLM2 GGUF staged there):
#   [TESTS=filter] bench/gpu/device_parity.sh MODELS_DIR OUT_DIR   (TESTS: a test-name filter, e.g. smollm2)
# Unpacks .gpu/, runs the GPU kernel tests (crates/hearth-engine/tests/gpu_kernels.rs) and the GPU parity tests
# (crates/hearth-engine/tests/gpu_parity.rs) with transformers' bf16
# logits on the same GPU (tools/oracle/gpu_logits.py; needs the gguf wheel in .whl/), then a short `hearth serve`
# smoke test on SmolLM2 on the GPU. Logs go to OUT_DIR.
set -uo pipefail
MODELS="$1"; OUT="$2"
mkdir -p /tmp/hbin "$OUT"
# Unpack what this call carried (an earlier call on the same machine may have unpacked it already).
[ -f .gpu/hearth.xz ] && xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth
for t in .gpu/tests/*.xz; do [ -f "$t" ] || continue; n=$(basename "$t" .xz); xz -dc "$t" > "/tmp/hbin/$n"; chmod +x "/tmp/hbin/$n"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
WHL=.whl; [ -d "$WHL" ] || WHL=/tmp/whl
if ls $WHL/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $WHL/*.whl && export PYTHONPATH=/tmp/site
fi
PYTHONUNBUFFERED=1 python3 tools/oracle/gpu_logits.py "$MODELS" /tmp/hf_gpu_bf16.json 2>&1 | tail -3 | tee "$OUT/hf_gpu.log"
[ -f /tmp/hf_gpu_bf16.json ] && cp /tmp/hf_gpu_bf16.json "$OUT/" && export HEARTH_HF_GPU_GOLDEN=/tmp/hf_gpu_bf16.json
export HEARTH_MODELS="$MODELS" HEARTH_REPO_ROOT="$PWD"
(for b in gpu_kernels gpu_parity; do /tmp/hbin/$b --test-threads 1 --nocapture ${TESTS:-}; done 2>&1) | tee "$OUT/gpu_parity.log" \
  | grep -E "test |max_abs|diverged|panicked|result" | head -80
# serve smoke: SmolLM2 (GGUF, quantized) on the GPU, 8 concurrent streams
/tmp/hbin/hearth serve -m "$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf" --device cuda --port 18300 --batch 16 > "$OUT/serve_smollm2.log" 2>&1 &
SP=$!
for _ in $(seq 1 300); do curl -sf http://127.0.0.1:18300/health >/dev/null 2>&1 && break; sleep 0.2; done
curl -s http://127.0.0.1:18300/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":24,"temperature":0}' | tee "$OUT/chat.json"; echo
python3 bench/load.py --url http://127.0.0.1:18300 --concurrency 1,8 --requests 8 --max-tokens 64 --label "hearth smollm2 cuda" | tee "$OUT/load_smollm2.txt"
kill $SP; wait $SP 2>/dev/null
tail -5 "$OUT/serve_smollm2.log"
