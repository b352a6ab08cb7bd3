//! Gemma 3: 5 sliding-window layers to 1 global, per-head q/k RMSNorm, RMSNorm before and after both the
//! attention and the MLP, GELU-tanh gated MLP, embeddings scaled by sqrt(hidden), tied LM head; a checkpoint with
//! a vision tower (4B and up) takes images, whose embeddings replace their tokens' (unscaled) and whose tokens
//! attend each other both ways. Reads top to bottom like Hugging Face's `modeling_gemma3.py`.

use super::layers::{finish_logits, select_rows, split_heads, Linear, Loader, RmsNorm, Rope, RopeAt};
use super::mlp::Mlp;
use super::Model;
use crate::attention::{AttnParams, BatchContext, KvStore};
use crate::weights::config::RopeScaling;
use crate::weights::{EmbeddingTable, ModelConfig};
use crate::work_pool::KernelPool;
use crate::Result;
use candle_core::{DType, Tensor};

struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    params: AttnParams,
}

impl Attention {
    fn load(l: &Loader, p: &str, layer: usize) -> Result<Self> {
        let c = l.cfg;
        Ok(Self {
            q_proj: l.linear(&format!("{p}.q_proj"), c.attention_bias)?,
            k_proj: l.linear(&format!("{p}.k_proj"), c.attention_bias)?,
            v_proj: l.linear(&format!("{p}.v_proj"), c.attention_bias)?,
            o_proj: l.linear(&format!("{p}.o_proj"), false)?,
            q_norm: l.rms_norm(&format!("{p}.q_norm"))?,
            k_norm: l.rms_norm(&format!("{p}.k_norm"))?,
            heads: c.num_heads,
            kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            params: AttnParams {
                scale: c.query_pre_attn_scalar.powf(-0.5),
                window: c.layer_window[layer],
                softcap: c.attn_logit_softcapping,
                sinks: None,
            },
        })
    }

    fn forward(
        &self,
        x: &Tensor,
        layer: usize,
        rope: &RopeAt,
        ctx: &BatchContext,
        kv: &mut dyn KvStore,
    ) -> Result<Tensor> {
        // 1. project
        let q = split_heads(&self.q_proj.forward(x)?, self.heads, self.head_dim)?;
        let k = split_heads(&self.k_proj.forward(x)?, self.kv_heads, self.head_dim)?;
        let v = split_heads(&self.v_proj.forward(x)?, self.kv_heads, self.head_dim)?;
        // 2. per-head RMSNorm of q and k
        let q = self.q_norm.forward(&q)?;
        let k = self.k_norm.forward(&k)?;
        // 3. rope (local base on sliding layers, global base otherwise)
        let q = rope.apply(&q)?;
        let k = rope.apply(&k)?;
        // 4. attend (sliding window per layer)
        let out = kv.attend(layer, &q, &k, &v, ctx, &self.params)?;
        // 5. output projection
        self.o_proj.forward(&out)
    }
}

struct Block {
    input_layernorm: RmsNorm,
    attn: Attention,
    post_attention_layernorm: RmsNorm,
    pre_feedforward_layernorm: RmsNorm,
    mlp: Mlp,
    post_feedforward_layernorm: RmsNorm,
    sliding: bool,
}

pub struct Gemma3 {
    cfg: ModelConfig,
    /// Activation dtype.
    dtype: DType,
    /// The paged KV cache's dtype.
    kv_encoding: crate::kv::KvEncoding,
    embed_tokens: EmbeddingTable,
    embed_scale: f64,
    layers: Vec<Block>,
    norm: RmsNorm,
    lm_head: Linear,
    rope_global: Rope,
    rope_local: Rope,
    /// The pool its CPU kernels run on (decided by its weights at load).
    kernel_pool: KernelPool,
    /// A vision-language checkpoint's image encoder and its processor.
    vision: Option<(super::gemma3_vision::Gemma3Vision, crate::vision::gemma3::Gemma3Processor)>,
}

/// The vision tower of a Hugging Face checkpoint, or of a GGUF's `mmproj` file (None for a text model).
fn load_vision(
    l: &Loader,
) -> Result<Option<(super::gemma3_vision::Gemma3Vision, crate::vision::gemma3::Gemma3Processor)>> {
    let Some((spec, source)) = super::vision_weights::vision_source(l)? else { return Ok(None) };
    let crate::vision::ImageProcessor::Gemma3 { processor, .. } = spec.processor else {
        return Err(crate::Error::InvalidModel(format!("a {} vision tower on a Gemma 3 model", spec.arch)));
    };
    let cfg = serde_json::from_value(spec.vision_config)
        .map_err(|e| crate::Error::InvalidModel(format!("vision config: {e}")))?;
    let tower = super::gemma3_vision::Gemma3Vision::load(source, cfg, processor.tokens, l.device)?;
    Ok(Some((tower, processor)))
}

impl Gemma3 {
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
                pre_feedforward_layernorm: l.rms_norm(&format!("{p}.pre_feedforward_layernorm"))?,
                mlp: Mlp::load(l, &format!("{p}.mlp"))?,
                post_feedforward_layernorm: l.rms_norm(&format!("{p}.post_feedforward_layernorm"))?,
                sliding: c.layer_window[i].is_some(),
            });
        }
        let lm_head = l.lm_head(&embed_tokens)?;
        let max = c.max_position_embeddings;
        let rope_global = Rope::new(c.head_dim, c.rope_theta, &c.rope_scaling, max, c.rope_interleaved, l.device)?;
        let local_base = c.rope_local_theta.unwrap_or(c.rope_theta);
        let rope_local = Rope::new(c.head_dim, local_base, &RopeScaling::None, max, c.rope_interleaved, l.device)?;
        Ok(Self {
            dtype: l.dtype,
            kv_encoding: l.kv_encoding()?,
            cfg: c.clone(),
            embed_tokens,
            embed_scale: (c.hidden_size as f64).sqrt(),
            layers,
            norm: l.rms_norm("model.norm")?,
            lm_head,
            rope_global,
            rope_local,
            kernel_pool: l.kernel_pool(),
            vision: load_vision(l)?,
        })
    }
}

impl Model for Gemma3 {
    super::model_accessors!(rope_global);

    fn takes_images(&self) -> bool {
        self.vision.is_some()
    }

    fn images_attend_both_ways(&self) -> bool {
        self.vision.is_some()
    }

    fn encode_image(&self, image: &crate::vision::PromptImage) -> Result<Tensor> {
        let Some((tower, processor)) = &self.vision else {
            return Err(crate::Error::Unsupported(format!("the {} model does not take images", self.cfg.arch_name)));
        };
        if image.tokens != processor.tokens {
            return Err(crate::Error::InvalidRequest(format!(
                "an image is {} tokens for this model, but the prompt holds {} placeholders for it",
                processor.tokens, image.tokens
            )));
        }
        let img = crate::vision::Image::new(image.width, image.height, image.rgb.clone())?;
        let pixels = processor.pixels(&img)?;
        self.kernel_pool.run(|| tower.encode(&pixels))
    }

    fn forward(&self, tokens: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor> {
        self.kernel_pool.run(|| {
            let mut h = (self.embed_tokens.lookup(tokens, self.dtype)? * self.embed_scale)?;
            // image embeddings replace their tokens' embeddings, unscaled
            if let Some(m) = ctx.media.as_ref().filter(|m| !m.embeds.is_empty()) {
                h = super::layers::splice_rows(&h, &m.embeds)?;
            }
            let (rope_local, rope_global) = (self.rope_local.at(&ctx.positions)?, self.rope_global.at(&ctx.positions)?);
            for (i, b) in self.layers.iter().enumerate() {
                let rope = if b.sliding { &rope_local } else { &rope_global };
                let a = b.attn.forward(&b.input_layernorm.forward(&h)?, i, rope, ctx, kv)?;
                h = (h + b.post_attention_layernorm.forward(&a)?)?;
                let m = b.mlp.forward(&b.pre_feedforward_layernorm.forward(&h)?)?;
                h = (h + b.post_feedforward_layernorm.forward(&m)?)?;
            }
            let h = select_rows(&h, &ctx.logit_indices())?;
            finish_logits(self.lm_head.forward(&self.norm.forward(&h)?)?, self.cfg.final_logit_softcapping)
        })
    }
}
