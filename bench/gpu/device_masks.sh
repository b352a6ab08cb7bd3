#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda --tests here; carry .gpu): the argmax kernel tests (plain
# and grammar-masked), constrained vs free decoding at 1 and 32 streams (bench/gpu/device_constrained.sh), and the
# prompt-cache check (bench/gpu/cache_check.py: hits, partial-block copies and a second turn against a server
# without the cache) on the 8B-shaped checkpoint.
#   bench/gpu/device_masks.sh OUT_DIR
set -uo pipefail
OUT="$1"; mkdir -p "$OUT" /tmp/hbin
for t in .gpu/tests/*.xz; do n=$(basename "$t" .xz); xz -dc "$t" > "/tmp/hbin/$n"; chmod +x "/tmp/hbin/$n"; done
timeout 200 /tmp/hbin/gpu_kernels --test-threads 1 argmax paged_kernel > "$OUT/kernels.log" 2>&1
grep -E "^test |test result|panicked" "$OUT/kernels.log"
bench/gpu/device_constrained.sh "$OUT/c" > "$OUT/c.log" 2>&1
cut -c1-330 "$OUT/c/constrained.jsonl"; tail -3 "$OUT/c.log"
/tmp/hbin/hearth serve -m /tmp/llama8b --device cuda --port 18661 --batch 8 > "$OUT/warm.log" 2>&1 &
A=$!
/tmp/hbin/hearth serve -m /tmp/llama8b --device cuda --port 18662 --batch 8 --prompt-cache 0 > "$OUT/cold.log" 2>&1 &
B=$!
for p in 18661 18662; do for _ in $(seq 1 900); do curl -sf http://127.0.0.1:$p/health >/dev/null 2>&1 && break; sleep 0.2; done; done
python3 bench/gpu/cache_check.py --url http://127.0.0.1:18661 --cold http://127.0.0.1:18662; echo "cache_check rc=$?"
kill $A $B; wait $A $B 2>/dev/null
