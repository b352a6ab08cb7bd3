#!/usr/bin/env bash
# Constrained vs free decoding on one hearth server (CPU or GPU), paired in the same run: the same prompts at each
# concurrency, free and with a realistic tool-call JSON schema whose long `content` string keeps every request
# going to max_tokens (so both variants decode the same number of tokens), alternating ROUNDS times; then the
# grammar counters from /stats.
#   bench/constrained.sh URL [CONC] [ROUNDS] [MAX_TOKENS]
# e.g. bench/constrained.sh http://127.0.0.1:8080 1,8 2 128
set -euo pipefail
URL="$1"; CONC="${2:-1,8}"; ROUNDS="${3:-2}"; MAXT="${4:-128}"
SCHEMA='{"response_format": {"type": "json_schema", "json_schema": {"name": "write_file", "schema": {"type": "object", "properties": {"name": {"const": "write_file"}, "arguments": {"type": "object", "properties": {"path": {"type": "string", "maxLength": 60}, "content": {"type": "string", "minLength": 20000}}, "required": ["path", "content"], "additionalProperties": false}}, "required": ["name", "arguments"], "additionalProperties": false}}}}'
cd "$(dirname "$0")/.."
for r in $(seq 1 "$ROUNDS"); do
  python3 bench/load.py --url "$URL" --concurrency "$CONC" --requests 8 --max-tokens "$MAXT" --label "free r$r"
  python3 bench/load.py --url "$URL" --concurrency "$CONC" --requests 8 --max-tokens "$MAXT" --label "json_schema r$r" --extra "$SCHEMA"
done
curl -s "$URL/stats" | python3 -c "import json,sys; s=json.load(sys.stdin); n=max(s['grammar_masks_total'],1); print(json.dumps({'grammar_masks_total': s['grammar_masks_total'], 'grammar_mask_ms_mean': round(s['grammar_mask_ms_total']/n, 4), 'p50': s['grammar_mask_ms_p50'], 'p99': s['grammar_mask_ms_p99'], 'grammar_mask_ms_max': s['grammar_mask_ms_max']}))"
