#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda here):
#   bench/gpu/device_images.sh OUT_DIR [PAIRS]
# Makes an 8B-shaped random Qwen2.5-VL (bench/make_vl_checkpoint.py --text 7b --gguf none: the published vision
# tower and Qwen2.5-VL-7B's text shape, bf16 safetensors, ~17 GB) in /tmp, serves it with hearth on the GPU and runs
# bench/images.py against it (TTFT of a first and a second turn about a 448x448 image, hearth's encoder ms per
# image from /stats), then transformers' tower on the same images (bench/gpu/vl_encoder_hf.py). Logs go to OUT_DIR.
set -uo pipefail
OUT="$1"; PAIRS="${2:-5}"
mkdir -p /tmp/hbin "$OUT"
[ -f .gpu/hearth.xz ] && xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
CK=/tmp/vl8b
[ -f "$CK/hf/model.safetensors" ] || python3 bench/make_vl_checkpoint.py "$CK" --text 7b --gguf none 2>&1 | tail -2 | tee "$OUT/make.log"
/tmp/hbin/hearth serve -m "$CK/hf" --device cuda --port 18310 --batch 8 > "$OUT/serve_vl8b.log" 2>&1 &
SP=$!
for _ in $(seq 1 1500); do curl -sf http://127.0.0.1:18310/health >/dev/null 2>&1 && break; sleep 0.2; done
python3 bench/images.py --url http://127.0.0.1:18310 --pairs "$PAIRS" --label "hearth cuda (8B-shaped Qwen2.5-VL, bf16)" \
  --markdown | tee "$OUT/images_hearth.txt"
kill $SP; wait $SP 2>/dev/null
tail -3 "$OUT/serve_vl8b.log"
python3 bench/gpu/vl_encoder_hf.py "$CK/hf" --images "$PAIRS" 2>&1 | tail -2 | tee "$OUT/encoder_hf.txt"
