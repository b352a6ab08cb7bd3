#!/usr/bin/env python3
"""Write a Llama-family safetensors checkpoint (bench/gpu/make_llama8b.py's) as a quantized GGUF, on the GPU machine.

    python3 bench/gpu/make_gguf.py SRC_DIR OUT.gguf --type q4_0 --vocab .gpu/tokenizer.gguf [--procs 16]
    python3 bench/gpu/make_gguf.py --vocab-only MODEL.gguf OUT.gguf

The first form writes every matrix (embedding and output head included) as --type (f16, q4_0, q4_1, q5_0, q8_0)
with the `gguf` package's numpy quantizers (k-quants: write f16, then `hearth quantize` it), one process per tensor, q/k rows permuted as llama.cpp's converter does;
norms stay f32. The tokenizer fields (`tokenizer.*`) are copied from --vocab, a GGUF without tensors made here by
the second form from a model with the same vocabulary (SmolLM2's, which make_llama8b.py's checkpoint uses), so that
nothing large travels to the device. Idempotent: an existing OUT is kept. Needs numpy, torch, safetensors and
gguf (bench/gpu/prepare_gguf.sh packs its wheel into .gpu/wheels; the device scripts import it from there with
PYTHONPATH=<the wheel>).
"""
import argparse, json, os, sys, time
from concurrent.futures import ProcessPoolExecutor

TYPES = {"f16": "F16", "q4_0": "Q4_0", "q4_1": "Q4_1", "q5_0": "Q5_0", "q8_0": "Q8_0"}


def copy_fields(reader, writer, prefix):
    """Copy every key/value field whose name starts with `prefix` from a GGUFReader to a GGUFWriter."""
    import gguf
    for name, field in reader.fields.items():
        if not name.startswith(prefix):
            continue
        vtype = gguf.GGUFValueType(field.types[0])
        sub = gguf.GGUFValueType(field.types[-1]) if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)


def vocab_only(src, out):
    import gguf
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(out, "llama")
    copy_fields(r, w, "tokenizer.")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"make_gguf: tokenizer fields of {src} -> {out} ({os.path.getsize(out) / 1e6:.1f} MB)", flush=True)


def gguf_name(hf):
    """llama.cpp's name for a Llama tensor."""
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")  # model.layers.N.<module>.<proj>.weight
    n, rest = parts[2], ".".join(parts[3:])
    table = {
        "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    return f"blk.{n}.{table[rest]}"


def permute(w, heads):
    """llama.cpp's q/k row order for rotary pairs."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert(job):
    """(gguf name, array, ggml type) for one tensor: quantized matrices, f32 vectors."""
    path, hf, qtype, cfg = job
    import gguf
    import numpy as np
    import torch
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        t = f.get_tensor(hf).to(torch.float32).numpy()
    if hf.endswith("q_proj.weight"):
        t = permute(t, cfg["num_attention_heads"])
    elif hf.endswith("k_proj.weight"):
        t = permute(t, cfg["num_key_value_heads"])
    if t.ndim == 1:
        return gguf_name(hf), np.ascontiguousarray(t), gguf.GGMLQuantizationType.F32
    q = getattr(gguf.GGMLQuantizationType, qtype)
    if qtype == "F16":
        return gguf_name(hf), t.astype(np.float16), q
    return gguf_name(hf), gguf.quants.quantize(np.ascontiguousarray(t), q), q


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--type", choices=sorted(TYPES), default="q4_0")
    ap.add_argument("--vocab")
    ap.add_argument("--vocab-only", action="store_true")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 4)
    a = ap.parse_args()
    if a.vocab_only:
        return vocab_only(a.src, a.out)
    if os.path.exists(a.out):
        print(f"make_gguf: {a.out} exists", flush=True)
        return
    import gguf
    cfg = json.load(open(os.path.join(a.src, "config.json")))
    index = json.load(open(os.path.join(a.src, "model.safetensors.index.json")))["weight_map"]
    jobs = [(os.path.join(a.src, f), hf, TYPES[a.type], cfg) for hf, f in index.items()]
    w = gguf.GGUFWriter(a.out + ".part", "llama")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_dimension_count(cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"]))
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    if a.vocab:
        copy_fields(gguf.GGUFReader(a.vocab), w, "tokenizer.")
    t0 = time.time()
    done = {}
    with ProcessPoolExecutor(a.procs) as pool:
        for name, arr, q in pool.map(convert, jobs):
            done[name] = (arr, q)
    # A stable order: the embedding, the layers in order, the final norm and head.
    def key(n):
        return (0, 0, n) if n.startswith("token_embd") else (1, int(n.split(".")[1]), n) if n.startswith("blk.") else (2, 0, n)
    for name in sorted(done, key=key):
        arr, q = done[name]
        w.add_tensor(name, arr, raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.rename(a.out + ".part", a.out)
    print(f"make_gguf: {len(done)} tensors as {a.type} in {time.time() - t0:.0f}s -> {a.out} "
          f"({os.path.getsize(a.out) / 1e9:.2f} GB)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
