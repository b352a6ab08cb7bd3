//! Architecture fixtures: tiny random checkpoints made with transformers (tools/oracle/tiny_models.py) for the
//! architectures without reachable real weights (and the HF-directory loading path: safetensors, shards,
//! tokenizer.json). Logits are compared in f32 against transformers; greedy continuations must be identical.

mod common;
use common::*;
use hearth_engine::attention::ContiguousKv;
use hearth_engine::generate::{forward_one, generate, GenerateRequest};
use hearth_engine::loader::load;
use hearth_engine::sampling::SamplingParams;

/// f32 reference vs f32 here: only summation order differs.
const TOL: f32 = 2e-4;

fn check(name: &str) {
    let dir = fixture(&format!("tiny-{name}"));
    let m = load(dir.to_str().unwrap(), &candle_core::Device::Cpu, None).unwrap_or_else(|e| panic!("{name}: {e}"));
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
        assert!(d < TOL, "{name} case {i}: last logits max-abs {d}");
        if all {
            for (p, row) in case["logits_all"].as_array().unwrap().iter().enumerate() {
                let d = out[p].iter().zip(floats(row)).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(d < TOL, "{name} case {i} position {p}: max-abs {d}");
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
        assert_eq!(got, want_greedy, "{name} case {i}: greedy continuation");
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

#[test]
fn tiny_gemma3_sliding_window() {
    check("gemma3");
}
