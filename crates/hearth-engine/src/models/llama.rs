//! The Llama family: Llama 2/3 (incl. llama3 and linear rope scaling), Mistral, SmolLM2, Qwen2 (q/k/v bias),
//! Qwen3 (per-head q/k RMSNorm) and Qwen3-MoE (Qwen3 with routed experts: `super::moe`). Reads top to bottom like
//! Hugging Face's `modeling_llama.py`.

use super::layers::{finish_logits, select_rows, split_heads, Linear, Loader, RmsNorm, Rope, RopeAt};
use super::moe::FeedForward;
use super::Model;
use crate::attention::{AttnParams, BatchContext, Heads, KvStore};
use crate::weights::{EmbeddingTable, ModelConfig};
use crate::work_pool::KernelPool;
use crate::Result;
use candle_core::{DType, Tensor};

/// q, k, v projections: three matmuls, or one fused matmul on the GPU path.
enum Qkv {
    Split { q: Linear, k: Linear, v: Linear },
    Fused(Linear),
}

struct Attention {
    qkv: Qkv,
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
        let names = [format!("{p}.q_proj"), format!("{p}.k_proj"), format!("{p}.v_proj")];
        // Qwen3's per-head q/k norms sit between the projection and the rotation: those keep the split path.
        let fused = if c.qk_norm { None } else { l.fused_linear(&names, bias)? };
        let qkv = match fused {
            Some(f) => Qkv::Fused(f),
            None => Qkv::Split {
                q: l.linear(&names[0], bias)?,
                k: l.linear(&names[1], bias)?,
                v: l.linear(&names[2], bias)?,
            },
        };
        // gpt-oss: one sink logit per query head, kept in f32
        let sinks = match c.attention_sinks {
            true => Some(l.vector_f32(&format!("{p}.sinks"), c.num_heads)?.into()),
            false => None,
        };
        Ok(Self {
            qkv,
            o_proj: l.linear(&format!("{p}.o_proj"), c.o_bias)?,
            q_norm: if c.qk_norm { Some(l.rms_norm(&format!("{p}.q_norm"))?) } else { None },
            k_norm: if c.qk_norm { Some(l.rms_norm(&format!("{p}.k_norm"))?) } else { None },
            heads: c.num_heads,
            kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            params: AttnParams {
                scale: c.query_pre_attn_scalar.powf(-0.5),
                window: c.layer_window[layer],
                softcap: c.attn_logit_softcapping,
                sinks,
            },
        })
    }

    /// Attention over rmsnorm(h + a) (`norm` is the layer's input norm; no `a` before the first layer): returns the
    /// residual stream h + a and the attention's output projection.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        h: &Tensor,
        a: Option<&Tensor>,
        norm: &RmsNorm,
        layer: usize,
        rope: &RopeAt,
        ctx: &BatchContext,
        kv: &mut dyn KvStore,
    ) -> Result<(Tensor, Tensor)> {
        // 0. the residual add and the input norm (fused into the q|k|v projection where the GPU can)
        // 1. project to per-head q, k, v (fused: rotate, store and attend in the KV store's kernels when it can)
        let (h, (q, k, v)) = match &self.qkv {
            Qkv::Split { q, k, v } => {
                let (h, x) = norm.forward_opt_add(h, a)?;
                (h, (q.forward(&x)?, k.forward(&x)?, v.forward(&x)?))
            }
            Qkv::Fused(f) => {
                let (h, qkv) = f.forward_add_norm(h, a, norm)?;
                let heads = Heads { q: self.heads, kv: self.kv_heads, dim: self.head_dim };
                if let Some(out) = kv.attend_qkv(layer, &qkv, &rope.tables(), heads, ctx, &self.params)? {
                    return Ok((h, self.o_proj.forward(&out)?));
                }
                let (nq, nk) = (self.heads * self.head_dim, self.kv_heads * self.head_dim);
                (
                    h,
                    (
                        qkv.narrow(1, 0, nq)?.contiguous()?,
                        qkv.narrow(1, nq, nk)?.contiguous()?,
                        qkv.narrow(1, nq + nk, nk)?.contiguous()?,
                    ),
                )
            }
        };
        let q = split_heads(&q, self.heads, self.head_dim)?;
        let k = split_heads(&k, self.kv_heads, self.head_dim)?;
        let v = split_heads(&v, self.kv_heads, self.head_dim)?;
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
        Ok((h, self.o_proj.forward(&out)?))
    }
}

struct Block {
    input_layernorm: RmsNorm,
    attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: FeedForward,
}

pub struct Llama {
    cfg: ModelConfig,
    /// Activation dtype.
    dtype: DType,
    /// The paged KV cache's dtype.
    kv_encoding: crate::kv::KvEncoding,
    embed_tokens: EmbeddingTable,
    layers: Vec<Block>,
    norm: RmsNorm,
    lm_head: Linear,
    rope: Rope,
    /// The pool its CPU kernels run on (decided by its weights at load).
    kernel_pool: KernelPool,
    /// A vision-language checkpoint's image encoder (Qwen2.5-VL).
    vision: Option<Vision>,
}

/// An image encoder and the processor whose patches it takes.
struct Vision {
    tower: super::qwen2_5_vl_vision::VisionTower,
    processor: crate::vision::qwen2_vl::Qwen2VlProcessor,
}

impl Vision {
    /// The vision tower of a Hugging Face checkpoint whose images hearth encodes, or of a GGUF's `mmproj` file.
    fn load(l: &Loader) -> Result<Option<Self>> {
        let Some((spec, source)) = super::vision_weights::vision_source(l)? else { return Ok(None) };
        let crate::vision::ImageProcessor::Qwen2Vl(processor) = spec.processor else {
            return Err(crate::Error::InvalidModel(format!("a {} vision tower on a Llama-family model", spec.arch)));
        };
        let cfg = serde_json::from_value(spec.vision_config)
            .map_err(|e| crate::Error::InvalidModel(format!("vision config: {e}")))?;
        let tower = super::qwen2_5_vl_vision::VisionTower::load(source, cfg, l.device)?;
        Ok(Some(Vision { tower, processor }))
    }
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
                mlp: FeedForward::load(l, &format!("{p}.mlp"), i)?,
            });
        }
        let lm_head = l.lm_head(&embed_tokens)?;
        let rope = Rope::new(
            c.head_dim,
            c.rope_theta,
            &c.rope_scaling,
            c.max_position_embeddings,
            c.rope_interleaved,
            l.device,
        )?;
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
            vision: Vision::load(l)?,
        })
    }

    /// The embedding and every block: the residual stream and its last pending residual add, which the final norm
    /// applies (fused with it).
    fn layers(&self, tokens: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<(Tensor, Option<Tensor>)> {
        let mut h = self.embed_tokens.lookup(tokens, self.dtype)?;
        let media = ctx.media.as_ref();
        if let Some(m) = media.filter(|m| !m.embeds.is_empty()) {
            h = super::layers::splice_rows(&h, &m.embeds)?;
        }
        let rope = match (media.and_then(|m| m.rope_positions.as_ref()), &self.cfg.mrope_section) {
            (Some(p), Some(sections)) => self.rope.at_sections(p, sections)?,
            _ => self.rope.at(&ctx.positions)?,
        };
        // Each residual add stays pending (`a`) until the norm that follows it — the next layer's input norm, the
        // final norm — applies it, fused with that norm (and on the GPU with the projection after it).
        if self.layers.is_empty() {
            return Err(crate::Error::InvalidModel("the model has no layers".into()));
        }
        let mut a: Option<Tensor> = None;
        for (i, b) in self.layers.iter().enumerate() {
            let (h1, att) = b.attn.forward(&h, a.as_ref(), &b.input_layernorm, i, &rope, ctx, kv)?;
            let (h2, m) = b.mlp.forward_add_norm(&h1, Some(&att), &b.post_attention_layernorm)?;
            (h, a) = (h2, Some(m));
        }
        Ok((h, a))
    }
}

impl Model for Llama {
    super::model_accessors!(rope);

    fn takes_images(&self) -> bool {
        self.vision.is_some()
    }

    /// Dense layers without attention sinks (MoE routing and gpt-oss's sinks take host-side or portable paths).
    fn decode_capturable(&self) -> bool {
        self.layers.iter().all(|b| matches!(b.mlp, FeedForward::Dense(_)) && b.attn.params.sinks.is_none())
    }

    fn encode_image(&self, image: &crate::vision::PromptImage) -> Result<Tensor> {
        let Some(v) = &self.vision else {
            return Err(crate::Error::Unsupported(format!("the {} model does not take images", self.cfg.arch_name)));
        };
        let img = crate::vision::Image::new(image.width, image.height, image.rgb.clone())?;
        let p = v.processor.patchify(&img)?;
        if p.tokens(v.processor.merge) != image.tokens {
            return Err(crate::Error::InvalidRequest(format!(
                "an image of {}x{} is {} tokens, but the prompt holds {} placeholders for it",
                image.width,
                image.height,
                p.tokens(v.processor.merge),
                image.tokens
            )));
        }
        self.kernel_pool.run(|| v.tower.encode(&p.values, p.grid))
    }

    fn forward(&self, tokens: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor> {
        self.kernel_pool.run(|| {
            let (h, a) = self.layers(tokens, ctx, kv)?;
            let rows = ctx.logit_indices();
            let logits = if rows.len() == h.dim(0)? {
                self.lm_head.forward_add_norm(&h, a.as_ref(), &self.norm)?.1
            } else {
                let (_, x) = self.norm.forward_opt_add(&h, a.as_ref())?;
                self.lm_head.forward(&select_rows(&x, &rows)?)?
            };
            finish_logits(logits, self.cfg.final_logit_softcapping)
        })
    }

    fn hidden(&self, tokens: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor> {
        self.kernel_pool.run(|| {
            let (h, a) = self.layers(tokens, ctx, kv)?;
            let (_, x) = self.norm.forward_opt_add(&h, a.as_ref())?;
            Ok(select_rows(&x, &ctx.logit_indices())?.to_dtype(DType::F32)?)
        })
    }
}
