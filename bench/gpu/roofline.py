#!/usr/bin/env python3
"""Memory roofline for batch-1 decode: weight bytes / measured device copy bandwidth.

    python3 bench/gpu/roofline.py MODEL_DIR

Copy bandwidth: a 4 GiB device-to-device copy through PyTorch, bytes read + written over the CUDA-event time,
median of 10 after 3 warm-ups. Weight bytes: every tensor in the checkpoint's safetensors (the embedding table is
counted although decode reads one row of it, so the roofline is slightly pessimistic).
"""
import json, os, statistics, sys


def main():
    import torch
    from safetensors import safe_open

    d = sys.argv[1]
    weight_bytes = 0
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), "pt") as s:
                for k in s.keys():
                    sl = s.get_slice(k)
                    n = 1
                    for x in sl.get_shape():
                        n *= x
                    weight_bytes += n * 2  # bf16
    src = torch.empty(2**31, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    bw = 2 * src.numel() * 2 / statistics.median(times)
    ms = weight_bytes / bw * 1e3
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "copy_TBps": round(bw / 1e12, 2),
                      "weight_GB": round(weight_bytes / 1e9, 2), "roofline_ms_per_token": round(ms, 2),
                      "roofline_tok_s": round(1e3 / ms, 1)}), flush=True)


if __name__ == "__main__":
    main()
