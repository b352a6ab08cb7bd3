"""Tiny random (seeded, deterministic) HF checkpoints + transformers goldens for them.

Run from the repo root:
    .venv-oracle/bin/python tools/oracle/tiny_models.py            # all models
    .venv-oracle/bin/python tools/oracle/tiny_models.py llama qwen3  # a subset
Writes tests/fixtures/tiny-<name>/ and tests/goldens/tiny_<name>.json.

Each fixture is written with save_pretrained, then config.json is rewritten in the classic (transformers 4.x)
layout that nearly every published checkpoint uses (rope_theta / rope_scaling / rope_local_base_freq /
sliding_window_pattern, torch_dtype) instead of transformers 5's native `rope_parameters`. The goldens are computed
from the model re-loaded from the fixture directory (so they cover that config layout and the stored dtype), and
the script checks the re-loaded model gives bit-identical logits to the in-memory model it saved.
"""
from __future__ import annotations

import copy
import json
import shutil
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import FIXTURES, GOLDENS, dump_json, r6, reference  # noqa: E402

import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import (AutoModelForCausalLM, AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig,  # noqa: E402
                          GenerationConfig, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM, GptOssConfig, GptOssForCausalLM)
from transformers import (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, Qwen3_5TextConfig,  # noqa: E402
                          Qwen3NextConfig, Qwen3NextForCausalLM)

torch.set_num_threads(2)
torch.use_deterministic_algorithms(True)

VOCAB = 512
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TRAIN_TEXT = """
The hearth is the heart of the home. In winter the family gathers around the fire, telling stories and
sharing bread. A small model can learn the shape of a language from a few pages of text: the common words,
the spaces between them, the punctuation that ends a sentence. This text is short, so the tokenizer it
trains will only know the most frequent pieces, and everything else falls back to single bytes.
Numbers like 42, 1234 and 3.14 appear here too, as does some code: def main(): return 0. The quick brown
fox jumps over the lazy dog. She sells sea shells by the sea shore. Peter Piper picked a peck of pickled
peppers. How much wood would a woodchuck chuck if a woodchuck could chuck wood? It was the best of times,
it was the worst of times, it was the age of wisdom, it was the age of foolishness. All happy families are
alike; each unhappy family is unhappy in its own way. Call me Ishmael. In the beginning the universe was
created. This has made a lot of people very angry and been widely regarded as a bad move. The sky above
the port was the color of television, tuned to a dead channel. It is a truth universally acknowledged,
that a single man in possession of a good fortune, must be in want of a wife. The language model reads
tokens one at a time, and predicts the next token from the ones that came before. Attention lets every
position look back at the earlier positions; a sliding window limits how far back it may look. Rotary
position embeddings rotate pairs of dimensions by an angle that grows with the position. Grouped query
attention shares each key and value head between several query heads, which saves memory in the cache.
"""

PROMPT_TEXT = (
    "The quick brown fox jumps over the lazy dog. Attention lets every position look back at the earlier "
    "positions, and the sliding window limits how far back it may look. Call me Ishmael."
)
CASE_LENGTHS = [5, 13, 24]
ALL_LOGITS_LEN = 13
N_GREEDY = 16
LINEAR_STD = 0.08
GPT_OSS_YARN = {"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                "original_max_position_embeddings": 64}
GPT_OSS_LIMIT = 0.5


def train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([TRAIN_TEXT], trainer=trainer)
    assert tok.get_vocab_size() <= VOCAB, tok.get_vocab_size()
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i
    return tok


def common_cfg(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=512, bos_token_id=BOS_ID,
                eos_token_id=EOS_ID, pad_token_id=PAD_ID, initializer_range=0.02)
    base.update(kw)
    return base


QWEN3_5_ROPE = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                "mrope_interleaved": True, "mrope_section": [11, 11, 10]}


def hybrid_cfg(**kw):
    """The tiny hybrid (gated-DeltaNet) models' shape: three linear-attention layers, then full attention."""
    return common_cfg(**{**dict(
        num_hidden_layers=4, rms_norm_eps=1e-6, tie_word_embeddings=False, head_dim=32, linear_conv_kernel_dim=4,
        linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"]), **kw})


# name -> (model class, config, storage dtype, shard?, legacy rope fields)
def specs():
    return {
        "llama": dict(
            cls=LlamaForCausalLM, dtype=torch.float32, shard=False,
            cfg=LlamaConfig(**common_cfg(num_hidden_layers=2, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                         rope_theta=500000.0,
                                         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                       "high_freq_factor": 4.0,
                                                       "original_max_position_embeddings": 64})),
            legacy=dict(rope_theta=500000.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
        "llama-linear": dict(
            cls=LlamaForCausalLM, dtype=torch.float32, shard=False,
            cfg=LlamaConfig(**common_cfg(num_hidden_layers=2, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                         rope_theta=10000.0, rope_scaling={"rope_type": "linear", "factor": 2.0})),
            legacy=dict(rope_theta=10000.0, rope_scaling={"rope_type": "linear", "factor": 2.0})),
        "mistral": dict(
            cls=MistralForCausalLM, dtype=torch.float32, shard=True,
            cfg=MistralConfig(**common_cfg(num_hidden_layers=2, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                           rope_theta=1000000.0, sliding_window=None)),
            legacy=dict(rope_theta=1000000.0, rope_scaling=None)),
        "qwen2": dict(
            cls=Qwen2ForCausalLM, dtype=torch.float32, shard=False,
            cfg=Qwen2Config(**common_cfg(num_hidden_layers=2, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                         rope_theta=1000000.0, use_sliding_window=False)),
            legacy=dict(rope_theta=1000000.0, rope_scaling=None)),
        "qwen3": dict(
            cls=Qwen3ForCausalLM, dtype=torch.bfloat16, shard=False,
            cfg=Qwen3Config(**common_cfg(num_hidden_layers=3, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                         rope_theta=1000000.0, use_sliding_window=False, attention_bias=False)),
            legacy=dict(rope_theta=1000000.0, rope_scaling=None)),
        # routed experts: 8 experts, 2 per token, renormalized; layer 1 keeps a dense MLP (mlp_only_layers)
        "qwen3-moe": dict(
            cls=Qwen3MoeForCausalLM, dtype=torch.bfloat16, shard=False,
            cfg=Qwen3MoeConfig(**common_cfg(num_hidden_layers=3, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                            rope_theta=1000000.0, use_sliding_window=False, attention_bias=False,
                                            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1])),
            legacy=dict(rope_theta=1000000.0, rope_scaling=None, num_experts=8)),
        # gpt-oss: attention sinks, q/k/v/o biases, alternating sliding (8) / full layers, YaRN rope (truncate
        # off), 8 experts with biases, top-2 then softmax, the clamped SwiGLU with a limit small enough to clamp
        "gpt-oss": dict(
            cls=GptOssForCausalLM, dtype=torch.bfloat16, shard=False,
            cfg=GptOssConfig(**common_cfg(num_hidden_layers=3, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                          intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                                          sliding_window=8, swiglu_limit=GPT_OSS_LIMIT, attention_bias=True,
                                          layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                          rope_parameters=dict(GPT_OSS_YARN, rope_theta=150000.0))),
            legacy=dict(rope_theta=150000.0, rope_scaling=GPT_OSS_YARN),
            # the o and expert biases add the same vector at every position: smaller than the tokens' own signal
            init=dict(bias_std=0.02, embed_std=0.1)),
        # Qwen3.5 (text): three gated-DeltaNet layers then one full-attention layer (output-gated, partial rotary
        # of a quarter of the head), 2 key heads serving 4 value heads; zero-centred norms (x * (1 + w)) except
        # the DeltaNet's gated norm. Its config keeps transformers 5's `rope_parameters` as published.
        "qwen3_5": dict(
            cls=Qwen3_5ForCausalLM, dtype=torch.bfloat16, shard=False,
            cfg=Qwen3_5TextConfig(**hybrid_cfg(
                rope_parameters=QWEN3_5_ROPE)),
            legacy=None, init=dict(zero_centered=True)),
        # Qwen3.5's MoE variant: the same hybrid layers, every feed-forward routed (8 experts, 2 per token,
        # renormalized) beside a shared expert weighed by a sigmoid gate
        "qwen3_5-moe": dict(
            cls=Qwen3_5MoeForCausalLM, dtype=torch.bfloat16, shard=False,
            cfg=Qwen3_5MoeTextConfig(**hybrid_cfg(
                num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                rope_parameters=QWEN3_5_ROPE)),
            legacy=None, init=dict(zero_centered=True)),
        # Qwen3-Next: Qwen3.5-MoE's layers with the DeltaNet's projections fused per key head (in_proj_qkvz,
        # in_proj_ba); layer 1 keeps a dense MLP (mlp_only_layers)
        "qwen3-next": dict(
            cls=Qwen3NextForCausalLM, dtype=torch.bfloat16, shard=False,
            cfg=Qwen3NextConfig(**hybrid_cfg(
                mlp_only_layers=[1],
                num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                norm_topk_prob=True,
                rope_parameters={k: QWEN3_5_ROPE[k] for k in ("rope_type", "rope_theta", "partial_rotary_factor")})),
            legacy=None, init=dict(zero_centered=True)),
        "gemma3": dict(
            cls=Gemma3ForCausalLM, dtype=torch.float32, shard=False,
            cfg=Gemma3TextConfig(**common_cfg(
                num_hidden_layers=6, rms_norm_eps=1e-6, tie_word_embeddings=True, sliding_window=8,
                layer_types=["sliding_attention"] * 5 + ["full_attention"], query_pre_attn_scalar=32,
                hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None, attn_logit_softcapping=None,
                rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
            legacy=dict(rope_theta=1000000.0, rope_local_base_freq=10000.0, rope_scaling=None,
                        sliding_window_pattern=6)),
    }


def randomize(model: torch.nn.Module, name: str, gemma_norms: bool, bias_std: float = 0.1,
              embed_std: float = 0.02, zero_centered: bool = False) -> None:
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    with torch.no_grad():
        for pname, p in model.named_parameters():
            shape = p.shape
            is_norm = "norm" in pname.split(".")[-2]
            if is_norm:
                v = 0.1 * torch.randn(shape, generator=g)
                # a DeltaNet's gated norm multiplies by w itself, every other Qwen3.5 norm by 1 + w
                if not (gemma_norms or (zero_centered and not pname.endswith("linear_attn.norm.weight"))):
                    v = 1.0 + v
            elif pname.endswith(".A_log"):
                v = torch.empty(shape).uniform_(0.5, 8.0, generator=g).log()  # decay rates exp(A_log) as trained
            elif pname.endswith(".dt_bias"):
                v = 0.5 * torch.randn(shape, generator=g)
            elif pname.endswith("conv1d.weight"):
                v = 0.3 * torch.randn(shape, generator=g)
            elif pname.endswith(".sinks"):
                v = torch.randn(shape, generator=g)  # a sink logit on the scale of the scores it competes with
            elif pname.endswith(".bias"):
                v = bias_std * torch.randn(shape, generator=g)
            elif "embed_tokens" in pname or "lm_head" in pname:
                v = embed_std * torch.randn(shape, generator=g)
            else:
                # projections: larger than the usual 0.02 so that the layers, not the (tied) embedding, dominate
                # the residual stream and the logits are well separated
                v = LINEAR_STD * torch.randn(shape, generator=g)
            p.copy_(v.to(p.dtype))


def rewrite_config_legacy(path: Path, legacy: dict | None, dtype: torch.dtype) -> None:
    cfg = json.loads(path.read_text())
    if legacy is None:  # a config published in transformers 5's layout: only the dtype's name is rewritten
        legacy = {}
    else:
        cfg.pop("rope_parameters", None)
    if "num_experts" in legacy:  # published Qwen3-MoE configs name it num_experts (transformers 5: num_local_experts)
        cfg.pop("num_local_experts", None)
    cfg.update(legacy)
    dt = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]
    cfg["torch_dtype"] = dt
    cfg.pop("dtype", None)
    path.write_text(json.dumps(dict(sorted(cfg.items())), indent=2) + "\n")


def save_tokenizer(tok: Tokenizer, out: Path) -> None:
    tok.save(str(out / "tokenizer.json"))
    added = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                      "special": True} for i, s in enumerate(SPECIALS)}
    tc = {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": "<|im_start|>",
        "chat_template": CHATML_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "model_max_length": 512,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<|endoftext|>",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
         "unk_token": "<|endoftext|>"}, indent=2) + "\n")


@torch.no_grad()
def logits_for(model, ids: list[int]) -> torch.Tensor:
    out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0].float()


@torch.no_grad()
def greedy(model, ids: list[int], n: int):
    seq = list(ids)
    toks, gaps = [], []
    for _ in range(n):
        last = logits_for(model, seq)[-1]
        top2 = torch.topk(last, 2)
        t = int(torch.argmax(last))
        toks.append(t)
        gaps.append(r6(top2.values[0] - top2.values[1]))
        seq.append(t)
    return toks, gaps


def build(name: str, spec: dict, tok: Tokenizer) -> None:
    out = FIXTURES / f"tiny-{name}"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    cfg = spec["cfg"]
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = spec["cls"](cfg).to(torch.float32).eval()
    randomize(model, name, gemma_norms=(name == "gemma3"), **spec.get("init", {}))
    if spec["dtype"] != torch.float32:
        # Round the weights through the storage dtype, keeping the f32 model (and its f32 buffers such as the
        # rotary inv_freq) as the in-memory reference.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(spec["dtype"]).to(torch.float32))
    model.generation_config = GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                                               do_sample=False)
    to_save = copy.deepcopy(model).to(spec["dtype"])
    kw = {}
    if spec["shard"]:
        total = sum(p.numel() * p.element_size() for p in to_save.state_dict().values())
        kw["max_shard_size"] = int(total * 0.6)
    to_save.save_pretrained(str(out), **kw)
    del to_save
    rewrite_config_legacy(out / "config.json", spec["legacy"], spec["dtype"])
    save_tokenizer(tok, out)
    for extra in ("chat_template.jinja",):
        if (out / extra).exists():
            (out / extra).unlink()

    st_files = sorted(p.name for p in out.glob("*.safetensors"))
    if spec["shard"]:
        assert len(st_files) == 2 and (out / "model.safetensors.index.json").exists(), st_files
    else:
        assert st_files == ["model.safetensors"], st_files

    # Reference model: re-loaded from disk, weights upcast to f32, computed in f32 with eager attention.
    ref = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32, attn_implementation="eager").eval()
    assert type(ref) is spec["cls"], type(ref)
    mem = model.eval()

    hf_tok = AutoTokenizer.from_pretrained(str(out))
    all_ids = hf_tok(PROMPT_TEXT, add_special_tokens=True)["input_ids"]
    assert all_ids == tok.encode(PROMPT_TEXT).ids
    assert len(all_ids) >= max(CASE_LENGTHS), len(all_ids)

    cases = []
    for n in CASE_LENGTHS:
        ids = all_ids[:n]
        lg = logits_for(ref, ids)
        lg_mem = logits_for(mem, ids)
        if not torch.equal(lg, lg_mem):
            raise SystemExit(f"{name}: re-loaded model differs from the saved one by "
                             f"{(lg - lg_mem).abs().max().item()}")
        g, gaps = greedy(ref, ids, N_GREEDY)
        case = {"text": hf_tok.decode(ids), "input_ids": ids, "logits_last": [r6(x) for x in lg[-1].tolist()],
                "greedy": g, "greedy_gaps": gaps}
        if n == ALL_LOGITS_LEN:
            case["logits_all"] = [[r6(x) for x in row] for row in lg.tolist()]
        cases.append(case)
        print(f"  {name} len {n}: greedy {g[:8]}... min gap {min(gaps):.4g}")

    golden = {
        "reference": reference("transformers", "torch", "safetensors", "tokenizers"),
        "model": name,
        "fixture": f"tests/fixtures/tiny-{name}",
        "architecture": type(ref).__name__,
        "dtype": {torch.float32: "f32", torch.bfloat16: "bf16"}[spec["dtype"]],
        "notes": [
            "logits computed in float32 (weights upcast from the stored dtype) by transformers with eager attention, "
            "from the model re-loaded from the fixture directory; full forward (no KV cache) for every greedy step.",
            "greedy: argmax (lowest id on ties) continuing input_ids, EOS not treated specially; greedy_gaps: "
            "top1-top2 logit gap at each step. Floats rounded to 6 significant digits.",
            "logits_all (only in the 13-token case): logits for every position, [position][vocab].",
        ],
        "cases": cases,
    }
    dump_json(golden, GOLDENS / f"tiny_{name.replace('-', '_')}.json")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"  fixture {out.name}: {size} bytes ({', '.join(sorted(p.name for p in out.iterdir()))})")


def main() -> None:
    tok = train_tokenizer()
    tok2 = train_tokenizer()
    assert tok.to_str() == tok2.to_str(), "tokenizer training is not deterministic"
    all_specs = specs()
    names = sys.argv[1:] or list(all_specs)
    for name in names:
        print(f"== {name}")
        build(name, all_specs[name], tok)


if __name__ == "__main__":
    main()
