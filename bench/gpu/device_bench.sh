#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda here; carry .gpu): the Llama-3.1-8B-shaped benchmark.
#   bench/gpu/device_bench.sh OUT_DIR [HF_BATCHES]
# 1. makes the random bf16 checkpoint (bench/gpu/make_llama8b.py) in /tmp/llama8b;
# 2. measures the copy bandwidth and the batch-1 memory roofline (bench/gpu/roofline.py);
# 3. serves it with hearth (--device cuda) and runs bench/load.py: batch-1 decode, aggregate at 8/32/64 streams
#    (512-token random prompts, 256 tokens, ignore_eos), TTFT, and prefill of 2048-token prompts;
# 4. runs the same workload through transformers + static cache + torch.compile (bench/gpu/hf_reference.py) at
#    HF_BATCHES (default 1,32).
# Everything prints JSON lines; OUT_DIR collects the logs.
set -uo pipefail
OUT="$1"; HFB="${2:-1,32}"
mkdir -p /tmp/hbin "$OUT"
[ -x /tmp/hbin/hearth ] || { xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
PYTHONUNBUFFERED=1 python3 bench/gpu/make_llama8b.py /tmp/llama8b 2>&1 | tee "$OUT/make.log"
PYTHONUNBUFFERED=1 python3 bench/gpu/roofline.py /tmp/llama8b 2>&1 | tee "$OUT/roofline.json"
PORT=18400
/tmp/hbin/hearth serve -m /tmp/llama8b --device cuda --port $PORT --batch 64 ${KV_GB:+--kv-budget $KV_GB} \
  --max-tokens 4096 > "$OUT/serve.log" 2>&1 &
SP=$!
for _ in $(seq 1 900); do curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.2; done
head -c 600 "$OUT/serve.log"; echo
L="python3 bench/load.py --url http://127.0.0.1:$PORT --prompt-tokens 512 --max-tokens 256 --label hearth-8b"
$L --concurrency 1 --requests 1 > /dev/null  # warm-up (kernel loads, memory pool)
$L --concurrency 1 --requests 3 | tee -a "$OUT/loads.jsonl"
curl -s http://127.0.0.1:$PORT/stats | tee "$OUT/stats_after_c1.json"; echo
$L --concurrency 8 --requests 8 | tee -a "$OUT/loads.jsonl"
$L --concurrency 32 --requests 32 | tee -a "$OUT/loads.jsonl"
$L --concurrency 64 --requests 64 | tee -a "$OUT/loads.jsonl"
python3 bench/load.py --url http://127.0.0.1:$PORT --prompt-tokens 2048 --max-tokens 1 --concurrency 1 --requests 3 \
  --label hearth-8b-prefill2k | tee -a "$OUT/loads.jsonl"
curl -s http://127.0.0.1:$PORT/stats | tee "$OUT/stats.json"; echo
kill $SP; wait $SP 2>/dev/null
tail -3 "$OUT/serve.log"
if [ "$HFB" != "none" ]; then
  PYTHONUNBUFFERED=1 timeout 420 python3 bench/gpu/hf_reference.py /tmp/llama8b --batches "$HFB" 2>&1 | grep -v Warning | tail -8 | tee "$OUT/hf.json"
fi
