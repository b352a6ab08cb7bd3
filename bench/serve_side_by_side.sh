#!/usr/bin/env bash
# hearth serve vs llama.cpp's llama-server on the same GGUF, same threads, loopback only, one after the other.
#   bench/serve_side_by_side.sh [MODEL_ALIAS] [THREADS]
# HEARTH_ARGS adds hearth serve flags; HEARTH_BIN picks the binary (default target/release/hearth: pass another
# build for a before/after A/B); SKIP_LLAMA=1 runs hearth only, SKIP_HEARTH=1 llama-server only; CONC, REQS, MAXTOK
# set the load; LLAMA_BUILD picks the llama.cpp build under bench/.build/llama.cpp (default build; build-avx2 is
# LLAMA_CPP_ISA=avx2 bench/setup-llama-cpp.sh's).
# Needs: scripts/fetch-models, bench/setup-llama-cpp.sh, cargo build --release -p hearth-cli.
# Prints bench/load.py's JSON lines and markdown rows for docs/benchmarks.md, then each server's peak RSS (VmHWM:
# the most resident memory the process had at any time, loading included).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-smollm2-135m}"
THREADS="${2:-2}"
CONC="${CONC:-1,4,8,16}"
REQS="${REQS:-16}"
MAXTOK="${MAXTOK:-128}"
MODELS="${HEARTH_MODELS:-$HOME/.cache/hearth/models}"
case "$MODEL" in
  smollm2-135m) GGUF="$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
  gemma3-270m) GGUF="$MODELS/gemma-3-270m-q4_k_m.gguf" ;;
  qwen2.5-coder-0.5b) GGUF="$MODELS/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" ;;
  qwen2.5-coder-1.5b) GGUF="$MODELS/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" ;;
  *) echo "unknown model $MODEL" >&2; exit 2 ;;
esac
HPORT=18181; LPORT=18182
peak_rss() { awk -v who="$2" '/^VmHWM/ {printf "peak RSS %s: %.1f MiB\n", who, $2 / 1024}' "/proc/$1/status"; }
wait_ready() { for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.2; done; echo "server on $1 never got ready" >&2; return 1; }

trap '[ -n "${HPID:-}" ] && kill $HPID 2>/dev/null || true; [ -n "${LPID:-}" ] && kill $LPID 2>/dev/null || true' EXIT
if [ "${SKIP_HEARTH:-0}" != 1 ]; then
# shellcheck disable=SC2086
"${HEARTH_BIN:-./target/release/hearth}" serve -m "$MODEL" --device cpu --threads "$THREADS" --host 127.0.0.1 --port $HPORT --batch 16 \
  ${HEARTH_ARGS:-} >/tmp/hearth-serve.log 2>&1 &
HPID=$!
wait_ready $HPORT
python3 bench/load.py --url http://127.0.0.1:$HPORT --concurrency "$CONC" --requests "$REQS" --max-tokens "$MAXTOK" \
  --label "hearth $MODEL${HEARTH_ARGS:+ $HEARTH_ARGS}" --markdown
peak_rss $HPID hearth
kill $HPID; wait $HPID 2>/dev/null || true
fi

[ "${SKIP_LLAMA:-0}" = 1 ] && exit 0
# llama-server: continuous batching with 16 slots, a context big enough for 16 x (prompt + 128).
"bench/.build/llama.cpp/${LLAMA_BUILD:-build}/bin/llama-server" -m "$GGUF" -t "$THREADS" -tb "$THREADS" -np 16 -cb -c 8192 \
  --host 127.0.0.1 --port $LPORT >/tmp/llama-server.log 2>&1 &
LPID=$!
wait_ready $LPORT
python3 bench/load.py --url http://127.0.0.1:$LPORT --concurrency "$CONC" --requests "$REQS" --max-tokens "$MAXTOK" \
  --label "llama-server $MODEL" --markdown
peak_rss $LPID llama-server
