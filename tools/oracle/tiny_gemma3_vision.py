"""A tiny random Gemma 3 vision-language checkpoint in the layout Gemma 3 (4B and up) is published in, and
transformers' goldens for it.

Run from the repo root, after tools/oracle/tiny_models.py gemma3 (its tokenizer is reused):
    .venv-oracle/bin/python tools/oracle/tiny_gemma3_vision.py
Writes tests/fixtures/tiny-gemma3-vision/ (config.json: `gemma3` with `text_config` and a SigLIP `vision_config`;
weights named `language_model.model.*`, `vision_tower.vision_model.*`, `multi_modal_projector.*` as published;
preprocessor_config.json; the tokenizer with Gemma 3's turn and image tokens added and its published chat template)
and tests/goldens/tiny_gemma3_vision.json.

The SigLIP tower sees 112x112 images as 8x8 patches; the projector pools them 2x2 into 16 tokens
(`mm_tokens_per_image`), RMS-normalizes and projects them. The text model has Gemma 3's 5 sliding : 1 global
layers (as llama.cpp assumes for GGUF); its sliding window (8) is shorter than an image's 16 tokens, so the
bidirectional attention over an image's tokens meets the window's lower bound.

tools/oracle/tiny_gguf.py gemma3_vision converts it with llama.cpp's converter to a text GGUF and an mmproj.

Images are the oracle's formula patterns (tools/oracle/vision_goldens.py `pattern`), processed by
`Gemma3ImageProcessorPil` (bilinear resize to 112x112, mean and std 0.5). Goldens, all in f32 from the stored
bf16 weights with eager attention:
  * `encoder`: per image, the projector's output (16 tokens x text hidden, 6 digits);
  * `cases`: prompts with images expanded as Gemma3Processor writes them (`\\n\\n<start_of_image>`, 16
    `<image_soft_token>`, `<end_of_image>\\n\\n`), logits at selected positions and greedy tokens (full forward
    with `token_type_ids` every step, as generate's first step sees it: the image tokens attend each other both
    ways) with their top-2 gaps;
  * `chat`: a chat request with one image as a PNG, its prompt ids through the chat template and
    Gemma3Processor, and the greedy answer.
"""
from __future__ import annotations

import base64
import io
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
from transformers import AutoTokenizer, Gemma3Config, Gemma3ForConditionalGeneration  # noqa: E402
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil  # noqa: E402

torch.set_num_threads(2)
torch.use_deterministic_algorithms(True)

SRC_TOK = FIXTURES / "tiny-gemma3"
OUT = FIXTURES / "tiny-gemma3-vision"
# Gemma 3's turn and image tokens, at the first ids after the tiny BPE vocabulary. The vocabulary size is what
# llama.cpp's converter counts for this tokenizer (its vocab plus its added tokens: 448 + 8), so the GGUF's token
# list and its embedding table (trimmed to that count) agree.
SOT, EOT, BOI, EOI, IMAGE = 448, 449, 450, 451, 452
ADDED = {SOT: "<start_of_turn>", EOT: "<end_of_turn>", BOI: "<start_of_image>", EOI: "<end_of_image>",
         IMAGE: "<image_soft_token>"}
MM_TOKENS = 16
TEXT = {"model_type": "gemma3_text", "vocab_size": 456, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "sliding_window": 8, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 16,
        "max_position_embeddings": 512, "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": None,
        "attn_logit_softcapping": None}
VISION = {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2, "image_size": 112, "patch_size": 14, "layer_norm_eps": 1e-6,
          "vision_use_head": False, "hidden_act": "gelu_pytorch_tanh", "num_channels": 3}
PREPROCESSOR = {"image_processor_type": "Gemma3ImageProcessor", "processor_class": "Gemma3Processor",
                "do_resize": True, "size": {"height": 112, "width": 112}, "resample": 2, "do_rescale": True,
                "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5],
                "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True, "do_pan_and_scan": None,
                "image_seq_length": MM_TOKENS}
IMAGES = {"a": ("noise", 61, 90), "b": ("gradient", 120, 50)}
FULL_IMAGE = [None]  # "\n\n" ids, BOI, IMAGE x 16, EOI, "\n\n" ids: filled from the tokenizer
CASES = [
    ("one_image", [[1, 40, 41, 42], ["a"], [43, 44, 45, 46, 47]]),
    ("two_images", [[1, 60, 61], ["b"], [62, 63], ["a"], [64, 65, 66]]),
    # 27 text tokens first: the image's tokens would straddle the engine's 32-token prompt pieces.
    ("straddle", [[1] + list(range(100, 126)), ["a"], [43, 44, 45]]),
]
N_GREEDY = 6
CHAT_TEXT = "What is in the picture?"
# Gemma 3's published chat template.
CHAT_TEMPLATE = (
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\\n'}}\n{%- endif -%}\n"
)


def randomize(model: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(13)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                # Gemma's RMSNorms scale by 1 + w; SigLIP's LayerNorms by w
                base = 1.0 if ("layer_norm" in name or "post_layernorm" in name) else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif "position_embedding" in name or "embed_tokens" in name:
                p.copy_((0.5 if "position" in name else 0.05) * torch.randn(p.shape, generator=g))
            elif "mm_input_projection_weight" in name:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[0] ** 0.5)
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def published_name(k: str) -> str:
    """transformers 5's names to the published ones."""
    if k.startswith("model.language_model."):
        return "language_model.model." + k[len("model.language_model."):]
    if k.startswith("model.vision_tower."):
        rest = k[len("model.vision_tower."):]
        return "vision_tower.vision_model." + rest[len("vision_model."):] if rest.startswith("vision_model.") \
            else "vision_tower.vision_model." + rest
    if k.startswith("model.multi_modal_projector."):
        return k[len("model."):]
    if k == "lm_head.weight":
        return "language_model.lm_head.weight"
    return k


def write_fixture() -> torch.nn.Module:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    top = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": TEXT,
           "vision_config": VISION, "mm_tokens_per_image": MM_TOKENS, "boi_token_index": BOI,
           "eoi_token_index": EOI, "image_token_index": IMAGE, "initializer_range": 0.02,
           "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": [2, EOT]}
    (OUT / "config.json").write_text(json.dumps(top, indent=2, sort_keys=True) + "\n")
    (OUT / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    (OUT / "processor_config.json").write_text(json.dumps({"image_seq_length": MM_TOKENS,
                                                           "processor_class": "Gemma3Processor"}, indent=2) + "\n")
    copy_tokenizer_with(SRC_TOK, OUT, ADDED, CHAT_TEMPLATE, {"extra_special_tokens": {
        "boi_token": ADDED[BOI], "eoi_token": ADDED[EOI], "image_token": ADDED[IMAGE]}})
    gen = json.loads((OUT / "generation_config.json").read_text())
    gen["eos_token_id"] = [2, EOT]
    (OUT / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")

    cfg = Gemma3Config.from_pretrained(str(OUT))
    torch.manual_seed(0)
    model = Gemma3ForConditionalGeneration(cfg).eval()
    randomize(model)
    tensors = {published_name(k): v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()
               if k != "lm_head.weight"}  # tied to the embeddings, as published
    save_file(tensors, str(OUT / "model.safetensors"), metadata={"format": "pt"})
    return model


def image(key: str) -> Image.Image:
    kind, w, h = IMAGES[key]
    return Image.fromarray(pattern(kind, w, h), "RGB")


@torch.no_grad()
def forward(ref, ids: list[int], pv) -> torch.Tensor:
    t = torch.tensor([ids])
    kw = {"pixel_values": pv, "token_type_ids": (t == IMAGE).long()} if pv is not None else {}
    return ref(input_ids=t, use_cache=False, **kw).logits[0].float()


def greedy(ref, ids: list[int], pv) -> tuple[list[int], list[float]]:
    seq, toks, gaps = list(ids), [], []
    for _ in range(N_GREEDY):
        lg = forward(ref, seq, pv)[-1]
        top2 = torch.topk(lg, 2).values
        toks.append(int(torch.argmax(lg)))
        gaps.append(r6(float(top2[0] - top2[1])))
        seq.append(toks[-1])
    return toks, gaps


def main() -> None:
    model = write_fixture()
    ref = Gemma3ForConditionalGeneration.from_pretrained(str(OUT), dtype=torch.float32,
                                                         attn_implementation="eager").eval()
    for (k, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        if not torch.equal(a, b):
            raise SystemExit(f"{k} did not survive the published layout")
    tok = AutoTokenizer.from_pretrained(str(OUT))
    nl2 = tok("\n\n", add_special_tokens=False)["input_ids"]
    full = nl2 + [BOI] + [IMAGE] * MM_TOKENS + [EOI] + nl2
    proc = Gemma3ImageProcessorPil(**{k: PREPROCESSOR[k] for k in ("size", "image_mean", "image_std")})
    feats, encoder = {}, {}
    with torch.no_grad():
        for key in IMAGES:
            pv = proc(images=image(key), return_tensors="pt")["pixel_values"].float()
            emb = ref.model.get_image_features(pv).pooler_output[0]
            feats[key] = pv
            kind, w, h = IMAGES[key]
            encoder[key] = {"pattern": kind, "size": [w, h],
                            "embeddings": [[r6(x) for x in row] for row in emb.tolist()]}
    cases = []
    for name, parts in CASES:
        ids, pvs = [], []
        for part in parts:
            if isinstance(part[0], str):
                for key in part:
                    ids += full
                    pvs.append(feats[key])
            else:
                ids += part
        pv = torch.cat(pvs)
        logits = forward(ref, ids, pv)
        first = ids.index(IMAGE)
        at = sorted({first - 1, first, first + MM_TOKENS // 2, first + MM_TOKENS - 1, len(ids) - 1})
        toks, gaps = greedy(ref, ids, pv)
        print(f"  {name}: {len(ids)} tokens, greedy {toks}, min gap {min(gaps):.3g}")
        cases.append({"name": name, "images": [k for p in parts if isinstance(p[0], str) for k in p],
                      "input_ids": ids, "logits_at": {str(p): [r6(x) for x in logits[p].tolist()] for p in at},
                      "greedy": toks, "gaps": gaps})
    # The chat request: the template's <start_of_image> expanded as Gemma3Processor does, then tokenized.
    buf = io.BytesIO()
    image("a").save(buf, format="PNG")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": CHAT_TEXT}]}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expanded = text.replace(ADDED[BOI], "\n\n" + ADDED[BOI] + ADDED[IMAGE] * MM_TOKENS + ADDED[EOI] + "\n\n")
    prompt = tok(expanded, add_special_tokens=False)["input_ids"]
    chat_toks, _ = greedy(ref, prompt, feats["a"])
    chat = {"text": CHAT_TEXT, "png_base64": base64.b64encode(buf.getvalue()).decode(), "rendered": text,
            "prompt_ids": prompt, "greedy": chat_toks, "answer": tok.decode(chat_toks, skip_special_tokens=True)}
    golden = {
        "reference": reference("torch", "transformers", "pillow"),
        "fixture": "tests/fixtures/tiny-gemma3-vision",
        "notes": [
            "f32 forward of the stored bf16 weights, eager attention; token_type_ids mark the image tokens, so "
            "each image's tokens attend each other both ways (Gemma 3's mask); greedy tokens by a full forward "
            "each step; gaps: top1-top2 logit gaps. Floats rounded to 6 significant digits.",
            "full image sequence: \\n\\n ids, <start_of_image>, <image_soft_token> x 16, <end_of_image>, \\n\\n ids.",
        ],
        "tokens": {"boi": BOI, "eoi": EOI, "image": IMAGE, "newlines": nl2},
        "encoder": encoder,
        "cases": cases,
        "chat": chat,
    }
    dump_json(golden, GOLDENS / "tiny_gemma3_vision.json")
    print(f"fixture {OUT}: {(OUT / 'model.safetensors').stat().st_size} bytes")


if __name__ == "__main__":
    main()
