#!/usr/bin/env bash
# Image requests, hearth serve vs llama.cpp's llama-server on the same GGUF and mmproj files, same threads,
# loopback only, one after the other: TTFT of a one-image request and of the next turn about the same image,
# and hearth's encoder time per image (bench/images.py).
#   bench/images.sh [DIR] [THREADS]
# DIR holds bench/make_vl_checkpoint.py's output (made there first if missing: a random Qwen2.5-VL with the
# published vision tower and a 0.5B-shaped text model, f16 GGUFs; FAMILY=gemma3: Gemma 3's published SigLIP tower
# and a 1B-shaped text model). PAIRS and SIZE set bench/images.py's load;
# IMAGES_ARGS adds bench/images.py flags (--text-only); HEARTH_ARGS adds hearth serve flags; SKIP_LLAMA=1 / SKIP_HEARTH=1 run one side; HF=1 also serves the
# checkpoint's Hugging Face directory with hearth (the tower from safetensors, f32 on the CPU).
# Needs: bench/setup-llama-cpp.sh, tools/oracle/setup.sh, cargo build --release -p hearth-cli.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-/tmp/hearth-vl-bench}"
THREADS="${2:-2}"
PAIRS="${PAIRS:-3}"
SIZE="${SIZE:-448}"
HPORT=18191; LPORT=18192
[ -f "$DIR/mmproj.gguf" ] || .venv-oracle/bin/python bench/make_vl_checkpoint.py "$DIR" --family "${FAMILY:-qwen2.5-vl}"
wait_ready() { for _ in $(seq 1 1500); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.2; done; echo "server on $1 never got ready" >&2; return 1; }
run() { python3 bench/images.py --url "http://127.0.0.1:$1" --pairs "$PAIRS" --size "$SIZE" --label "$2" --markdown ${IMAGES_ARGS:-}; }

trap '[ -n "${HPID:-}" ] && kill $HPID 2>/dev/null || true; [ -n "${LPID:-}" ] && kill $LPID 2>/dev/null || true' EXIT
echo "| server | image | TTFT turn 1 (ms) | TTFT turn 2 (ms) | ratio | encoder ms/image |"
echo "|---|---|---:|---:|---:|---:|"
hearth() {
  # shellcheck disable=SC2086
  ./target/release/hearth serve "$@" --device cpu --threads "$THREADS" --host 127.0.0.1 --port $HPORT \
    ${HEARTH_ARGS:-} >/tmp/hearth-images.log 2>&1 &
  HPID=$!
  wait_ready $HPORT
  run $HPORT "$LABEL"
  kill $HPID; wait $HPID 2>/dev/null || true; HPID=
}
if [ "${SKIP_HEARTH:-0}" != 1 ]; then
  LABEL="hearth (GGUF + mmproj)" hearth -m "$DIR/text.gguf" --mmproj "$DIR/mmproj.gguf"
  if [ "${HF:-0}" = 1 ]; then LABEL="hearth (HF directory)" hearth -m "$DIR/hf"; fi
fi
[ "${SKIP_LLAMA:-0}" = 1 ] && exit 0
# llama-server: one slot (each conversation's second turn finds its first in the slot's cache).
"bench/.build/llama.cpp/${LLAMA_BUILD:-build}/bin/llama-server" -m "$DIR/text.gguf" --mmproj "$DIR/mmproj.gguf" \
  -t "$THREADS" -tb "$THREADS" -np 1 -c 8192 --host 127.0.0.1 --port $LPORT >/tmp/llama-server-images.log 2>&1 &
LPID=$!
wait_ready $LPORT
run $LPORT "llama-server (GGUF + mmproj)"
grep -E "image (slice )?encoded in" /tmp/llama-server-images.log | tail -n "$PAIRS" || true
