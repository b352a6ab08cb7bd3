#!/usr/bin/env bash
# Prompt-cache benchmarks on the CPU, loopback only, one server at a time (bench/prompt_cache.py does the talking).
#   bench/prompt_cache.sh reattach   # 8k-token prompt: cold, RAM hit, SSD restore after a restart
#   bench/prompt_cache.sh restore-verify  # 8k-token SSD restores with the data check on and off, alternated
#   bench/prompt_cache.sh agents     # 8 agents sharing a 2k-token system prompt: cache on, off, llama-server
#   bench/prompt_cache.sh multiturn  # a 20-turn chat, ChatML (SmolLM2) and Gemma 3 (bench/templates/gemma3.jinja),
#                                    # and SmolLM2 on llama-server (multiturn-llama: only that)
#   bench/prompt_cache.sh hybrid     # the 20-turn chat on a hybrid (Qwen3.5-shaped) GGUF, HYBRID_GGUF (made by
#                                    # bench/make_moe_gguf.py --arch qwen3.5): hearth's state snapshots on and off,
#                                    # and llama-server on the same file
# HEARTH_BIN picks the binary (default target/release/hearth); THREADS (2). Prints JSON lines for
# docs/benchmarks.md. Needs: scripts/fetch-models, cargo build --release -p hearth-cli (and for agents
# bench/setup-llama-cpp.sh unless SKIP_LLAMA=1).
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT="${1:-all}"
THREADS="${THREADS:-2}"
BIN="${HEARTH_BIN:-./target/release/hearth}"
MODELS="${HEARTH_MODELS:-$HOME/.cache/hearth/models}"
PORT=18191
URL="http://127.0.0.1:$PORT"
TMP="$(mktemp -d)"
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

wait_ready() { for _ in $(seq 1 900); do curl -sf "$URL/health" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "server never got ready; log:" >&2; tail -20 "$TMP/server.log" >&2; return 1; }
start() { "$BIN" serve --device cpu --threads "$THREADS" --host 127.0.0.1 --port $PORT "$@" >>"$TMP/server.log" 2>&1 &
  PID=$!; wait_ready; }
stop() { kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=""; }
stats() { curl -sf "$URL/stats" | python3 -c "import json,sys; s=json.load(sys.stdin); \
print(json.dumps({'label': '$1', 'prompt_cache': s['prompt_cache'], 'ssd_cache': s.get('ssd_cache')}))"; }

reattach() {
  local ssd="$TMP/ssd"
  start -m smollm2-135m --batch 4 --ssd-cache "$ssd"
  python3 bench/prompt_cache.py reattach --url "$URL" --tokens "${TOKENS:-8000}" --repeats 3 --label "cold, then RAM hits"
  stats "after RAM hits"
  stop # SIGTERM: the server writes its cache to the SSD tier before it exits
  start -m smollm2-135m --batch 4 --ssd-cache "$ssd"
  python3 bench/prompt_cache.py reattach --url "$URL" --tokens "${TOKENS:-8000}" --repeats 1 --label "SSD restore after a restart"
  stats "after the SSD restore"
  stop
  start -m smollm2-135m --batch 4 --ssd-cache "$ssd" --ssd-cache-verify off
  python3 bench/prompt_cache.py reattach --url "$URL" --tokens "${TOKENS:-8000}" --repeats 1 --label "SSD restore, --ssd-cache-verify off"
  stop
}

# The data check's share of a restore: one cold run writes the tier, then ROUNDS restarts each with the check on
# and off, alternated, each restoring the whole prompt once (the files are in the page cache: the fastest read, so
# the check's largest share). Medians at the end.
restore_verify() {
  local ssd="$TMP/ssd" log="$TMP/restore.jsonl"
  start -m smollm2-135m --batch 4 --ssd-cache "$ssd"
  python3 bench/prompt_cache.py reattach --url "$URL" --tokens "${TOKENS:-8000}" --repeats 1 --label "cold" | tee -a "$log"
  stop
  for r in $(seq 1 "${ROUNDS:-5}"); do
    for v in on off; do
      start -m smollm2-135m --batch 4 --ssd-cache "$ssd" --ssd-cache-verify $v
      python3 bench/prompt_cache.py reattach --url "$URL" --tokens "${TOKENS:-8000}" --repeats 1 --label "verify $v" | tee -a "$log"
      stop
    done
  done
  python3 bench/verify_share.py "$log"
}

agents() {
  local args=(--url "$URL" --agents 8 --system 2000 --turns 3 --max-tokens 32)
  start -m smollm2-135m --batch 8
  python3 bench/prompt_cache.py agents "${args[@]}" --label "hearth, prompt cache on"
  stop
  start -m smollm2-135m --batch 8 --prompt-cache 0
  python3 bench/prompt_cache.py agents "${args[@]}" --label "hearth, --prompt-cache 0"
  stop
  [ "${SKIP_LLAMA:-0}" = 1 ] && return 0
  # llama-server: 8 slots, each with room for its agent's 3 turns; cache_prompt is on per request.
  bench/.build/llama.cpp/build/bin/llama-server -m "$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf" -t "$THREADS" \
    -tb "$THREADS" -np 8 -cb -c 24576 --host 127.0.0.1 --port $PORT >>"$TMP/server.log" 2>&1 &
  PID=$!; wait_ready
  python3 bench/prompt_cache.py agents "${args[@]}" --label "llama-server -np 8 (cache_prompt)"
  stop
}

multiturn() {
  start -m smollm2-135m --batch 4
  python3 bench/prompt_cache.py multiturn --url "$URL" --turns 20 --max-tokens 48 --label "SmolLM2 ChatML, cache on"
  stop
  start -m smollm2-135m --batch 4 --prompt-cache 0
  python3 bench/prompt_cache.py multiturn --url "$URL" --turns 20 --max-tokens 48 --label "SmolLM2 ChatML, --prompt-cache 0"
  stop
  start -m gemma3-270m --batch 4 --chat-template bench/templates/gemma3.jinja
  python3 bench/prompt_cache.py multiturn --url "$URL" --turns 20 --max-tokens 48 --vocab 262144 --label "Gemma 3 270M, Gemma template, cache on"
  stop
  multiturn_llama
}

# The same 20-turn SmolLM2 chat on llama-server (same GGUF, its template, cache_prompt), for the peer's turn 20 / turn 1.
multiturn_llama() {
  [ "${SKIP_LLAMA:-0}" = 1 ] && return 0
  bench/.build/llama.cpp/build/bin/llama-server -m "$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf" -t "$THREADS" \
    -tb "$THREADS" -np 1 -c 8192 --jinja --host 127.0.0.1 --port $PORT >>"$TMP/server.log" 2>&1 &
  PID=$!; wait_ready
  python3 bench/prompt_cache.py multiturn --url "$URL" --turns 20 --max-tokens 48 --label "SmolLM2 ChatML, llama-server (cache_prompt)"
  stop
}

# A hybrid model: a cached prefix resumes only from a recurrent-state snapshot (--prompt-cache-state).
hybrid() {
  local gguf="${HYBRID_GGUF:?set HYBRID_GGUF to a Qwen3.5-shaped GGUF (bench/make_moe_gguf.py --arch qwen3.5)}"
  start -m "$gguf" --batch 4
  python3 bench/prompt_cache.py multiturn --url "$URL" --turns 20 --max-tokens 48 --label "hybrid, snapshots on"
  stats "hybrid, snapshots on"
  python3 bench/prompt_cache.py turn20 --url "$URL" --repeats 7 --label "hybrid, snapshots on"
  stop
  start -m "$gguf" --batch 4 --prompt-cache-state 0
  python3 bench/prompt_cache.py multiturn --url "$URL" --turns 20 --max-tokens 48 --label "hybrid, --prompt-cache-state 0"
  stop
  [ "${SKIP_LLAMA:-0}" = 1 ] && return 0
  bench/.build/llama.cpp/build/bin/llama-server -m "$gguf" -t "$THREADS" -tb "$THREADS" -np 1 -c 8192 --jinja \
    --host 127.0.0.1 --port $PORT >>"$TMP/server.log" 2>&1 &
  PID=$!; wait_ready
  python3 bench/prompt_cache.py multiturn --url "$URL" --turns 20 --max-tokens 48 --label "hybrid, llama-server (cache_prompt)"
  python3 bench/prompt_cache.py turn20 --url "$URL" --repeats 7 --label "hybrid, llama-server (cache_prompt)"
  stop
}

case "$WHAT" in
  reattach) reattach ;;
  hybrid) hybrid ;;
  restore-verify) restore_verify ;;
  agents) agents ;;
  multiturn) multiturn ;;
  multiturn-llama) multiturn_llama ;;
  all) reattach; agents; multiturn ;;
  *) echo "usage: $0 reattach|restore-verify|agents|multiturn|multiturn-llama|all" >&2; exit 2 ;;
esac
