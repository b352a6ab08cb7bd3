"""Tiny GGUF fixtures written by llama.cpp's own converter from random transformers checkpoints, with llama.cpp's
logits for them (llama-cpp-python): GGUF loading of architectures without reachable real weights, checked against
the implementation that defines the format.

Run from the repo root (needs bench/setup-llama-cpp.sh: its llama.cpp checkout holds convert_hf_to_gguf.py):
    .venv-oracle/bin/python tools/oracle/tiny_gguf.py [qwen3moe] [gpt-oss] [qwen35] [qwen3next] [qwen2_5_vl] \
        [gemma3_vision]
(default: all)
Writes tests/fixtures/tiny-<name>.gguf and tests/goldens/tiny_<name>_gguf.json for:
  qwen3moe-q8_0: tiny_models.py's qwen3-moe with every layer routed (llama.cpp's qwen3moe has no dense layers),
                 converted with --outtype q8_0 (stacked ffn_*_exps expert tensors, a float router).
  gpt-oss-mxfp4: tests/fixtures/tiny-gpt-oss-mxfp4 (tiny_mxfp4.py: the experts in MXFP4 as gpt-oss publishes
                 them), converted with --outtype q8_0: the experts stay MXFP4 (GGML's type 39), the rest Q8_0 / F32.
                 llama.cpp's gpt-oss has its clamped SwiGLU's limit built in (7.0; the GGUF stores none), so this
                 file's experts clamp at 7.0 where the Hugging Face fixture's clamp at 0.5.
  qwen35-f32, qwen35moe-q8_0: tiny_models.py's qwen3_5 (f32) and qwen3_5-moe (q8_0), with --no-mtp (llama.cpp
                 reorders the value heads into tiled order, keeps -exp(A_log) and the norms as 1 + w).
  qwen3next-f32: tiny_models.py's qwen3-next with every layer routed, f32, --no-mtp.
  qwen2_5_vl:    tests/fixtures/tiny-qwen2_5_vl (tiny_qwen2_5_vl.py) as a text GGUF (`qwen2vl`, f32) and, with
                 --mmproj, its vision tower (tiny-qwen2_5_vl-mmproj.gguf, f32). The mmproj also states the tiny
                 tower's window (56 pixels) and its processor's pixel bounds under llama.cpp's own keys
                 (clip.vision.window_size, image_min_pixels, image_max_pixels), which the converter leaves out
                 (llama.cpp then assumes the published 112-pixel window). No llama.cpp golden: f32 conversions of
                 the checkpoint answer to its transformers golden (tests/goldens/tiny_qwen2_5_vl.json).
  gemma3_vision: tests/fixtures/tiny-gemma3-vision (tiny_gemma3_vision.py) the same way (`gemma3` text GGUF, f32;
                 its mmproj f32 but the projection, which the converter keeps in F16: the fixture's bf16 values are
                 exact in f16); answers to tests/goldens/tiny_gemma3_vision.json.
The tokenizer's pre-tokenizer is tiny_models.py's own, which the converter does not know: it is written as
`default`. Goldens are computed from token ids, so tokenization takes no part in them.
"""
from __future__ import annotations

import copy
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import tiny_models as tm  # noqa: E402
from common import FIXTURES, GOLDENS, dump_json, r6, reference  # noqa: E402

import llama_cpp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

LLAMA_CPP = ROOT / "bench" / ".build" / "llama.cpp"


def hf_checkpoint(name: str, spec: dict, out: Path, tok) -> None:
    """The tiny checkpoint as tiny_models.py makes it, saved to `out`."""
    cfg = spec["cfg"]
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = spec["cls"](cfg).to(torch.float32).eval()
    tm.randomize(model, name, gemma_norms=False, **spec.get("init", {}))
    copy.deepcopy(model).to(spec["dtype"]).save_pretrained(str(out))
    tm.rewrite_config_legacy(out / "config.json", spec["legacy"], spec["dtype"])
    tm.save_tokenizer(tok, out)


def convert(src: Path, dst: Path, outtype: str, extra: tuple[str, ...] = (), patch: str = "") -> None:
    """llama.cpp's convert_hf_to_gguf.py on `src`, its pre-tokenizer check answered with `default` (and `patch`,
    Python run before the converter)."""
    script = (
        "import sys, runpy\n"
        f"sys.path.insert(0, {str(LLAMA_CPP)!r})\n"
        "import conversion.base as base\n"
        "base.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'default'\n"
        f"{patch}"
        f"sys.argv = ['convert_hf_to_gguf.py', {str(src)!r}, '--outtype', {outtype!r}, '--outfile', {str(dst)!r}]"
        f" + {list(extra)!r}\n"
        f"runpy.run_path({str(LLAMA_CPP / 'convert_hf_to_gguf.py')!r}, run_name='__main__')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=str(LLAMA_CPP))


def last_logits(llm) -> np.ndarray:
    """The context's logits for the last evaluated token (llama-cpp-python keeps no copy with logits_all=False)."""
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32, copy=True)


def llama_logits(path: Path, cases: list[list[int]]):
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=2, n_threads_batch=2, logits_all=False,
                          verbose=False, seed=0)
    out = []
    for ids in cases:
        llm.reset()
        llm.eval(ids)
        scores = last_logits(llm)
        first = scores.copy()
        greedy, gaps = [], []
        for _ in range(tm.N_GREEDY):
            top2 = np.sort(scores)[-2:]
            t = int(np.argmax(scores))
            greedy.append(t)
            gaps.append(r6(float(top2[1] - top2[0])))
            llm.eval([t])
            scores = last_logits(llm)
        out.append({"input_ids": ids, "logits_last": [r6(float(x)) for x in first], "greedy": greedy,
                    "gaps": gaps})
    return out


def write_golden(name: str, gguf: Path, ids: list[int], note: str) -> None:
    cases = llama_logits(gguf, [ids[:n] for n in tm.CASE_LENGTHS])
    for c in cases:
        print(f"  {name} len {len(c['input_ids'])}: greedy {c['greedy'][:8]}... min gap {min(c['gaps']):.4g}")
    golden = {
        "reference": reference("llama-cpp-python", "gguf", "torch", "transformers"),
        "model": name,
        "fixture": f"tests/fixtures/tiny-{name}.gguf",
        "notes": [
            note,
            "logits_last: llama.cpp's logits after the prompt; greedy: argmax continuing it, one token at a time "
            "through llama.cpp's KV cache; gaps: top1-top2 logit gap at each greedy step. Floats rounded to 6 "
            "significant digits.",
        ],
        "cases": cases,
    }
    dump_json(golden, GOLDENS / f"tiny_{name.replace('-', '_')}_gguf.json")
    print(f"  fixture {gguf.name}: {gguf.stat().st_size} bytes")


def all_routed(spec_name: str, name: str, outtype: str, extra: tuple[str, ...], ids: list[int]) -> None:
    """tiny_models.py's `spec_name` checkpoint with every layer routed (llama.cpp's qwen3moe and qwen3next have no
    dense layers), converted to tests/fixtures/tiny-NAME.gguf, with its golden."""
    tok = tm.train_tokenizer()
    spec = tm.specs()[spec_name]
    spec["cfg"].mlp_only_layers = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "hf"
        src.mkdir()
        hf_checkpoint(spec_name, spec, src, tok)
        gguf = FIXTURES / f"tiny-{name}.gguf"
        convert(src, gguf, outtype, extra)
    flags = " ".join(("--outtype", outtype) + extra)
    write_golden(name, gguf, ids, f"tiny_models.py's {spec_name} checkpoint with every layer routed, converted by "
                 f"llama.cpp's convert_hf_to_gguf.py {flags} (bench/.build/llama.cpp).")


def qwen3moe(ids: list[int]) -> None:
    all_routed("qwen3-moe", "qwen3moe-q8_0", "q8_0", (), ids)


def gpt_oss(ids: list[int]) -> None:
    gguf = FIXTURES / "tiny-gpt-oss-mxfp4.gguf"
    convert((FIXTURES / "tiny-gpt-oss-mxfp4").resolve(), gguf, "q8_0")
    write_golden("gpt-oss-mxfp4", gguf, ids, "tests/fixtures/tiny-gpt-oss-mxfp4 (MXFP4 experts) converted by "
                 "llama.cpp's convert_hf_to_gguf.py --outtype q8_0: experts MXFP4, the rest Q8_0 / F32.")


def qwen35(ids: list[int]) -> None:
    """Qwen3.5 and its MoE variant (tiny_models.py's checkpoints): llama.cpp's converter reorders the value heads
    into tiled order, keeps -exp(A_log) and the norms as 1 + w; --no-mtp (the checkpoints have no MTP head)."""
    for fixture, name, outtype in (("tiny-qwen3_5", "qwen35-f32", "f32"), ("tiny-qwen3_5-moe", "qwen35moe-q8_0", "q8_0")):
        gguf = FIXTURES / f"tiny-{name}.gguf"
        convert((FIXTURES / fixture).resolve(), gguf, outtype, ("--no-mtp",))
        write_golden(name, gguf, ids, f"tests/fixtures/{fixture} converted by llama.cpp's convert_hf_to_gguf.py "
                     f"--outtype {outtype} --no-mtp (bench/.build/llama.cpp).")


def qwen3next(ids: list[int]) -> None:
    """Qwen3-Next in f32: the converter splits in_proj_qkvz into q|k|v and z and keeps in_proj_ba fused."""
    all_routed("qwen3-next", "qwen3next-f32", "f32", ("--no-mtp",), ids)


# The tiny tower's window and processor bounds, under the keys llama.cpp reads (clip.vision.*).
MMPROJ_KEYS_PATCH = """
import json
import conversion.qwenvl as qwenvl
_set = qwenvl.Qwen2VLVisionModel.set_gguf_parameters
def _with_keys(self):
    _set(self)
    pre = json.loads((self.dir_model / "preprocessor_config.json").read_text())
    self.gguf_writer.add_uint32("clip.vision.window_size", self.hparams_vision["window_size"])
    self.gguf_writer.add_uint32("clip.vision.image_min_pixels", pre["min_pixels"])
    self.gguf_writer.add_uint32("clip.vision.image_max_pixels", pre["max_pixels"])
qwenvl.Qwen2VLVisionModel.set_gguf_parameters = _with_keys
"""


def vision_pair(name: str, patch: str = "") -> None:
    """tests/fixtures/tiny-NAME as an f32 text GGUF and its mmproj."""
    src = (FIXTURES / f"tiny-{name}").resolve()
    text, mmproj = FIXTURES / f"tiny-{name}.gguf", FIXTURES / f"tiny-{name}-mmproj.gguf"
    convert(src, text, "f32")
    convert(src, mmproj, "f32", ("--mmproj",), patch)
    for f in (text, mmproj):
        print(f"  fixture {f.name}: {f.stat().st_size} bytes")


def qwen2_5_vl(_ids: list[int]) -> None:
    vision_pair("qwen2_5_vl", MMPROJ_KEYS_PATCH)


def gemma3_vision(_ids: list[int]) -> None:
    vision_pair("gemma3-vision")


BUILDS = {"qwen3moe": qwen3moe, "gpt-oss": gpt_oss, "qwen35": qwen35, "qwen3next": qwen3next,
          "qwen2_5_vl": qwen2_5_vl, "gemma3_vision": gemma3_vision}


def main() -> None:
    if not (LLAMA_CPP / "convert_hf_to_gguf.py").exists():
        raise SystemExit("run bench/setup-llama-cpp.sh first: it checks out llama.cpp, whose converter this uses")
    ids = tm.train_tokenizer().encode(tm.PROMPT_TEXT).ids
    for name in sys.argv[1:] or list(BUILDS):
        BUILDS[name](ids)


if __name__ == "__main__":
    main()
