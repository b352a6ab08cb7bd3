#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda here; carry .gpu/hearth.xz): a Qwen3.5-shaped hybrid
# (bench/make_moe_gguf.py --arch qwen3.5 --hf-only: 0.6B, bf16 safetensors, SmolLM2's tokenizer) served by hearth
# on the GPU, where its gated-DeltaNet recurrence runs on the host: batch-1 decode and 8 streams (bench/load.py,
# 512-token random prompts, 128 tokens), and 2048-token prefill.
#   bench/gpu/device_hybrid.sh OUT_DIR
set -uo pipefail
OUT="$1"
mkdir -p /tmp/hbin "$OUT"
[ -x /tmp/hbin/hearth ] || { xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
PYTHONUNBUFFERED=1 python3 bench/make_moe_gguf.py /tmp/q35 --arch qwen3.5 --layers 24 --heads 8 --kv-heads 2 \
  --hf-only 2>&1 | tail -2 | tee "$OUT/make.log"
PORT=18401
/tmp/hbin/hearth serve -m /tmp/q35 --device cuda --port $PORT --batch 16 --max-tokens 4096 > "$OUT/serve.log" 2>&1 &
SP=$!
for _ in $(seq 1 900); do curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.2; done
head -c 400 "$OUT/serve.log"; echo
L="python3 bench/load.py --url http://127.0.0.1:$PORT --prompt-tokens 512 --max-tokens 128 --label hearth-qwen35-0.6b"
$L --concurrency 1 --requests 1 > /dev/null  # warm-up
$L --concurrency 1 --requests 3 | tee -a "$OUT/loads.jsonl"
$L --concurrency 8 --requests 8 | tee -a "$OUT/loads.jsonl"
python3 bench/load.py --url http://127.0.0.1:$PORT --prompt-tokens 2048 --max-tokens 1 --concurrency 1 --requests 3 \
  --label hearth-qwen35-prefill2k | tee -a "$OUT/loads.jsonl"
kill $SP; wait $SP 2>/dev/null
tail -3 "$OUT/serve.log"
