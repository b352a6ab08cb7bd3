#!/usr/bin/env python3
"""Write bench/gpu/smollm2-tokenizer/ (tokenizer.json + tokenizer_config.json) from the SmolLM2 GGUF's vocabulary,
for the random-weight benchmark checkpoint (bench/gpu/make_llama8b.py), which needs a tokenizer to serve.

    python3 bench/gpu/make_tokenizer.py [GGUF]      (needs: pip install gguf tokenizers)

Byte-level BPE with SmolLM2's pre-tokenizer (single digits, then byte-level), the GGUF's merges, its control
tokens as special tokens, and its chat template. Run once; the output is committed.
"""
import json, os, sys

from gguf import GGUFReader
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))


def field(r, name):
    f = r.fields[name]
    if len(f.data) == 1 and f.types[0].name != "ARRAY":
        v = f.parts[f.data[0]]
        return bytes(v).decode() if f.types[0].name == "STRING" else v.tolist()[0]
    return [bytes(f.parts[i]).decode() if f.types[-1].name == "STRING" else f.parts[i].tolist()[0] for i in f.data]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/hearth/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    r = GGUFReader(path)
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    bos, eos = field(r, "tokenizer.ggml.bos_token_id"), field(r, "tokenizer.ggml.eos_token_id")
    template = field(r, "tokenizer.chat_template")
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(tokens, types) if ty == 3]  # CONTROL
    tok.add_special_tokens(specials)
    out = os.path.join(HERE, "smollm2-tokenizer")
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    json.dump({"bos_token": tokens[bos], "eos_token": tokens[eos], "chat_template": template,
               "model_max_length": 8192, "tokenizer_class": "GPT2Tokenizer"},
              open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
    print(f"make_tokenizer: {len(tokens)} tokens, {len(merges)} merges, {len(specials)} special -> {out}")
    print(tok.encode("Hello world, 2024 tokens.").ids)


if __name__ == "__main__":
    main()
