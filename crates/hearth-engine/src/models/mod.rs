//! Model architectures. A model is a pure function of (weights, packed tokens, KV view): it owns no cache and
//! knows nothing of batching beyond the positions and row spans in [`BatchContext`].

pub mod gemma3;
pub mod layers;
pub mod llama;

use crate::attention::{BatchContext, KvStore};
use crate::weights::config::Family;
use crate::weights::resolve::ModelLocation;
use crate::weights::{GgufFile, HfWeights, ModelConfig, Weights};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};

pub trait Model: Send + Sync {
    fn config(&self) -> &ModelConfig;
    /// Positions the rotary tables cover.
    fn max_positions(&self) -> usize;
    /// tokens: (T,) u32 packed per `ctx`. Returns f32 logits: (rows, vocab), or (T, vocab) with `ctx.all_logits`.
    fn forward(&self, tokens: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor>;
}

/// Open the weights at a resolved location and read their configuration.
pub fn open_weights(loc: &ModelLocation) -> Result<(Weights, ModelConfig)> {
    match loc {
        ModelLocation::Gguf(p) => {
            let g = GgufFile::open(p)?;
            let cfg = ModelConfig::from_gguf(&g)?;
            Ok((Weights::Gguf(g), cfg))
        }
        ModelLocation::HfDir(d) => {
            let path = d.join("config.json");
            let text = std::fs::read_to_string(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            let mut cfg = ModelConfig::from_hf_json(&text)?;
            merge_generation_config_eos(d, &mut cfg);
            Ok((Weights::Hf(HfWeights::open(d)?), cfg))
        }
    }
}

/// `generation_config.json` may name more EOS ids than config.json (Llama 3 instruct does).
fn merge_generation_config_eos(dir: &std::path::Path, cfg: &mut ModelConfig) {
    let Ok(text) = std::fs::read_to_string(dir.join("generation_config.json")) else { return };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else { return };
    if let Some(e) = v.get("eos_token_id").cloned() {
        if let Ok(ids) = serde_json::from_value::<crate::weights::config::IdOrIds>(e) {
            for id in ids.ids() {
                if !cfg.eos_token_ids.contains(&id) {
                    cfg.eos_token_ids.push(id);
                }
            }
        }
    }
}

/// How to build a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Dequantize GGUF matrices at load: the reference's exact math (transformers dequantizes GGUF the same way),
    /// at ~4-8x the weight memory. `--dequantize` / `HEARTH_DEQUANTIZE=1`.
    pub dequantize: bool,
}

/// Build the model for a configuration. CPU computes in f32.
pub fn load_model(weights: &Weights, cfg: &ModelConfig, device: &Device, opts: &LoadOptions) -> Result<Box<dyn Model>> {
    let dtype = if device.is_cpu() { DType::F32 } else { DType::BF16 };
    let l = layers::Loader { weights, cfg, device, dtype, dequantize: opts.dequantize };
    Ok(match cfg.family {
        Family::Llama => Box::new(llama::Llama::load(&l)?),
        Family::Gemma3 => Box::new(gemma3::Gemma3::load(&l)?),
    })
}
