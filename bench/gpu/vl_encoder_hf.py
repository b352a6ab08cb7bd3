#!/usr/bin/env python3
"""transformers' Qwen2.5-VL vision tower on the GPU, the peer of hearth's encoder time in bench/gpu/device_images.sh:
median ms per image (bf16, SDPA attention) for the same 448x448 images bench/images.py sends.

    python3 bench/gpu/vl_encoder_hf.py CHECKPOINT_DIR [--images 5] [--size 448]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from PIL import Image
from transformers import Qwen2_5_VLForConditionalGeneration
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from images import png  # noqa: E402  (bench/images.py: the same images)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("--images", type=int, default=5)
    ap.add_argument("--size", type=int, default=448)
    a = ap.parse_args()
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(a.ckpt, dtype=torch.bfloat16,
                                                               attn_implementation="sdpa").cuda().eval()
    proc = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056)
    import io
    times = []
    with torch.no_grad():
        for i in range(a.images + 1):
            img = Image.open(io.BytesIO(png(a.size, 1000 + i))).convert("RGB")
            out = proc(images=img, return_tensors="pt")
            pv, grid = out["pixel_values"].cuda().to(torch.bfloat16), out["image_grid_thw"].cuda()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.model.visual(pv, grid_thw=grid)
            torch.cuda.synchronize()
            if i > 0:  # the first is a warm-up
                times.append((time.perf_counter() - t0) * 1000)
    print(f"transformers {torch.__version__}/{__import__('transformers').__version__} encoder ms per image "
          f"(median of {len(times)}): {statistics.median(times):.1f}  all: {[round(t, 1) for t in times]}")


if __name__ == "__main__":
    main()
