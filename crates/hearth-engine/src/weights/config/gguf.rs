//! A GGUF file's metadata as a [`ModelConfig`] (llama.cpp's keys per `general.architecture`).

use super::{
    family_of, gemma_windows, Activation, Family, LinearAttnConfig, ModelConfig, MoeConfig, RopeScaling, Routing,
};
use crate::weights::gguf::GgufFile;
use crate::{Error, Result};

/// A GGUF file's rope scaling: `rope_freqs.weight`'s per-dimension divisors, else `ARCH.rope.scaling.*`.
fn gguf_rope_scaling(g: &GgufFile, arch: &str) -> Result<RopeScaling> {
    let key = |k: &str| format!("{arch}.{k}");
    Ok(if g.has_tensor("rope_freqs.weight") {
        let t = g.tensor_f32("rope_freqs.weight", &candle_core::Device::Cpu)?;
        RopeScaling::FreqFactors(t.flatten_all()?.to_vec1::<f32>()?)
    } else {
        match g.get_str(&key("rope.scaling.type")) {
            Some("linear") => RopeScaling::Linear { factor: g.get_f64(&key("rope.scaling.factor")).unwrap_or(1.0) },
            // llama.cpp's YaRN: the correction range rounded outward, cos and sin scaled by 0.1·ln(factor) + 1
            Some("yarn") => {
                let factor = g.get_f64(&key("rope.scaling.factor")).unwrap_or(1.0);
                RopeScaling::Yarn {
                    factor,
                    beta_fast: g.get_f64(&key("rope.scaling.yarn_beta_fast")).unwrap_or(32.0),
                    beta_slow: g.get_f64(&key("rope.scaling.yarn_beta_slow")).unwrap_or(1.0),
                    original_max_position_embeddings: g
                        .get_f64(&key("rope.scaling.original_context_length"))
                        .ok_or_else(|| {
                            Error::InvalidModel(format!(
                                "GGUF metadata lacks `{}`",
                                key("rope.scaling.original_context_length")
                            ))
                        })?,
                    truncate: true,
                    attention_factor: if factor > 1.0 { 0.1 * factor.ln() + 1.0 } else { 1.0 },
                }
            }
            None | Some("none") => RopeScaling::None,
            Some(other) => {
                return Err(Error::Unsupported(format!(
                    "GGUF rope scaling `{other}`; supported: none, linear, llama3, yarn"
                )))
            }
        }
    })
}

/// A GGUF architecture's family (the hybrid ones only as llama.cpp names them).
fn gguf_family(arch: &str) -> Result<Family> {
    match (family_of(arch)?, arch) {
        (Family::Qwen35, "qwen35" | "qwen35moe" | "qwen3next") | (Family::Llama | Family::Gemma3, _) => family_of(arch),
        _ => Err(Error::Unsupported(format!(
            "GGUF architecture `{arch}`: hearth reads it from Hugging Face checkpoints only"
        ))),
    }
}

/// The vocabulary size: `ARCH.vocab_size`, else the tokenizer's token count.
fn gguf_vocab(g: &GgufFile, arch: &str) -> Result<usize> {
    match g.get_u64(&format!("{arch}.vocab_size")) {
        Some(v) => Ok(v as usize),
        None => g
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.to_vec().ok())
            .map(|v| v.len())
            .ok_or_else(|| Error::InvalidModel("GGUF has neither a vocab_size nor tokenizer.ggml.tokens".into())),
    }
}

/// llama.cpp's Qwen2-VL / Qwen2.5-VL text model (`qwen2vl`): M-RoPE's sections, `rope.dimension_sections`
/// (four entries, the fourth 0), as transformers' `mrope_section` (the first three).
fn gguf_mrope_sections(g: &GgufFile, arch: &str) -> Option<Vec<usize>> {
    let v = g.get(&format!("{arch}.rope.dimension_sections"))?.to_vec().ok()?;
    let s: Vec<usize> = v.iter().filter_map(|x| x.to_i32().ok().map(|n| n.max(0) as usize)).collect();
    (arch == "qwen2vl" && s.len() >= 3).then(|| s[..3].to_vec())
}

/// llama.cpp's Qwen3.5 and Qwen3-Next linear-attention layers (`ssm.*` keys): Qwen3.5's value heads stored in
/// tiled order (value head `h` reads key head `h % key_heads`), Qwen3-Next's grouped as Hugging Face keeps them;
/// the layers from `attention.recurrent_layers` or `full_attention_interval`.
fn gguf_linear_attn(g: &GgufFile, arch: &str, layers: usize) -> Result<LinearAttnConfig> {
    let key = |k: &str| format!("{arch}.{k}");
    let need = |k: &str| -> Result<usize> {
        g.get_u64(&key(k))
            .map(|v| v as usize)
            .ok_or_else(|| Error::InvalidModel(format!("GGUF metadata lacks `{}`", key(k))))
    };
    let flags: Option<Vec<bool>> = g
        .get(&key("attention.recurrent_layers"))
        .and_then(|v| v.to_vec().ok())
        .and_then(|v| v.iter().map(|b| b.to_bool().ok()).collect());
    let layer_flags = match flags {
        Some(f) if f.len() == layers => f,
        _ => {
            let every = g.get_u64(&key("full_attention_interval")).unwrap_or(4).max(1) as usize;
            (0..layers).map(|i| (i + 1) % every != 0).collect()
        }
    };
    let v_heads = need("ssm.time_step_rank")?;
    Ok(LinearAttnConfig {
        layers: layer_flags,
        conv_kernel: need("ssm.conv_kernel")?,
        k_heads: need("ssm.group_count")?,
        v_heads,
        key_dim: need("ssm.state_size")?,
        value_dim: need("ssm.inner_size")?.checked_div(v_heads).unwrap_or(0),
        tiled_v_heads: arch != "qwen3next",
    })
}

impl ModelConfig {
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let arch = g.architecture()?.to_string();
        let family = gguf_family(&arch)?;
        let key = |k: &str| format!("{arch}.{k}");
        let need = |k: &str| -> Result<u64> {
            g.get_u64(&key(k)).ok_or_else(|| Error::InvalidModel(format!("GGUF metadata lacks `{}`", key(k))))
        };
        let hidden = need("embedding_length")? as usize;
        let heads = need("attention.head_count")? as usize;
        let kv_heads = g.get_u64(&key("attention.head_count_kv")).unwrap_or(heads as u64) as usize;
        let head_dim = g
            .get_u64(&key("attention.key_length"))
            .map(|v| v as usize)
            .unwrap_or(hidden.checked_div(heads).unwrap_or(0));
        let layers = need("block_count")? as usize;
        let vocab = gguf_vocab(g, &arch)?;
        let rope_scaling = gguf_rope_scaling(g, &arch)?;
        let is_gemma = family == Family::Gemma3;
        let window = g.get_u64(&key("attention.sliding_window")).map(|w| w as usize);
        let is_oss = arch == "gpt-oss";
        let layer_window = match (is_gemma, is_oss, window) {
            (true, _, Some(w)) => gemma_windows(layers, w, 6),
            // llama.cpp's gpt-oss: even layers slide
            (_, true, Some(w)) => (0..layers).map(|i| (i % 2 == 0).then_some(w)).collect(),
            _ => vec![None; layers],
        };
        let eos = g.get_u64("tokenizer.ggml.eos_token_id").map(|v| v as u32);
        // llama.cpp's qwen3moe: every layer routed, the top-k probabilities renormalized.
        let moe = match g.get_u64(&key("expert_count")) {
            Some(experts) if experts > 0 => Some(MoeConfig {
                experts: experts as usize,
                top_k: need("expert_used_count")? as usize,
                intermediate_size: need("expert_feed_forward_length")? as usize,
                norm_topk_prob: true,
                sparse_layers: vec![true; layers],
                // gpt-oss: top-k then softmax, biased router and experts
                routing: if is_oss { Routing::TopKSoftmax } else { Routing::SoftmaxTopK },
                biases: g.has_tensor("blk.0.ffn_gate_inp.bias"),
                shared_expert: g.get_u64(&key("expert_shared_feed_forward_length")).map(|n| n as usize),
            }),
            _ => None,
        };
        let intermediate_size = match (&moe, g.get_u64(&key("feed_forward_length"))) {
            (_, Some(n)) => n as usize,
            (Some(m), None) => m.intermediate_size,
            (None, None) => need("feed_forward_length")? as usize,
        };
        Self {
            family,
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size,
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim,
            rms_norm_eps: g.get_f64(&key("attention.layer_norm_rms_epsilon")).unwrap_or(1e-6),
            rope_theta: g.get_f64(&key("rope.freq_base")).unwrap_or(if is_gemma { 1_000_000.0 } else { 10_000.0 }),
            rope_local_theta: is_gemma.then_some(10_000.0),
            rope_scaling,
            rope_interleaved: matches!(arch.as_str(), "llama" | "mistral"),
            max_position_embeddings: g.get_u64(&key("context_length")).unwrap_or(4096) as usize,
            attention_bias: g.has_tensor("blk.0.attn_q.bias"),
            qk_norm: g.has_tensor("blk.0.attn_q_norm.weight") || family == Family::Qwen35,
            tie_word_embeddings: !g.has_tensor("output.weight"),
            layer_window,
            // llama.cpp: Gemma 3 27B (62 layers) scales by hidden/heads; the other sizes by head_dim.
            query_pre_attn_scalar: if is_gemma && layers == 62 {
                (hidden / heads.max(1)) as f64
            } else {
                head_dim as f64
            },
            final_logit_softcapping: g.get_f64(&key("final_logit_softcapping")),
            attn_logit_softcapping: g.get_f64(&key("attn_logit_softcapping")),
            // llama.cpp's gpt-oss has its clamped SwiGLU's constants built in (GGUF stores none)
            activation: match (is_gemma, is_oss) {
                (true, _) => Activation::GeluTanh,
                (_, true) => Activation::SwigluOai { alpha: 1.702, limit: 7.0 },
                _ => Activation::Silu,
            },
            norm_weight_offset: 0.0,
            bos_token_id: g.get_u64("tokenizer.ggml.bos_token_id").map(|v| v as u32),
            eos_token_ids: eos.into_iter().collect(),
            moe,
            attention_sinks: g.has_tensor("blk.0.attn_sinks.weight"),
            o_bias: g.has_tensor("blk.0.attn_output.bias"),
            linear_attn: match family {
                Family::Qwen35 => Some(gguf_linear_attn(g, &arch, layers)?),
                _ => None,
            },
            rotary_dim: g.get_u64(&key("rope.dimension_count")).map_or(head_dim, |d| d as usize),
            mrope_section: gguf_mrope_sections(g, &arch),
            arch_name: arch,
        }
        .validate()
    }
}
