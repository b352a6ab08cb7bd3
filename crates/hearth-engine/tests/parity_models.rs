//! Parity gate for the real models: hearth's CPU path against llama.cpp and Hugging Face transformers goldens
//! (tools/oracle/logits_goldens.py). Two configurations:
//! - exact math (`--dequantize`: GGUF matrices dequantized to f32, as transformers loads them): logits within
//!   EXACT_TOL of transformers and greedy tokens equal to transformers' wherever its gap exceeds EXACT_GAP;
//! - the default quantized path (activations quantized to 8 bits inside the matmuls, as llama.cpp does).
//!
//! Prompt ids must be identical; greedy tokens must equal llama.cpp's on every step until the first step where the
//! reference's own top-1/top-2 gap is below a margin (GAP_MARGIN, or a model's own where its quantized path is
//! noisier; there the two implementations may legitimately pick differently); last-position logits must agree within the stated tolerances (max-abs over the golden's sampled
//! ids, and relative RMS). docs/parity.md records the measured differences.

mod common;
use common::*;
use hearth_engine::engine::{start, EngineConfig, EngineRequest};
use hearth_engine::generate::{forward_one, generate, single_sequence_kv, GenerateRequest};
use hearth_engine::loader::{load_with, LoadedModel};
use hearth_engine::models::LoadOptions;
use hearth_engine::sampling::SamplingParams;

/// Exact-math path vs transformers (both f32 on the same dequantized weights): only summation order differs.
const EXACT_TOL: f32 = 1e-3;
const EXACT_GAP: f32 = 0.01;

/// The last position's logits over the KV store `hearth generate` uses (the serving path's attention and cache
/// dtype).
fn last_logits(m: &LoadedModel, prompt_ids: &[u32]) -> Vec<f32> {
    let mut kv = single_sequence_kv(m, prompt_ids.len()).unwrap();
    forward_one(m.model.as_ref(), kv.as_mut(), 0, prompt_ids, 0, false, &m.device).unwrap().pop().unwrap()
}

fn greedy(m: &LoadedModel, prompt_ids: &[u32], n: usize) -> Vec<u32> {
    let req = GenerateRequest {
        prompt_ids: prompt_ids.to_vec(),
        max_tokens: n,
        sampling: SamplingParams::default(),
        ignore_eos: true,
        prefill_chunk: 512,
    };
    generate(m, &req, |_| true).unwrap().ids
}

/// Dequantized weights: hearth's model math against transformers' on the same f32 weights.
fn run_exact(golden_name: &str, alias: &str) {
    let g = golden(golden_name);
    let m = load_with(alias, &candle_core::Device::Cpu, None, &LoadOptions { dequantize: true, ..Default::default() })
        .unwrap();
    let tol = Tol { max_abs: EXACT_TOL, rel_rms: 1e-4 };
    for (i, p) in g["prompts"].as_array().unwrap().iter().enumerate() {
        let hf = &p["hf"];
        assert!(!hf.is_null(), "{alias} prompt {i}: the golden lacks transformers' reference");
        let name = format!("{alias} prompt {i} exact");
        let prompt_ids = ids(&p["prompt_ids"]);
        compare_logits(&format!("{name} vs transformers"), &last_logits(&m, &prompt_ids), hf, &tol);
        let n = hf["greedy"].as_array().unwrap().len();
        greedy_matches(&format!("{name} greedy vs transformers"), &greedy(&m, &prompt_ids, n), hf, EXACT_GAP);
    }
}

fn run(golden_name: &str, alias: &str, tol_llama: Tol, tol_hf: Tol, gap_margin: f32) {
    let g = golden(golden_name);
    let m = real_model(alias);
    for (i, p) in g["prompts"].as_array().unwrap().iter().enumerate() {
        let name = format!("{alias} prompt {i}");
        let text = p["text"].as_str().unwrap();
        let prompt_ids = ids(&p["prompt_ids"]);
        assert_eq!(m.tokenizer.encode(text, true).unwrap(), prompt_ids, "{name}: prompt ids differ from llama.cpp");

        let logits = last_logits(&m, &prompt_ids);
        compare_logits(&format!("{name} vs llama.cpp"), &logits, &p["llama_cpp"], &tol_llama);
        if !p["hf"].is_null() {
            compare_logits(&format!("{name} vs transformers"), &logits, &p["hf"], &tol_hf);
        }

        let n = p["llama_cpp"]["greedy"].as_array().unwrap().len();
        greedy_matches(
            &format!("{name} greedy vs llama.cpp"),
            &greedy(&m, &prompt_ids, n),
            &p["llama_cpp"],
            gap_margin,
        );
    }
}

/// Every golden prompt at once through the continuous-batching engine (paged KV, chunked prefill beside other
/// rows' decode): each row's greedy tokens equal its own alone (batch invariance) and llama.cpp's as in [`run`].
fn run_batched(golden_name: &str, alias: &str, gap_margin: f32) {
    let g = golden(golden_name);
    let m = real_model(alias);
    let solo: Vec<Vec<u32>> = g["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| greedy(&m, &ids(&p["prompt_ids"]), p["llama_cpp"]["greedy"].as_array().unwrap().len()))
        .collect();
    let cfg = EngineConfig {
        max_batch: 8,
        kv_block_size: 16,
        kv_blocks: 512,
        step_tokens: 256,
        step_tokens_decoding: 32,
        max_prefill_rows: 2,
        max_queue: 64,
        cache: Default::default(),
        spec: Default::default(),
    };
    let eos = m.tokenizer.eos_ids().to_vec();
    let eng = start(m.model, m.device, cfg, eos).unwrap();
    let streams: Vec<_> = g["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let req = EngineRequest {
                prompt: ids(&p["prompt_ids"]),
                sampling: SamplingParams::default(),
                max_tokens: p["llama_cpp"]["greedy"].as_array().unwrap().len(),
                stop_token_ids: vec![],
                ignore_eos: true,
                n: 1,
                constraint: None,
                spec: Default::default(),
                media: None,
            };
            eng.submit(req).unwrap()
        })
        .collect();
    for (i, (s, p)) in streams.into_iter().zip(g["prompts"].as_array().unwrap()).enumerate() {
        let batched = collect(s).0;
        assert_eq!(batched, solo[i], "{alias} prompt {i}: batched greedy tokens differ from alone");
        greedy_matches(&format!("{alias} prompt {i} batched vs llama.cpp"), &batched, &p["llama_cpp"], gap_margin);
    }
}

#[test]
fn smollm2_matches_llama_cpp_and_transformers() {
    // Measured (docs/parity.md; f16 KV cache, as llama.cpp's): vs llama.cpp max-abs <= 0.66, rel RMS <= 0.031;
    // vs transformers (f32 throughout) 0.99, 0.040.
    run(
        "logits_smollm2.json",
        "smollm2-135m",
        Tol { max_abs: 1.0, rel_rms: 0.05 },
        Tol { max_abs: 1.3, rel_rms: 0.06 },
        GAP_MARGIN,
    );
}

#[test]
fn smollm2_batched_matches_alone_and_llama_cpp() {
    run_batched("logits_smollm2.json", "smollm2-135m", GAP_MARGIN);
}

#[test]
fn smollm2_exact_math_matches_transformers() {
    run_exact("logits_smollm2.json", "smollm2-135m");
}

#[test]
fn gemma3_exact_math_matches_transformers() {
    run_exact("logits_gemma3.json", "gemma3-270m");
}

#[test]
fn gemma3_matches_llama_cpp_and_transformers() {
    // Measured (f16 KV cache, as llama.cpp's): vs llama.cpp max-abs <= 1.43, rel RMS <= 0.049; vs transformers
    // (f32 throughout) 1.44, 0.086, on prompt 5, where llama.cpp itself is 1.80 / 0.108 from transformers (the
    // f32 cache: 0.88 / 0.040 there; f16's rounding of K and V moves hearth toward llama.cpp).
    // Greedy margin 1.0: Gemma 3's quantized path is chaotic at the level of one activation rounding. Two
    // implementations computing the same exact integer block sums (hearth's k-quant kernels and candle's, equal
    // to 6e-7 per matmul on this model's tensors) give last logits up to 0.94 apart, and the same kernels fed the
    // prompt in one pass or one token at a time up to 1.33 apart (`cpu_matmul::tests::dump_model_logits`), so a
    // reference gap below 1.0 is a near-tie.
    run(
        "logits_gemma3.json",
        "gemma3-270m",
        Tol { max_abs: 2.1, rel_rms: 0.075 },
        Tol { max_abs: 2.0, rel_rms: 0.12 },
        1.0,
    );
}

/// Chunked prefill gives the same last logits as one pass on the paged KV store `hearth generate` and the engine
/// use. On the quantized path bit for bit: the attention's result depends only on a token's own query, keys and
/// values, and hearth's int8 kernels' on their own row (a last-bit difference would grow into whole 8-bit
/// quantization steps). The exact path's f32 matmuls are candle's, whose summation order is not promised across
/// row counts, so there only to 1e-3.
#[test]
fn chunked_prefill_equals_single_pass() {
    for dequantize in [true, false] {
        let m = load_with(
            "smollm2-135m",
            &candle_core::Device::Cpu,
            None,
            &LoadOptions { dequantize, ..Default::default() },
        )
        .unwrap();
        let ids = m.tokenizer.encode("The quick brown fox jumps over the lazy dog. ".repeat(6).as_str(), true).unwrap();
        let one = last_logits(&m, &ids);
        let mut kv = single_sequence_kv(&m, ids.len()).unwrap();
        let (mut last, mut pos) = (Vec::new(), 0);
        for c in ids.chunks(7) {
            last = forward_one(m.model.as_ref(), kv.as_mut(), 0, c, pos, false, &m.device).unwrap().pop().unwrap();
            pos += c.len();
        }
        let max = one.iter().zip(&last).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let se: f32 = one.iter().zip(&last).map(|(a, b)| (a - b).powi(2)).sum();
        let ss: f32 = one.iter().map(|a| a * a).sum();
        let rel = (se / ss).sqrt();
        eprintln!("chunked vs single pass (dequantize={dequantize}): max_abs {max:.6} rel_rms {rel:.6}");
        if dequantize {
            assert!(max < 1e-3, "exact path: chunked vs single-pass logits differ by {max}");
        } else {
            assert!(one == last, "quantized path: chunked vs single-pass logits differ by {max} (rel {rel})");
        }
    }
}

#[test]
fn qwen_coder_05b_matches_llama_cpp_and_transformers() {
    run(
        "logits_qwen05b.json",
        "qwen2.5-coder-0.5b",
        // Measured (f16 KV cache): vs llama.cpp max-abs <= 0.31, rel RMS <= 0.016; vs transformers 0.41, 0.018.
        Tol { max_abs: 0.6, rel_rms: 0.03 },
        Tol { max_abs: 0.6, rel_rms: 0.03 },
        GAP_MARGIN,
    );
}

#[test]
fn qwen_coder_15b_matches_llama_cpp_and_transformers() {
    run(
        "logits_qwen15b.json",
        "qwen2.5-coder-1.5b",
        // Measured (f16 KV cache): vs llama.cpp max-abs <= 0.47, rel RMS <= 0.028; vs transformers 0.41, 0.024.
        Tol { max_abs: 0.7, rel_rms: 0.04 },
        Tol { max_abs: 0.7, rel_rms: 0.04 },
        GAP_MARGIN,
    );
}

/// The 0.5B only: the 1.5B runs the same model code (the Qwen2 family, q/k/v bias) at three times the f32
/// weights, which would add minutes to the test run without covering anything more.
#[test]
fn qwen_coder_exact_math_matches_transformers() {
    run_exact("logits_qwen05b.json", "qwen2.5-coder-0.5b");
}

#[test]
fn qwen_coder_batched_matches_alone_and_llama_cpp() {
    run_batched("logits_qwen05b.json", "qwen2.5-coder-0.5b", GAP_MARGIN);
    run_batched("logits_qwen15b.json", "qwen2.5-coder-1.5b", GAP_MARGIN);
}
