#!/usr/bin/env python3
"""A random vision-language checkpoint of a real shape for image benchmarks (Qwen2.5-VL or Gemma 3), with
llama.cpp's GGUF conversion of it.

    .venv-oracle/bin/python bench/make_vl_checkpoint.py OUT_DIR [--family qwen2.5-vl|gemma3] [--text 0.5b|7b]
        [--gguf f16|f32|none]

Writes OUT_DIR/hf (config.json in the published layout, bf16 `model.safetensors`, preprocessor_config.json with
the published pixel bounds 3136..12845056, the tokenizer and chat template of tests/fixtures/tiny-qwen2_5_vl) and,
unless --gguf none, OUT_DIR/text.gguf and OUT_DIR/mmproj.gguf written by llama.cpp's convert_hf_to_gguf.py
(bench/setup-llama-cpp.sh's checkout) in that type.

The vision tower is Qwen2.5-VL's published one (the same for 3B, 7B and 72B: 32 blocks of width 1280, 16 heads,
SwiGLU 3420, windows of 112 pixels, full attention in blocks 7/15/23/31; 0.67B parameters). The text model is
Qwen2.5-0.5B's shape (--text 0.5b: 24 layers of width 896, 14 heads, 2 KV heads, MLP 4864) or Qwen2.5-VL-7B's
(--text 7b: 28 layers of width 3584, 28 heads, 4 KV heads, MLP 18944), with the real vocabulary size (151936,
the tokenizer's 452 tokens at its start). Weights are N(0, 0.02) (norms 1, biases 0): timing needs the shapes,
not the values. Deterministic (seed 0; drawn on the GPU where torch sees one, so the values differ from the CPU's).

--family gemma3: Gemma 3's published SigLIP tower (27 layers of width 1152, 16 heads, MLP 4304, 896x896 images in
14x14 patches, pooled to 256 tokens; 0.42B parameters) and Gemma 3 1B's text shape (26 layers of width 1152, 4
heads and 1 KV head of 256, MLP 6912, 5 sliding-window layers of 512 to 1 global), with the tokenizer and chat
template of tests/fixtures/tiny-gemma3-vision (its 456-token vocabulary: llama.cpp's converter trims the embeddings
to the tokenizer's count, so the vocabulary is the tokenizer's). Gemma's RMSNorms (1 + w) start at w = 0.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "oracle"))

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "tiny-qwen2_5_vl"
GEMMA_FIXTURE = ROOT / "tests" / "fixtures" / "tiny-gemma3-vision"
GEMMA_TEXT = {"hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
              "num_key_value_heads": 1, "head_dim": 256, "sliding_window": 512, "query_pre_attn_scalar": 256,
              "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 4 + ["sliding_attention"] * 2,
              "max_position_embeddings": 32768}
GEMMA_VISION = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
                "image_size": 896, "patch_size": 14}
TEXT = {
    "0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2, "mrope_section": [8, 12, 12]},
    "7b": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "mrope_section": [16, 24, 24]},
}
VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "in_channels": 3,
          "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "tokens_per_second": 2,
          "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31], "hidden_act": "silu"}
VOCAB = 151936


def shapes(text: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint in the published layout (`visual.*`, `model.*`, `lm_head.*`)."""
    h, i, layers = text["hidden_size"], text["intermediate_size"], text["num_hidden_layers"]
    hd = h // text["num_attention_heads"]
    kv = text["num_key_value_heads"] * hd
    out = {"model.embed_tokens.weight": (VOCAB, h), "model.norm.weight": (h,), "lm_head.weight": (VOCAB, h)}
    for n in range(layers):
        p = f"model.layers.{n}"
        out.update({f"{p}.input_layernorm.weight": (h,), f"{p}.post_attention_layernorm.weight": (h,),
                    f"{p}.self_attn.q_proj.weight": (h, h), f"{p}.self_attn.q_proj.bias": (h,),
                    f"{p}.self_attn.k_proj.weight": (kv, h), f"{p}.self_attn.k_proj.bias": (kv,),
                    f"{p}.self_attn.v_proj.weight": (kv, h), f"{p}.self_attn.v_proj.bias": (kv,),
                    f"{p}.self_attn.o_proj.weight": (h, h), f"{p}.mlp.gate_proj.weight": (i, h),
                    f"{p}.mlp.up_proj.weight": (i, h), f"{p}.mlp.down_proj.weight": (h, i)})
    vh, vi, m = VISION["hidden_size"], VISION["intermediate_size"], VISION["spatial_merge_size"]
    out["visual.patch_embed.proj.weight"] = (vh, 3, 2, 14, 14)
    for n in range(VISION["depth"]):
        p = f"visual.blocks.{n}"
        out.update({f"{p}.norm1.weight": (vh,), f"{p}.norm2.weight": (vh,),
                    f"{p}.attn.qkv.weight": (3 * vh, vh), f"{p}.attn.qkv.bias": (3 * vh,),
                    f"{p}.attn.proj.weight": (vh, vh), f"{p}.attn.proj.bias": (vh,)})
        for name, (o, k) in {"gate_proj": (vi, vh), "up_proj": (vi, vh), "down_proj": (vh, vi)}.items():
            out.update({f"{p}.mlp.{name}.weight": (o, k), f"{p}.mlp.{name}.bias": (o,)})
    merged = vh * m * m
    out.update({"visual.merger.ln_q.weight": (vh,), "visual.merger.mlp.0.weight": (merged, merged),
                "visual.merger.mlp.0.bias": (merged,), "visual.merger.mlp.2.weight": (h, merged),
                "visual.merger.mlp.2.bias": (h,)})
    return out


def gemma_shapes() -> dict[str, tuple[int, ...]]:
    """Every tensor of the Gemma 3 checkpoint in the published layout."""
    t, v = GEMMA_TEXT, GEMMA_VISION
    h, i, hd = t["hidden_size"], t["intermediate_size"], t["head_dim"]
    q, kv = t["num_attention_heads"] * hd, t["num_key_value_heads"] * hd
    vocab = json_vocab(GEMMA_FIXTURE)
    lm = "language_model.model"
    out = {f"{lm}.embed_tokens.weight": (vocab, h), f"{lm}.norm.weight": (h,)}
    for n in range(t["num_hidden_layers"]):
        p = f"{lm}.layers.{n}"
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            out[f"{p}.{norm}.weight"] = (h,)
        out.update({f"{p}.self_attn.q_proj.weight": (q, h), f"{p}.self_attn.k_proj.weight": (kv, h),
                    f"{p}.self_attn.v_proj.weight": (kv, h), f"{p}.self_attn.o_proj.weight": (h, q),
                    f"{p}.self_attn.q_norm.weight": (hd,), f"{p}.self_attn.k_norm.weight": (hd,),
                    f"{p}.mlp.gate_proj.weight": (i, h), f"{p}.mlp.up_proj.weight": (i, h),
                    f"{p}.mlp.down_proj.weight": (h, i)})
    vh, vi, side = v["hidden_size"], v["intermediate_size"], v["image_size"] // v["patch_size"]
    vm = "vision_tower.vision_model"
    out.update({f"{vm}.embeddings.patch_embedding.weight": (vh, 3, 14, 14), f"{vm}.embeddings.patch_embedding.bias":
                (vh,), f"{vm}.embeddings.position_embedding.weight": (side * side, vh),
                f"{vm}.post_layernorm.weight": (vh,), f"{vm}.post_layernorm.bias": (vh,)})
    for n in range(v["num_hidden_layers"]):
        p = f"{vm}.encoder.layers.{n}"
        for name, (o, k) in {"self_attn.q_proj": (vh, vh), "self_attn.k_proj": (vh, vh), "self_attn.v_proj":
                             (vh, vh), "self_attn.out_proj": (vh, vh), "mlp.fc1": (vi, vh), "mlp.fc2": (vh, vi)}.items():
            out.update({f"{p}.{name}.weight": (o, k), f"{p}.{name}.bias": (o,)})
        for norm in ("layer_norm1", "layer_norm2"):
            out.update({f"{p}.{norm}.weight": (vh,), f"{p}.{norm}.bias": (vh,)})
    out.update({"multi_modal_projector.mm_input_projection_weight": (vh, h),
                "multi_modal_projector.mm_soft_emb_norm.weight": (vh,)})
    return out


def json_vocab(fixture: Path) -> int:
    return json.loads((fixture / "config.json").read_text())["text_config"]["vocab_size"]


def write_gemma(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg = json.loads((GEMMA_FIXTURE / "config.json").read_text())
    cfg["text_config"].update(GEMMA_TEXT)
    cfg["vision_config"].update(GEMMA_VISION)
    cfg["mm_tokens_per_image"] = 256
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    pre = json.loads((GEMMA_FIXTURE / "preprocessor_config.json").read_text())
    pre.update({"size": {"height": 896, "width": 896}, "image_seq_length": 256})
    (out / "preprocessor_config.json").write_text(json.dumps(pre, indent=2) + "\n")
    (out / "processor_config.json").write_text(json.dumps({"image_seq_length": 256}) + "\n")
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        shutil.copy(GEMMA_FIXTURE / f, out / f)
    save_random(out, gemma_shapes(), gemma=True)


def save_random(out: Path, shapes_: dict, gemma: bool = False) -> None:
    """N(0, 0.02) weights in bf16 (norms: Gemma's `1 + w` at w = 0, others 1; biases 0)."""
    # drawn on the GPU where there is one (the 8B shape on the device; other values than the CPU's, same shapes)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)
    tensors = {}
    for name, shape in shapes_.items():
        gemma_norm = gemma and name.startswith("language_model") and "norm" in name or "soft_emb_norm" in name
        if "norm" in name or "ln_q" in name:
            t = torch.zeros(shape) if gemma_norm or name.endswith(".bias") else torch.ones(shape)
        elif name.endswith(".bias"):
            t = torch.zeros(shape)
        else:
            t = torch.randn(shape, generator=g, device=dev) * 0.02
        tensors[name] = t.to(torch.bfloat16).cpu().contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    n = sum(t.numel() for t in tensors.values())
    print(f"{out}: {n / 1e9:.2f}B parameters", flush=True)


def write_hf(out: Path, text: dict) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cfg = json.loads((FIXTURE / "config.json").read_text())
    cfg.update({k: v for k, v in text.items() if k != "mrope_section"})
    cfg.update({"vocab_size": VOCAB, "max_position_embeddings": 32768, "tie_word_embeddings": False,
                "rope_scaling": {"type": "mrope", "mrope_section": text["mrope_section"]},
                "vision_config": dict(VISION, out_hidden_size=text["hidden_size"])})
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    pre = json.loads((FIXTURE / "preprocessor_config.json").read_text())
    pre.update({"min_pixels": 3136, "max_pixels": 12845056})
    (out / "preprocessor_config.json").write_text(json.dumps(pre, indent=2) + "\n")
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        shutil.copy(FIXTURE / f, out / f)
    save_random(out, shapes(text))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--family", choices=["qwen2.5-vl", "gemma3"], default="qwen2.5-vl")
    ap.add_argument("--text", choices=sorted(TEXT), default="0.5b")
    ap.add_argument("--gguf", choices=["f16", "f32", "none"], default="f16")
    a = ap.parse_args()
    hf = a.out / "hf"
    if a.family == "gemma3":
        write_gemma(hf)
    else:
        write_hf(hf, TEXT[a.text])
    if a.gguf != "none":
        import tiny_gguf  # tools/oracle: llama.cpp's converter with the tiny tokenizer's pre-tokenizer answered
        tiny_gguf.convert(hf.resolve(), (a.out / "text.gguf").resolve(), a.gguf)
        tiny_gguf.convert(hf.resolve(), (a.out / "mmproj.gguf").resolve(), a.gguf, ("--mmproj",))
        for f in ("text.gguf", "mmproj.gguf"):
            print(f"{a.out / f}: {(a.out / f).stat().st_size / 2**30:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
