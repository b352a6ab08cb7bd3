"""Goldens for `hearth quantize`, from llama.cpp's llama-quantize on the default model (SmolLM2-135M, Q4_1).

Run from the repo root after bench/setup-llama-cpp.sh (which builds llama-quantize):
    .venv-oracle/bin/python tools/oracle/quantize_golden.py
For each scheme (q8_0, q4_k_m), llama-quantize --allow-requantize rewrites the Q4_1 file; the golden records, per
tensor, llama.cpp's output type, the sha256 of its bytes, and its relative RMS error against the source's values
(dequantized). Writes tests/goldens/quantize_smollm2.json.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GOLDENS, MODELS_DIR, REPO_ROOT, SMOLLM2_FILE, dump_json, r6, reference  # noqa: E402

import gguf  # noqa: E402
import numpy as np  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

BIN = REPO_ROOT / "bench" / ".build" / "llama.cpp" / "build" / "bin"
SCHEMES = {"q8_0": "Q8_0", "q4_k_m": "Q4_K_M"}


def llama_cpp_version() -> str:
    out = subprocess.run([str(BIN / "llama-cli"), "--version"], capture_output=True, text=True,
                         env={**os.environ, "LD_LIBRARY_PATH": str(BIN)})
    return (out.stdout + out.stderr).strip().splitlines()[0] if (out.stdout + out.stderr).strip() else "unknown"


def main() -> None:
    src = MODELS_DIR / SMOLLM2_FILE
    source = {t.name: t for t in gguf.GGUFReader(src).tensors}
    schemes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, ftype in SCHEMES.items():
            out = Path(tmp) / f"{name}.gguf"
            cmd = [str(BIN / "llama-quantize"), "--allow-requantize", str(src), str(out), ftype, "2"]
            subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "LD_LIBRARY_PATH": str(BIN)})
            tensors = {}
            for t in gguf.GGUFReader(out).tensors:
                x = dequantize(source[t.name].data, source[t.name].tensor_type).astype(np.float64)
                y = dequantize(t.data, t.tensor_type).astype(np.float64)
                rel = float(np.sqrt(((y - x) ** 2).mean() / max((x ** 2).mean(), 1e-30)))
                tensors[t.name] = {"type": t.tensor_type.name, "sha256": hashlib.sha256(t.data.tobytes()).hexdigest(),
                                   "rel_rmse": r6(rel)}
            schemes[name] = {"command": f"llama-quantize --allow-requantize {SMOLLM2_FILE} OUT {ftype} 2",
                             "tensors": tensors}
            print(f"{name}: {len(tensors)} tensors")
    ref = reference("gguf", "numpy")
    ref["llama_cpp"] = llama_cpp_version()
    ref["llama_cpp_source"] = "vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist (bench/setup-llama-cpp.sh)"
    dump_json({"reference": ref, "model_file": SMOLLM2_FILE, "schemes": schemes}, GOLDENS / "quantize_smollm2.json")


if __name__ == "__main__":
    main()
