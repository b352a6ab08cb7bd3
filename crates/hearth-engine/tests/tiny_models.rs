//! Architecture fixtures: tiny random checkpoints made with transformers (tools/oracle/tiny_models.py) for the
//! architectures without reachable real weights (and the HF-directory loading path: safetensors, shards,
//! tokenizer.json). Logits are compared in f32 against transformers; greedy continuations must be identical.

mod common;
use common::*;
use hearth_engine::attention::ContiguousKv;
use hearth_engine::generate::{forward_one, generate, GenerateRequest};
use hearth_engine::loader::{load, load_with};
use hearth_engine::models::LoadOptions;
use hearth_engine::sampling::SamplingParams;

/// f32 reference vs f32 here: only summation order differs.
const TOL: f32 = 2e-4;
/// hearth's quantized path against llama.cpp's on a Q8_0 GGUF of a tiny random model, whose logits span only
/// about ±0.5, so that the two implementations' 8-bit activation rounding shows as a relative RMS of 1-2% (the
/// dense tiny Qwen3 converted the same way differs from llama.cpp by as much: 1.1-1.9%); and the top-1/top-2 gap
/// below which their greedy tokens may part (the differences grow along a continuation).
const GGUF_TOL: Tol = Tol { max_abs: 2e-2, rel_rms: 3e-2 };
const GGUF_GAP: f32 = 0.15;
/// GGUF_TOL's comparison on the tiny gpt-oss GGUF, whose logits span ±3.5 rather than ±0.5: the same two 8-bit
/// paths then differ by up to 6.8e-2 max-abs and 2.9% relative RMS (llama.cpp's YaRN without its rounded correction
/// range: 8.2%; without its attention factor: 42%).
const GPT_OSS_GGUF_TOL: Tol = Tol { max_abs: 0.1, rel_rms: 4e-2 };
/// The MXFP4 experts on the int8 kernels (8-bit activations in the expert matmuls only) against transformers' math.
const MXFP4_TOL: Tol = Tol { max_abs: 6e-2, rel_rms: 2e-2 };

fn check(name: &str) {
    check_with(name, &LoadOptions::default(), Tol { max_abs: TOL, rel_rms: 1.0 }, 0.0);
}

/// `name`'s fixture loaded with `opts` against its goldens: logits within `tol` (max-abs at every position compared,
/// relative RMS of the last); greedy tokens equal up to the first step whose reference top-1/top-2 gap is below
/// `margin` (0: every token).
fn check_with(name: &str, opts: &LoadOptions, tol: Tol, margin: f32) {
    check_fixture(&format!("tiny-{name}"), name, opts, tol, margin);
}

/// [`check_with`] of fixture directory `dir` against model `name`'s goldens.
fn check_fixture(dir: &str, name: &str, opts: &LoadOptions, tol: Tol, margin: f32) {
    let dir = fixture(dir);
    let m = load_with(dir.to_str().unwrap(), &candle_core::Device::Cpu, None, opts)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let g = golden(&format!("tiny_{}.json", name.replace('-', "_")));
    let n_layers = m.model.config().num_layers;
    for (i, case) in g["cases"].as_array().unwrap().iter().enumerate() {
        let input = ids(&case["input_ids"]);
        let mut kv = ContiguousKv::new(n_layers, input.len());
        let all = case.get("logits_all").is_some_and(|v| !v.is_null());
        let out = forward_one(m.model.as_ref(), &mut kv, 0, &input, 0, all, &m.device).unwrap();
        let last = out.last().unwrap();
        let want = floats(&case["logits_last"]);
        let d = last.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let rms = (last.iter().zip(&want).map(|(a, b)| (a - b).powi(2)).sum::<f32>()
            / want.iter().map(|b| b * b).sum::<f32>())
        .sqrt();
        eprintln!("{name} {opts:?} case {i}: last logits max-abs {d:.2e}, rel RMS {rms:.2e}");
        assert!(d < tol.max_abs && rms < tol.rel_rms, "{name} case {i}: last logits max-abs {d}, rel RMS {rms}");
        if all {
            for (p, row) in case["logits_all"].as_array().unwrap().iter().enumerate() {
                let d = out[p].iter().zip(floats(row)).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(d < tol.max_abs, "{name} case {i} position {p}: max-abs {d}");
            }
        }
        let want_greedy = ids(&case["greedy"]);
        let req = GenerateRequest {
            prompt_ids: input,
            max_tokens: want_greedy.len(),
            sampling: SamplingParams::default(),
            ignore_eos: true,
            prefill_chunk: 5,
        };
        let got = generate(&m, &req, |_| true).unwrap().ids;
        let gaps = floats(&case["greedy_gaps"]);
        if let Some(k) = got.iter().zip(&want_greedy).position(|(a, b)| a != b) {
            assert!(gaps[k] < margin, "{name} case {i}: greedy token {k} differs (reference gap {})", gaps[k]);
        }
        assert_eq!(got.len(), want_greedy.len(), "{name} case {i}: greedy continuation length");
    }
}

#[test]
fn tiny_llama_with_llama3_rope_scaling() {
    check("llama");
}

#[test]
fn tiny_llama_with_linear_rope_scaling() {
    check("llama-linear");
}

#[test]
fn tiny_mistral_sharded_safetensors() {
    check("mistral");
}

#[test]
fn tiny_qwen2_with_qkv_bias() {
    check("qwen2");
}

#[test]
fn tiny_qwen3_bf16_with_qk_norm() {
    check("qwen3");
}

/// Routed experts (8, 2 per token, renormalized) on two layers and a dense MLP on the third.
#[test]
fn tiny_qwen3_moe_routed_experts() {
    check("qwen3-moe");
}

/// gpt-oss: attention sinks, q/k/v/o biases, sliding (8) and full layers alternating, YaRN rope (factor 8 over 64
/// original positions, the correction range not truncated, cos and sin scaled), 8 experts with biases stored
/// stacked with gate and up interleaved, routed top-2 then softmax, and the clamped SwiGLU (limit 0.5: about a
/// quarter of the gates and half the ups clamp).
#[test]
fn tiny_gpt_oss_sinks_yarn_clamped_experts() {
    check("gpt-oss");
}

/// gpt-oss as published: its experts in MXFP4 (tools/oracle/tiny_mxfp4.py; transformers dequantizes them). With
/// `--dequantize` (the reference's math) within TOL; by default the experts become Q8_0 blocks holding the same
/// values exactly and run on the int8 kernels, which quantize the activations to 8 bits as llama.cpp does
/// (MXFP4_TOL).
#[test]
fn tiny_gpt_oss_mxfp4_experts() {
    let exact = Tol { max_abs: TOL, rel_rms: 1.0 };
    check_with("gpt-oss-mxfp4", &LoadOptions { dequantize: true, ..Default::default() }, exact, 0.0);
    check_with("gpt-oss-mxfp4", &LoadOptions::default(), MXFP4_TOL, GGUF_GAP);
}

/// A Qwen3-MoE GGUF written by llama.cpp's own converter (Q8_0; its stacked `ffn_*_exps` expert tensors read one
/// expert at a time in place) against llama.cpp on the same file (tools/oracle/tiny_gguf.py): both quantize the
/// activations to 8 bits in the matmuls, each its own way (GGUF_TOL).
#[test]
fn tiny_qwen3moe_gguf_matches_llama_cpp() {
    gguf_matches_llama_cpp("qwen3moe-q8_0", GGUF_TOL);
}

/// gpt-oss as llama.cpp writes it (`tools/oracle/tiny_gguf.py`: the MXFP4 checkpoint converted by llama.cpp's
/// converter): MXFP4 experts (GGML's type 39, which candle cannot read: `weights::gguf_scan`), sinks, biases, YaRN
/// with llama.cpp's rounded correction range, its built-in SwiGLU limit. Against llama.cpp on the same file.
#[test]
fn tiny_gpt_oss_gguf_matches_llama_cpp() {
    gguf_matches_llama_cpp("gpt-oss-mxfp4", GPT_OSS_GGUF_TOL);
}

/// The GGUF fixture `tiny-NAME.gguf` against llama.cpp's logits and greedy tokens on it.
/// Qwen3.5 as llama.cpp converts it (`qwen35`: value heads in tiled order, -exp(A_log), norms stored as 1 + w), in
/// f32 against llama.cpp on the same file (whose own logits are within 5.2e-5 of transformers').
#[test]
fn tiny_qwen35_gguf_matches_llama_cpp() {
    gguf_matches_llama_cpp("qwen35-f32", Tol { max_abs: 2e-4, rel_rms: 1e-3 });
}

/// Qwen3.5-MoE as llama.cpp converts it (`qwen35moe`, Q8_0: stacked experts, the shared expert and its gate).
#[test]
fn tiny_qwen35moe_gguf_matches_llama_cpp() {
    gguf_matches_llama_cpp("qwen35moe-q8_0", GGUF_TOL);
}

/// Qwen3-Next as llama.cpp converts it (`qwen3next`, f32: q|k|v and z split apart, b and a still fused, value heads
/// grouped as Hugging Face keeps them).
#[test]
fn tiny_qwen3next_gguf_matches_llama_cpp() {
    gguf_matches_llama_cpp("qwen3next-f32", Tol { max_abs: 2e-4, rel_rms: 1e-3 });
}

fn gguf_matches_llama_cpp(name: &str, tol: Tol) {
    let path = fixture(&format!("tiny-{name}.gguf"));
    let m = load(path.to_str().unwrap(), &candle_core::Device::Cpu, None).unwrap_or_else(|e| panic!("{name}: {e}"));
    let g = golden(&format!("tiny_{}_gguf.json", name.replace('-', "_")));
    for (i, case) in g["cases"].as_array().unwrap().iter().enumerate() {
        let input = ids(&case["input_ids"]);
        let mut kv = ContiguousKv::new(m.model.config().num_layers, input.len());
        let out = forward_one(m.model.as_ref(), &mut kv, 0, &input, 0, false, &m.device).unwrap();
        let want = floats(&case["logits_last"]);
        let ours = out.last().unwrap();
        let d = ours.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let peak = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let rms = (ours.iter().zip(&want).map(|(a, b)| (a - b).powi(2)).sum::<f32>()
            / want.iter().map(|b| b * b).sum::<f32>())
        .sqrt();
        eprintln!("{name} case {i}: last logits max-abs {d:.2e} (largest |logit| {peak:.3}), rel RMS {rms:.2e}");
        assert!(d < tol.max_abs && rms < tol.rel_rms, "{name} case {i}: max-abs {d}, rel RMS {rms}");
        let req = GenerateRequest {
            prompt_ids: input,
            max_tokens: ids(&case["greedy"]).len(),
            sampling: SamplingParams::default(),
            ignore_eos: true,
            prefill_chunk: 5,
        };
        let got = generate(&m, &req, |_| true).unwrap().ids;
        greedy_matches(&format!("{name} case {i}"), &got, case, GGUF_GAP);
    }
}

/// Qwen3.5: gated-DeltaNet layers (their recurrent state in the KV store, in 16-token chunks whose arithmetic
/// differs from transformers' 64-token chunks only in summation order) and an output-gated full-attention layer
/// with a partial rotation; the greedy run prefills in pieces of 5 and decodes one token at a time.
#[test]
fn tiny_qwen3_5_hybrid_linear_attention() {
    check("qwen3_5");
}

/// Qwen3.5-MoE: the hybrid layers with every feed-forward routed, beside a sigmoid-gated shared expert.
#[test]
fn tiny_qwen3_5_moe_shared_expert() {
    check("qwen3_5-moe");
}

/// Qwen3-Next: the same hybrid machinery, its DeltaNet projections fused per key head (regrouped at load), a
/// dense layer among the routed ones.
#[test]
fn tiny_qwen3_next_fused_projections() {
    check("qwen3-next");
}

/// Qwen3.5 as published: the text model nested under `text_config` and `model.language_model.*`, beside a vision
/// tower and an MTP head (tools/oracle/tiny_qwen3_5_nested.py: the same text weights, so the same goldens).
#[test]
fn tiny_qwen3_5_published_nested_layout() {
    check_fixture("tiny-qwen3_5-nested", "qwen3_5", &LoadOptions::default(), Tol { max_abs: TOL, rel_rms: 1.0 }, 0.0);
}

#[test]
fn tiny_gemma3_sliding_window() {
    check("gemma3");
}

/// `Model::hidden` returns what the output head reads: the tied head applied to the hidden states gives
/// `forward`'s logits at every position. An architecture without it refuses.
#[test]
fn hidden_states_feed_the_head() {
    use hearth_engine::attention::BatchContext;
    let cpu = candle_core::Device::Cpu;
    let dir = fixture("tiny-qwen3");
    let m = load(dir.to_str().unwrap(), &cpu, None).unwrap();
    let input = ids(&golden("tiny_qwen3.json")["cases"][1]["input_ids"]);
    let n_layers = m.model.config().num_layers;
    let logits =
        forward_one(m.model.as_ref(), &mut ContiguousKv::new(n_layers, input.len()), 0, &input, 0, true, &cpu).unwrap();
    let ctx = BatchContext::new(&[(0, 0, input.len())], true, &cpu).unwrap();
    let tokens = candle_core::Tensor::new(input.as_slice(), &cpu).unwrap();
    let hidden = m.model.hidden(&tokens, &ctx, &mut ContiguousKv::new(n_layers, input.len())).unwrap();
    assert_eq!(hidden.dims(), [input.len(), m.model.config().hidden_size]);
    let st = candle_core::safetensors::load(dir.join("model.safetensors"), &cpu).unwrap();
    let embed = st["model.embed_tokens.weight"].to_dtype(candle_core::DType::F32).unwrap();
    let via_hidden = hidden.matmul(&embed.t().unwrap()).unwrap().to_vec2::<f32>().unwrap();
    for (p, (a, b)) in via_hidden.iter().zip(&logits).enumerate() {
        let d = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(d < 1e-5, "position {p}: hidden @ head differs from forward's logits by {d}");
    }

    let g = load(fixture("tiny-gemma3").to_str().unwrap(), &cpu, None).unwrap();
    let mut kv = ContiguousKv::new(g.model.config().num_layers, input.len());
    let e = g.model.hidden(&tokens, &ctx, &mut kv).unwrap_err().to_string();
    assert!(e.contains("does not produce embeddings"), "{e}");
}

/// The routed model in the continuous-batching engine: each prompt's greedy tokens are the reference's alone (up
/// to a near-tie) and the same beside the others in one batch (a token's experts see only its own row) and on a prompt-cache hit; their logprobs too,
/// bit for bit with the GGUF's int8 matmuls (rows independent), and within LOGPROB_TOL with the safetensors
/// checkpoint's dense weights (candle's f32 GEMM rounds differently at different row counts).
#[test]
fn tiny_qwen3_moe_batched_and_cached_like_alone() {
    batched_and_cached_like_alone("tiny-qwen3-moe", "tiny_qwen3_moe.json", false);
    batched_and_cached_like_alone("tiny-qwen3moe-q8_0.gguf", "tiny_qwen3moe_q8_0_gguf.json", true);
}

/// gpt-oss in the engine: the paged CPU attention's sinks and windows, batched and on prompt-cache hits.
#[test]
fn tiny_gpt_oss_batched_and_cached_like_alone() {
    batched_and_cached_like_alone("tiny-gpt-oss", "tiny_gpt_oss.json", false);
}

/// Qwen3.5-MoE in the engine: routed rows beside recurrent state, batched and resumed from snapshots.
#[test]
fn tiny_qwen3_5_moe_batched_and_cached_like_alone() {
    batched_and_cached_like_alone("tiny-qwen3_5-moe", "tiny_qwen3_5_moe.json", false);
}

/// Qwen3.5 in the engine: linear-attention state per row, batched, and resumed from snapshots on cache hits.
#[test]
fn tiny_qwen3_5_batched_and_cached_like_alone() {
    batched_and_cached_like_alone("tiny-qwen3_5", "tiny_qwen3_5.json", false);
}

const LOGPROB_TOL: f32 = 1e-4;

fn batched_and_cached_like_alone(model: &str, golden_name: &str, exact: bool) {
    use hearth_engine::engine::{start, EngineEvent, EngineRequest};
    use hearth_engine::types::CacheConfig;
    let m = load(fixture(model).to_str().unwrap(), &candle_core::Device::Cpu, None).unwrap();
    let g = golden(golden_name);
    let mut prompts: Vec<Vec<u32>> = g["cases"].as_array().unwrap().iter().map(|c| ids(&c["input_ids"])).collect();
    prompts.push(prompts[2].repeat(2)); // 48 tokens: three cache blocks of 16
    let cfg = hearth_engine::engine::EngineConfig {
        cache: CacheConfig { max_blocks: 64, namespace: m.fingerprint, state_bytes: 64 << 20, ..Default::default() },
        ..test_config(64, 4)
    };
    let eng = start(m.model, m.device, cfg, vec![]).unwrap();
    let req = |p: &Vec<u32>| EngineRequest {
        sampling: SamplingParams { logprobs: Some(0), ..SamplingParams::default() },
        ..greedy(p.clone(), 12)
    };
    // (tokens, logprobs, cached prompt tokens)
    let finish = |mut s: hearth_engine::engine::RequestStream| {
        let (mut ids, mut lps) = (Vec::new(), Vec::new());
        loop {
            match s.blocking_next().expect("stream ended without Finished") {
                EngineEvent::Token { id, logprob, .. } => {
                    ids.push(id);
                    lps.push(logprob.unwrap_or(f32::NAN));
                }
                EngineEvent::Finished { usage, .. } => return (ids, lps, usage.cached_tokens),
                EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
                EngineEvent::PromptLogprobs { .. } => {}
            }
        }
    };
    let solo: Vec<_> = prompts.iter().map(|p| finish(eng.submit(req(p)).unwrap())).collect();
    // Alone, the engine (paged attention) continues each golden prompt as the reference does, up to a near-tie.
    let margin = if exact { GGUF_GAP } else { 1e-2 };
    for (i, case) in g["cases"].as_array().unwrap().iter().enumerate() {
        let want = ids(&case["greedy"]);
        let gaps = floats(case.get("greedy_gaps").unwrap_or(&case["gaps"]));
        if let Some(k) = solo[i].0.iter().zip(&want).position(|(a, b)| a != b) {
            assert!(
                gaps[k] < margin,
                "{model} prompt {i}: greedy token {k} differs from the reference (gap {})",
                gaps[k]
            );
        }
    }
    // Twice batched: by then the solo runs have cached every prompt's full blocks (the long one hits 32 tokens).
    for round in 0..2 {
        let streams: Vec<_> = prompts.iter().map(|p| eng.submit(req(p)).unwrap()).collect();
        for (i, (s, alone)) in streams.into_iter().zip(&solo).enumerate() {
            let (got, lps, cached) = finish(s);
            assert_eq!(got, alone.0, "{model} round {round} prompt {i}: greedy tokens differ from alone");
            for (j, (a, b)) in lps.iter().zip(&alone.1).enumerate() {
                let ok = if exact { a.to_bits() == b.to_bits() } else { (a - b).abs() <= LOGPROB_TOL };
                assert!(ok, "{model} round {round} prompt {i} token {j}: logprob {a} alone {b}");
            }
            if i == 3 {
                assert!(cached >= 32, "{model}: the 48-token prompt hits the prompt cache ({cached} tokens)");
            }
        }
    }
}
