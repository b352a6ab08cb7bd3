#!/usr/bin/env bash
# On the GPU machine (repo root, .gpu carried): constrained vs free decoding on the 8B-shaped checkpoint at 1 and
# 32 streams (bench/constrained.sh: a tool-call JSON schema whose long string runs every request to max_tokens),
# paired in one server, two rounds; the grammar mask counters at the end.
#   bench/gpu/device_constrained.sh OUT_DIR
set -uo pipefail
OUT="$1"; mkdir -p "$OUT" /tmp/hbin
[ -x /tmp/hbin/hearth ] || { xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth; }
[ -f /tmp/llama8b/.complete ] || python3 bench/gpu/make_llama8b.py /tmp/llama8b > "$OUT/make.log" 2>&1
PORT=18650
/tmp/hbin/hearth serve -m /tmp/llama8b --device cuda --port $PORT --batch 64 > "$OUT/serve.log" 2>&1 &
SP=$!
for _ in $(seq 1 900); do curl -sf http://127.0.0.1:$PORT/health >/dev/null 2>&1 && break; sleep 0.2; done
python3 bench/load.py --url http://127.0.0.1:$PORT --concurrency 1 --requests 1 --max-tokens 16 > /dev/null
bench/constrained.sh http://127.0.0.1:$PORT 1,32 2 128 | tee "$OUT/constrained.jsonl"
kill $SP; wait $SP 2>/dev/null
