"""A tiny random Qwen2.5-VL checkpoint in the layout Qwen2.5-VL is published in, and transformers' goldens for it.

Run from the repo root, after tools/oracle/tiny_models.py qwen2 (its tokenizer is reused):
    .venv-oracle/bin/python tools/oracle/tiny_qwen2_5_vl.py
Writes tests/fixtures/tiny-qwen2_5_vl/ (config.json with the text model's fields at the top level and
`rope_scaling` {type: mrope}, `vision_config`, weights named `visual.*`, `model.*`, `lm_head.*` as published;
preprocessor_config.json) and tests/goldens/tiny_qwen2_5_vl.json. The vision tower has window attention in its
first and last blocks and full attention in the middle one (`fullatt_block_indexes`), windows of 2x2 merged
tokens, so both attention kinds and the window reordering are exercised.

Images are the oracle's formula patterns (tools/oracle/vision_goldens.py `pattern`), processed by
`Qwen2VLImageProcessorPil` with this checkpoint's preprocessor config. Goldens, all computed in f32 from the
stored bf16 weights with eager attention:
  * `encoder`: per image, the grid and the vision tower's merged output (tokens x out_hidden, 6 digits);
  * `cases`: prompts with image placeholders expanded (vision_start, image_token x tokens, vision_end), the 3D
    rope positions transformers computes (`get_rope_index`), logits at selected positions, and greedy tokens
    (full forward every step, positions recomputed by transformers) with their top-2 gaps.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FIXTURES, GOLDENS, copy_tokenizer_with, dump_json, r6, reference  # noqa: E402
from vision_goldens import pattern  # noqa: E402

import torch  # noqa: E402
from PIL import Image  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration  # noqa: E402
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil  # noqa: E402

torch.set_num_threads(2)
torch.use_deterministic_algorithms(True)

SRC_TOK = FIXTURES / "tiny-qwen2"
OUT = FIXTURES / "tiny-qwen2_5_vl"
IMAGE, VIDEO, V_START, V_END = 448, 449, 450, 451  # the first ids after the tiny BPE vocabulary
TEXT = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "max_position_embeddings": 512, "hidden_act": "silu", "tie_word_embeddings": False,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}
VISION = {"depth": 3, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "in_channels": 3,
          "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "tokens_per_second": 2,
          "window_size": 56, "out_hidden_size": 64, "fullatt_block_indexes": [1], "hidden_act": "silu"}
PREPROCESSOR = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14, "temporal_patch_size": 2,
                "merge_size": 2, "min_pixels": 784, "max_pixels": 112 * 112, "do_resize": True, "do_rescale": True,
                "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                "image_std": [0.26862954, 0.26130258, 0.27577711], "do_convert_rgb": True}
IMAGES = {"a": ("noise", 61, 90), "b": ("gradient", 120, 50)}
# (name, text ids before, images with text between, text after): ids are plain tokens of the tiny vocab.
CASES = [
    ("one_image", [[1, 40, 41, 42], ["a"], [43, 44, 45, 46, 47]]),
    ("two_images", [[1, 60, 61], ["b"], [62, 63], ["a"], [64, 65, 66]]),
    # 29 text tokens first: the image's placeholders straddle the engine's 32-token prompt pieces.
    ("straddle", [[1] + list(range(100, 128)), ["a"], [43, 44, 45]]),
]
N_GREEDY = 6
VISION_TOKENS = {IMAGE: "<|image_pad|>", VIDEO: "<|video_pad|>", V_START: "<|vision_start|>", V_END: "<|vision_end|>"}
# Qwen2.5-VL's published chat template.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in "
    "content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] "
    "== 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content "
    "%}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}"
)
CHAT_TEXT = "What is in the picture?"


def randomize(model: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or ".norm1." in name or ".norm2." in name or "ln_q" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[1] if p.dim() == 2 else p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def published_name(k: str) -> str:
    if k.startswith("model.visual."):
        return k[len("model."):]
    if k.startswith("model.language_model."):
        return "model." + k[len("model.language_model."):]
    return k


@torch.no_grad()
def chat_case(ref, proc, feats) -> dict:
    """A chat request as a client sends it (image a as a PNG data URL, then text), rendered by the chat template,
    its placeholder expanded as Qwen2_5_VLProcessor does, and the greedy answer."""
    import base64
    import io
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(OUT))
    kind, w, h = IMAGES["a"]
    buf = io.BytesIO()
    Image.fromarray(pattern(kind, w, h), "RGB").save(buf, format="PNG")
    png = base64.b64encode(buf.getvalue()).decode()
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": CHAT_TEXT}]}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    pv, grid, emb = feats["a"]
    at = ids.index(IMAGE)
    ids = ids[:at] + [IMAGE] * emb.shape[0] + ids[at + 1:]
    seq, toks = list(ids), []
    for _ in range(N_GREEDY):
        t = torch.tensor([seq])
        lg = ref(input_ids=t, pixel_values=pv, image_grid_thw=grid, mm_token_type_ids=(t == IMAGE).int(),
                 use_cache=False).logits[0, -1].float()
        toks.append(int(torch.argmax(lg)))
        seq.append(toks[-1])
    return {"text": CHAT_TEXT, "png_base64": png, "prompt_ids": ids, "greedy": toks,
            "answer": tok.decode(toks, skip_special_tokens=True)}


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    top = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", **TEXT,
           "vision_config": VISION, "image_token_id": IMAGE, "video_token_id": VIDEO,
           "vision_start_token_id": V_START, "vision_end_token_id": V_END, "bos_token_id": 1, "eos_token_id": 2,
           "torch_dtype": "bfloat16"}
    (OUT / "config.json").write_text(json.dumps(top, indent=2, sort_keys=True) + "\n")
    (OUT / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    # The vision tokens as special tokens at the config's ids (unused by the tiny BPE vocabulary), and the
    # published chat template.
    copy_tokenizer_with(SRC_TOK, OUT, VISION_TOKENS, CHAT_TEMPLATE)

    cfg = Qwen2_5_VLConfig.from_pretrained(str(OUT))
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(cfg).eval()
    randomize(model)
    tensors = {published_name(k): v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(OUT / "model.safetensors"), metadata={"format": "pt"})

    ref = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(OUT), dtype=torch.float32,
                                                             attn_implementation="eager").eval()
    for (k, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        if not torch.equal(a, b):
            raise SystemExit(f"{k} did not survive the published layout")
    proc = Qwen2VLImageProcessorPil(**{k: v for k, v in PREPROCESSOR.items() if k in ("min_pixels", "max_pixels")})

    feats, encoder = {}, {}
    with torch.no_grad():
        for key, (kind, w, h) in IMAGES.items():
            out = proc(images=Image.fromarray(pattern(kind, w, h), "RGB"), return_tensors="pt")
            pv, grid = out["pixel_values"].float(), out["image_grid_thw"]
            emb = ref.model.visual(pv, grid_thw=grid).pooler_output
            feats[key] = (pv, grid, emb)
            encoder[key] = {"pattern": kind, "size": [w, h], "grid_thw": grid[0].tolist(),
                            "embeddings": [[r6(x) for x in row] for row in emb.tolist()]}

    cases = []
    for name, parts in CASES:
        ids, pvs, grids = [], [], []
        for part in parts:
            if isinstance(part[0], str):
                for key in part:
                    pv, grid, emb = feats[key]
                    ids += [V_START] + [IMAGE] * emb.shape[0] + [V_END]
                    pvs.append(pv)
                    grids.append(grid)
            else:
                ids += part
        pv, grid = torch.cat(pvs), torch.cat(grids)
        seq, toks, gaps = list(ids), [], []
        with torch.no_grad():
            for step in range(N_GREEDY + 1):
                t = torch.tensor([seq])
                out = ref(input_ids=t, pixel_values=pv, image_grid_thw=grid, mm_token_type_ids=(t == IMAGE).int(),
                          use_cache=False)
                lg = out.logits[0].float()
                if step == 0:
                    first = lg
                    pos, _ = ref.model.get_rope_index(t, (t == IMAGE).int(), image_grid_thw=grid)
                if step == N_GREEDY:
                    break
                top2 = torch.topk(lg[-1], 2)
                toks.append(int(torch.argmax(lg[-1])))
                gaps.append(r6(top2.values[0] - top2.values[1]))
                seq.append(toks[-1])
        rows = sorted({ids.index(IMAGE), len(ids) - len(parts[-1]) - 1, len(ids) - len(parts[-1]), len(ids) - 1})
        cases.append({"name": name, "input_ids": ids, "images": [k for p in parts if isinstance(p[0], str) for k in p],
                      "positions": pos[:, 0].tolist(),
                      "logits_at": {str(r): [r6(x) for x in first[r].tolist()] for r in rows},
                      "greedy": toks, "greedy_gaps": gaps})
        print(f"  {name}: {len(ids)} tokens, greedy {toks}, min gap {min(gaps):.4g}")

    chat = chat_case(ref, proc, feats)

    golden = {
        "reference": reference("transformers", "torch", "pillow"),
        "fixture": "tests/fixtures/tiny-qwen2_5_vl",
        "architecture": "Qwen2_5_VLForConditionalGeneration",
        "notes": ["f32 compute from the stored bf16 weights, eager attention; floats to 6 significant digits.",
                  "positions: [3][tokens] (temporal, height, width) from get_rope_index; logits_at: position -> "
                  "logits row; greedy: full forward each step (no cache), argmax, lowest id on ties."],
        "encoder": encoder,
        "cases": cases,
        "chat": chat,
    }
    dump_json(golden, GOLDENS / "tiny_qwen2_5_vl.json")
    size = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {OUT.name}: {size} bytes")


if __name__ == "__main__":
    main()
