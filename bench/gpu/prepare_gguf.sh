#!/usr/bin/env bash
# Here (not on the GPU machine): pack what bench/gpu/make_gguf.py needs there into .gpu (carried with the build):
# the `gguf` package's wheel (.gpu/wheels; imported there from the wheel by PYTHONPATH) and a tensor-less GGUF holding
# SmolLM2's tokenizer fields (.gpu/tokenizer.gguf), the vocabulary of make_llama8b.py's checkpoint.
#   bench/gpu/prepare_gguf.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/gguf_of.sh
src=$(gguf_of smollm2-135m)
[ -f "$src" ] || scripts/fetch-models smollm2-135m
mkdir -p .gpu/wheels
py=python3
[ -x .venv-oracle/bin/python ] && py=.venv-oracle/bin/python
$py -m pip download --quiet --no-deps --only-binary :all: -d .gpu/wheels gguf
$py -c 'import gguf' 2>/dev/null || $py -m pip install --quiet --no-deps .gpu/wheels/gguf-*.whl
$py -c 'import numpy' 2>/dev/null || $py -m pip install --quiet numpy  # gguf's one dependency this step needs
$py bench/gpu/make_gguf.py --vocab-only "$src" .gpu/tokenizer.gguf
ls -la .gpu/wheels .gpu/tokenizer.gguf
