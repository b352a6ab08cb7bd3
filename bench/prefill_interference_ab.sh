#!/usr/bin/env bash
# Paired A/B of the running stream's inter-token latency while a ~4k-token prompt arrives, one hearth server per
# variant, alternating variants over RUNS rounds (loopback only).
#   bench/prefill_interference_ab.sh [RUNS] "name|serve args" ...
# e.g. bench/prefill_interference_ab.sh 2 "default|" "single-budget|--prefill-chunk-decoding 256"
# MODEL picks the model (default smollm2-135m), LONG_TOKENS the long prompt's length (default 4000).
# Needs: scripts/fetch-models, cargo build --release -p hearth-cli. Prints bench/prefill_interference.py's JSON
# lines, each prefixed with the variant's name.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-2}"; shift
PORT=18191
MODEL="${MODEL:-smollm2-135m}"
for run in $(seq 1 "$RUNS"); do
  for spec in "$@"; do
    IFS='|' read -r name args <<< "$spec"
    # shellcheck disable=SC2086
    ./target/release/hearth serve -m "$MODEL" --device cpu --threads 2 --host 127.0.0.1 --port $PORT --batch 16 $args \
      >/tmp/hearth-pi.log 2>&1 &
    SP=$!
    for _ in $(seq 1 600); do curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.2; done
    python3 bench/prefill_interference.py --url http://127.0.0.1:$PORT --long-tokens "${LONG_TOKENS:-4000}" \
      | sed "s/^/$name run$run: /"
    kill $SP; wait $SP 2>/dev/null || true
  done
done
