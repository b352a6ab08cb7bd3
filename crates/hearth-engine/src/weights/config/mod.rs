//! One model configuration, built either from a Hugging Face `config.json` or from GGUF metadata, so model code
//! sees a single shape of hyper-parameters whatever the file format.

mod gguf;
mod hf;

use crate::{Error, Result};

pub use hf::IdOrIds;

/// The architecture families hearth implements (one model file each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Llama 2/3, Mistral, SmolLM2, Qwen2 (qkv bias), Qwen3 (q/k norm), Qwen3-MoE (Qwen3 with routed experts),
    /// gpt-oss (attention sinks, biased routed experts).
    Llama,
    /// Gemma 3 text.
    Gemma3,
    /// Qwen3.5 text: gated-DeltaNet linear-attention layers ([`LinearAttnConfig`]) between output-gated
    /// full-attention layers with partial rotary embeddings.
    Qwen35,
}

/// The linear-attention (gated DeltaNet) layers of a hybrid model (Qwen3.5): a causal depthwise convolution over
/// the q|k|v projection, then the gated delta rule over a per-sequence state of `v_heads` × `key_dim` ×
/// `value_dim` (`crate::recurrent`).
#[derive(Debug, Clone, PartialEq)]
pub struct LinearAttnConfig {
    /// Per layer: whether it is a linear-attention layer (else full attention).
    pub layers: Vec<bool>,
    /// The convolution's kernel size (it keeps `conv_kernel - 1` inputs per sequence).
    pub conv_kernel: usize,
    pub k_heads: usize,
    pub v_heads: usize,
    pub key_dim: usize,
    pub value_dim: usize,
    /// Value heads in tiled order (llama.cpp's GGUF: value head `h` reads key head `h % k_heads`) rather than
    /// grouped by key head (Hugging Face: `h / (v_heads / k_heads)`).
    pub tiled_v_heads: bool,
}

impl LinearAttnConfig {
    /// How many of the model's layers are linear attention.
    pub fn linear_layers(&self) -> usize {
        self.layers.iter().filter(|&&lin| lin).count()
    }

    /// The key head value head `h` reads.
    pub fn key_head(&self, h: usize) -> usize {
        if self.tiled_v_heads {
            h % self.k_heads
        } else {
            h / (self.v_heads / self.k_heads)
        }
    }
}

impl LinearAttnConfig {
    /// The channels the convolution runs over: q, k (`k_heads` × `key_dim` each) and v.
    pub fn conv_dim(&self) -> usize {
        2 * self.k_heads * self.key_dim + self.v_heads * self.value_dim
    }
}

/// The gated MLP's activation: `out = act(gate) * up`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    Silu,
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: with g = min(gate, limit) and u = clamp(up, -limit, limit),
    /// `out = g * sigmoid(alpha * g) * (u + 1)`.
    SwigluOai {
        alpha: f32,
        limit: f32,
    },
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
    /// YaRN (transformers' `_compute_yarn_parameters`): frequencies blended between `1/factor` interpolation and
    /// extrapolation by a linear ramp over the dimensions between the `beta_fast` and `beta_slow` correction
    /// dimensions; `attention_factor` multiplies cos and sin.
    Yarn {
        factor: f64,
        beta_fast: f64,
        beta_slow: f64,
        original_max_position_embeddings: f64,
        /// Round the correction range outward to whole dimensions.
        truncate: bool,
        attention_factor: f64,
    },
}

impl RopeScaling {
    /// What cos and sin are multiplied by (YaRN's attention factor; 1 for the rest).
    pub fn attention_factor(&self) -> f64 {
        match self {
            RopeScaling::Yarn { attention_factor, .. } => *attention_factor,
            _ => 1.0,
        }
    }
}

/// How a router's scores pick a token's experts and weigh them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// Softmax over every expert, then the `top_k` largest probabilities (Qwen3-MoE), renormalized to sum to 1
    /// where `norm_topk_prob` is set.
    SoftmaxTopK,
    /// The `top_k` largest scores, then a softmax over those (gpt-oss).
    TopKSoftmax,
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
    pub routing: Routing,
    /// The router and the experts' projections have biases (gpt-oss).
    pub biases: bool,
    /// A shared expert of this intermediate size runs on every token beside the routed ones, its output weighed
    /// by sigmoid(`shared_expert_gate`(x)) (Qwen3.5-MoE).
    pub shared_expert: Option<usize>,
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
    /// Each attention head has a learned sink logit that joins its softmax's denominator (gpt-oss).
    pub attention_sinks: bool,
    /// The attention's output projection has a bias (gpt-oss).
    pub o_bias: bool,
    /// Hybrid models: which layers are linear attention, and their shape.
    pub linear_attn: Option<LinearAttnConfig>,
    /// The rotary embedding turns the first this many dims of each head (`head_dim` unless partial).
    pub rotary_dim: usize,
    /// Multimodal rope (Qwen2-VL, Qwen2.5-VL): the rotary frequencies split into (temporal, height, width)
    /// sections, each turned by its own component of a token's 3D position. Text tokens' three components are
    /// equal, which is plain rope.
    pub mrope_section: Option<Vec<usize>>,
}

impl ModelConfig {
    /// Layers that keep KV (every layer but the linear-attention ones).
    pub fn kv_layers(&self) -> usize {
        match &self.linear_attn {
            Some(l) => l.layers.len() - l.linear_layers(),
            None => self.num_layers,
        }
    }

    pub fn describe(&self) -> String {
        let mut experts = match &self.moe {
            Some(m) => format!(", {} experts of {}, {} per token", m.experts, m.intermediate_size, m.top_k),
            None => String::new(),
        };
        if let Some(l) = &self.linear_attn {
            experts += &format!(", {} linear-attention layers of {} value heads", l.linear_layers(), l.v_heads);
        }
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
        if self.rotary_dim == 0 || self.rotary_dim > self.head_dim || !self.rotary_dim.is_multiple_of(2) {
            return bad(format!(
                "rotary dims {} must be even, non-zero and at most head_dim {}",
                self.rotary_dim, self.head_dim
            ));
        }
        if let Some(m) = &self.mrope_section {
            if m.len() != 3 || m.iter().sum::<usize>() != self.rotary_dim / 2 {
                return bad(format!(
                    "mrope_section {m:?} must have three parts summing to half the rotary dims ({})",
                    self.rotary_dim / 2
                ));
            }
        }
        if let Some(l) = &self.linear_attn {
            if l.layers.len() != self.num_layers {
                return bad("the per-layer list of linear-attention layers does not match the layer count".into());
            }
            if l.conv_kernel == 0
                || l.k_heads == 0
                || l.key_dim == 0
                || l.value_dim == 0
                || l.v_heads == 0
                || !l.v_heads.is_multiple_of(l.k_heads)
            {
                return bad(format!(
                    "linear attention: {} value heads over {} key heads (a multiple of it), key dim {}, value dim {}, \
                     kernel {}: all must be non-zero",
                    l.v_heads, l.k_heads, l.key_dim, l.value_dim, l.conv_kernel
                ));
            }
            if l.layers.iter().all(|&lin| lin) {
                return bad("a hybrid model needs at least one full-attention layer".into());
            }
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

const SUPPORTED_ARCHS: &str = "llama, mistral, qwen2, qwen3, qwen3_moe (GGUF qwen3moe), gpt_oss, gemma3, \
                               qwen3_5 and qwen3_5_moe (GGUF qwen35, qwen35moe), qwen3_next (GGUF qwen3next), qwen2_vl and qwen2_5_vl \
                               (GGUF qwen2vl); named by GGUF general.architecture or HF model_type";

fn family_of(arch: &str) -> Result<Family> {
    match arch {
        "llama" | "mistral" | "qwen2" | "qwen3" | "qwen3_moe" | "qwen3moe" | "gpt_oss" | "gpt-oss" | "smollm"
        | "smollm2" | "qwen2_vl" | "qwen2_vl_text" | "qwen2_5_vl" | "qwen2_5_vl_text" | "qwen2vl" => Ok(Family::Llama),
        "gemma3" | "gemma3_text" => Ok(Family::Gemma3),
        "qwen3_5" | "qwen3_5_text" | "qwen3_5_moe" | "qwen3_5_moe_text" | "qwen3_next" | "qwen35" | "qwen35moe"
        | "qwen3next" => Ok(Family::Qwen35),
        other => Err(Error::Unsupported(format!("architecture `{other}`; supported: {SUPPORTED_ARCHS}"))),
    }
}

/// Gemma 3: every `pattern`-th layer (1-based) is global, the others slide.
fn gemma_windows(n: usize, window: usize, pattern: usize) -> Vec<Option<usize>> {
    (0..n).map(|i| if pattern > 0 && (i + 1) % pattern == 0 { None } else { Some(window) }).collect()
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

    #[test]
    fn gpt_oss_sinks_biases_yarn_and_routing() {
        let c = ModelConfig::from_hf_json(
            r#"{"model_type":"gpt_oss","vocab_size":10,"hidden_size":8,"intermediate_size":6,"head_dim":4,
                "num_hidden_layers":3,"num_attention_heads":2,"num_key_value_heads":1,"num_local_experts":4,
                "experts_per_token":2,"sliding_window":16,"swiglu_limit":7.0,
                "rope_scaling":{"rope_type":"yarn","factor":32.0,"beta_fast":32.0,"beta_slow":1.0,"truncate":false,
                                "original_max_position_embeddings":4096},"rope_theta":150000}"#,
        )
        .unwrap();
        assert!(c.attention_sinks && c.attention_bias && c.o_bias);
        assert_eq!(c.layer_window, vec![Some(16), None, Some(16)], "even layers slide");
        assert_eq!(c.activation, Activation::SwigluOai { alpha: 1.702, limit: 7.0 });
        let m = c.moe.as_ref().unwrap();
        assert_eq!((m.experts, m.top_k, m.intermediate_size), (4, 2, 6));
        assert_eq!((m.routing, m.biases), (Routing::TopKSoftmax, true));
        match c.rope_scaling {
            RopeScaling::Yarn { factor, truncate, attention_factor, .. } => {
                assert_eq!((factor, truncate), (32.0, false));
                assert!((attention_factor - (0.1 * 32f64.ln() + 1.0)).abs() < 1e-12);
            }
            ref other => panic!("{other:?}"),
        }
        assert_eq!(c.rope_theta, 150000.0);
    }

    #[test]
    fn transformers5_rope_parameters_carry_the_base_and_the_scaling() {
        let c = ModelConfig::from_hf_json(
            r#"{"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,
                "num_attention_heads":2,"rope_parameters":{"rope_type":"linear","factor":2.0,"rope_theta":5e5}}"#,
        )
        .unwrap();
        assert_eq!((c.rope_theta, c.rope_scaling.clone()), (5e5, RopeScaling::Linear { factor: 2.0 }));
        let e = ModelConfig::from_hf_json(
            r#"{"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,
                "num_attention_heads":2,"rope_scaling":{"rope_type":"yarn","factor":4.0}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("original_max_position_embeddings"), "{e}");
    }
}
