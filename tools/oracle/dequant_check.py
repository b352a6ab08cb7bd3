"""Diagnostic (writes no golden): how much of the llama.cpp vs transformers difference is weight/activation quantization?

Writes an F32 copy of each GGUF (every tensor dequantized with gguf-py, metadata copied) to a temp dir, runs
llama.cpp on it with the prompts of tests/goldens/logits_<model>.json, and compares with that golden's `hf`
(transformers on the same dequantized weights) and `llama_cpp` (llama.cpp on the quantized file) entries.

Run from the repo root (needs ~1.7 GB free in $TMPDIR):
    .venv-oracle/bin/python tools/oracle/dequant_check.py [smollm2|gemma3]
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GEMMA3_FILE, GOLDENS, MODELS_DIR, SMOLLM2_FILE  # noqa: E402

import gguf  # noqa: E402
import numpy as np  # noqa: E402

import logits_goldens as lg  # noqa: E402


def write_f32_copy(src: Path, dst: Path) -> None:
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for field in r.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF.") \
                or field.name == "general.file_type":
            continue
        vt = field.types[0]
        st = field.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), vt, sub_type=st)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check(name: str, model_file: str) -> None:
    golden = json.loads((GOLDENS / f"logits_{name}.json").read_text())
    with tempfile.TemporaryDirectory() as td:
        f32 = Path(td) / (Path(model_file).stem + ".F32.gguf")
        write_f32_copy(MODELS_DIR / model_file, f32)
        llm = lg.llama_cpp_model(f32)
        for p in golden["prompts"]:
            ids = p["prompt_ids"]
            assert llm.tokenize(p["text"].encode(), add_bos=True, special=True) == ids
            logits, greedy, _ = lg.llama_cpp_run(llm, ids)
            for ref in ("hf", "llama_cpp"):
                r = p[ref]
                if r is None:
                    continue
                d_sample = max(abs(logits[i] - v) for i, v in r["sample"])
                d_top = max(abs(logits[i] - v) for i, v in r["top"])
                agree = next((k for k, (a, b) in enumerate(zip(greedy, r["greedy"])) if a != b), len(greedy))
                print(f"[{name}] {len(ids):4d} tok {p['text'][:32]!r:36} llama.cpp(F32 gguf) vs {ref:9}: "
                      f"sample max|d|={d_sample:.4g} top64 max|d|={d_top:.4g} greedy agree {agree}/{len(greedy)}")
        del llm


def main() -> None:
    models = {"smollm2": SMOLLM2_FILE, "gemma3": GEMMA3_FILE}
    for name in sys.argv[1:] or list(models):
        check(name, models[name])


if __name__ == "__main__":
    main()
