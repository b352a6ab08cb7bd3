#!/usr/bin/env bash
# Paired A/B of the CPU attention backend (HEARTH_CPU_ATTN=1: in place, per token; 0: gather + candle matmul):
# alternating rounds on one machine, SmolLM2 on the CPU. Per round and variant:
#   - decode at depth: bench/load.py, 1,000-token prompts (random ids), 128 greedy tokens, 1 and 8 streams
#     (TTFT p50 of the single stream = a cold 1k prefill);
#   - a cold 4,000-token prefill (bench/prompt_cache.py reattach, first request);
#   - turn 20 of a fixed 20-turn chat vs turn 1 (TTFT medians of 7).
#   bench/cpu_attention_ab.sh [ROUNDS]     # default 2; prints JSON lines for docs/benchmarks.md
# Needs: scripts/fetch-models, cargo build --release -p hearth-cli. THREADS (2), HEARTH_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-2}"
THREADS="${THREADS:-2}"
BIN="${HEARTH_BIN:-./target/release/hearth}"
PORT=18196
URL="http://127.0.0.1:$PORT"
LOG="$(mktemp)"
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -f "$LOG"; }
trap cleanup EXIT
for round in $(seq 1 "$ROUNDS"); do
  for v in 1 0; do
    HEARTH_CPU_ATTN=$v "$BIN" serve -m smollm2-135m --device cpu --threads "$THREADS" --batch 8 \
      --host 127.0.0.1 --port $PORT >"$LOG" 2>&1 &
    PID=$!
    for _ in $(seq 1 300); do curl -sf "$URL/health" >/dev/null 2>&1 && break; sleep 0.2; done
    label="HEARTH_CPU_ATTN=$v round $round"
    python3 bench/load.py --url "$URL" --concurrency 1,8 --requests 8 --max-tokens 128 --prompt-tokens 1000 \
      --label "$label"
    python3 bench/prompt_cache.py reattach --url "$URL" --tokens 4000 --repeats 1 --seed "$round" --label "$label"
    python3 bench/prompt_cache.py turn20 --url "$URL" --label "$label"
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
  done
done
