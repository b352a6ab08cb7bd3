//! A causal decoder (the generative Llama family: Llama, Mistral, Qwen2, Qwen3) as an [`Encoder`], the way
//! decoder embedding models such as Qwen3-Embedding use it: each row attends causally to its own real tokens,
//! and the final hidden states (after the final norm) are what the embedder pools, usually at the last token.

use crate::attention::{BatchContext, ContiguousKv};
use crate::models::{load_model, Encoder, LoadOptions, Model};
use crate::weights::{HfWeights, ModelConfig, Weights};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use std::path::Path;

/// `model_type`s of causal decoders that embed through [`DecoderEncoder`] (those `models::llama` implements).
pub const DECODER_TYPES: [&str; 4] = ["qwen3", "qwen2", "llama", "mistral"];

pub struct DecoderEncoder {
    model: Box<dyn Model>,
    device: Device,
}

impl DecoderEncoder {
    /// Load the decoder of a Hugging Face directory (its `config.json` text already read); the output head is
    /// loaded too (tied or not) but never run.
    pub fn load(dir: &Path, config_json: &str, device: &Device, dtype: DType) -> Result<Self> {
        let cfg = ModelConfig::from_hf_json(config_json)?;
        let weights = Weights::Hf(HfWeights::open(dir)?);
        let opts = LoadOptions { dtype: Some(dtype), ..Default::default() };
        let model = load_model(&weights, &cfg, device, &opts)?;
        Ok(Self { model, device: device.clone() })
    }
}

/// Real tokens of each row of a right-padded mask: 1s, then only 0s.
fn row_lengths(mask: &Tensor) -> Result<Vec<usize>> {
    let rows = mask.to_dtype(DType::F32)?.to_vec2::<f32>()?;
    rows.iter()
        .map(|r| {
            let n = r.iter().take_while(|&&m| m > 0.0).count();
            if n == 0 || r[n..].iter().any(|&m| m > 0.0) {
                return Err(Error::InvalidRequest(
                    "a decoder embeds right-padded rows of at least one token (mask 1s, then 0s)".into(),
                ));
            }
            Ok(n)
        })
        .collect()
}

impl Encoder for DecoderEncoder {
    fn hidden_size(&self) -> usize {
        self.model.config().hidden_size
    }

    fn vocab_size(&self) -> usize {
        self.model.config().vocab_size
    }

    fn max_positions(&self) -> usize {
        self.model.max_positions()
    }

    /// All rows' real tokens packed into one forward pass, each row its own KV slot starting at position 0, so
    /// padding is never computed; the padded positions of the output are zeros.
    fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, l) = ids.dims2()?;
        if l > self.max_positions() {
            return Err(Error::InvalidRequest(format!(
                "a batch of {l} positions exceeds the model's {} positions",
                self.max_positions()
            )));
        }
        let lens = row_lengths(mask)?;
        let rows = ids.to_vec2::<u32>()?;
        let packed: Vec<u32> = rows.iter().zip(&lens).flat_map(|(r, &n)| r[..n].iter().copied()).collect();
        let spans: Vec<(usize, usize, usize)> = lens.iter().enumerate().map(|(i, &n)| (i, 0, n)).collect();
        let ctx = BatchContext::new(&spans, true, &self.device)?;
        let mut kv = ContiguousKv::new(self.model.config().kv_layers(), l);
        let tokens = Tensor::new(packed.as_slice(), &self.device)?;
        let hidden = self.model.hidden(&tokens, &ctx, &mut kv)?;
        let width = hidden.dim(1)?;
        let mut out = Vec::with_capacity(b);
        for (row, &n) in ctx.rows.iter().zip(&lens) {
            let h = hidden.narrow(0, row.start, n)?;
            out.push(if n < l {
                Tensor::cat(&[h, Tensor::zeros((l - n, width), DType::F32, &self.device)?], 0)?
            } else {
                h
            });
        }
        Ok(Tensor::stack(&out, 0)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_lengths_need_right_padding() {
        let m = |v: Vec<f32>, r: usize| Tensor::from_vec(v, (r, 3), &Device::Cpu).unwrap();
        assert_eq!(row_lengths(&m(vec![1., 1., 0., 1., 1., 1.], 2)).unwrap(), vec![2, 3]);
        assert!(row_lengths(&m(vec![0., 1., 1.], 1)).is_err());
        assert!(row_lengths(&m(vec![0., 0., 0.], 1)).is_err());
    }
}
