#!/usr/bin/env python3
"""A random Qwen3-MoE (or gpt-oss) checkpoint of a chosen size, written as a GGUF by llama.cpp's own converter: for
measuring routed-expert models on the CPU against llama.cpp on the same file (speed only: the weights are random).

    .venv-oracle/bin/python bench/make_moe_gguf.py OUT.gguf [--hidden 1024] [--layers 16] [--experts 64]
        [--top-k 8] [--expert-ffn 256] [--heads 16] [--kv-heads 4] [--outtype q8_0] [--arch qwen3-moe|gpt-oss]

`--arch qwen3.5` makes a dense Qwen3.5-shaped hybrid instead (three gated-DeltaNet layers to one output-gated
full-attention layer, 16 key and value heads of 128 in the DeltaNet, 256-dim attention heads with a quarter rotated,
a gated MLP of --ffn; --layers 24 --heads 8 --kv-heads 2: ~0.6B parameters, the shape of the small Qwen3.5 models);
`--arch gpt-oss` makes gpt-oss's shape instead (attention sinks and biases, alternating 128-token sliding and full
layers, YaRN, biased experts) with its experts in MXFP4 as gpt-oss is published (tools/oracle/tiny_mxfp4.py's
quantizer), which the converter keeps as GGML's MXFP4.

Needs tools/oracle/setup.sh (torch, transformers) and bench/setup-llama-cpp.sh (the converter). The defaults make
~0.95B parameters of which ~0.25B are read per token (8 of 64 experts, attention, embeddings and the untied output
head over SmolLM2's 49,152-token vocabulary, bench/gpu/smollm2-tokenizer), like the small MoE models people run
on a CPU. Weights are N(0, 0.02), norms 1, drawn with a fixed seed.
"""
import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "oracle"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--expert-ffn", type=int, default=256)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--outtype", default="q8_0")
    ap.add_argument("--arch", default="qwen3-moe", choices=["qwen3-moe", "gpt-oss", "qwen3.5"])
    ap.add_argument("--ffn", type=int, default=3584, help="qwen3.5: the MLP's intermediate size")
    ap.add_argument("--hf-only", action="store_true",
                    help="write the Hugging Face checkpoint (bf16 safetensors and the tokenizer) to OUT, a directory, "
                         "instead of converting it (a GPU machine without the converter)")
    a = ap.parse_args()

    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    tok_dir = ROOT / "bench" / "gpu" / "smollm2-tokenizer"
    vocab = len(json.loads((tok_dir / "tokenizer.json").read_text())["model"]["vocab"])
    shape = dict(vocab_size=vocab, hidden_size=a.hidden, num_hidden_layers=a.layers, num_attention_heads=a.heads,
                 num_key_value_heads=a.kv_heads, head_dim=a.hidden // a.heads, num_experts_per_tok=a.top_k,
                 tie_word_embeddings=False, max_position_embeddings=32768, bos_token_id=1, eos_token_id=2)
    if a.arch == "qwen3.5":
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
        shape.update(head_dim=256)
        shape.pop("num_experts_per_tok")
        cls, cfg = Qwen3_5ForCausalLM, Qwen3_5TextConfig(
            **shape, intermediate_size=a.ffn, linear_num_key_heads=16, linear_num_value_heads=16,
            linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                             "mrope_interleaved": True, "mrope_section": [11, 11, 10]})
    elif a.arch == "gpt-oss":
        from transformers import GptOssConfig, GptOssForCausalLM
        cls, cfg = GptOssForCausalLM, GptOssConfig(**shape, num_local_experts=a.experts,
                                                   intermediate_size=a.expert_ffn, sliding_window=128)
    else:
        cls, cfg = Qwen3MoeForCausalLM, Qwen3MoeConfig(
            **shape, intermediate_size=4 * a.hidden, num_experts=a.experts, moe_intermediate_size=a.expert_ffn,
            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], rope_theta=1000000.0)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = cls(cfg)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if a.arch == "qwen3.5" and name.endswith(".A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif a.arch == "qwen3.5" and name.endswith(".dt_bias"):
                p.fill_(1.0)
            elif "norm" in name.split(".")[-2]:
                # Qwen3.5's norms multiply by 1 + w (its DeltaNet's gated norm by w)
                zero_centred = a.arch == "qwen3.5" and not name.endswith("linear_attn.norm.weight")
                p.fill_(0.0 if zero_centred else 1.0)
            else:
                p.copy_((0.02 * torch.randn(p.shape, generator=g)).to(p.dtype))
    total = sum(p.numel() for p in model.parameters())
    per_layer_expert = 3 * a.hidden * a.expert_ffn
    routed = a.layers * (a.experts - a.top_k) * per_layer_expert if a.arch != "qwen3.5" else 0
    active = total - routed
    print(f"{total / 1e9:.2f}B parameters, {active / 1e9:.2f}B read per token", file=sys.stderr)
    if a.hf_only:
        model.save_pretrained(a.out)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tok_dir / f, Path(a.out) / f)
        print(f"wrote {a.out}", file=sys.stderr)
        return
    from tiny_gguf import convert  # noqa: E402  (llama.cpp's converter, its pre-tokenizer check answered)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "moe"
        model.save_pretrained(str(src))
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tok_dir / f, src / f)
        if a.arch == "gpt-oss":
            to_mxfp4(src)
        del model
        convert(src, Path(a.out).resolve(), a.outtype, ("--no-mtp",) if a.arch == "qwen3.5" else ())
    print(f"wrote {a.out}", file=sys.stderr)


def to_mxfp4(src: Path) -> None:
    """Rewrite a saved gpt-oss checkpoint's experts as MXFP4 blocks and scales, as gpt-oss is published."""
    from safetensors.torch import load_file, save_file
    from tiny_mxfp4 import quantize
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4"}
    (src / "config.json").write_text(json.dumps(cfg))
    for f in src.glob("*.safetensors"):
        tensors = load_file(str(f))
        out = {}
        for name, t in tensors.items():
            if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
                out[name + "_blocks"], out[name + "_scales"] = quantize(t.transpose(1, 2))
            else:
                out[name] = t
        save_file(out, str(f), metadata={"format": "pt"})


if __name__ == "__main__":
    main()
