#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda --tests here; carry .gpu): the prompt cache on the
# 8B-shaped checkpoint.
#   bench/gpu/device_prompt_cache.sh OUT_DIR
# 1. the GPU tier test (VRAM -> host -> SSD -> VRAM, bit for bit) from gpu_kernels;
# 2. the checkpoint of bench/gpu/make_llama8b.py with a 32k context (same shards, one changed config value);
# 3. a 32,000-token prompt: cold, then RAM (VRAM) hits, then SIGTERM (the server writes its cache to the SSD
#    tier), a restart and the same prompt restored from the SSD, with /stats after each;
# 4. a paired decode A/B, prompt cache on vs --prompt-cache 0 (SKIP_DECODE_AB=1 leaves it out) (bench/gpu/device_ab.sh: distinct prompts, no hits);
# 5. a decode A/B under eviction pressure, spilling to the SSD tier or not.
set -uo pipefail
OUT="$1"; mkdir -p "$OUT" /tmp/hbin
[ -f .gpu/hearth.xz ] && xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth
for t in .gpu/tests/*.xz; do [ -f "$t" ] || continue; n=$(basename "$t" .xz); xz -dc "$t" > "/tmp/hbin/$n"; chmod +x "/tmp/hbin/$n"; done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 300 /tmp/hbin/gpu_kernels --test-threads 1 kv_blocks_move paged_kernel_matches 2>&1 | grep -E "^test |test result|panicked" | tee "$OUT/tier_test.log"
[ -f /tmp/llama8b/.complete ] || python3 bench/gpu/make_llama8b.py /tmp/llama8b > "$OUT/make.log" 2>&1
M=/tmp/llama8b32k; mkdir -p $M
for f in /tmp/llama8b/*; do [ "$(basename "$f")" = config.json ] || ln -sf "$f" "$M/"; done
python3 -c "import json; c=json.load(open('/tmp/llama8b/config.json')); c['max_position_embeddings']=32768; json.dump(c, open('$M/config.json','w'))"
PORT=18600; URL=http://127.0.0.1:$PORT; SSD=/tmp/hearth-ssd; rm -rf $SSD
start() { env HEARTH_CUDA_STEP_TIMING=1 /tmp/hbin/hearth serve -m $M --device cuda --port $PORT --batch 8 --kv-budget 40 --ssd-cache $SSD "$@" >> "$OUT/serve.log" 2>&1 &
  SP=$!; for _ in $(seq 1 900); do curl -sf $URL/health >/dev/null 2>&1 && return 0; sleep 0.2; done; echo "no server" >&2; tail "$OUT/serve.log"; }
stats() { curl -s $URL/stats | python3 -c "import json,sys; s=json.load(sys.stdin); print(json.dumps({'label':'$1','prompt_cache':s['prompt_cache'],'ssd_cache':s['ssd_cache'],'steps':{k:s[k] for k in s if k.startswith('step')}}))" | tee -a "$OUT/stats.jsonl"; }
R="python3 bench/prompt_cache.py reattach --url $URL --tokens 32000 --max-tokens 8"
start
# Warm-up: another 32k prompt first (first-use costs of long-context kernels and allocations), then the measured one.
$R --repeats 1 --seed 101 --label "8B 32k: warm-up (another prompt)" | tee -a "$OUT/reattach.jsonl"
stats "after the warm-up"
$R --repeats 3 --label "8B 32k: cold, then VRAM hits" | tee -a "$OUT/reattach.jsonl"
stats "after VRAM hits"
t0=$(date +%s%N); kill -TERM $SP; wait $SP; echo "{\"shutdown_with_flush_ms\": $(( ($(date +%s%N) - t0) / 1000000 ))}" | tee -a "$OUT/reattach.jsonl"
tail -3 "$OUT/serve.log"
start
$R --repeats 2 --label "8B 32k: SSD restore after a restart, then a VRAM hit" | tee -a "$OUT/reattach.jsonl"
stats "after the SSD restore"
kill -TERM $SP; wait $SP
du -sh $SSD | tee -a "$OUT/reattach.jsonl"
# 3b. the same hits with the tensor-core kernel's key split off (HEARTH_CUDA_TC_SPLIT=0): restored from the SSD,
#     then VRAM hits, to pair with the VRAM hits above.
HEARTH_CUDA_TC_SPLIT=0 start
$R --repeats 3 --label "8B 32k: HEARTH_CUDA_TC_SPLIT=0, SSD restore then VRAM hits" | tee -a "$OUT/reattach.jsonl"
kill -TERM $SP; wait $SP
start
$R --repeats 3 --label "8B 32k: key split on, SSD restore then VRAM hits" | tee -a "$OUT/reattach.jsonl"
kill -TERM $SP; wait $SP
# 3c. what the disk under the SSD tier reads: 4 GiB with O_DIRECT (the disk) and again through the page cache.
dd if=/dev/zero of=/tmp/ddprobe bs=16M count=256 oflag=direct 2>&1 | tail -1 | sed 's/^/disk write: /' | tee -a "$OUT/disk.txt"
dd if=/tmp/ddprobe of=/dev/null bs=16M iflag=direct 2>&1 | tail -1 | sed 's/^/disk read (O_DIRECT): /' | tee -a "$OUT/disk.txt"
cat /tmp/ddprobe > /dev/null; dd if=/tmp/ddprobe of=/dev/null bs=16M 2>&1 | tail -1 | sed 's/^/page-cache read: /' | tee -a "$OUT/disk.txt"
rm -f /tmp/ddprobe; df -h /tmp | tee -a "$OUT/disk.txt"
if [ -z "${SKIP_DECODE_AB:-}" ]; then  # SKIP_DECODE_AB=1 leaves step 4 out
  bench/gpu/device_ab.sh "$OUT/ab" 1,32 "cache||" "nocache||--prompt-cache 0" "cache2||" "nocache2||--prompt-cache 0" > "$OUT/ab.log" 2>&1
  cut -c1-300 "$OUT/ab/ab.jsonl" 2>/dev/null || tail -20 "$OUT/ab.log"
fi
# 5. decode under eviction pressure: a 3 GiB KV cache fills with parked blocks and evicts them for new requests;
#    with --ssd-cache every eviction is spilled (copied on the second stream), without it the blocks are dropped.
rm -rf /tmp/hearth-ssd-ab
KV_BUDGET=3 bench/gpu/device_ab.sh "$OUT/evict" 32,32 "spill||--ssd-cache /tmp/hearth-ssd-ab" "drop||" "spill2||--ssd-cache /tmp/hearth-ssd-ab2" "drop2||" > "$OUT/evict.log" 2>&1
cut -c1-300 "$OUT/evict/ab.jsonl" 2>/dev/null || tail -20 "$OUT/evict.log"
du -sh /tmp/hearth-ssd-ab /tmp/hearth-ssd-ab2 2>/dev/null
