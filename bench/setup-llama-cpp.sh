#!/usr/bin/env bash
# Build llama.cpp's own C++ tools (llama-bench, llama-cli, llama-server) from the llama.cpp vendored in the
# llama-cpp-python sdist on PyPI, with native CPU flags (AMX off, below), into bench/.build/llama.cpp/build. Idempotent.
# LLAMA_CPP_ISA=avx2 builds instead an AVX2 + FMA + F16C-only copy into bench/.build/llama.cpp/build-avx2: on an
# AVX-512 machine it stands in for an AVX2-only one (paired with hearth's HEARTH_FAST_QUANT=avx2).
# LLAMA_CPP_ISA=cuda builds llama-bench and llama-server with the CUDA backend for compute capability
# CUDA_COMPUTE_CAP (default 90) into bench/.build/llama.cpp/build-cuda, with the toolchain scripts/setup-cuda installs
# and AVX2 host code (it runs on the GPU machine, whose CPU is not this one); long on 2 cores.
# Needs: python3 + pip (for the sdist and for cmake if it is missing), a C++ compiler.
set -euo pipefail
cd "$(dirname "$0")"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
OUT=.build/llama.cpp
# AMX stays off in both: a VM may report AMX without enabling it (ggml then dies on its first tile instruction), and
# hearth uses none, so the comparison stays like for like. GCC's explicit -mno-* flags win over -march=native.
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
case "${LLAMA_CPP_ISA:-native}" in
  native) BUILD="$OUT/build"; ISA_FLAGS=(-DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=$NO_AMX" "-DCMAKE_CXX_FLAGS=$NO_AMX") ;;
  avx2) BUILD="$OUT/build-avx2"
    ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
      -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF) ;;
  cuda) BUILD="$OUT/build-cuda"
    eval "$(../scripts/setup-cuda | grep '^export ')"
    # nvcc's own link line looks in lib64; the wheels' layout has lib
    [ -e "$CUDA_HOME/lib64" ] || ln -s lib "$CUDA_HOME/lib64"
    ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
      -DGGML_AVX512=OFF -DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_COMPUTE_CAP:-90}"
      "-DCMAKE_CUDA_COMPILER=$CUDA_HOME/bin/nvcc" "-DCUDAToolkit_ROOT=$CUDA_HOME"
      "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$CUDA_HOME/lib") ;;
  *) echo "setup-llama-cpp: LLAMA_CPP_ISA is native, avx2 or cuda, not ${LLAMA_CPP_ISA}" >&2; exit 2 ;;
esac
BIN="$BUILD/bin"
TARGETS=(llama-bench llama-cli llama-server llama-perplexity llama-quantize)
[ "${LLAMA_CPP_ISA:-native}" = cuda ] && TARGETS=(llama-bench llama-server)
if [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-server" ] && { [ -x "$BIN/llama-cli" ] || [ "${LLAMA_CPP_ISA:-}" = cuda ]; }; then
  echo "setup-llama-cpp: up to date ($BIN)"; exit 0
fi
mkdir -p .build
if ! command -v cmake >/dev/null; then
  python3 -m venv .build/cmake-venv
  .build/cmake-venv/bin/pip install --quiet --only-binary :all: cmake
  export PATH="$PWD/.build/cmake-venv/bin:$PATH"
fi
if [ ! -d "$OUT/src" ]; then
  tmp=$(mktemp -d)
  # The sdist straight from the package index pip uses (`pip download` of an sdist would also build its build
  # dependencies from source). The index is pip's own: PIP_INDEX_URL, pip's configuration, else its default.
  index=$(python3 -m pip config get global.index-url 2>/dev/null || true)
  index="${PIP_INDEX_URL:-${index:-$(python3 -c 'from pip._internal.models.index import PyPI; print(PyPI.simple_url)')}}"
  python3 - "$VERSION" "$tmp/sdist.tar.gz" "${index%/}" <<'PY'
import html, re, sys, urllib.parse, urllib.request
version, dest, index = sys.argv[1], sys.argv[2], sys.argv[3]
page_url = f"{index}/llama-cpp-python/"
page = urllib.request.urlopen(page_url, timeout=60).read().decode()
name = f"llama_cpp_python-{version}.tar.gz"
links = [urllib.parse.urljoin(page_url, html.unescape(l)) for l in re.findall(r'href="([^"]+)"', page) if name in l]
if not links:
    sys.exit(f"setup-llama-cpp: {name} not found in the package index")
urllib.request.urlretrieve(links[0], dest)
PY
  tar -xzf "$tmp/sdist.tar.gz" -C "$tmp"
  rm -rf "$OUT"
  mv "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp" "$OUT"
  rm -rf "$tmp"
fi
cmake -S "$OUT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "${ISA_FLAGS[@]}" -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >/dev/null
cmake --build "$BUILD" --config Release -j "${JOBS:-2}" --target "${TARGETS[@]}"
echo "setup-llama-cpp: built $BIN/{llama-bench,llama-cli,llama-server}"
