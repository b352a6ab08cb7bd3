"""Tokenizer goldens for the GGUF models, from llama.cpp (llama-cpp-python) and HF transformers.

Run from the repo root:
    .venv-oracle/bin/python tools/oracle/tokenizer_goldens.py
Writes tests/goldens/tokenizer_smollm2.json and tests/goldens/tokenizer_gemma3.json.
"""
from __future__ import annotations

import ctypes
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import GEMMA3_FILE, GOLDENS, MODELS_DIR, SMOLLM2_FILE, dump_json, reference  # noqa: E402

import gguf  # noqa: E402
import llama_cpp  # noqa: E402

COMMON_CORPUS = [
    "",
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "   three leading spaces and two trailing  ",
    "multiple    spaces   between words",
    "tab\tseparated\tvalues",
    "\t\tleading tabs",
    "line one\nline two\n\n\nline five",
    "\n\n\n",
    " \n \t\n  mixed \r\n whitespace\t \n",
    "Emoji: 😀 🎉 👍",
    "ZWJ family: 👨‍👩‍👧‍👦 and 👩‍💻",
    "Flags: 🇫🇷 🇯🇵 🇺🇸",
    "Skin tones: 👋🏽 👍🏿",
    "中文分词测试：我爱自然语言处理。",
    "日本語のテキスト、カタカナとひらがな。",
    "한국어 문장입니다.",
    "مرحبا بالعالم",
    "Café naïve résumé Ångström",
    "Combining: e\u0301 a\u0308 n\u0303",
    "Straße İstanbul ΕΛΛΗΝΙΚΆ",
    "def add(a, b):\n    return a + b\n",
    "fn main() {\n    let x: Vec<u32> = vec![1, 2, 3];\n    println!(\"{:?}\", x);\n}",
    "{\n  \"name\": \"hearth\",\n  \"values\": [1, 2.5, null],\n  \"nested\": {\"ok\": true}\n}",
    "1234567",
    "3.14159",
    "1,000,000",
    "Numbers 0 12 345 6789 and 2024-06-01",
    "I'm sure they'll say DON'T, we've we'd you're it's",
    "https://example.com/path?query=1&lang=en#frag",
    "email me at someone@example.org!",
    "Mixed: ASCII, 中文, العربية, emoji 🚀 and code `x += 1`",
    "<tag attr=\"1\">&amp;</tag>",
    "a\u00a0non-breaking\u2009thin\u200bzero-width",
]

SPECIAL_CORPUS = {
    "smollm2": [
        "<|im_start|>user\nhi<|im_end|>\n",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "text with <|endoftext|> inside",
        "<|im_start|>",
    ],
    "gemma3": [
        "<start_of_turn>user\nhi<end_of_turn>\n",
        "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
        "<bos>",
        "<eos>",
        "text with <bos> and <eos> inside",
    ],
}


def gguf_meta(path: Path) -> dict:
    r = gguf.GGUFReader(str(path))
    out = {}
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.add_bos_token",
                "tokenizer.ggml.add_eos_token", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        f = r.fields.get(key)
        if f is None:
            out[key] = None
            continue
        v = f.contents()
        out[key] = v
    return out


def piece(vocab, token: int, special: bool) -> bytes:
    """llama.cpp's piece for one token: llama_token_to_piece(vocab, token, buf, n, lstrip=0, special)."""
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(vocab, llama_cpp.llama_token(token), buf, 256, 0, special)
    assert 0 <= n <= 256, n
    return bytes(buf[:n])


def hf_tokenizer(model_file: str):
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(str(MODELS_DIR), gguf_file=model_file), None
    except Exception as e:  # record why transformers could not load it
        traceback.print_exc()
        return None, f"{type(e).__name__}: {e}"


def build(name: str, model_file: str) -> None:
    path = MODELS_DIR / model_file
    meta = gguf_meta(path)
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    eff_add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    eff_add_eos = bool(llama_cpp.llama_vocab_get_add_eos(vocab))
    gguf_add_bos = meta["tokenizer.ggml.add_bos_token"]
    if gguf_add_bos is not None and bool(gguf_add_bos) != eff_add_bos:
        print(f"WARNING {name}: GGUF add_bos_token={gguf_add_bos} but llama.cpp applies {eff_add_bos}")

    tok, hf_err = hf_tokenizer(model_file)

    cases = []
    mismatches = []
    for text in COMMON_CORPUS + SPECIAL_CORPUS[name]:
        b = text.encode("utf-8")
        # add_bos=True asks llama.cpp to add the special tokens the GGUF says to add (add_bos_token / add_eos_token).
        ids = llm.tokenize(b, add_bos=True, special=True)
        ids_ns = llm.tokenize(b, add_bos=False, special=True)
        detok = [piece(vocab, i, False).hex() for i in ids_ns]
        detok_special = [piece(vocab, i, True).hex() for i in ids_ns]
        assert [llm.detokenize([i]) for i in ids_ns] == [bytes.fromhex(h) for h in detok]
        hf_ids = None
        if tok is not None:
            hf_ids = tok(text, add_special_tokens=True)["input_ids"]
            if hf_ids != ids:
                mismatches.append(text)
        cases.append({
            "text": text,
            "llama_cpp": ids,
            "llama_cpp_no_special": ids_ns,
            "hf": hf_ids,
            "detok": detok,
            "detok_special": detok_special,
        })

    out = {
        "reference": reference("llama-cpp-python", "transformers", "tokenizers", "gguf", "sentencepiece"),
        "model_file": model_file,
        "gguf_tokenizer": {k: v for k, v in meta.items()},
        "add_bos": eff_add_bos,
        "add_eos": eff_add_eos,
        "n_vocab": llm.n_vocab(),
        "notes": [
            "llama_cpp: Llama(model_path, vocab_only=True).tokenize(text.encode(), add_bos=True, special=True); "
            "add_bos=True makes llama.cpp add BOS/EOS exactly as the GGUF flags say (see add_bos/add_eos).",
            "llama_cpp_no_special: tokenize(..., add_bos=False, special=True) (special tokens in text still parsed).",
            "hf: transformers AutoTokenizer.from_pretrained(models_dir, gguf_file=model_file)(text, add_special_tokens=True)"
            "['input_ids'], or null with hf_error.",
            "detok: hex of llama.cpp's piece for each id of llama_cpp_no_special: llama_token_to_piece(vocab, id, "
            "lstrip=0, special=False) == llm.detokenize([id]) (control tokens render as empty); detok_special: "
            "the same with special=True (control tokens render as their text).",
        ],
        "hf_error": hf_err,
        "hf_mismatches": mismatches if tok is not None else None,
        "cases": cases,
    }
    dump_json(out, GOLDENS / f"tokenizer_{name}.json")
    if tok is None:
        print(f"{name}: transformers could not load the tokenizer: {hf_err}")
    else:
        print(f"{name}: {len(cases)} cases, {len(mismatches)} llama.cpp/HF mismatches")
        for t in mismatches:
            c = next(c for c in cases if c["text"] == t)
            print(f"  MISMATCH {t!r}\n    llama.cpp {c['llama_cpp']}\n    hf        {c['hf']}")


def main() -> None:
    build("smollm2", SMOLLM2_FILE)
    build("gemma3", GEMMA3_FILE)


if __name__ == "__main__":
    main()
