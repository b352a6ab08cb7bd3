//! The Llama family: Llama 2/3 (incl. llama3 and linear rope scaling), Mistral, SmolLM2, Qwen2 (q/k/v bias) and
//! Qwen3 (per-head q/k RMSNorm). Reads top to bottom like Hugging Face's `modeling_llama.py`.

use super::layers::{finish_logits, select_rows, split_heads, Linear, Loader, Mlp, RmsNorm, Rope, RopeAt};
use super::Model;
use crate::attention::{AttnParams, BatchContext, KvStore};
use crate::weights::{EmbeddingTable, ModelConfig};
use crate::Result;
use candle_core::{DType, Tensor};

struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    params: AttnParams,
}

impl Attention {
    fn load(l: &Loader, p: &str, layer: usize) -> Result<Self> {
        let c = l.cfg;
        let bias = c.attention_bias;
        Ok(Self {
            q_proj: l.linear(&format!("{p}.q_proj"), bias)?,
            k_proj: l.linear(&format!("{p}.k_proj"), bias)?,
            v_proj: l.linear(&format!("{p}.v_proj"), bias)?,
            o_proj: l.linear(&format!("{p}.o_proj"), false)?,
            q_norm: if c.qk_norm { Some(l.rms_norm(&format!("{p}.q_norm"))?) } else { None },
            k_norm: if c.qk_norm { Some(l.rms_norm(&format!("{p}.k_norm"))?) } else { None },
            heads: c.num_heads,
            kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            params: AttnParams {
                scale: c.query_pre_attn_scalar.powf(-0.5),
                window: c.layer_window[layer],
                softcap: c.attn_logit_softcapping,
            },
        })
    }

    fn forward(&self, x: &Tensor, layer: usize, rope: &RopeAt, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor> {
        // 1. project to per-head q, k, v
        let q = split_heads(&self.q_proj.forward(x)?, self.heads, self.head_dim)?;
        let k = split_heads(&self.k_proj.forward(x)?, self.kv_heads, self.head_dim)?;
        let v = split_heads(&self.v_proj.forward(x)?, self.kv_heads, self.head_dim)?;
        // 2. Qwen3: RMSNorm each head of q and k
        let (q, k) = match (&self.q_norm, &self.k_norm) {
            (Some(qn), Some(kn)) => (qn.forward(&q)?, kn.forward(&k)?),
            _ => (q, k),
        };
        // 3. rotary position embedding at each token's own position
        let q = rope.apply(&q)?;
        let k = rope.apply(&k)?;
        // 4. attend through the KV store (appends k/v for each row)
        let out = kv.attend(layer, &q, &k, &v, ctx, &self.params)?;
        // 5. output projection
        self.o_proj.forward(&out)
    }
}

struct Block {
    input_layernorm: RmsNorm,
    attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

pub struct Llama {
    cfg: ModelConfig,
    /// Activation (and KV) dtype.
    dtype: DType,
    embed_tokens: EmbeddingTable,
    layers: Vec<Block>,
    norm: RmsNorm,
    lm_head: Linear,
    rope: Rope,
}

impl Llama {
    pub fn load(l: &Loader) -> Result<Self> {
        let c = l.cfg;
        let embed_tokens = l.embedding()?;
        let mut layers = Vec::with_capacity(c.num_layers);
        for i in 0..c.num_layers {
            let p = format!("model.layers.{i}");
            layers.push(Block {
                input_layernorm: l.rms_norm(&format!("{p}.input_layernorm"))?,
                attn: Attention::load(l, &format!("{p}.self_attn"), i)?,
                post_attention_layernorm: l.rms_norm(&format!("{p}.post_attention_layernorm"))?,
                mlp: Mlp::load(l, &format!("{p}.mlp"))?,
            });
        }
        let lm_head = l.lm_head(&embed_tokens)?;
        let rope = Rope::new(c.head_dim, c.rope_theta, &c.rope_scaling, c.max_position_embeddings, c.rope_interleaved, l.device)?;
        Ok(Self { cfg: c.clone(), dtype: l.dtype, embed_tokens, layers, norm: l.rms_norm("model.norm")?, lm_head, rope })
    }
}

impl Model for Llama {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn max_positions(&self) -> usize {
        self.rope.max_positions()
    }

    fn forward(&self, tokens: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor> {
        let mut h = self.embed_tokens.lookup(tokens, self.dtype)?;
        let rope = self.rope.at(&ctx.positions)?;
        for (i, b) in self.layers.iter().enumerate() {
            let a = b.attn.forward(&b.input_layernorm.forward(&h)?, i, &rope, ctx, kv)?;
            h = (h + a)?;
            let m = b.mlp.forward(&b.post_attention_layernorm.forward(&h)?)?;
            h = (h + m)?;
        }
        let h = select_rows(&h, &ctx.logit_indices())?;
        finish_logits(self.lm_head.forward(&self.norm.forward(&h)?)?, self.cfg.final_logit_softcapping)
    }
}
