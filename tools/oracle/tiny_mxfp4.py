"""The tiny gpt-oss checkpoint with its experts in MXFP4, as gpt-oss is published, and transformers' goldens for it.

Run from the repo root, after tools/oracle/tiny_models.py gpt-oss:
    .venv-oracle/bin/python tools/oracle/tiny_mxfp4.py
Writes tests/fixtures/tiny-gpt-oss-mxfp4/ and tests/goldens/tiny_gpt_oss_mxfp4.json.

The experts of tests/fixtures/tiny-gpt-oss are quantized to MXFP4 here (blocks of 32 values along each output
row's inputs sharing one power-of-two scale, stored as E8M0 = exponent + 127; values rounded to the nearest E2M1
number in {0, 0.5, 1, 1.5, 2, 3, 4, 6} times that scale, two 4-bit codes a byte, low nibble first) and saved in the
published layout: `mlp.experts.{gate_up,down}_proj_blocks` (E, out, in/32, 16) u8 and `_scales` (E, out, in/32) u8,
the rest as the bf16 fixture has it, `quantization_config` {"quant_method": "mxfp4"} in config.json. The goldens
come from transformers loading that directory (on the CPU it dequantizes MXFP4 to bf16) in f32.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FIXTURES, GOLDENS, dump_json, r6, reference  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

import tiny_models  # noqa: E402

torch.set_num_threads(2)
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (..., out, in) float -> blocks (..., out, in/32, 16) u8, scales (..., out, in/32) u8."""
    *lead, out, inp = w.shape
    g = w.float().reshape(*lead, out, inp // 32, 32)
    amax = g.abs().amax(-1)
    # the smallest power of two that brings the block's largest magnitude within 6
    exp = torch.ceil(torch.log2(torch.clamp(amax, min=2.0**-126) / 6.0)).clamp(-127, 127)
    x = g / torch.ldexp(torch.ones_like(exp), exp.int())[..., None]
    idx = (x.abs()[..., None] - E2M1).abs().argmin(-1)  # nearest (ties to the lower magnitude)
    code = idx + 8 * ((x < 0) & (idx > 0)).long()
    code = code.to(torch.uint8)
    blocks = code[..., 0::2] | (code[..., 1::2] << 4)
    return blocks.contiguous(), (exp.int() + 127).to(torch.uint8).contiguous()


def main() -> None:
    src = tiny_models.FIXTURES / "tiny-gpt-oss"
    out = FIXTURES / "tiny-gpt-oss-mxfp4"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tensors = load_file(str(src / "model.safetensors"))
    saved = {}
    for name, t in tensors.items():
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            # stored (E, in, out) unquantized; MXFP4 blocks run along each output row's inputs
            blocks, scales = quantize(t.transpose(1, 2))
            saved[name + "_blocks"], saved[name + "_scales"] = blocks, scales
        else:
            saved[name] = t
    save_file(saved, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4",
                                  "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                             "model.embed_tokens", "lm_head"]}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for f in src.iterdir():
        if f.name not in ("config.json", "model.safetensors"):
            shutil.copy(f, out / f.name)

    ref = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32, attn_implementation="eager").eval()
    # the experts as transformers dequantized them equal this script's own dequantization
    for i, layer in enumerate(ref.model.layers):
        for proj in ("gate_up_proj", "down_proj"):
            b, s = saved[f"model.layers.{i}.mlp.experts.{proj}_blocks"], saved[f"model.layers.{i}.mlp.experts.{proj}_scales"]
            lut = torch.tensor([*E2M1.tolist(), *(-E2M1).tolist()])
            vals = torch.stack([lut[(b & 15).long()], lut[(b >> 4).long()]], -1).flatten(-2)
            deq = torch.ldexp(vals, (s.int() - 127)[..., None]).flatten(-2).transpose(1, 2)
            got = getattr(layer.mlp.experts, proj).float()
            assert torch.equal(got, deq), f"layer {i} {proj}: transformers dequantized otherwise"
    tok = AutoTokenizer.from_pretrained(str(out))
    all_ids = tok(tiny_models.PROMPT_TEXT, add_special_tokens=True)["input_ids"]
    cases = []
    for n in tiny_models.CASE_LENGTHS:
        ids = all_ids[:n]
        lg = tiny_models.logits_for(ref, ids)
        g, gaps = tiny_models.greedy(ref, ids, tiny_models.N_GREEDY)
        case = {"input_ids": ids, "logits_last": [r6(x) for x in lg[-1].tolist()], "greedy": g, "greedy_gaps": gaps}
        if n == tiny_models.ALL_LOGITS_LEN:
            case["logits_all"] = [[r6(x) for x in row] for row in lg.tolist()]
        cases.append(case)
        print(f"  gpt-oss-mxfp4 len {n}: greedy {g[:8]}... min gap {min(gaps):.4g}")
    dump_json({
        "reference": reference("transformers", "torch", "safetensors", "tokenizers"),
        "model": "gpt-oss-mxfp4",
        "fixture": "tests/fixtures/tiny-gpt-oss-mxfp4",
        "architecture": type(ref).__name__,
        "dtype": "mxfp4 experts, bf16 elsewhere",
        "notes": [
            "transformers on the CPU dequantizes the MXFP4 experts to bf16; logits computed in float32 with eager "
            "attention, full forward for every greedy step (as tiny_models.py).",
            "greedy_gaps: top1-top2 logit gap at each step. Floats rounded to 6 significant digits.",
        ],
        "cases": cases,
    }, GOLDENS / "tiny_gpt_oss_mxfp4.json")


if __name__ == "__main__":
    main()
