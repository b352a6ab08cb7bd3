#!/usr/bin/env python3
"""A copy of a random checkpoint whose output head is scaled up: logit gaps far above rounding, for diagnosing
whether a greedy path's divergence comes from the last step (near-ties) or from the layers (a chaotic model).

    python3 bench/gpu/peak_head.py SRC_DIR OUT_DIR [--scale 50]

Only the shard holding `lm_head.weight` is rewritten; the other files are symlinked. Needs torch and safetensors.
"""
import argparse, json, os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--scale", type=float, default=50.0)
    a = ap.parse_args()
    from safetensors.torch import load_file, save_file
    os.makedirs(a.out, exist_ok=True)
    index = json.load(open(os.path.join(a.src, "model.safetensors.index.json")))
    head = index["weight_map"]["lm_head.weight"]
    for f in os.listdir(a.src):
        dst = os.path.join(a.out, f)
        if f != head and not os.path.exists(dst):
            os.symlink(os.path.join(os.path.abspath(a.src), f), dst)
    tensors = load_file(os.path.join(a.src, head))
    tensors["lm_head.weight"] = tensors["lm_head.weight"] * a.scale
    save_file(tensors, os.path.join(a.out, head), metadata={"format": "pt"})
    print(f"peak_head: lm_head x{a.scale} in {head} -> {a.out}")


if __name__ == "__main__":
    main()
