#!/usr/bin/env python3
"""Prefill and decode speed of `hearth generate` against llama.cpp's llama-bench, same GGUF, same threads.

Usage (from the repo root, after scripts/fetch-models, bench/setup-llama-cpp.sh and
`cargo build --release -p hearth-cli`):
    python3 bench/generate_vs_llamacpp.py [--runs 5] [--threads 2] [--gen 128] [--models smollm2-135m,gemma3-270m]
        [--prompts 1k,4k,0] [--kill-switch HEARTH_FAST_QUANT | --no-kill-switch] [--llama-build build]

Prompts: `1k` is bench/prompts/long.txt (~950 tokens), `4k` the same text four times (~3,800 tokens), `0` a
one-line prompt (decode at depth ~0).
hearth: `hearth generate --raw --prompt-file PROMPT --max-tokens GEN --ignore-eos --json`, RUNS
times per configuration (default levers, and the --kill-switch lever (default HEARTH_FAST_QUANT) set to 0
as the A/B unless --no-kill-switch); its own prefill and decode timings. llama.cpp: `llama-bench -p N -n 0` (prefill of N tokens, N = hearth's prompt length) and
`llama-bench -p 0 -n GEN -d N` (decode GEN tokens at context depth N), RUNS repetitions each. Medians.
--llama-build picks the llama.cpp build under bench/.build/llama.cpp (`build-avx2`: LLAMA_CPP_ISA=avx2
bench/setup-llama-cpp.sh; run hearth's side with HEARTH_FAST_QUANT=avx2 in the environment to match).
Prints a markdown table for docs/benchmarks.md. Stdlib only.
"""
import argparse, json, os, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEARTH = os.path.join(ROOT, "target/release/hearth")
PROMPT = os.path.join(ROOT, "bench/prompts/long.txt")
MODELS = {"smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
          "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
          "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"}


def models_dir():
    return os.environ.get("HEARTH_MODELS") or os.path.expanduser("~/.cache/hearth/models")


def prompt_file(spec):
    """The prompt file for a --prompts entry: 1k = long.txt, Nk = it N times, 0 = one short line."""
    if spec == "1k":
        return PROMPT
    path = os.path.join("/tmp", f"hearth-bench-prompt-{spec}.txt")
    if spec == "0":
        text = "Once upon a time,"
    elif spec.endswith("k") and spec[:-1].isdigit():
        text = "\n\n".join([open(PROMPT).read().strip()] * int(spec[:-1]))
    else:
        sys.exit(f"unknown prompt {spec!r}: use 1k, 4k (any Nk) or 0")
    with open(path, "w") as f:
        f.write(text)
    return path


def hearth_runs(model, runs, threads, gen, env_extra, prompt):
    env = dict(os.environ, **env_extra)
    out = []
    for _ in range(runs):
        cmd = [HEARTH, "generate", "-m", model, "--device", "cpu", "--threads", str(threads), "--raw",
               "--prompt-file", prompt, "--max-tokens", str(gen), "--ignore-eos", "--json"]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        out.append(json.loads(r.stdout)["timings"])
    return out


def llama_bench(bench, gguf, threads, runs, args):
    cmd = [bench, "-m", gguf, "-t", str(threads), "-r", str(runs), "-o", "json"] + args
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    rows = json.loads(r.stdout)
    return rows[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--prompts", default="1k", help="comma-separated: 1k, 4k (any Nk), 0 (a one-line prompt)")
    ap.add_argument("--kill-switch", default="HEARTH_FAST_QUANT", help="the lever whose =0 rows pair with the defaults")
    ap.add_argument("--no-kill-switch", action="store_true", help="skip the kill-switch rows")
    ap.add_argument("--llama-build", default="build", help="the llama.cpp build directory under bench/.build/llama.cpp")
    a = ap.parse_args()
    bench = os.path.join(ROOT, "bench/.build/llama.cpp", a.llama_build, "bin/llama-bench")
    for p in (HEARTH, bench):
        if not os.path.exists(p):
            sys.exit(f"missing {p}: build it first (see the docstring)")
    print("| model | engine | prompt tokens | prefill tok/s (median) | decode tok/s (median) | runs |")
    print("|---|---|---|---|---|---|")
    variants = [("hearth", {})]
    if not a.no_kill_switch:
        variants.append((f"hearth, {a.kill_switch}=0", {a.kill_switch: "0"}))
    for model in a.models.split(","):
        gguf = model if model.endswith(".gguf") else os.path.join(models_dir(), MODELS[model])
        for spec in a.prompts.split(","):
            prompt = prompt_file(spec)
            for label, env in variants:
                t = hearth_runs(model, a.runs, a.threads, a.gen, env, prompt)
                n = t[0]["prompt_tokens"]
                pf = statistics.median(x["prefill_tok_s"] for x in t)
                dc = statistics.median(x["decode_tok_s"] for x in t)
                print(f"| {model} | {label} | {n} | {pf:.1f} | {dc:.1f} | {a.runs} |", flush=True)
            pp = llama_bench(bench, gguf, a.threads, a.runs, ["-p", str(n), "-n", "0"])
            tg = llama_bench(bench, gguf, a.threads, a.runs, ["-p", "0", "-n", str(a.gen), "-d", str(n)])
            print(f"| {model} | llama.cpp llama-bench (vendored in llama-cpp-python 0.3.36) | {n} | "
                  f"{pp['avg_ts']:.1f} | {tg['avg_ts']:.1f} | {a.runs} |", flush=True)


if __name__ == "__main__":
    main()
