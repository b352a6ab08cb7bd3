//! Model architectures. A model is a pure function of (weights, packed tokens, KV view): it owns no cache and
//! knows nothing of batching beyond the positions and row spans in [`BatchContext`]. An embedding model is an
//! [`Encoder`]: a pure function of (weights, a padded batch of token ids and its mask) to hidden states.

pub mod bert;
pub mod delta_net;
pub mod gemma3;
pub mod gemma3_vision;
pub mod layers;
pub mod linear;
pub mod llama;
pub mod mlp;
pub mod moe;
pub mod norm;
pub mod qwen2_5_vl_vision;
pub mod qwen3_5;
pub mod vision_weights;

use crate::attention::{BatchContext, KvStore};
use crate::weights::config::Family;
use crate::weights::{GgufFile, ModelConfig, Weights};
use crate::work_pool::KernelPool;
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};

/// The [`Model`] accessors of a model struct with `cfg`, `dtype`, `kv_encoding` and `kernel_pool` fields; `$rope`
/// names the rotary table that bounds its positions.
macro_rules! model_accessors {
    ($rope:ident) => {
        fn config(&self) -> &crate::weights::ModelConfig {
            &self.cfg
        }

        fn dtype(&self) -> candle_core::DType {
            self.dtype
        }

        fn kv_encoding(&self) -> crate::kv::KvEncoding {
            self.kv_encoding
        }

        fn max_positions(&self) -> usize {
            self.$rope.max_positions()
        }

        fn kernel_pool(&self) -> crate::work_pool::KernelPool {
            self.kernel_pool
        }
    };
}
pub(crate) use model_accessors;

pub trait Model: Send + Sync {
    fn config(&self) -> &ModelConfig;
    /// The dtype activations use on this model's device.
    fn dtype(&self) -> DType;
    /// How the paged KV cache keeps its rows (`--kv-cache-dtype`, else [`crate::attention::kv_dtype`]'s choice;
    /// the activations' dtype with `dequantize`).
    fn kv_encoding(&self) -> crate::kv::KvEncoding;
    /// Positions the rotary tables cover.
    fn max_positions(&self) -> usize;
    /// The pool this model's parallel CPU kernels run on, decided at load (`crate::work_pool`); hearth's for a
    /// model without quantized CPU weights.
    fn kernel_pool(&self) -> KernelPool {
        KernelPool::Hearth
    }
    /// The model encodes images ([`Model::encode_image`]).
    fn takes_images(&self) -> bool {
        false
    }
    /// An image's tokens attend each other both ways (Gemma 3): each image's run is computed in one prompt piece.
    fn images_attend_both_ways(&self) -> bool {
        false
    }
    /// A decode step's forward reads nothing from the host but its tokens, the batch's positions and the KV store's
    /// metadata, and issues the same work for the same shapes (no host-side routing, no per-step uploads): a CUDA
    /// graph may capture it and replay it with other tokens and positions (`gpu::graphs`).
    fn decode_capturable(&self) -> bool {
        false
    }
    /// A vision-language model's image encoder: one image (at its processor size) to its LLM tokens'
    /// embeddings, (tokens, hidden). Text models refuse.
    fn encode_image(&self, image: &crate::vision::PromptImage) -> Result<Tensor> {
        let _ = image;
        Err(Error::Unsupported(format!("the {} model does not take images", self.config().arch_name)))
    }
    /// tokens: (T,) u32 packed per `ctx`. Returns f32 logits: (rows, vocab), or (T, vocab) with `ctx.all_logits`.
    fn forward(&self, tokens: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor>;
    /// The final hidden states (after the final norm, before the output head) at the positions `forward` returns
    /// logits for: f32 (rows, hidden), or (T, hidden) with `ctx.all_logits`. What a decoder embedding model pools.
    fn hidden(&self, tokens: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor> {
        let _ = (tokens, ctx, kv);
        Err(Error::Unsupported(format!(
            "the {} architecture does not produce embeddings (its final hidden states are not exposed)",
            self.config().arch_name
        )))
    }
}

/// A model whose last hidden states are pooled into embeddings (`crate::embed`). Rows are right-padded: row `i`
/// holds its tokens at positions `0..len_i`, then padding that `mask` marks with 0. A padded position must not
/// change any real position's output (beyond float summation order).
pub trait Encoder: Send + Sync {
    fn hidden_size(&self) -> usize;
    /// Token ids must be below this.
    fn vocab_size(&self) -> usize;
    /// The longest row the model can take (its position table).
    fn max_positions(&self) -> usize;
    /// ids: (B, L) u32; mask: (B, L) f32 (1 real, 0 padding). Returns (B, L, hidden) hidden states.
    fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor>;
}

/// How to build a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Dequantize GGUF matrices at load: the reference's exact math (transformers dequantizes GGUF the same way),
    /// at ~4-8x the weight memory. `--dequantize` / `HEARTH_DEQUANTIZE=1`.
    pub dequantize: bool,
    /// Activation/KV dtype; None: [`activation_dtype`]'s choice. The CPU computes in f32 only.
    pub dtype: Option<DType>,
    /// The KV cache's encoding (`--kv-cache-dtype`); None: `auto`. One the device cannot read fails the load.
    pub kv_cache: Option<crate::kv::KvEncoding>,
    /// A GGUF model's vision tower: llama.cpp's `mmproj` file (`--mmproj`).
    pub mmproj: Option<std::path::PathBuf>,
}

/// The activation dtype for these weights on this device: f32 on the CPU; on a GPU bf16 for dense (safetensors)
/// weights and f32 for GGUF ones (their matmuls quantize the activations to 8 bits anyway, and f32 keeps the
/// quantized path comparable to llama.cpp's goldens).
pub fn activation_dtype(weights: &Weights, device: &Device) -> DType {
    match (device.is_cpu(), weights) {
        (true, _) | (false, Weights::Gguf(_)) => DType::F32,
        (false, Weights::Hf(_)) => DType::BF16,
    }
}

/// Build the model for a configuration.
pub fn load_model(weights: &Weights, cfg: &ModelConfig, device: &Device, opts: &LoadOptions) -> Result<Box<dyn Model>> {
    let dtype = match opts.dtype {
        None => activation_dtype(weights, device),
        Some(DType::F32) => DType::F32,
        Some(d @ (DType::BF16 | DType::F16)) if !device.is_cpu() => d,
        Some(d) => {
            return Err(Error::Unsupported(format!(
                "dtype {d:?} on {}: the CPU computes in f32; GPUs take f32, bf16 or f16",
                if device.is_cpu() { "the CPU" } else { "this device" }
            )))
        }
    };
    let mmproj = match (&opts.mmproj, weights, cfg.family) {
        (None, ..) => None,
        (Some(p), Weights::Gguf(_), Family::Llama | Family::Gemma3) => Some((GgufFile::open(p)?, p.as_path())),
        (Some(p), Weights::Hf(_), _) => {
            return Err(Error::InvalidRequest(format!(
                "--mmproj {}: a Hugging Face directory carries its own vision tower; --mmproj goes with a .gguf model",
                p.display()
            )))
        }
        (Some(p), ..) => {
            return Err(Error::Unsupported(format!(
                "--mmproj {} with a {} model (hearth runs mmproj towers for qwen2vl and gemma3 GGUFs)",
                p.display(),
                cfg.arch_name
            )))
        }
    };
    let mut l = layers::Loader::new(weights, cfg, device, dtype, opts.dequantize);
    l.kv_cache = opts.kv_cache;
    l.mmproj = mmproj.as_ref().map(|(g, p)| (g, *p));
    Ok(match cfg.family {
        Family::Llama => Box::new(llama::Llama::load(&l)?),
        Family::Gemma3 => Box::new(gemma3::Gemma3::load(&l)?),
        Family::Qwen35 => Box::new(qwen3_5::Qwen35::load(&l)?),
    })
}

/// Parse a `--dtype` value: `auto` (None), `f32`, `bf16`, `f16`.
pub fn parse_dtype(s: &str) -> Result<Option<DType>> {
    Ok(match s.trim().to_ascii_lowercase().as_str() {
        "auto" | "" => None,
        "f32" | "float32" => Some(DType::F32),
        "bf16" | "bfloat16" => Some(DType::BF16),
        "f16" | "float16" => Some(DType::F16),
        other => {
            return Err(Error::InvalidRequest(format!("unknown dtype `{other}`: expected auto, f32, bf16 or f16")))
        }
    })
}
