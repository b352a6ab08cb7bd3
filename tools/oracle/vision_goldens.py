"""Goldens for hearth's image preprocessing: Pillow's resize (each filter, up, down, one axis) and the Qwen2-VL
image processor of transformers (its Pillow backend, `Qwen2VLImageProcessorPil`).

Run from the repo root after tools/oracle/setup.sh:
    .venv-oracle/bin/python tools/oracle/vision_goldens.py
The test images are computed from a formula the Rust test repeats (`pattern`), so nothing binary is committed.
Resized images are stored whole (base64 of the RGB bytes); a processor's `pixel_values` by its shape, its sum,
and the values at every 211th index (enough to catch a wrong patch order or normalization), with the resized
image it came from. Writes tests/goldens/vision_preprocess.json.
"""
from __future__ import annotations

import base64
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GOLDENS, dump_json, reference  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402


def pattern(kind: str, w: int, h: int) -> np.ndarray:
    """`noise`: a multiplicative hash of (x, y, channel); `gradient`: smooth ramps with wrap-around edges."""
    y, x, c = np.meshgrid(np.arange(h), np.arange(w), np.arange(3), indexing="ij")
    x, y, c = (a.astype(np.uint64) for a in (x, y, c))
    if kind == "noise":
        hsh = ((x * 73856093) ^ (y * 19349663) ^ (c * 83492791)) & 0xFFFFFFFF
        v = (hsh >> 8) & 255
    else:
        v = (x * 255 // max(w - 1, 1) + c * 40 + y * 3) % 256
    return v.astype(np.uint8)


FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
RESIZES = [  # (pattern, w, h, out_w, out_h)
    ("noise", 37, 23, 56, 28),
    ("noise", 97, 61, 28, 20),
    ("gradient", 50, 40, 50, 17),
    ("noise", 33, 29, 70, 29),
    ("gradient", 300, 200, 45, 31),
]


def b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def main() -> None:
    import transformers
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    resizes = []
    for kind, w, h, ow, oh in RESIZES:
        img = Image.fromarray(pattern(kind, w, h), "RGB")
        for name, f in FILTERS.items():
            out = np.asarray(img.resize((ow, oh), resample=f))
            resizes.append({"pattern": kind, "size": [w, h], "out": [ow, oh], "filter": name, "rgb": b64(out)})

    qwen = []
    for kind, w, h, cfg in [
        ("noise", 100, 75, {}),
        ("gradient", 40, 30, {"min_pixels": 784}),
        ("noise", 61, 90, {"min_pixels": 784, "max_pixels": 56 * 84}),
    ]:
        proc = Qwen2VLImageProcessorPil(**cfg)
        arr = pattern(kind, w, h)
        out = proc(images=Image.fromarray(arr, "RGB"), return_tensors="np")
        pv = out["pixel_values"].astype(np.float32)
        grid = [int(v) for v in out["image_grid_thw"][0]]
        gh, gw = grid[1] * 14, grid[2] * 14
        resized = np.asarray(Image.fromarray(arr, "RGB").resize((gw, gh), resample=Image.BICUBIC))
        flat = pv.reshape(-1)
        idx = list(range(0, flat.size, 211))
        qwen.append({
            "pattern": kind, "size": [w, h], "config": cfg, "grid_thw": grid, "shape": list(pv.shape),
            "sum": float(flat.astype(np.float64).sum()), "resized_rgb": b64(resized),
            "samples": [[i, float(flat[i])] for i in idx],
        })

    dump_json({"reference": reference("transformers", "pillow", "numpy"), "resize": resizes, "qwen2_vl": qwen},
              GOLDENS / "vision_preprocess.json")


if __name__ == "__main__":
    main()
