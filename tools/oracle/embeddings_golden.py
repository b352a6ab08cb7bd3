"""Sentence-embedding golden for all-MiniLM-L6-v2, from sentence-transformers.

Requirements (this script installs nothing): sentence-transformers and torch, e.g.
    .venv-oracle/bin/pip install -c tools/oracle/constraints.txt sentence-transformers==6.2.0 torch==2.15.0
(the plain PyPI torch wheel is fine; everything runs on the CPU), and the model fetched by scripts/fetch-models.

Run from the repo root:
    .venv-oracle/bin/python tools/oracle/embeddings_golden.py
Writes tests/goldens/embeddings_all_minilm_l6_v2.json: per sentence, sentence-transformers' input ids and its
embedding (7 significant digits), all sentences encoded in one call; and two sentences' vectors with CLS, max and
last-token pooling (no normalization) on the same transformer.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GOLDENS, MODELS_DIR, dump_json, reference  # noqa: E402

import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Pooling  # noqa: E402

ALIAS = "all-minilm-l6-v2"
OUT = GOLDENS / "embeddings_all_minilm_l6_v2.json"
N_THREADS = 2

LONG = (
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg, a goldsmith "
    "from Mainz, combined several existing technologies into a practical system for producing books. Movable "
    "metal type, oil-based ink, and a screw press adapted from those used to make wine allowed a small workshop "
    "to print hundreds of identical pages in the time a scribe needed to copy a single one. Within fifty years, "
    "presses had spread to more than two hundred cities across Europe, and millions of volumes had been printed. "
    "The consequences were enormous: scholars could compare the same text in different places, and ideas moved "
    "faster than any authority could control them."
)

SENTENCES = [
    "Hello world",
    "42",
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on a stage in front of a crowd.",
    "Café, naïve résumé — 日本語のテキスト, Ελληνικά and emoji 🚀🔥 mixed together.",
    "   leading and trailing spaces,\ttabs\nand newlines   ",
    "def add(a, b):\n    return a + b  # HTTP/1.1 200 OK, x=3.14e-2",
    LONG,
]


# The other pooling modes, on the same transformer without Normalize: (mode, sentence indices).
OTHER_MODES = ["cls", "max", "lasttoken"]
OTHER_MODE_CASES = [0, 4]


def sig7(x: float) -> float:
    return float(f"{float(x):.7g}")


def main() -> None:
    torch.set_num_threads(N_THREADS)
    model_dir = MODELS_DIR / ALIAS
    if not (model_dir / "modules.json").is_file():
        sys.exit(f"{model_dir} is missing: run scripts/fetch-models")
    model = SentenceTransformer(str(model_dir), device="cpu")
    max_len = model.max_seq_length
    ids = [model.preprocess([s])["input_ids"][0].tolist() for s in SENTENCES]
    for s, i in zip(SENTENCES, ids):
        # The golden never depends on truncation: hearth refuses over-long inputs instead of cutting them.
        assert len(i) < max_len, f"{len(i)} tokens >= max_seq_length {max_len}: {s[:40]!r}"
    with torch.inference_mode():
        emb = model.encode(SENTENCES, batch_size=len(SENTENCES), convert_to_numpy=True, normalize_embeddings=False)
    other = {}
    for mode in OTHER_MODES:
        m = SentenceTransformer(modules=[model[0], Pooling(emb.shape[1], pooling_mode=mode)], device="cpu")
        with torch.inference_mode():
            e = m.encode([SENTENCES[i] for i in OTHER_MODE_CASES], convert_to_numpy=True)
        other[mode] = [[sig7(x) for x in row] for row in e]
    out = {
        "reference": reference("sentence-transformers", "transformers", "torch", "tokenizers", "numpy"),
        "model": ALIAS,
        "settings": {
            "max_seq_length": max_len,
            "modules": [type(m).__name__ for m in model],
            "pooling": model[1].get_config_dict(),
            "dimensions": int(emb.shape[1]),
            "torch_threads": N_THREADS,
        },
        "notes": [
            "SentenceTransformer(models_dir/all-minilm-l6-v2, device='cpu').encode(sentences, batch_size=len(sentences)):"
            " one padded batch (sentence-transformers sorts it by length), the directory's own pooling and"
            " Normalize module; f32.",
            "input_ids: model.preprocess([text])['input_ids'][0] ([CLS] ... [SEP]); every case is shorter than"
            " max_seq_length, so nothing is truncated.",
            "embedding: rounded to 7 significant digits.",
            "other_pooling: SentenceTransformer(modules=[model[0], Pooling(384, pooling_mode=mode)]).encode(...) of"
            " the cases at other_pooling_cases (no Normalize module): one row per case.",
        ],
        "cases": [
            {"text": s, "input_ids": i, "embedding": [sig7(x) for x in e]}
            for s, i, e in zip(SENTENCES, ids, emb)
        ],
        "other_pooling_cases": OTHER_MODE_CASES,
        "other_pooling": other,
    }
    dump_json(out, OUT)


if __name__ == "__main__":
    main()
