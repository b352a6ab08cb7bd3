"""The tiny Qwen3.5 checkpoint in the layout Qwen3.5 is published in: `model_type` `qwen3_5` with the text model's
config under `text_config`, its weights under `model.language_model.*`, a vision tower (`model.visual.*`) and a
multi-token-prediction head (`mtp.*`) beside them.

Run from the repo root, after tools/oracle/tiny_models.py qwen3_5:
    .venv-oracle/bin/python tools/oracle/tiny_qwen3_5_nested.py
Writes tests/fixtures/tiny-qwen3_5-nested/ from tests/fixtures/tiny-qwen3_5/ (the same text weights) and checks
that transformers' Qwen3_5ForConditionalGeneration, loaded from it, gives the text model's logits bit for bit on
the golden prompts — so tests/goldens/tiny_qwen3_5.json is its golden too.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FIXTURES, GOLDENS  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM, Qwen3_5Config, Qwen3_5ForConditionalGeneration  # noqa: E402

torch.set_num_threads(2)
torch.use_deterministic_algorithms(True)

SRC = FIXTURES / "tiny-qwen3_5"
OUT = FIXTURES / "tiny-qwen3_5-nested"
VISION = {"model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
          "out_hidden_size": 64, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
          "in_channels": 3, "num_position_embeddings": 16}


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    text_cfg = json.loads((SRC / "config.json").read_text())
    text_cfg.pop("architectures", None)
    top = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
           "text_config": text_cfg, "vision_config": VISION, "tie_word_embeddings": False,
           "image_token_id": 3, "video_token_id": 4, "vision_start_token_id": 5, "vision_end_token_id": 6,
           "torch_dtype": text_cfg["torch_dtype"]}
    (OUT / "config.json").write_text(json.dumps(top, indent=2, sort_keys=True) + "\n")
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        shutil.copy(SRC / f, OUT / f)

    # The vision tower as transformers makes it (random), so the checkpoint loads without missing weights.
    cfg = Qwen3_5Config.from_pretrained(str(OUT))
    torch.manual_seed(0)
    shell = Qwen3_5ForConditionalGeneration(cfg)
    tensors = {k: v for k, v in shell.state_dict().items() if k.startswith("model.visual.")}
    g = torch.Generator().manual_seed(7)
    tensors = {k: (0.02 * torch.randn(v.shape, generator=g)).to(torch.bfloat16) for k, v in tensors.items()}
    for name, t in load_file(str(SRC / "model.safetensors")).items():
        if name.startswith("model."):
            tensors["model.language_model." + name[len("model."):]] = t
        else:
            tensors[name] = t
    # a multi-token-prediction head, as published (transformers ignores it; hearth leaves it unread)
    hidden = text_cfg["hidden_size"]
    tensors["mtp.fc.weight"] = (0.02 * torch.randn(hidden, 2 * hidden, generator=g)).to(torch.bfloat16)
    tensors["mtp.norm.weight"] = torch.zeros(hidden, dtype=torch.bfloat16)
    save_file(tensors, str(OUT / "model.safetensors"), metadata={"format": "pt"})

    text = AutoModelForCausalLM.from_pretrained(str(SRC), dtype=torch.float32).eval()
    nested = Qwen3_5ForConditionalGeneration.from_pretrained(str(OUT), dtype=torch.float32).eval()
    golden = json.loads((GOLDENS / "tiny_qwen3_5.json").read_text())
    with torch.no_grad():
        for case in golden["cases"]:
            ids = torch.tensor([case["input_ids"]])
            a = text(input_ids=ids, use_cache=False).logits
            b = nested(input_ids=ids, use_cache=False).logits
            if not torch.equal(a, b):
                raise SystemExit(f"nested logits differ by {(a - b).abs().max().item()}")
    size = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {OUT.name}: {size} bytes; logits equal to the text model's on {len(golden['cases'])} prompts")


if __name__ == "__main__":
    main()
