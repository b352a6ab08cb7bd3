#!/usr/bin/env bash
# Idempotent setup of the Python reference-oracle environment (.venv-oracle).
# Usage (from the repo root):   bash tools/oracle/setup.sh
# Re-running is cheap: packages already at the pinned version are skipped by pip.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="$ROOT/.venv-oracle"
PYTHON="${PYTHON:-python3}"

# Pinned versions (the goldens record the versions that produced them).
TORCH_VERSION=2.15.0
TRANSFORMERS_VERSION=5.24.0
GGUF_VERSION=0.19.0
SENTENCEPIECE_VERSION=0.2.3
PROTOBUF_VERSION=7.36.2
NUMPY_VERSION=2.4.6
SAFETENSORS_VERSION=0.8.0
TOKENIZERS_VERSION=0.23.3
JINJA2_VERSION=3.1.6
LLAMA_CPP_PYTHON_VERSION=0.3.36
ACCELERATE_VERSION=1.15.0   # transformers needs it to load GGUF files
PILLOW_VERSION=13.0.0       # the image processors' reference backend

# .gitignore entry for the venv
GI="$ROOT/.gitignore"
if [ ! -f "$GI" ] || ! grep -qxF '.venv-oracle/' "$GI"; then
  if [ -f "$GI" ] && [ -s "$GI" ] && [ "$(tail -c1 "$GI")" != "" ]; then echo >> "$GI"; fi
  echo '.venv-oracle/' >> "$GI"
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/pip"
"$PIP" install --quiet "pip==26.3"
CONSTRAINTS="$ROOT/tools/oracle/constraints.txt"   # every transitive dependency, pinned

# Pure-Python / prebuilt wheels first.
# torch: plain PyPI wheel (PyPI has no CPU-only Linux wheel; the CUDA runtime
# wheels it depends on are pulled in but unused, the oracle runs on CPU).
"$PIP" install -c "$CONSTRAINTS" \
  "torch==$TORCH_VERSION" \
  "transformers==$TRANSFORMERS_VERSION" \
  "gguf==$GGUF_VERSION" \
  "sentencepiece==$SENTENCEPIECE_VERSION" \
  "protobuf==$PROTOBUF_VERSION" \
  "numpy==$NUMPY_VERSION" \
  "safetensors==$SAFETENSORS_VERSION" \
  "tokenizers==$TOKENIZERS_VERSION" \
  "jinja2==$JINJA2_VERSION" \
  "accelerate==$ACCELERATE_VERSION" \
  "pillow==$PILLOW_VERSION"

# llama-cpp-python builds llama.cpp from the sdist: slow on 2 cores, so niced.
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('llama_cpp_python') == '$LLAMA_CPP_PYTHON_VERSION' else 1)" 2>/dev/null; then
  # AMX off: a VM may report AMX without enabling it, and ggml then dies on its first tile instruction. The flags
  # go in through CFLAGS/CXXFLAGS (CMake's initial compiler flags), with no quoting inside CMAKE_ARGS to survive.
  # --no-cache-dir: a wheel pip cached from an earlier build (AMX on, or another machine's -march) must not stand
  # in for this one.
  CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" CXXFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
  CMAKE_ARGS="-DGGML_NATIVE=ON" \
  MAKEFLAGS="-j2" \
  CMAKE_BUILD_PARALLEL_LEVEL=2 \
  nice -n 15 "$PIP" install -c "$CONSTRAINTS" --no-cache-dir --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
fi

"$VENV/bin/python" - <<'PY'
import importlib.metadata as m
for p in ["torch", "transformers", "gguf", "sentencepiece", "protobuf", "numpy",
          "safetensors", "tokenizers", "jinja2", "accelerate", "llama_cpp_python"]:
    print(f"{p}=={m.version(p)}")
PY
