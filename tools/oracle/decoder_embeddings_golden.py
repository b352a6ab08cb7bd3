"""A tiny decoder embedding model in Qwen3-Embedding's layout, and its sentence-transformers golden.

Requirements (this script installs nothing): sentence-transformers, torch, transformers and safetensors, as for
embeddings_golden.py. The fixture is built from tests/fixtures/tiny-qwen3 (tiny_models.py), so run that first if it
is missing.

Run from the repo root:
    .venv-oracle/bin/python tools/oracle/decoder_embeddings_golden.py
Writes tests/fixtures/tiny-qwen3-embedding/ and tests/goldens/embeddings_tiny_qwen3.json.

The fixture copies tiny-qwen3's random weights and tokenizer and adds what Qwen3-Embedding's directory has:
- the weights of the bare `Qwen3Model` (tensor names without `model.`, no lm_head), as Qwen3-Embedding saves them;
- a tokenizer post-processor (TemplateProcessing) that appends `<|endoftext|>` to every input, and left padding;
- modules.json (Transformer, Pooling, Normalize), sentence_bert_config.json, 1_Pooling/config.json with
  `pooling_mode_lasttoken`, config_sentence_transformers.json with a query prompt (not applied by default).
The golden holds sentence-transformers' input ids and embeddings (7 significant digits) of every sentence, all
encoded in one call (one padded batch).
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FIXTURES, GOLDENS, REPO_ROOT, dump_json, reference  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from tokenizers import Tokenizer, processors  # noqa: E402

SRC = FIXTURES / "tiny-qwen3"
OUT = FIXTURES / "tiny-qwen3-embedding"
GOLDEN = GOLDENS / "embeddings_tiny_qwen3.json"
N_THREADS = 2
MAX_SEQ_LENGTH = 256
APPENDED = "<|endoftext|>"
QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"

SENTENCES = [
    "Hello world",
    "42",
    "The quick brown fox jumps over the lazy dog.",
    "Call me Ishmael. It was the best of times, it was the worst of times.",
    "Café, naïve résumé — 日本語のテキスト and emoji 🚀 mixed together.",
    "   leading and trailing spaces,\ttabs\nand newlines   ",
    "def main(): return 0  # 3.14",
    QUERY_PROMPT + "What does rotary position embedding rotate?",
    "Attention lets every position look back at the earlier positions; a sliding window limits how far back it "
    "may look. Rotary position embeddings rotate pairs of dimensions by an angle that grows with the position. "
    "Grouped query attention shares each key and value head between several query heads.",
]


def sig7(x: float) -> float:
    return float(f"{float(x):.7g}")


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def build_fixture() -> None:
    if not (SRC / "model.safetensors").is_file():
        sys.exit(f"{SRC} is missing: run tools/oracle/tiny_models.py qwen3")
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    for f in ["config.json", "generation_config.json", "special_tokens_map.json"]:
        shutil.copy(SRC / f, OUT / f)

    # The bare base model's tensors, in the stored dtype.
    tensors = load_file(str(SRC / "model.safetensors"))
    bare = {k.removeprefix("model."): v for k, v in tensors.items() if k != "lm_head.weight"}
    save_file(bare, str(OUT / "model.safetensors"), metadata={"format": "pt"})
    (OUT / "model.safetensors").chmod(0o644)

    tok = Tokenizer.from_file(str(SRC / "tokenizer.json"))
    eos_id = tok.token_to_id(APPENDED)
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A {APPENDED}", pair=f"$A {APPENDED} $B:1 {APPENDED}:1", special_tokens=[(APPENDED, eos_id)])
    tok.save(str(OUT / "tokenizer.json"))
    tc = json.loads((SRC / "tokenizer_config.json").read_text())
    tc["padding_side"] = "left"
    write_json(OUT / "tokenizer_config.json", tc)

    t = "sentence_transformers.models."
    write_json(OUT / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": f"{t}Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": f"{t}Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": f"{t}Normalize"},
    ])
    write_json(OUT / "sentence_bert_config.json", {"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False})
    hidden = json.loads((SRC / "config.json").read_text())["hidden_size"]
    write_json(OUT / "1_Pooling" / "config.json", {
        "word_embedding_dimension": hidden,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": True,
        "include_prompt": True,
    })
    # 2_Normalize has no files (and git keeps no empty folder): sentence-transformers loads it without one.
    write_json(OUT / "config_sentence_transformers.json", {
        "prompts": {"query": QUERY_PROMPT, "document": ""},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    })
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"fixture {OUT.relative_to(REPO_ROOT)}: {size} bytes")


def main() -> None:
    torch.set_num_threads(N_THREADS)
    build_fixture()
    # sentence-transformers would compute in the stored bf16; the reference is f32, as hearth computes.
    model = SentenceTransformer(str(OUT), device="cpu", model_kwargs={"dtype": torch.float32})
    assert next(model.parameters()).dtype == torch.float32
    assert [type(m).__name__ for m in model] == ["Transformer", "Pooling", "Normalize"], model
    assert model.max_seq_length == MAX_SEQ_LENGTH, model.max_seq_length
    eos_id = model.tokenizer.convert_tokens_to_ids(APPENDED)
    ids = [model.preprocess([s])["input_ids"][0].tolist() for s in SENTENCES]
    for s, i in zip(SENTENCES, ids):
        assert i[-1] == eos_id, f"the tokenizer did not append {APPENDED}: {s[:40]!r}"
        # The golden never depends on truncation: hearth refuses over-long inputs instead of cutting them.
        assert len(i) < MAX_SEQ_LENGTH, f"{len(i)} tokens >= max_seq_length {MAX_SEQ_LENGTH}: {s[:40]!r}"
    with torch.inference_mode():
        emb = model.encode(SENTENCES, batch_size=len(SENTENCES), convert_to_numpy=True)
    out = {
        "reference": reference("sentence-transformers", "transformers", "torch", "tokenizers", "safetensors"),
        "model": "tiny-qwen3-embedding",
        "fixture": str(OUT.relative_to(REPO_ROOT)),
        "settings": {
            "max_seq_length": MAX_SEQ_LENGTH,
            "modules": [type(m).__name__ for m in model],
            "pooling": model[1].get_config_dict(),
            "padding_side": model.tokenizer.padding_side,
            "dimensions": int(emb.shape[1]),
            "torch_threads": N_THREADS,
        },
        "notes": [
            "SentenceTransformer('tests/fixtures/tiny-qwen3-embedding', device='cpu', model_kwargs={'dtype':"
            " torch.float32}).encode(sentences, batch_size=len(sentences)): one left-padded batch, last-token"
            " pooling, Normalize; weights stored in bf16, computed in f32.",
            f"input_ids: model.preprocess([text])['input_ids'][0]; the tokenizer's post-processor appends {APPENDED}"
            f" (id {eos_id}), whose state is the one pooled. No prompt is applied (default_prompt_name is null);"
            " one case writes the query instruction into its text, as a client would.",
            "embedding: rounded to 7 significant digits.",
        ],
        "cases": [
            {"text": s, "input_ids": i, "embedding": [sig7(x) for x in e]}
            for s, i, e in zip(SENTENCES, ids, emb)
        ],
    }
    dump_json(out, GOLDEN)


if __name__ == "__main__":
    main()
