#!/usr/bin/env python3
"""Achieved weight bandwidth of cuBLAS (through PyTorch) bf16 linear layers at small batch, for the 8B shapes.

    python3 bench/gpu/gemm_probe.py

For each (M, N, K): y = x[M,K] @ W[N,K]^T timed with CUDA events (median of 20 after 5 warm-ups); prints the
weight bytes / time in GB/s. Tells whether a decode step's matmuls can reach the memory roofline through cuBLAS.
"""
import json, statistics
import torch

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336), "lm_head": (49152, 4096)}


def t(fn):
    for _ in range(5):
        fn()
    ts = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


for name, (n, k) in SHAPES.items():
    # several copies so that the weights are not served from the 60 MB L2
    ws = [torch.randn(n, k, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    for m in (1, 2, 4, 8, 16, 32, 64, 128):
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        def run():
            for w in ws:
                torch.nn.functional.linear(x, w)
        s = t(run) / len(ws)
        print(json.dumps({"shape": name, "m": m, "us": round(s * 1e6, 1), "GBps": round(n * k * 2 / s / 1e9)}), flush=True)
