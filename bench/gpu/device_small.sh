#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda --tests and bench/gpu/prepare_gguf.sh here; carry .gpu):
#   bench/gpu/device_small.sh OUT_DIR [SHAPES (smollm2-135m,qwen2.5-0.5b)] [CONC (1,8)] [TYPE (q4_0)]
# Small models are bound by launches, not bytes: each SHAPE (bench/gpu/make_llama8b.py --shape) is made on the
# device with random weights and written as a TYPE GGUF (bench/gpu/make_gguf.py), then
# 1. the GPU parity tests: the CUDA-graph probe runs one decode step of it eagerly and as a replayed graph
#    (gpu_parity decode_step_graph_*: logits equal, µs per step each way), the graphs' replay-equals-eager test
#    (decode_graphs_*) and the tiny models' parity tests;
# 2. bench/gpu/device_ab.sh serves it at each CONC, VARIANTS (device_ab.sh's form, newline-separated; default:
#    hearth's defaults only).
# Logs go to OUT_DIR.
set -uo pipefail
OUT="$1"; SHAPES="${2:-smollm2-135m,qwen2.5-0.5b}"; CONC="${3:-1,8}"; TYPE="${4:-q4_0}"
mkdir -p "$OUT" /tmp/hbin
xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth
for t in .gpu/tests/*.xz; do n=$(basename "$t" .xz); xz -dc "$t" > "/tmp/hbin/$n"; chmod +x "/tmp/hbin/$n"; done
python3 -c 'import gguf' 2>/dev/null || export PYTHONPATH="$(ls "$PWD"/.gpu/wheels/gguf-*.whl)${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
for s in ${SHAPES//,/ }; do
  python3 bench/gpu/make_llama8b.py /tmp/llama-$s --shape $s >> "$OUT/make.log" 2>&1
  [ -f /tmp/llama-$s-$TYPE.gguf ] || python3 bench/gpu/make_gguf.py /tmp/llama-$s /tmp/llama-$s-$TYPE.gguf --type $TYPE \
    --vocab .gpu/tokenizer.gguf >> "$OUT/make.log" 2>&1
done
tail -3 "$OUT/make.log"
FIRST="${SHAPES%%,*}"
HEARTH_REPO_ROOT="$PWD" HEARTH_GRAPH_PROBE_MODEL=/tmp/llama-$FIRST-$TYPE.gguf timeout 300 /tmp/hbin/gpu_parity \
  --test-threads 1 --nocapture decode_ tiny_ > "$OUT/parity.log" 2>&1
grep -E "^test |test result|graph probe|panicked|max-abs" "$OUT/parity.log" | head -40
V="${VARIANTS:-default||}"
mapfile -t VS <<< "$V"
for s in ${SHAPES//,/ }; do
  MODEL=/tmp/llama-$s-$TYPE.gguf KV_BUDGET=8 bench/gpu/device_ab.sh "$OUT/ab_$s" "$CONC" "${VS[@]}" > "$OUT/ab_$s.log" 2>&1
  cut -c1-230 "$OUT/ab_$s/ab.jsonl"; cut -c1-160 "$OUT/ab_$s/steps.jsonl"; cat "$OUT/ab_$s/greedy.txt"
done
