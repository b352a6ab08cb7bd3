#!/usr/bin/env bash
# One stream's decode while other programs keep the cores busy: hearth with a lever off and on (by default
# HEARTH_WORK_POOL: candle's barrier pool, then hearth's own work pool), and llama-server, each beside BUSY busy loops.
#   bench/contention.sh [BUSY_LIST] [ROUNDS]        e.g. bench/contention.sh 0,1,2 2
# Same GGUF (MODEL, default smollm2-135m), 2 threads, one stream, 3 requests of 64 tokens per run (bench/load.py,
# loopback). LEVER (default HEARTH_WORK_POOL) is the hearth lever run at 0 and 1, e.g.
#   MODEL=gemma3-270m LEVER=HEARTH_K_QUANT bench/contention.sh 1,2 1
# Prints bench/load.py's markdown rows, labelled with the busy-loop count; the agg tok/s column is the decode rate.
set -euo pipefail
cd "$(dirname "$0")/.."
BUSY="${1:-0,1,2}"
MODEL="${MODEL:-smollm2-135m}"
LEVER="${LEVER:-HEARTH_WORK_POOL}"
ROUNDS="${2:-1}"
busy_pids=()
stop_busy() { for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done; busy_pids=(); }
trap stop_busy EXIT
for round in $(seq 1 "$ROUNDS"); do
  for n in ${BUSY//,/ }; do
    for _ in $(seq 1 "$n"); do (while :; do :; done) & busy_pids+=($!); done
    for lever in 0 1; do
      env "$LEVER=$lever" CONC=1 REQS=3 MAXTOK=64 SKIP_LLAMA=1 bench/serve_side_by_side.sh "$MODEL" 2 \
        | grep '^|' | sed "s/^| hearth/| round $round, $n busy: hearth $LEVER=$lever/"
    done
    CONC=1 REQS=3 MAXTOK=64 SKIP_HEARTH=1 bench/serve_side_by_side.sh "$MODEL" 2 \
      | grep '^|' | sed "s/^| llama-server/| round $round, $n busy: llama-server/"
    stop_busy
  done
done
