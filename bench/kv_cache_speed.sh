#!/usr/bin/env bash
# Decode speed with the KV cache in each of ENCODINGS ("f16 q8_0") at a context depth, hearth and llama.cpp on the
# same GGUF and threads, paired and alternating, one process at a time (llama.cpp for its own types: f16, q8_0, q4_0):
#   bench/kv_cache_speed.sh [MODEL_ALIAS] [THREADS] [DEPTH] [ROUNDS]
# hearth: `hearth generate --raw` on a prompt of DEPTH tokens (cut from docs/benchmarks.md, repeated as needed),
# then NEW (96) greedy tokens with --ignore-eos; its decode tok/s. llama.cpp: `llama-bench -d DEPTH -n NEW -p 0`
# with -ctk/-ctv f16 and q8_0 (SKIP_LLAMA=1 leaves it out). Medians of ROUNDS (3) are printed per setting.
# Needs: scripts/fetch-models, bench/setup-llama-cpp.sh, cargo build --release -p hearth-cli.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-qwen2.5-coder-1.5b}"; THREADS="${2:-2}"; DEPTH="${3:-4096}"; ROUNDS="${4:-3}"; NEW="${NEW:-96}"
source bench/gguf_of.sh
GGUF="$(gguf_of "$MODEL")"
PROMPT=$(mktemp); trap 'rm -f "$PROMPT"' EXIT
# DEPTH tokens of real text: the benchmarks page, repeated, cut by the model's own tokenizer.
python3 - "$MODEL" "$DEPTH" "$PROMPT" <<'PY'
import json, subprocess, sys
model, depth, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
text = open("docs/benchmarks.md").read()
while len(text) < depth * 6:
    text += "\n" + text
lo, hi = 0, len(text)
count = lambda n: len(json.loads(subprocess.run(["./target/release/hearth", "tokenize", "-m", model, "--no-special", text[:n]],
                                                capture_output=True, text=True, check=True).stdout))
while hi - lo > 64:  # the longest prefix of at most DEPTH tokens, to 64 characters
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if count(mid) <= depth else (lo, mid)
open(out, "w").write(text[:lo])
PY
med() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
declare -A H L
for r in $(seq "$ROUNDS"); do
  for kv in ${ENCODINGS:-f16 q8_0}; do
    rate=$(./target/release/hearth generate -m "$MODEL" --threads "$THREADS" --raw --kv-cache-dtype $kv --prompt-file "$PROMPT" \
      --max-tokens "$NEW" --ignore-eos --temperature 0 2>&1 >/dev/null | sed -n 's/.*decode: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p')
    echo "hearth $kv round $r: $rate tok/s"; H[$kv]+="$rate "
    if [ "${SKIP_LLAMA:-0}" != 1 ] && [[ "$kv" =~ ^(f16|q8_0|q4_0)$ ]]; then
      rate=$(bench/.build/llama.cpp/build/bin/llama-bench -m "$GGUF" -t "$THREADS" -p 0 -n "$NEW" -d "$DEPTH" -r 1 -ctk $kv -ctv $kv -o csv 2>/dev/null \
        | python3 -c "import csv,sys; print([r for r in csv.DictReader(sys.stdin)][-1]['avg_ts'])")
      echo "llama.cpp $kv round $r: $rate tok/s"; L[$kv]+="$rate "
    fi
  done
done
for kv in ${ENCODINGS:-f16 q8_0}; do
  echo "median: hearth $kv $(echo ${H[$kv]} | tr ' ' '\n' | med) tok/s${L[$kv]:+ | llama.cpp $kv $(echo ${L[$kv]} | tr ' ' '\n' | med) tok/s}"
done
