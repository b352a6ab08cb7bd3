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
use hearth_engine::attention::ContiguousKv;
use hearth_engine::generate::{forward_one, generate, GenerateRequest};
use hearth_engine::loader::{load_with, LoadedModel};
use hearth_engine::models::LoadOptions;
use hearth_engine::sampling::SamplingParams;

/// Exact-math path vs transformers (both f32 on the same dequantized weights): only summation order differs.
const EXACT_TOL: f32 = 1e-3;
const EXACT_GAP: f32 = 0.01;

fn last_logits(m: &LoadedModel, prompt_ids: &[u32]) -> Vec<f32> {
    let mut kv = ContiguousKv::new(m.model.config().num_layers, prompt_ids.len());
    forward_one(m.model.as_ref(), &mut kv, 0, prompt_ids, 0, false, &m.device).unwrap().pop().unwrap()
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

#[test]
fn smollm2_matches_llama_cpp_and_transformers() {
    // Measured (docs/parity.md): vs llama.cpp max-abs <= 0.76, rel RMS <= 0.043; vs transformers 0.65, 0.044.
    run(
        "logits_smollm2.json",
        "smollm2-135m",
        Tol { max_abs: 1.2, rel_rms: 0.06 },
        Tol { max_abs: 1.0, rel_rms: 0.06 },
        GAP_MARGIN,
    );
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
    // Measured: vs llama.cpp max-abs <= 1.83, rel RMS <= 0.119; vs transformers 0.87, 0.026. The two references
    // differ from each other by up to 1.80 / 0.108 on these prompts; the llama.cpp worst is prompt 5, where hearth
    // is 0.67 / 0.020 from transformers and llama.cpp itself the outlier.
    // Greedy margin 1.0: Gemma 3's quantized path is chaotic at the level of one activation rounding. Two
    // implementations computing the same exact integer block sums (hearth's k-quant kernels and candle's, equal
    // to 6e-7 per matmul on this model's tensors) give last logits up to 0.94 apart, and the same kernels fed the
    // prompt in one pass or one token at a time up to 1.33 apart (`kernels::tests::dump_model_logits`), so a
    // reference gap below 1.0 is a near-tie.
    run(
        "logits_gemma3.json",
        "gemma3-270m",
        Tol { max_abs: 2.4, rel_rms: 0.15 },
        Tol { max_abs: 1.3, rel_rms: 0.05 },
        1.0,
    );
}

/// Chunked prefill gives the same last logits as one pass. In exact (f32) math only summation order differs; on
/// the quantized path activations are rounded to 8 bits inside every matmul, which turns those last-bit differences
/// into whole quantization steps (measured: 0.28 max-abs with candle's kernels alone), so there the top-1 must
/// agree and the relative RMS stay small.
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
        let n = m.model.config().num_layers;
        let mut kv = ContiguousKv::new(n, ids.len());
        let (mut last, mut pos) = (Vec::new(), 0);
        for c in ids.chunks(7) {
            last = forward_one(m.model.as_ref(), &mut kv, 0, c, pos, false, &m.device).unwrap().pop().unwrap();
            pos += c.len();
        }
        let max = one.iter().zip(&last).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let se: f32 = one.iter().zip(&last).map(|(a, b)| (a - b).powi(2)).sum();
        let ss: f32 = one.iter().map(|a| a * a).sum();
        let rel = (se / ss).sqrt();
        eprintln!("chunked vs single pass (dequantize={dequantize}): max_abs {max:.6} rel_rms {rel:.6}");
        let argmax = hearth_engine::sampling::sampler::argmax;
        assert_eq!(argmax(&one), argmax(&last));
        if dequantize {
            assert!(max < 1e-3, "exact path: chunked vs single-pass logits differ by {max}");
        } else {
            assert!(rel < 0.1, "quantized path: chunked vs single-pass relative RMS {rel}");
        }
    }
}
