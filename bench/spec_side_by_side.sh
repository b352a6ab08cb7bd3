#!/usr/bin/env bash
# Speculative decoding, hearth vs llama.cpp's llama-server on the same GGUF and threads, one request at a time,
# loopback only, one server after the other:
#   bench/spec_side_by_side.sh [MODEL_ALIAS] [THREADS] [ROUNDS] [WORKLOAD]
# hearth (`--speculative $SPEC`, default auto; DRAFT=alias adds `--draft-model`): each round the same greedy request
# with `"speculative": false` (off), with the server's speculation (spec), and (edit) with the file as `prediction`
# (bench/spec_decode.py). llama-server: without speculation, then with LLAMA_SPEC (default `--spec-type
# ngram-simple`; with DRAFT, `-md` and the draft's GGUF), ROUNDS requests each. WORKLOAD: edit (default) or chat.
# MAXTOK: max_tokens per request (700). HEARTH_ARGS adds hearth serve flags; LLAMA_BUILD picks the llama.cpp build (as bench/serve_side_by_side.sh).
# Needs: scripts/fetch-models, bench/setup-llama-cpp.sh, cargo build --release -p hearth-cli.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-qwen2.5-coder-1.5b}"
THREADS="${2:-2}"
ROUNDS="${3:-3}"
WORKLOAD="${4:-edit}"
source bench/gguf_of.sh
GGUF="$(gguf_of "$MODEL")"
SPEC="${SPEC:-auto}"
DRAFT_ARGS=(); LLAMA_DEFAULT_SPEC="--spec-type ngram-simple"
if [ -n "${DRAFT:-}" ]; then
  DRAFT_ARGS=(--draft-model "$DRAFT"); LLAMA_DEFAULT_SPEC="-md $(gguf_of "$DRAFT")"
fi
HPORT=18191; LPORT=18192
wait_ready() { for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.2; done; echo "server on $1 never got ready" >&2; return 1; }
trap '[ -n "${HPID:-}" ] && kill $HPID 2>/dev/null || true; [ -n "${LPID:-}" ] && kill $LPID 2>/dev/null || true' EXIT
VARIANTS=off,spec,prediction
[ "$WORKLOAD" = chat ] && VARIANTS=off,spec

if [ "${SKIP_HEARTH:-0}" != 1 ]; then
# shellcheck disable=SC2086
./target/release/hearth serve -m "$MODEL" --device cpu --threads "$THREADS" --host 127.0.0.1 --port $HPORT \
  --speculative "$SPEC" "${DRAFT_ARGS[@]}" ${HEARTH_ARGS:-} >/tmp/hearth-spec.log 2>&1 &
HPID=$!
wait_ready $HPORT
python3 bench/spec_decode.py --url http://127.0.0.1:$HPORT --workload "$WORKLOAD" --rounds "$ROUNDS" --variants "$VARIANTS" --max-tokens "${MAXTOK:-700}"
kill $HPID; wait $HPID 2>/dev/null || true; HPID=
fi

[ "${SKIP_LLAMA:-0}" = 1 ] && exit 0
for spec in "" "${LLAMA_SPEC:-$LLAMA_DEFAULT_SPEC}"; do
  # shellcheck disable=SC2086
  "bench/.build/llama.cpp/${LLAMA_BUILD:-build}/bin/llama-server" -m "$GGUF" -t "$THREADS" -tb "$THREADS" -np 1 \
    -c 8192 --host 127.0.0.1 --port $LPORT $spec >/tmp/llama-spec.log 2>&1 &
  LPID=$!
  wait_ready $LPORT
  echo "# llama-server ${spec:-(no speculation)}"
  python3 bench/spec_decode.py --url http://127.0.0.1:$LPORT --workload "$WORKLOAD" --rounds "$ROUNDS" --llama --max-tokens "${MAXTOK:-700}" \
    --variants "$([ -z "$spec" ] && echo off || echo spec)"
  kill $LPID; wait $LPID 2>/dev/null || true; LPID=
done
