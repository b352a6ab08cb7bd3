#!/usr/bin/env bash
# One stream's decode while other programs keep the cores busy: hearth with candle's barrier pool
# (HEARTH_WORK_POOL=0), hearth with its own work pool (=1), and llama-server, each beside BUSY busy loops.
#   bench/contention.sh [BUSY_LIST] [ROUNDS]        e.g. bench/contention.sh 0,1,2 2
# Same GGUF (SmolLM2-135M Q4_1), 2 threads, one stream, 3 requests of 64 tokens per run (bench/load.py, loopback).
# Prints bench/load.py's markdown rows, labelled with the busy-loop count; the agg tok/s column is the decode rate.
set -euo pipefail
cd "$(dirname "$0")/.."
BUSY="${1:-0,1,2}"
ROUNDS="${2:-1}"
busy_pids=()
stop_busy() { for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done; busy_pids=(); }
trap stop_busy EXIT
for round in $(seq 1 "$ROUNDS"); do
  for n in ${BUSY//,/ }; do
    for _ in $(seq 1 "$n"); do (while :; do :; done) & busy_pids+=($!); done
    for lever in 0 1; do
      HEARTH_WORK_POOL=$lever CONC=1 REQS=3 MAXTOK=64 SKIP_LLAMA=1 bench/serve_side_by_side.sh smollm2-135m 2 \
        | grep '^|' | sed "s/^| hearth/| round $round, $n busy: hearth HEARTH_WORK_POOL=$lever/"
    done
    CONC=1 REQS=3 MAXTOK=64 SKIP_HEARTH=1 bench/serve_side_by_side.sh smollm2-135m 2 \
      | grep '^|' | sed "s/^| llama-server/| round $round, $n busy: llama-server/"
    stop_busy
  done
done
