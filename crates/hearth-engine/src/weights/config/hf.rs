//! A Hugging Face `config.json` as a [`ModelConfig`]: the classic (transformers 4) layout and transformers 5's
//! `rope_parameters`, Gemma 3's nested text config, Qwen3-MoE's and gpt-oss's experts.

use super::{
    family_of, gemma_windows, Activation, Family, LinearAttnConfig, ModelConfig, MoeConfig, RopeScaling, Routing,
};
use crate::{Error, Result};
use serde::Deserialize;

impl ModelConfig {
    pub fn from_hf_json(text: &str) -> Result<Self> {
        let c: HfConfig = serde_json::from_str(text).map_err(|e| Error::InvalidModel(format!("config.json: {e}")))?;
        let c = unnest(c);
        let arch = c.model_type.clone().unwrap_or_else(|| "llama".into());
        let family = family_of(&arch)?;
        let is_gemma = family == Family::Gemma3;
        let req = |v: Option<usize>, n: &str| v.ok_or_else(|| Error::InvalidModel(format!("config.json lacks `{n}`")));
        let hidden = req(c.hidden_size, "hidden_size")?;
        let heads = req(c.num_attention_heads, "num_attention_heads")?;
        let layers = req(c.num_hidden_layers, "num_hidden_layers")?;
        let head_dim = c.head_dim.unwrap_or(hidden.checked_div(heads).unwrap_or(0));
        let is_oss = arch == "gpt_oss";
        let is_qwen35 = family == Family::Qwen35;
        // transformers 5 writes `rope_parameters` (with the base inside) where older configs have `rope_scaling`
        let rope = c.rope_scaling.as_ref().or(c.rope_parameters.as_ref());
        let rope_scaling = match rope {
            None => RopeScaling::None,
            Some(s) => hf_rope_scaling(s, c.max_position_embeddings)?,
        };
        let rope_theta = c.rope_theta.or(rope.and_then(|r| r.rope_theta));
        let linear_attn = if is_qwen35 { Some(hf_linear_attn(&c, layers)?) } else { None };
        let layer_window = if let Some(types) = &c.layer_types {
            types.iter().map(|t| if t == "sliding_attention" { c.sliding_window } else { None }).collect()
        } else if is_gemma {
            gemma_windows(layers, c.sliding_window.unwrap_or(4096), c.sliding_window_pattern.unwrap_or(6))
        } else if is_oss {
            // transformers' default for gpt-oss: even layers slide, odd layers see everything
            (0..layers).map(|i| if i % 2 == 0 { Some(c.sliding_window.unwrap_or(128)) } else { None }).collect()
        } else if c.use_sliding_window.unwrap_or(true) {
            vec![c.sliding_window; layers]
        } else {
            vec![None; layers]
        };
        let moe = hf_moe(&c, layers, is_oss)?;
        let is_qwen_vl = arch.starts_with("qwen2_vl") || arch.starts_with("qwen2_5_vl");
        let attention_bias = c.attention_bias.unwrap_or(arch == "qwen2" || is_qwen_vl || is_oss);
        Self {
            family,
            vocab_size: req(c.vocab_size, "vocab_size")?,
            hidden_size: hidden,
            intermediate_size: match (&moe, c.intermediate_size) {
                (_, Some(n)) => n,
                (Some(m), None) => m.intermediate_size,
                (None, None) => req(None, "intermediate_size")?,
            },
            num_layers: layers,
            num_heads: heads,
            num_kv_heads: c.num_key_value_heads.unwrap_or(heads),
            head_dim,
            rms_norm_eps: c.rms_norm_eps.unwrap_or(1e-6),
            rope_theta: rope_theta.unwrap_or(match (is_gemma, is_oss) {
                (true, _) => 1_000_000.0,
                (_, true) => 150_000.0,
                _ => 10_000.0,
            }),
            rope_local_theta: if is_gemma { Some(c.rope_local_base_freq.unwrap_or(10_000.0)) } else { None },
            rope_scaling,
            rope_interleaved: false,
            max_position_embeddings: c.max_position_embeddings.unwrap_or(4096),
            attention_bias,
            qk_norm: arch == "qwen3" || arch == "qwen3_moe" || is_gemma || is_qwen35,
            tie_word_embeddings: c.tie_word_embeddings.unwrap_or(is_gemma),
            layer_window,
            query_pre_attn_scalar: c.query_pre_attn_scalar.unwrap_or(head_dim as f64),
            final_logit_softcapping: c.final_logit_softcapping,
            attn_logit_softcapping: c.attn_logit_softcapping,
            activation: match c.hidden_act.as_deref().or(c.hidden_activation.as_deref()) {
                _ if is_oss => Activation::SwigluOai {
                    alpha: c.swiglu_alpha.unwrap_or(1.702),
                    limit: c.swiglu_limit.unwrap_or(7.0),
                },
                Some("gelu_pytorch_tanh") | Some("gelu_tanh") => Activation::GeluTanh,
                Some("silu") | Some("swish") | None if !is_gemma => Activation::Silu,
                None => Activation::GeluTanh,
                Some(other) => {
                    return Err(Error::Unsupported(format!("hidden_act `{other}`; supported: silu, gelu_pytorch_tanh")))
                }
            },
            // Gemma's and Qwen3.5's norms multiply by 1 + w
            norm_weight_offset: if is_gemma || is_qwen35 { 1.0 } else { 0.0 },
            bos_token_id: c.bos_token_id.as_ref().and_then(|v| v.ids().first().copied()),
            eos_token_ids: c.eos_token_id.as_ref().map(|v| v.ids()).unwrap_or_default(),
            moe,
            attention_sinks: is_oss,
            o_bias: is_oss && attention_bias,
            linear_attn,
            rotary_dim: hf_rotary_dim(&c, rope, head_dim, is_qwen35),
            mrope_section: rope.and_then(|r| r.mrope_section.clone()).filter(|_| !is_qwen35),
            arch_name: arch,
        }
        .validate()
    }
}

/// The text model's config: Gemma 3, Qwen3.5 and Qwen2(.5)-VL multimodal checkpoints may nest it.
fn unnest(c: HfConfig) -> HfConfig {
    let outer_type = c.model_type.clone();
    match (c.text_config, outer_type.as_deref()) {
        (Some(inner), Some(outer @ ("gemma3" | "qwen3_5" | "qwen3_5_moe" | "qwen2_vl" | "qwen2_5_vl"))) => {
            let mut inner = *inner;
            inner.model_type.get_or_insert_with(|| format!("{outer}_text"));
            inner.tie_word_embeddings = inner.tie_word_embeddings.or(c.tie_word_embeddings);
            inner
        }
        (text_config, _) => HfConfig { text_config, ..c },
    }
}

/// A Hugging Face `rope_scaling` (or transformers 5 `rope_parameters`) block.
fn hf_rope_scaling(s: &HfRopeScaling, max_positions: Option<usize>) -> Result<RopeScaling> {
    let kind = s.rope_type.as_deref().or(s.r#type.as_deref()).unwrap_or("default");
    Ok(match kind {
        // M-RoPE's sections are read beside the scaling (`mrope_section`); its frequencies are the default ones.
        "default" | "mrope" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: s.factor.unwrap_or(1.0) },
        "llama3" => RopeScaling::Llama3 {
            factor: s.factor.unwrap_or(8.0),
            low_freq_factor: s.low_freq_factor.unwrap_or(1.0),
            high_freq_factor: s.high_freq_factor.unwrap_or(4.0),
            original_max_position_embeddings: s.original_max_position_embeddings.unwrap_or(8192.0),
        },
        "yarn" => {
            let original = s.original_max_position_embeddings.ok_or_else(|| {
                Error::InvalidModel("yarn rope scaling lacks `original_max_position_embeddings`".into())
            })?;
            let factor = match (s.factor, max_positions) {
                (Some(f), _) => f,
                (None, Some(m)) => m as f64 / original,
                (None, None) => return Err(Error::InvalidModel("yarn rope scaling lacks `factor`".into())),
            };
            if !(factor.is_finite() && factor > 0.0 && original > 0.0) {
                return Err(Error::InvalidModel(format!(
                    "yarn rope scaling: factor {factor} and original_max_position_embeddings {original} must be \
                     positive"
                )));
            }
            // transformers: 0.1·mscale·ln(factor) + 1 (1 where factor <= 1)
            let mscale = |m: f64| if factor <= 1.0 { 1.0 } else { 0.1 * m * factor.ln() + 1.0 };
            let attention_factor = match (s.attention_factor, s.mscale, s.mscale_all_dim) {
                (Some(a), _, _) => a,
                (None, Some(m), Some(all)) if m != 0.0 && all != 0.0 => mscale(m) / mscale(all),
                _ => mscale(1.0),
            };
            RopeScaling::Yarn {
                factor,
                beta_fast: s.beta_fast.filter(|&b| b != 0.0).unwrap_or(32.0),
                beta_slow: s.beta_slow.filter(|&b| b != 0.0).unwrap_or(1.0),
                original_max_position_embeddings: original,
                truncate: s.truncate.unwrap_or(true),
                attention_factor,
            }
        }
        other => {
            return Err(Error::Unsupported(format!(
                "rope_scaling type `{other}`; supported: default, linear, llama3, yarn"
            )))
        }
    })
}

/// The routed feed-forward of a Hugging Face config (`num_experts` > 0), as transformers' Qwen3-MoE reads it: layer
/// i is routed unless listed in `mlp_only_layers`, when (i + 1) is a multiple of `decoder_sparse_step`. gpt-oss
/// (`gpt_oss`) routes every layer, top-k then softmax, with biases, its experts `intermediate_size` wide.
fn hf_moe(c: &HfConfig, layers: usize, gpt_oss: bool) -> Result<Option<MoeConfig>> {
    let Some(experts) = c.num_experts.filter(|&e| e > 0) else { return Ok(None) };
    let req = |v: Option<usize>, n: &str| v.ok_or_else(|| Error::InvalidModel(format!("config.json lacks `{n}`")));
    let step = c.decoder_sparse_step.unwrap_or(1);
    let dense = c.mlp_only_layers.clone().unwrap_or_default();
    let intermediate_size = match (gpt_oss, c.moe_intermediate_size) {
        (_, Some(n)) => n,
        (true, None) => req(c.intermediate_size, "intermediate_size")?,
        (false, None) => req(None, "moe_intermediate_size")?,
    };
    Ok(Some(MoeConfig {
        experts,
        top_k: req(c.num_experts_per_tok, "num_experts_per_tok")?,
        intermediate_size,
        // Qwen3.5-MoE's router always renormalizes (its config has no such field); Qwen3-Next's by default
        norm_topk_prob: c
            .norm_topk_prob
            .unwrap_or(matches!(c.model_type.as_deref(), Some("qwen3_5_moe" | "qwen3_5_moe_text" | "qwen3_next"))),
        sparse_layers: (0..layers).map(|i| !dense.contains(&i) && step > 0 && (i + 1) % step == 0).collect(),
        routing: if gpt_oss { Routing::TopKSoftmax } else { Routing::SoftmaxTopK },
        biases: gpt_oss,
        shared_expert: c.shared_expert_intermediate_size.filter(|&n| n > 0),
    }))
}

/// The rotated dims of each head: `partial_rotary_factor` of it (top level or in `rope_parameters`; Qwen3.5 turns
/// a quarter unless its config says otherwise), rounded down to even.
fn hf_rotary_dim(c: &HfConfig, rope: Option<&HfRopeScaling>, head_dim: usize, qwen35: bool) -> usize {
    let partial = c.partial_rotary_factor.or(rope.and_then(|r| r.partial_rotary_factor));
    let partial = partial.unwrap_or(if qwen35 { 0.25 } else { 1.0 });
    ((head_dim as f64 * partial) as usize) & !1
}

/// Qwen3.5's linear-attention layers: `layer_types` (else every `full_attention_interval`-th layer is full
/// attention, transformers' default of 4) and the DeltaNet's heads.
fn hf_linear_attn(c: &HfConfig, layers: usize) -> Result<LinearAttnConfig> {
    let layer_flags = match &c.layer_types {
        Some(types) => types
            .iter()
            .map(|t| match t.as_str() {
                "linear_attention" => Ok(true),
                "full_attention" => Ok(false),
                other => Err(Error::Unsupported(format!(
                    "layer type `{other}` in a Qwen3.5 config; supported: linear_attention, full_attention"
                ))),
            })
            .collect::<Result<Vec<bool>>>()?,
        None => {
            let every = c.full_attention_interval.unwrap_or(4).max(1);
            (0..layers).map(|i| (i + 1) % every != 0).collect()
        }
    };
    Ok(LinearAttnConfig {
        layers: layer_flags,
        conv_kernel: c.linear_conv_kernel_dim.unwrap_or(4),
        k_heads: c.linear_num_key_heads.unwrap_or(16),
        v_heads: c.linear_num_value_heads.unwrap_or(32),
        key_dim: c.linear_key_head_dim.unwrap_or(128),
        value_dim: c.linear_value_head_dim.unwrap_or(128),
        tiled_v_heads: false,
    })
}

/// A token id field that may be a single id or a list (HF allows both).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum IdOrIds {
    One(u32),
    Many(Vec<u32>),
}

impl IdOrIds {
    pub fn ids(&self) -> Vec<u32> {
        match self {
            IdOrIds::One(i) => vec![*i],
            IdOrIds::Many(v) => v.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct HfRopeScaling {
    rope_type: Option<String>,
    r#type: Option<String>,
    factor: Option<f64>,
    low_freq_factor: Option<f64>,
    high_freq_factor: Option<f64>,
    original_max_position_embeddings: Option<f64>,
    beta_fast: Option<f64>,
    beta_slow: Option<f64>,
    truncate: Option<bool>,
    attention_factor: Option<f64>,
    mscale: Option<f64>,
    mscale_all_dim: Option<f64>,
    /// transformers 5's `rope_parameters` carry the base.
    rope_theta: Option<f64>,
    partial_rotary_factor: Option<f64>,
    mrope_section: Option<Vec<usize>>,
}

#[derive(Debug, Deserialize)]
struct HfConfig {
    model_type: Option<String>,
    text_config: Option<Box<HfConfig>>,
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_local_base_freq: Option<f64>,
    rope_scaling: Option<HfRopeScaling>,
    rope_parameters: Option<HfRopeScaling>,
    max_position_embeddings: Option<usize>,
    attention_bias: Option<bool>,
    tie_word_embeddings: Option<bool>,
    sliding_window: Option<usize>,
    sliding_window_pattern: Option<usize>,
    use_sliding_window: Option<bool>,
    layer_types: Option<Vec<String>>,
    query_pre_attn_scalar: Option<f64>,
    final_logit_softcapping: Option<f64>,
    attn_logit_softcapping: Option<f64>,
    hidden_act: Option<String>,
    hidden_activation: Option<String>,
    bos_token_id: Option<IdOrIds>,
    eos_token_id: Option<IdOrIds>,
    #[serde(alias = "num_local_experts")]
    num_experts: Option<usize>,
    #[serde(alias = "experts_per_token")]
    num_experts_per_tok: Option<usize>,
    swiglu_alpha: Option<f32>,
    swiglu_limit: Option<f32>,
    moe_intermediate_size: Option<usize>,
    norm_topk_prob: Option<bool>,
    decoder_sparse_step: Option<usize>,
    mlp_only_layers: Option<Vec<usize>>,
    partial_rotary_factor: Option<f64>,
    shared_expert_intermediate_size: Option<usize>,
    full_attention_interval: Option<usize>,
    linear_conv_kernel_dim: Option<usize>,
    linear_key_head_dim: Option<usize>,
    linear_value_head_dim: Option<usize>,
    linear_num_key_heads: Option<usize>,
    linear_num_value_heads: Option<usize>,
}
