#!/usr/bin/env bash
# On the GPU machine (repo root; carry .gpu): the SSD tier's data check (`--ssd-cache-verify`) on and off, paired.
#   bench/gpu/device_restore_verify.sh OUT_DIR [ROUNDS]
# The 8B-shaped checkpoint (bench/gpu/make_llama8b.py) with a 32k context; one 32,000-token prompt computed cold and
# written to the SSD tier at SIGTERM; then ROUNDS (3) restarts with the check on and ROUNDS with it off, alternated,
# each restoring the whole prompt once (TTFT = the restore plus the last block's tokens; /stats after each).
# ON / OFF are the flags that turn the check on and off (defaults: `--ssd-cache-verify on|off`).
set -uo pipefail
OUT="$1"; ROUNDS="${2:-3}"; mkdir -p "$OUT" /tmp/hbin
ON="${ON:---ssd-cache-verify on}"; OFF="${OFF:---ssd-cache-verify off}"
[ -f .gpu/hearth.xz ] && xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f /tmp/llama8b/.complete ] || python3 bench/gpu/make_llama8b.py /tmp/llama8b > "$OUT/make.log" 2>&1
M=/tmp/llama8b32k; mkdir -p $M
for f in /tmp/llama8b/*; do [ "$(basename "$f")" = config.json ] || ln -sf "$f" "$M/"; done
python3 -c "import json; c=json.load(open('/tmp/llama8b/config.json')); c['max_position_embeddings']=32768; json.dump(c, open('$M/config.json','w'))"
PORT=18650; URL=http://127.0.0.1:$PORT; SSD=/tmp/hearth-ssd-verify; rm -rf $SSD
start() { /tmp/hbin/hearth serve -m $M --device cuda --port $PORT --batch 8 --kv-budget 40 --ssd-cache $SSD "$@" >> "$OUT/serve.log" 2>&1 &
  SP=$!; for _ in $(seq 1 900); do curl -sf $URL/health >/dev/null 2>&1 && return 0; sleep 0.2; done; echo "no server" >&2; tail "$OUT/serve.log"; }
ssd() { curl -s $URL/stats | python3 -c "import json,sys; s=json.load(sys.stdin)['ssd_cache']; print(json.dumps({'label':'$1','restores':s['restores'],'restore_failures':s['restore_failures'],'quarantined':s['quarantined']}))" | tee -a "$OUT/stats.jsonl"; }
R="python3 bench/prompt_cache.py reattach --url $URL --tokens 32000 --max-tokens 8 --repeats 1"
start $ON
$R --label "cold" | tee -a "$OUT/restore.jsonl"
kill -TERM $SP; wait $SP
for r in $(seq 1 "$ROUNDS"); do
  for v in on off; do
    if [ $v = on ]; then start $ON; else start $OFF; fi
    $R --label "verify $v" | tee -a "$OUT/restore.jsonl"
    ssd "verify $v"
    kill -TERM $SP; wait $SP
  done
done
du -sh $SSD | tee -a "$OUT/restore.jsonl"
python3 bench/verify_share.py "$OUT/restore.jsonl"
