"""Logits goldens for the real GGUF models, from llama.cpp (llama-cpp-python) and HF transformers (dequantized, f32).

Run from the repo root:
    .venv-oracle/bin/python tools/oracle/logits_goldens.py              # every model
    .venv-oracle/bin/python tools/oracle/logits_goldens.py smollm2      # one model (smollm2, gemma3, qwen05b, qwen15b)
Writes tests/goldens/logits_<model>.json, and prints how the two references
differ from each other for every prompt.
"""
from __future__ import annotations

import math
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (GEMMA3_FILE, GOLDENS, MODELS_DIR, QWEN05B_FILE, QWEN15B_FILE, SMOLLM2_FILE,  # noqa: E402
                    dump_json, r6, reference)

import llama_cpp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

N_CTX = 2048
N_THREADS = 2
N_GREEDY = 32
N_TOP = 64
N_SAMPLE = 512

torch.set_num_threads(N_THREADS)

PARAGRAPH = (
    "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg, a goldsmith "
    "from Mainz, combined several existing technologies into a practical system for producing books. Movable "
    "metal type, oil-based ink, and a screw press adapted from those used to make wine allowed a small workshop "
    "to print hundreds of identical pages in the time a scribe needed to copy a single one. Within fifty years, "
    "presses had spread to more than two hundred cities across Europe, and millions of volumes had been printed. "
    "The consequences were enormous. Scholars could compare the same text in different places, errors could be "
    "corrected in later editions, and ideas moved faster than any authority could control them. The Reformation, "
    "the Scientific Revolution, and the rise of newspapers all depended on cheap printed paper. Historians still "
    "debate how much credit belongs to Gutenberg himself, since printing with wooden blocks had existed in China "
    "and Korea for centuries, but few doubt that the press changed the world. In the end, the most important "
    "effect of the press may have been"
)

COMMON_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    PARAGRAPH,
    "日本の首都は東京です。中国の首都は",
    "Shopping list:\n1. Eggs\n2. Milk\n3. Bread\n4.",
]
CHAT_PROMPT = {
    "smollm2": "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "gemma3": "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
}
# Qwen2.5's template with its default system message.
QWEN_CHAT = ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
             "<|im_start|>user\nWrite a Python function that checks whether a number is prime.<|im_end|>\n"
             "<|im_start|>assistant\n")
CHAT_PROMPT["qwen05b"] = CHAT_PROMPT["qwen15b"] = QWEN_CHAT


def summarize(logits: np.ndarray) -> dict:
    """Compact storage of one logits vector."""
    v = logits.astype(np.float64)
    n = v.shape[0]
    order = np.argsort(-v, kind="stable")[:N_TOP]
    stride = n // N_SAMPLE
    m = v.max()
    lse = m + math.log(np.exp(v - m).sum())
    return {
        "top": [[int(i), r6(v[i])] for i in order],
        "sample": [[int(i), r6(v[i])] for i in range(0, n, stride)],
        "logsumexp": r6(lse),
        "vocab_size": n,
    }


def gap(logits: np.ndarray) -> float:
    top2 = np.sort(logits.astype(np.float64))[-2:]
    return r6(top2[1] - top2[0])


def argmax(logits: np.ndarray) -> int:
    return int(np.argmax(logits))  # lowest id on ties


# ------------------------------------------------------------------ llama.cpp
def llama_cpp_model(path: Path):
    return llama_cpp.Llama(model_path=str(path), n_ctx=N_CTX, n_threads=N_THREADS, n_threads_batch=N_THREADS,
                           logits_all=False, verbose=False, seed=0)


def last_logits(llm) -> np.ndarray:
    # With logits_all=False llama-cpp-python no longer copies logits into llm.scores, so read the context's
    # output for the last evaluated token directly.
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32, copy=True)


def llama_cpp_run(llm, ids: list[int]):
    llm.reset()
    llm.eval(ids)
    last = last_logits(llm)
    prompt_logits = last.copy()
    greedy, gaps = [], []
    for _ in range(N_GREEDY):
        t = argmax(last)
        greedy.append(t)
        gaps.append(gap(last))
        llm.eval([t])
        last = last_logits(llm)
    return prompt_logits, greedy, gaps


# ------------------------------------------------------------------ transformers
def hf_model(model_file: str):
    try:
        from transformers import AutoModelForCausalLM
        m = AutoModelForCausalLM.from_pretrained(str(MODELS_DIR), gguf_file=model_file, dtype=torch.float32,
                                                 attn_implementation="eager")
        m.eval()
        return m, None
    except Exception as e:
        traceback.print_exc()
        return None, f"{type(e).__name__}: {e}"


@torch.no_grad()
def hf_run(model, ids: list[int]):
    out = model(input_ids=torch.tensor([ids]), use_cache=True)
    last = out.logits[0, -1].float().numpy().copy()
    cache = out.cache
    prompt_logits = last.copy()
    greedy, gaps = [], []
    for _ in range(N_GREEDY):
        t = argmax(last)
        greedy.append(t)
        gaps.append(gap(last))
        out = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
        cache = out.cache
        last = out.logits[0, -1].float().numpy().copy()
    return prompt_logits, greedy, gaps


def compare(a_logits, a_greedy, b_logits, b_greedy, n: int) -> dict:
    stride = n // N_SAMPLE
    idx = np.arange(0, n, stride)
    a64, b64 = a_logits.astype(np.float64), b_logits.astype(np.float64)
    d = np.abs(a64 - b64)
    lse = lambda v: v.max() + math.log(np.exp(v - v.max()).sum())  # noqa: E731
    dlp = np.abs((a64 - lse(a64)) - (b64 - lse(b64)))
    agree = 0
    for x, y in zip(a_greedy, b_greedy):
        if x != y:
            break
        agree += 1
    return {
        "sample_max_abs_diff": r6(d[idx].max()),
        "full_max_abs_diff": r6(d.max()),
        "full_mean_abs_diff": r6(d.mean()),
        "full_max_abs_diff_logprobs": r6(dlp.max()),
        "top64_overlap": len(set(np.argsort(-a64)[:N_TOP].tolist()) & set(np.argsort(-b64)[:N_TOP].tolist())),
        "top1_equal": argmax(a_logits) == argmax(b_logits),
        "greedy_equal": a_greedy == b_greedy,
        "greedy_agree_prefix": agree,
    }


def build(name: str, model_file: str) -> None:
    path = MODELS_DIR / model_file
    prompts = COMMON_PROMPTS + [CHAT_PROMPT[name]]
    llm = llama_cpp_model(path)
    hf, hf_err = hf_model(model_file)

    out_prompts = []
    for text in prompts:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        t0 = time.time()
        lc_logits, lc_greedy, lc_gaps = llama_cpp_run(llm, ids)
        t1 = time.time()
        entry = {"text": text, "prompt_ids": ids,
                 "llama_cpp": {**summarize(lc_logits), "greedy": lc_greedy, "gaps": lc_gaps},
                 "hf": None}
        if hf is not None:
            hf_logits, hf_greedy, hf_gaps = hf_run(hf, ids)
            entry["hf"] = {**summarize(hf_logits), "greedy": hf_greedy, "gaps": hf_gaps}
            cmp = compare(lc_logits, lc_greedy, hf_logits, hf_greedy, lc_logits.shape[0])
            entry["llama_cpp_vs_hf"] = cmp
            print(f"[{name}] {len(ids):4d} tok {text[:40]!r:44} llama.cpp {t1 - t0:.1f}s hf {time.time() - t1:.1f}s | "
                  f"sample max|d|={cmp['sample_max_abs_diff']:.4g} full max|d|={cmp['full_max_abs_diff']:.4g} "
                  f"mean|d|={cmp['full_mean_abs_diff']:.3g} logprob max|d|={cmp['full_max_abs_diff_logprobs']:.4g} "
                  f"top64 overlap={cmp['top64_overlap']} top1_eq={cmp['top1_equal']} "
                  f"greedy_eq={cmp['greedy_equal']} (agree {cmp['greedy_agree_prefix']}/{N_GREEDY})")
            if not cmp["greedy_equal"]:
                k = cmp["greedy_agree_prefix"]
                print(f"    diverge at step {k}: llama.cpp {lc_greedy[k]} (gap {lc_gaps[k]}) vs hf {hf_greedy[k]} "
                      f"(gap {hf_gaps[k]})")
            print(f"    llama.cpp: {llm.detokenize(lc_greedy).decode('utf-8', 'replace')!r}")
            print(f"    hf:        {llm.detokenize(hf_greedy).decode('utf-8', 'replace')!r}")
        else:
            print(f"[{name}] {len(ids)} tok {text[:40]!r}: hf unavailable")
        out_prompts.append(entry)

    golden = {
        "reference": reference("llama-cpp-python", "transformers", "torch", "gguf", "numpy"),
        "model_file": model_file,
        "settings": {"n_ctx": N_CTX, "n_threads": N_THREADS, "n_greedy": N_GREEDY, "n_top": N_TOP,
                     "sample_stride": lc_logits.shape[0] // N_SAMPLE},
        "notes": [
            "prompt_ids: llama.cpp tokenize(text.encode(), add_bos=True, special=True) (BOS per the GGUF's flag); "
            "both references are fed these same ids.",
            "llama_cpp: llama_cpp.Llama(model_path, n_ctx=2048, n_threads=2, logits_all=False): eval(prompt_ids) then "
            "one eval([token]) per greedy step; logits are the raw output at the last position.",
            "hf: transformers AutoModelForCausalLM.from_pretrained(models_dir, gguf_file=model_file, dtype=float32, "
            "attn_implementation='eager') (GGUF weights dequantized to f32); full prompt forward then KV-cached steps. "
            "hf is null (with hf_error) if transformers could not load the GGUF.",
            "top: the 64 highest [id, logit]; sample: [id, logit] for ids 0, stride, 2*stride, ... with "
            "stride = vocab_size // 512; logsumexp over the full vector (float64).",
            "greedy: 32 argmax tokens (lowest id on ties, EOS not special) along that reference's own path; gaps: "
            "top1 - top2 logit at each step, on that reference's own logits.",
            "llama_cpp_vs_hf: differences between the two references, computed by this script from the full "
            "vectors at the last prompt position (logprobs = logits - logsumexp); greedy_agree_prefix = number of "
            "leading greedy tokens that agree.",
        ],
        "hf_error": hf_err,
        "prompts": out_prompts,
    }
    dump_json(golden, GOLDENS / f"logits_{name}.json")


def main() -> None:
    models = {"smollm2": SMOLLM2_FILE, "gemma3": GEMMA3_FILE, "qwen05b": QWEN05B_FILE, "qwen15b": QWEN15B_FILE}
    for name in sys.argv[1:] or list(models):
        build(name, models[name])


if __name__ == "__main__":
    main()
