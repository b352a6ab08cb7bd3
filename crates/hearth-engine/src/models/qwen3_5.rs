//! Qwen3.5 (text): a hybrid of gated-DeltaNet linear-attention layers (`super::delta_net`) and output-gated
//! full-attention layers with partial rotary embeddings, each followed by a gated MLP (or routed experts). Reads
//! top to bottom like transformers' `modeling_qwen3_5.py`. Only the full-attention layers keep KV; the linear ones
//! keep a fixed-size recurrent state per sequence (`crate::recurrent`).

use super::delta_net::GatedDeltaNet;
use super::layers::{finish_logits, select_rows, split_heads, Linear, Loader, RmsNorm, Rope, RopeAt};
use super::moe::FeedForward;
use super::Model;
use crate::attention::{AttnParams, BatchContext, KvStore};
use crate::weights::{EmbeddingTable, ModelConfig};
use crate::work_pool::KernelPool;
use crate::{Error, Result};
use candle_core::{DType, Tensor, D};

/// Full attention whose query projection also yields a per-channel output gate: `o_proj(attn · σ(gate))`.
struct GatedAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    rotary_dim: usize,
    params: AttnParams,
    /// This layer's index among the KV-keeping layers.
    kv_layer: usize,
}

impl GatedAttention {
    fn load(l: &Loader, p: &str, kv_layer: usize) -> Result<Self> {
        let c = l.cfg;
        let bias = c.attention_bias;
        Ok(Self {
            q_proj: l.linear(&format!("{p}.q_proj"), bias)?,
            k_proj: l.linear(&format!("{p}.k_proj"), bias)?,
            v_proj: l.linear(&format!("{p}.v_proj"), bias)?,
            o_proj: l.linear(&format!("{p}.o_proj"), bias)?,
            q_norm: l.rms_norm(&format!("{p}.q_norm"))?,
            k_norm: l.rms_norm(&format!("{p}.k_norm"))?,
            heads: c.num_heads,
            kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            rotary_dim: c.rotary_dim,
            params: AttnParams { scale: (c.head_dim as f64).powf(-0.5), window: None, softcap: None, sinks: None },
            kv_layer,
        })
    }

    /// Rotate the first `rotary_dim` dims of each head of x (T, H, D).
    fn rotate(&self, x: &Tensor, rope: &RopeAt) -> Result<Tensor> {
        if self.rotary_dim == self.head_dim {
            return rope.apply(x);
        }
        let turned = rope.apply(&x.narrow(D::Minus1, 0, self.rotary_dim)?.contiguous()?)?;
        let rest = x.narrow(D::Minus1, self.rotary_dim, self.head_dim - self.rotary_dim)?;
        Ok(Tensor::cat(&[&turned, &rest], D::Minus1)?.contiguous()?)
    }

    fn forward(&self, x: &Tensor, rope: &RopeAt, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor> {
        let t = x.dim(0)?;
        // 1. q and its gate, interleaved per head: [q_h | gate_h]
        let qg = self.q_proj.forward(x)?.reshape((t, self.heads, 2 * self.head_dim))?;
        let q = qg.narrow(2, 0, self.head_dim)?.contiguous()?;
        let gate = qg.narrow(2, self.head_dim, self.head_dim)?.reshape((t, self.heads * self.head_dim))?;
        let k = split_heads(&self.k_proj.forward(x)?, self.kv_heads, self.head_dim)?;
        let v = split_heads(&self.v_proj.forward(x)?, self.kv_heads, self.head_dim)?;
        // 2. per-head norms, then the partial rotation
        let q = self.rotate(&self.q_norm.forward(&q)?, rope)?;
        let k = self.rotate(&self.k_norm.forward(&k)?, rope)?;
        // 3. attend, gate, project
        let out = kv.attend(self.kv_layer, &q, &k, &v, ctx, &self.params)?;
        let gated = (out * candle_nn::ops::sigmoid(&gate.to_dtype(DType::F32)?)?.to_dtype(x.dtype())?)?;
        self.o_proj.forward(&gated)
    }
}

enum Mixer {
    Linear(GatedDeltaNet),
    Full(GatedAttention),
}

struct Block {
    input_layernorm: RmsNorm,
    mixer: Mixer,
    post_attention_layernorm: RmsNorm,
    mlp: FeedForward,
}

pub struct Qwen35 {
    cfg: ModelConfig,
    dtype: DType,
    kv_encoding: crate::kv::KvEncoding,
    embed_tokens: EmbeddingTable,
    layers: Vec<Block>,
    norm: RmsNorm,
    lm_head: Linear,
    rope: Rope,
    kernel_pool: KernelPool,
}

impl Qwen35 {
    pub fn load(l: &Loader) -> Result<Self> {
        let c = l.cfg;
        let lin =
            c.linear_attn.as_ref().ok_or_else(|| Error::InvalidModel("Qwen3.5 without linear attention".into()))?;
        let embed_tokens = l.embedding()?;
        let (mut kv_layer, mut ordinal) = (0, 0);
        let mut layers = Vec::with_capacity(c.num_layers);
        for i in 0..c.num_layers {
            let p = format!("model.layers.{i}");
            let mixer = if lin.layers[i] {
                ordinal += 1;
                Mixer::Linear(GatedDeltaNet::load(l, &format!("{p}.linear_attn"), lin, ordinal - 1)?)
            } else {
                kv_layer += 1;
                Mixer::Full(GatedAttention::load(l, &format!("{p}.self_attn"), kv_layer - 1)?)
            };
            layers.push(Block {
                input_layernorm: l.rms_norm(&format!("{p}.input_layernorm"))?,
                mixer,
                post_attention_layernorm: l.rms_norm(&format!("{p}.post_attention_layernorm"))?,
                mlp: FeedForward::load(l, &format!("{p}.mlp"), i)?,
            });
        }
        let lm_head = l.lm_head(&embed_tokens)?;
        let rope = Rope::new(c.rotary_dim, c.rope_theta, &c.rope_scaling, c.max_position_embeddings, false, l.device)?;
        Ok(Self {
            cfg: c.clone(),
            dtype: l.dtype,
            kv_encoding: l.kv_encoding()?,
            embed_tokens,
            layers,
            norm: l.rms_norm("model.norm")?,
            lm_head,
            rope,
            kernel_pool: l.kernel_pool(),
        })
    }

    /// The embedding and every block, then the final norm: (T, hidden).
    fn hidden_all(&self, tokens: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor> {
        let mut h = self.embed_tokens.lookup(tokens, self.dtype)?;
        let rope = self.rope.at(&ctx.positions)?;
        for b in &self.layers {
            let x = b.input_layernorm.forward(&h)?;
            let a = match &b.mixer {
                Mixer::Linear(d) => d.forward(&x, ctx, kv)?,
                Mixer::Full(att) => att.forward(&x, &rope, ctx, kv)?,
            };
            let (h1, x) = b.post_attention_layernorm.forward_add(&h, &a)?;
            h = (h1 + b.mlp.forward(&x)?)?;
        }
        self.norm.forward(&h)
    }
}

impl Model for Qwen35 {
    super::model_accessors!(rope);

    fn forward(&self, tokens: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor> {
        self.kernel_pool.run(|| {
            let x = self.hidden_all(tokens, ctx, kv)?;
            let logits = self.lm_head.forward(&select_rows(&x, &ctx.logit_indices())?)?;
            finish_logits(logits, self.cfg.final_logit_softcapping)
        })
    }

    fn hidden(&self, tokens: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor> {
        self.kernel_pool.run(|| {
            let x = self.hidden_all(tokens, ctx, kv)?;
            Ok(select_rows(&x, &ctx.logit_indices())?.to_dtype(DType::F32)?)
        })
    }
}
