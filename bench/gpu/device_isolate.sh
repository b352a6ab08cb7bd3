#!/usr/bin/env bash
# On the GPU machine (repo root, after scripts/build-cuda here; carry .gpu): the respawn time of an isolated engine
# serving the Llama-3.1-8B-shaped random checkpoint (bench/gpu/make_llama8b.py, in /tmp/llama8b) on the GPU.
#   bench/gpu/device_isolate.sh [KILLS]
set -uo pipefail
mkdir -p /tmp/hbin
[ -x /tmp/hbin/hearth ] || { xz -dc .gpu/hearth.xz > /tmp/hbin/hearth && chmod +x /tmp/hbin/hearth; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
PYTHONUNBUFFERED=1 python3 bench/gpu/make_llama8b.py /tmp/llama8b 2>&1 | tail -2
HEARTH_BIN=/tmp/hbin/hearth DEVICE=cuda bench/isolate_restart.sh /tmp/llama8b "${1:-5}"
tail -5 /tmp/hearth-isolate.log
