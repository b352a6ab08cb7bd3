#!/usr/bin/env python3
"""The reference workload through Hugging Face transformers on the same GPU: static KV cache + torch.compile.

    python3 bench/gpu/hf_reference.py MODEL_DIR [--batches 1,32] [--prompt 512] [--new 256] [--runs 2]

For each batch size B: random prompts of exactly --prompt tokens, greedy, exactly --new tokens (EOS ignored).
One untimed warm-up generate (compiles), then --runs timed ones (CUDA-synchronized wall time, median).
Prints one JSON line per batch: total tok/s (B * new / generate time), prefill time (a max_new_tokens=1 call) and
decode tok/s per stream with the prefill taken out. Loopback-free: nothing here talks to a server.
"""
import argparse, json, statistics, time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--runs", type=int, default=2)
    a = ap.parse_args()
    import torch, transformers
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, device_map="cuda")
    model.eval()
    vocab = model.config.vocab_size
    g = torch.Generator(device="cpu").manual_seed(7)

    def gen(ids, new):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                                 do_sample=False, cache_implementation="static", pad_token_id=0)
        torch.cuda.synchronize()
        assert out.shape[1] == ids.shape[1] + new, out.shape
        return time.perf_counter() - t0

    for b in [int(x) for x in a.batches.split(",")]:
        ids = torch.randint(100, vocab, (b, a.prompt), generator=g).cuda()
        t_warm = gen(ids, a.new)  # compiles for this shape
        gen(ids, 1)
        totals = [gen(ids, a.new) for _ in range(a.runs)]
        prefills = [gen(ids, 1) for _ in range(a.runs)]
        total, prefill = statistics.median(totals), statistics.median(prefills)
        print(json.dumps({
            "reference": f"transformers {transformers.__version__} torch {torch.__version__} static cache + compile",
            "batch": b, "prompt": a.prompt, "new": a.new, "warmup_s": round(t_warm, 1),
            "total_s": round(total, 3), "agg_tok_s": round(b * a.new / total, 1),
            "prefill_s": round(prefill, 4), "prefill_tok_s": round(b * a.prompt / prefill, 1),
            "decode_tok_s_per_stream": round((a.new - 1) / max(total - prefill, 1e-9), 1),
            "decode_ms_per_step": round((total - prefill) / (a.new - 1) * 1e3, 2),
        }), flush=True)


if __name__ == "__main__":
    main()
