#!/usr/bin/env python3
"""Create a Llama-3.1-8B-shaped checkpoint with random bf16 weights (for speed measurements only).

    python3 bench/gpu/make_llama8b.py OUT_DIR [--layers 32] [--steady] [--shape 8b|smollm2-135m|qwen2.5-0.5b]

Shape: hidden 4096, 32 layers, 32 heads, 8 KV heads, intermediate 14336, rope theta 500000; vocabulary and
tokenizer from SmolLM2 (bench/gpu/smollm2-tokenizer, 49152 tokens) so that it tokenizes and chats. Weights are
N(0, 0.02) (norms 1), drawn on the GPU with a fixed seed and written as sharded safetensors. Needs torch and
safetensors (both on the lent H200 machine). Idempotent: an OUT_DIR that already holds the checkpoint is kept.

--steady: the same shapes and cost, but a greedy path no rounding can change, for measuring speculation with
drafts that are all kept. A plain random model is chaotic: its logits are near-ties, so a verification pass of k+1
rows (another GEMM shape, other rounding) soon takes another path than the one-row steps that made the prediction.
Here the embeddings are scaled by 50 and every layer's output projections (o_proj, down_proj) by 0.01, so the
residual stream stays close to the input token's embedding, and the output head is the unscaled embedding table
with its rows permuted: the next token after t is perm(t), ahead of the runner-up by a logit margin of ~80 against
~6. Every layer still runs in full.

--shape: smollm2-135m (hidden 576, 30 layers, 9 heads, 3 KV heads, intermediate 1536) or qwen2.5-0.5b (hidden 896,
24 layers, 14 heads, 2 KV heads, intermediate 4864, without Qwen2's q/k/v biases) instead of the 8B shape, with
SmolLM2's vocabulary in every shape (Qwen2.5's own has 151,936 tokens): small models whose batch-1 speed is
bound by launches, not bytes. --layers defaults to the shape's.
"""
import argparse, json, os, shutil, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
# shape: (hidden, intermediate, layers, heads, KV heads, head size)
SHAPES = {"8b": (4096, 14336, 32, 32, 8, 128), "smollm2-135m": (576, 1536, 30, 9, 3, 64),
          "qwen2.5-0.5b": (896, 4864, 24, 14, 2, 64)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    ap.add_argument("--shard-gb", type=float, default=4.0)
    ap.add_argument("--steady", action="store_true")
    a = ap.parse_args()
    import torch
    from safetensors.torch import save_file

    h, i, layers, heads, kv_heads, hd = SHAPES[a.shape]
    a.layers = a.layers or layers
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
        "intermediate_size": i, "num_hidden_layers": a.layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": hd, "hidden_act": "silu", "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "vocab_size": 49152, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16", "bos_token_id": 1,
        "eos_token_id": 2,
    }
    os.makedirs(a.out, exist_ok=True)
    done = os.path.join(a.out, ".complete")
    if os.path.exists(done):
        print(f"make_llama8b: {a.out} already complete", flush=True)
        return
    tok = os.path.join(HERE, "smollm2-tokenizer")
    for f in os.listdir(tok):
        shutil.copy(os.path.join(tok, f), a.out)
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=1)
    json.dump({"bos_token_id": 1, "eos_token_id": 2}, open(os.path.join(a.out, "generation_config.json"), "w"))

    v, kvd = 49152, kv_heads * hd
    shapes = [("model.embed_tokens.weight", (v, h)), ("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    for l in range(a.layers):
        p = f"model.layers.{l}."
        shapes += [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,)),
                   (p + "self_attn.q_proj.weight", (h, h)), (p + "self_attn.k_proj.weight", (kvd, h)),
                   (p + "self_attn.v_proj.weight", (kvd, h)), (p + "self_attn.o_proj.weight", (h, h)),
                   (p + "mlp.gate_proj.weight", (i, h)), (p + "mlp.up_proj.weight", (i, h)),
                   (p + "mlp.down_proj.weight", (h, i))]
    g = torch.Generator(device="cuda").manual_seed(1234)
    t0 = time.time()
    shard, size, shards, index = {}, 0, [], {}
    limit = int(a.shard_gb * 2**30)

    def flush():
        nonlocal shard, size
        if shard:
            name = f"model-{len(shards) + 1:05d}.safetensors"
            save_file(shard, os.path.join(a.out, name), metadata={"format": "pt"})
            for k in shard:
                index[k] = name
            shards.append(name)
            shard, size = {}, 0

    total = 0
    embed = None
    for name, shape in shapes:
        if len(shape) == 1:
            t = torch.ones(shape, dtype=torch.bfloat16)
        elif a.steady and name == "lm_head.weight":
            # row perm(t) of the head is embedding t: the token after t is perm(t)
            perm = torch.randperm(v, generator=torch.Generator().manual_seed(99))
            t = embed[torch.argsort(perm)].contiguous()
        else:
            t = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32) * 0.02
            if a.steady and name == "model.embed_tokens.weight":
                embed = t.to(torch.bfloat16).cpu()
                t = t * 50
            elif a.steady and name.endswith(("o_proj.weight", "down_proj.weight")):
                t = t * 0.01
            t = t.to(torch.bfloat16).cpu()
        shard[name] = t
        size += t.numel() * 2
        total += t.numel()
        if size >= limit:
            flush()
    flush()
    json.dump({"metadata": {"total_size": total * 2}, "weight_map": index},
              open(os.path.join(a.out, "model.safetensors.index.json"), "w"), indent=1)
    open(done, "w").write("ok\n")
    print(f"make_llama8b: {total / 1e9:.2f}B params, {len(shards)} shards in {time.time() - t0:.0f}s -> {a.out}",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
