//! One model configuration, built either from a Hugging Face `config.json` or from GGUF metadata, so model code
//! sees a single shape of hyper-parameters whatever the file format.

use super::gguf::GgufFile;
use crate::{Error, Result};
use serde::Deserialize;

/// The architecture families hearth implements (one model file each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Llama 2/3, Mistral, SmolLM2, Qwen2 (qkv bias), Qwen3 (q/k norm), Qwen3-MoE (Qwen3 with routed experts).
    Llama,
    /// Gemma 3 text.
    Gemma3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Silu,
    GeluTanh,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (frequencies divided by it).
    Linear {
        factor: f64,
    },
    /// Llama 3.1 frequency-dependent scaling.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
    /// Per-dimension frequency divisors read from a GGUF `rope_freqs.weight` tensor.
    FreqFactors(Vec<f32>),
}

/// A Mixture-of-Experts feed-forward (Qwen3-MoE): a router picks `top_k` of `experts` gated MLPs per token.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    pub experts: usize,
    /// Experts each token is routed to.
    pub top_k: usize,
    /// The intermediate size of one expert.
    pub intermediate_size: usize,
    /// Renormalize the top-k routing probabilities to sum to 1.
    pub norm_topk_prob: bool,
    /// Per layer: whether its feed-forward is the MoE block (else the dense MLP of `intermediate_size`).
    pub sparse_layers: Vec<bool>,
}

#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub family: Family,
    /// The original architecture name (`llama`, `qwen2`, `qwen3`, `mistral`, `gemma3`, ...).
    pub arch_name: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// Rope base of sliding-window layers (Gemma 3: 10 000), if different from `rope_theta`.
    pub rope_local_theta: Option<f64>,
    pub rope_scaling: RopeScaling,
    /// GGUF llama-arch q/k weights are permuted for interleaved ("normal") rope; HF and NEOX archs use halves.
    pub rope_interleaved: bool,
    pub max_position_embeddings: usize,
    pub attention_bias: bool,
    pub qk_norm: bool,
    pub tie_word_embeddings: bool,
    /// Per layer: `Some(window)` for sliding-window layers.
    pub layer_window: Vec<Option<usize>>,
    /// Attention scale = this^-0.5 (defaults to head_dim).
    pub query_pre_attn_scalar: f64,
    pub final_logit_softcapping: Option<f64>,
    pub attn_logit_softcapping: Option<f64>,
    pub activation: Activation,
    /// Added to RMSNorm weights at load: 1.0 for HF Gemma (`x * (1 + w)`); GGUF stores `1 + w` already.
    pub norm_weight_offset: f64,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// The routed-experts feed-forward, for MoE architectures.
    pub moe: Option<MoeConfig>,
}

impl ModelConfig {
    pub fn describe(&self) -> String {
        let experts = match &self.moe {
            Some(m) => format!(", {} experts of {}, {} per token", m.experts, m.intermediate_size, m.top_k),
            None => String::new(),
        };
        format!(
            "{} ({} layers, hidden {}, heads {}/{} kv, head_dim {}, vocab {}{experts})",
            self.arch_name,
            self.num_layers,
            self.hidden_size,
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.vocab_size
        )
    }

    fn validate(self) -> Result<Self> {
        let bad = |m: String| Err(Error::InvalidModel(m));
        if self.num_heads == 0 || self.num_kv_heads == 0 || !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return bad(format!("{} heads is not a multiple of {} kv heads", self.num_heads, self.num_kv_heads));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!("head_dim {} must be even and non-zero", self.head_dim));
        }
        if self.num_layers == 0 || self.hidden_size == 0 || self.vocab_size == 0 {
            return bad("num_layers, hidden_size and vocab_size must be non-zero".into());
        }
        if self.layer_window.len() != self.num_layers {
            return bad("per-layer sliding-window list does not match the layer count".into());
        }
        if self.layer_window.contains(&Some(0)) {
            return bad("a sliding window of 0 tokens would hide every key".into());
        }
        if let Some(m) = &self.moe {
            if m.experts == 0 || m.top_k == 0 || m.top_k > m.experts || m.intermediate_size == 0 {
                return bad(format!(
                    "mixture of experts: {} experts, {} per token, expert size {}: need 1 <= per token <= experts and \
                     a non-zero expert size",
                    m.experts, m.top_k, m.intermediate_size
                ));
            }
            if m.sparse_layers.len() != self.num_layers {
                return bad("the per-layer list of MoE layers does not match the layer count".into());
            }
        }
        Ok(self)
    }
}

const SUPPORTED_ARCHS: &str =
    "llama, mistral, qwen2, qwen3, qwen3_moe (GGUF qwen3moe), gemma3 (GGUF general.architecture or HF model_type)";

fn family_of(arch: &str) -> Result<Family> {
    match arch {
        "llama" | "mistral" | "qwen2" | "qwen3" | "qwen3_moe" | "qwen3moe" | "smollm" | "smollm2" => Ok(Family::Llama),
        "gemma3" | "gemma3_text" => Ok(Family::Gemma3),
        other => Err(Error::Unsupported(format!("architecture `{other}`; supported: {SUPPORTED_ARCHS}"))),
    }
}

/// Gemma 3: every `pattern`-th layer (1-based) is global, the others slide.
fn gemma_windows(n: usize, window: usize, pattern: usize) -> Vec<Option<usize>> {
    (0..n).map(|i| if pattern > 0 && (i + 1) % pattern == 0 { None } else { Some(window) }).collect()
}

impl ModelConfig {
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let arch = g.architecture()?.to_string();
        let family = family_of(&arch)?;
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
        let vocab = match g.get_u64(&key("vocab_size")) {
            Some(v) => v as usize,
            None => {
                g.get("tokenizer.ggml.tokens").and_then(|v| v.to_vec().ok()).map(|v| v.len()).ok_or_else(|| {
                    Error::InvalidModel("GGUF has neither a vocab_size nor tokenizer.ggml.tokens".into())
                })?
            }
        };
        let rope_scaling = if g.has_tensor("rope_freqs.weight") {
            let t = g.tensor_f32("rope_freqs.weight", &candle_core::Device::Cpu)?;
            RopeScaling::FreqFactors(t.flatten_all()?.to_vec1::<f32>()?)
        } else {
            match g.get_str(&key("rope.scaling.type")) {
                Some("linear") => RopeScaling::Linear { factor: g.get_f64(&key("rope.scaling.factor")).unwrap_or(1.0) },
                None | Some("none") => RopeScaling::None,
                Some(other) => {
                    return Err(Error::Unsupported(format!(
                        "GGUF rope scaling `{other}`; supported: none, linear, llama3"
                    )))
                }
            }
        };
        let is_gemma = family == Family::Gemma3;
        let window = g.get_u64(&key("attention.sliding_window")).map(|w| w as usize);
        let layer_window = match (is_gemma, window) {
            (true, Some(w)) => gemma_windows(layers, w, 6),
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
            qk_norm: g.has_tensor("blk.0.attn_q_norm.weight"),
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
            activation: if is_gemma { Activation::GeluTanh } else { Activation::Silu },
            norm_weight_offset: 0.0,
            bos_token_id: g.get_u64("tokenizer.ggml.bos_token_id").map(|v| v as u32),
            eos_token_ids: eos.into_iter().collect(),
            moe,
            arch_name: arch,
        }
        .validate()
    }

    pub fn from_hf_json(text: &str) -> Result<Self> {
        let c: HfConfig = serde_json::from_str(text).map_err(|e| Error::InvalidModel(format!("config.json: {e}")))?;
        // Gemma 3 multimodal checkpoints nest the text model.
        let c = match c.text_config {
            Some(inner) if c.model_type.as_deref() == Some("gemma3") => {
                let mut inner = *inner;
                inner.model_type.get_or_insert_with(|| "gemma3_text".into());
                inner
            }
            _ => c,
        };
        let arch = c.model_type.clone().unwrap_or_else(|| "llama".into());
        let family = family_of(&arch)?;
        let is_gemma = family == Family::Gemma3;
        let req = |v: Option<usize>, n: &str| v.ok_or_else(|| Error::InvalidModel(format!("config.json lacks `{n}`")));
        let hidden = req(c.hidden_size, "hidden_size")?;
        let heads = req(c.num_attention_heads, "num_attention_heads")?;
        let layers = req(c.num_hidden_layers, "num_hidden_layers")?;
        let head_dim = c.head_dim.unwrap_or(hidden.checked_div(heads).unwrap_or(0));
        let rope_scaling = match &c.rope_scaling {
            None => RopeScaling::None,
            Some(s) => {
                let kind = s.rope_type.as_deref().or(s.r#type.as_deref()).unwrap_or("default");
                match kind {
                    "default" => RopeScaling::None,
                    "linear" => RopeScaling::Linear { factor: s.factor.unwrap_or(1.0) },
                    "llama3" => RopeScaling::Llama3 {
                        factor: s.factor.unwrap_or(8.0),
                        low_freq_factor: s.low_freq_factor.unwrap_or(1.0),
                        high_freq_factor: s.high_freq_factor.unwrap_or(4.0),
                        original_max_position_embeddings: s.original_max_position_embeddings.unwrap_or(8192.0),
                    },
                    other => {
                        return Err(Error::Unsupported(format!(
                            "rope_scaling type `{other}`; supported: default, linear, llama3"
                        )))
                    }
                }
            }
        };
        let layer_window = if let Some(types) = &c.layer_types {
            types.iter().map(|t| if t == "sliding_attention" { c.sliding_window } else { None }).collect()
        } else if is_gemma {
            gemma_windows(layers, c.sliding_window.unwrap_or(4096), c.sliding_window_pattern.unwrap_or(6))
        } else if c.use_sliding_window.unwrap_or(true) {
            vec![c.sliding_window; layers]
        } else {
            vec![None; layers]
        };
        let moe = hf_moe(&c, layers)?;
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
            rope_theta: c.rope_theta.unwrap_or(if is_gemma { 1_000_000.0 } else { 10_000.0 }),
            rope_local_theta: if is_gemma { Some(c.rope_local_base_freq.unwrap_or(10_000.0)) } else { None },
            rope_scaling,
            rope_interleaved: false,
            max_position_embeddings: c.max_position_embeddings.unwrap_or(4096),
            attention_bias: c.attention_bias.unwrap_or(arch == "qwen2"),
            qk_norm: arch == "qwen3" || arch == "qwen3_moe" || is_gemma,
            tie_word_embeddings: c.tie_word_embeddings.unwrap_or(is_gemma),
            layer_window,
            query_pre_attn_scalar: c.query_pre_attn_scalar.unwrap_or(head_dim as f64),
            final_logit_softcapping: c.final_logit_softcapping,
            attn_logit_softcapping: c.attn_logit_softcapping,
            activation: match c.hidden_act.as_deref().or(c.hidden_activation.as_deref()) {
                Some("gelu_pytorch_tanh") | Some("gelu_tanh") => Activation::GeluTanh,
                Some("silu") | Some("swish") | None if !is_gemma => Activation::Silu,
                None => Activation::GeluTanh,
                Some(other) => {
                    return Err(Error::Unsupported(format!("hidden_act `{other}`; supported: silu, gelu_pytorch_tanh")))
                }
            },
            norm_weight_offset: if is_gemma { 1.0 } else { 0.0 },
            bos_token_id: c.bos_token_id.as_ref().and_then(|v| v.ids().first().copied()),
            eos_token_ids: c.eos_token_id.as_ref().map(|v| v.ids()).unwrap_or_default(),
            moe,
            arch_name: arch,
        }
        .validate()
    }
}

/// The routed feed-forward of a Hugging Face config (`num_experts` > 0), as transformers' Qwen3-MoE reads it: layer
/// i is routed unless listed in `mlp_only_layers`, when (i + 1) is a multiple of `decoder_sparse_step`.
fn hf_moe(c: &HfConfig, layers: usize) -> Result<Option<MoeConfig>> {
    let Some(experts) = c.num_experts.filter(|&e| e > 0) else { return Ok(None) };
    let req = |v: Option<usize>, n: &str| v.ok_or_else(|| Error::InvalidModel(format!("config.json lacks `{n}`")));
    let step = c.decoder_sparse_step.unwrap_or(1);
    let dense = c.mlp_only_layers.clone().unwrap_or_default();
    Ok(Some(MoeConfig {
        experts,
        top_k: req(c.num_experts_per_tok, "num_experts_per_tok")?,
        intermediate_size: req(c.moe_intermediate_size, "moe_intermediate_size")?,
        norm_topk_prob: c.norm_topk_prob.unwrap_or(false),
        sparse_layers: (0..layers).map(|i| !dense.contains(&i) && step > 0 && (i + 1) % step == 0).collect(),
    }))
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
    num_experts_per_tok: Option<usize>,
    moe_intermediate_size: Option<usize>,
    norm_topk_prob: Option<bool>,
    decoder_sparse_step: Option<usize>,
    mlp_only_layers: Option<Vec<usize>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_qwen2_and_defaults_bias_on() {
        let c = ModelConfig::from_hf_json(
            r#"{"model_type":"qwen2","vocab_size":10,"hidden_size":8,"intermediate_size":16,
                "num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"eos_token_id":[3,4]}"#,
        )
        .unwrap();
        assert!(c.attention_bias);
        assert!(!c.qk_norm);
        assert_eq!(c.head_dim, 4);
        assert_eq!(c.eos_token_ids, vec![3, 4]);
    }

    #[test]
    fn gemma_layer_pattern_makes_every_sixth_layer_global() {
        let w = gemma_windows(12, 512, 6);
        assert_eq!(w.iter().filter(|w| w.is_none()).count(), 2);
        assert_eq!(w[5], None);
        assert_eq!(w[0], Some(512));
    }

    #[test]
    fn rejects_unknown_architecture_with_the_supported_list() {
        let e = ModelConfig::from_hf_json(r#"{"model_type":"gpt_neox","hidden_size":8}"#).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("gpt_neox") && m.contains("qwen3"), "{m}");
    }

    #[test]
    fn qwen3_moe_routes_every_layer_but_the_dense_ones() {
        let base = r#""model_type":"qwen3_moe","vocab_size":10,"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":4,"num_attention_heads":2,"num_key_value_heads":1,"num_experts_per_tok":2,
            "moe_intermediate_size":4,"norm_topk_prob":true,"mlp_only_layers":[2]"#;
        for experts in [r#""num_experts":8"#, r#""num_local_experts":8"#] {
            let c = ModelConfig::from_hf_json(&format!("{{{base},{experts}}}")).unwrap();
            let m = c.moe.clone().expect("a MoE config");
            assert_eq!((m.experts, m.top_k, m.intermediate_size, m.norm_topk_prob), (8, 2, 4, true));
            assert_eq!(m.sparse_layers, vec![true, true, false, true]);
            assert!(c.qk_norm);
            assert!(c.describe().ends_with("8 experts of 4, 2 per token)"), "{}", c.describe());
        }
        let e = ModelConfig::from_hf_json(&format!("{{{base},\"num_experts\":1}}")).unwrap_err();
        assert!(e.to_string().contains("per token"), "{e}");
    }

    #[test]
    fn rejects_inconsistent_heads() {
        let e = ModelConfig::from_hf_json(
            r#"{"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":16,
                "num_hidden_layers":2,"num_attention_heads":3,"num_key_value_heads":2}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("kv heads"));
    }
}
