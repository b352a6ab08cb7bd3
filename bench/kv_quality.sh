#!/usr/bin/env bash
# What KV-cache encodings cost in quality, hearth and llama.cpp on the same GGUF, in one run:
#   bench/kv_quality.sh [MODEL_ALIAS] [THREADS] [CTX] [FILE...]
# hearth: `hearth kv-quality` with --dequantize (exact math, so the encoding is the only change; see docs/cli.md)
# over each FILE (default: the bundled public-domain corpus, bench/corpus/*.txt: 16 documents of about 4k tokens,
# eight chapters of Moby-Dick and eight State of the Union addresses), the first CTX (512) tokens of each,
# ENCODINGS (f16,q8_0) against the f32 cache; then
# the same with the weights as stored (8-bit activations in the matmuls, as llama.cpp runs). llama.cpp:
# `llama-perplexity --kl-divergence` on the files concatenated, as many chunks of CTX tokens as there are files,
# with -ctk/-ctv of each of LLAMA_KV (q8_0 q4_0) against its f16 cache. SKIP_HEARTH=1 or SKIP_LLAMA=1 leaves a side
# out. PIECES=18000 scores long contexts instead: the files joined and cut into 16 pieces of that many characters.
# Needs: scripts/fetch-models, cargo build --release -p hearth-cli, bench/setup-llama-cpp.sh (for llama.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-qwen2.5-coder-1.5b}"; THREADS="${2:-2}"; CTX="${3:-512}"; shift $(( $# < 3 ? $# : 3 ))
FILES=("$@"); [ ${#FILES[@]} -gt 0 ] || FILES=(bench/corpus/*.txt)
if [ -n "${PIECES:-}" ]; then
  # long contexts: the FILES joined by blank lines, cut into 16 pieces of PIECES characters (18000: ~4k tokens)
  PIECE_DIR=$(mktemp -d); trap 'rm -rf "$PIECE_DIR"' EXIT
  python3 - "$PIECES" "$PIECE_DIR" "${FILES[@]}" <<'PY'
import sys
n, out, files = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
text = "\n\n".join(open(f).read() for f in files)
for i in range(min(16, len(text) // n)):
    open(f"{out}/piece{i:02d}.md", "w").write(text[i * n:(i + 1) * n])
PY
  FILES=("$PIECE_DIR"/piece*.md)
fi
ENCODINGS="${ENCODINGS:-f16,q8_0}"
source bench/gguf_of.sh
GGUF="$(gguf_of "$MODEL")"
if [ "${SKIP_HEARTH:-0}" != 1 ]; then
  echo "# hearth $MODEL, ${#FILES[@]} documents, first $CTX tokens each, exact math (--dequantize)"
  ./target/release/hearth kv-quality -m "$MODEL" --threads "$THREADS" --dequantize --ctx "$CTX" --encodings "$ENCODINGS" "${FILES[@]}"
  echo "# hearth $MODEL, the weights as stored (8-bit activations)"
  ./target/release/hearth kv-quality -m "$MODEL" --threads "$THREADS" --ctx "$CTX" --encodings "$ENCODINGS" "${FILES[@]}"
fi
[ "${SKIP_LLAMA:-0}" = 1 ] && exit 0
LP=bench/.build/llama.cpp/build/bin/llama-perplexity
TEXT=$(mktemp); BASE=$(mktemp); trap 'rm -f "$TEXT" "$BASE"; rm -rf "${PIECE_DIR:-}"' EXIT
cat "${FILES[@]}" > "$TEXT"
"$LP" -m "$GGUF" -f "$TEXT" -c "$CTX" --chunks ${#FILES[@]} -t "$THREADS" -ctk f16 -ctv f16 --kl-divergence-base "$BASE" >/dev/null 2>&1
for kv in ${LLAMA_KV:-q8_0 q4_0}; do
  echo "# llama.cpp $MODEL, -ctk/-ctv $kv against f16, ${#FILES[@]} chunks of $CTX (second halves scored)"
  "$LP" -m "$GGUF" -f "$TEXT" -c "$CTX" --chunks ${#FILES[@]} -t "$THREADS" -ctk $kv -ctv $kv --kl-divergence --kl-divergence-base "$BASE" 2>&1 \
    | grep -E "Mean    KLD|99.0%   KLD|Maximum KLD|Same top p|Mean PPL\(Q\)  "
done
