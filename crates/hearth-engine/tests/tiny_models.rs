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
