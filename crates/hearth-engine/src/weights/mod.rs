//! Weights: where a model's tensors come from (GGUF or Hugging Face safetensors), behind one interface that
//! speaks Hugging Face parameter names. Model code never sees a file format.

pub mod config;
mod experts;
pub mod gguf;
mod gguf_scan;
mod mxfp4;
pub mod quantize;
pub mod resolve;
pub mod safetensors;

use crate::{Error, Result};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Tensor};
use std::sync::Arc;

pub use config::ModelConfig;
pub use experts::ExpertPart;
pub use gguf::GgufFile;
pub use safetensors::HfWeights;

pub enum Weights {
    Gguf(GgufFile),
    Hf(HfWeights),
}

impl Weights {
    /// (elements, bytes as stored) over every tensor.
    pub fn sizes(&self) -> (u64, u64) {
        match self {
            Weights::Gguf(g) => g.sizes(),
            Weights::Hf(h) => h.sizes(),
        }
    }
}

/// A matrix used as `x @ W^T`: quantized (GGUF) or dense.
#[derive(Clone)]
pub struct MatWeight(pub QMatMul);

/// An embedding table, shared with a tied LM head.
#[derive(Clone)]
pub enum EmbeddingTable {
    Quantized(Arc<QTensor>),
    Dense(Tensor),
}

impl EmbeddingTable {
    /// Rows `ids` of the table, in `dtype` (a quantized table yields f32 rows).
    pub fn lookup(&self, ids: &Tensor, dtype: DType) -> Result<Tensor> {
        let rows = match self {
            EmbeddingTable::Quantized(q) => q.embedding(ids)?,
            EmbeddingTable::Dense(w) => w.index_select(ids, 0)?,
        };
        Ok(if rows.dtype() == dtype { rows } else { rows.to_dtype(dtype)? })
    }

    /// Rows of the table (the vocabulary it can embed).
    pub fn rows(&self) -> usize {
        match self {
            EmbeddingTable::Quantized(q) => q.shape().dims().first().copied().unwrap_or(0),
            EmbeddingTable::Dense(w) => w.dims().first().copied().unwrap_or(0),
        }
    }

    /// The same table as an output projection (tied word embeddings).
    pub fn as_matmul(&self) -> Result<QMatMul> {
        Ok(match self {
            EmbeddingTable::Quantized(q) => gguf_matmul(q.clone())?,
            EmbeddingTable::Dense(w) => QMatMul::Tensor(w.clone()),
        })
    }
}

impl Weights {
    fn gguf_name(g: &GgufFile, hf: &str) -> Result<String> {
        let arch = g.architecture()?;
        gguf::hf_to_gguf_name(arch, hf)
            .ok_or_else(|| Error::InvalidModel(format!("no GGUF name for parameter `{hf}` (architecture {arch})")))
    }

    pub fn contains(&self, hf: &str) -> bool {
        match self {
            Weights::Gguf(g) => Self::gguf_name(g, hf).map(|n| g.has_tensor(&n)).unwrap_or(false),
            Weights::Hf(h) => h.contains(hf),
        }
    }

    /// A weight matrix, kept quantized when the file is quantized.
    pub fn matrix(&self, hf: &str, dtype: DType, device: &Device) -> Result<QMatMul> {
        match self {
            Weights::Gguf(g) => {
                let q = g.qtensor(&Self::gguf_name(g, hf)?, device)?;
                gguf_matmul(Arc::new(q))
            }
            Weights::Hf(h) => Ok(QMatMul::Tensor(h.tensor(hf, dtype, device)?)),
        }
    }

    /// A small tensor (norm weight, bias) in the compute dtype.
    pub fn vector(&self, hf: &str, dtype: DType, device: &Device) -> Result<Tensor> {
        match self {
            Weights::Gguf(g) => Ok(g.tensor_f32(&Self::gguf_name(g, hf)?, device)?.to_dtype(dtype)?),
            Weights::Hf(h) => h.tensor(hf, dtype, device),
        }
    }

    pub fn embedding(&self, hf: &str, dtype: DType, device: &Device) -> Result<EmbeddingTable> {
        match self {
            Weights::Gguf(g) => Ok(EmbeddingTable::Quantized(Arc::new(g.qtensor(&Self::gguf_name(g, hf)?, device)?))),
            Weights::Hf(h) => Ok(EmbeddingTable::Dense(h.tensor(hf, dtype, device)?)),
        }
    }
}

/// A GGUF matrix as the matmuls take it. candle widens F16 matrices to f32 (twice the file's memory, twice the bytes
/// a decode step reads); with `HEARTH_CPU_F16_WEIGHTS=1` they stay f16 on the CPU and multiply in candle's f16
/// matmul, the activations rounded to f16 first, as llama.cpp's CPU matmul does for F16 weights (opt-in: that matmul
/// decodes one stream faster but prefills slower than the f32 one, docs/benchmarks.md).
pub(crate) fn gguf_matmul(q: Arc<QTensor>) -> Result<QMatMul> {
    gguf_matmul_as(q, crate::levers::get().cpu_f16_weights)
}

fn gguf_matmul_as(q: Arc<QTensor>, keep_f16: bool) -> Result<QMatMul> {
    let device = q.device();
    if keep_f16 && q.dtype() == GgmlDType::F16 && device.is_cpu() {
        return Ok(QMatMul::TensorF16(q.dequantize_f16(&device)?));
    }
    Ok(QMatMul::from_arc(q)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Module;

    /// An F16 matrix kept f16 multiplies within f16 rounding of the widened one; other types are untouched.
    #[test]
    fn f16_matrices_stay_f16_when_asked() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 0.05, (48, 64), &dev).unwrap();
        let x = Tensor::randn(0f32, 1.0, (3, 64), &dev).unwrap();
        let q = Arc::new(QTensor::quantize(&w, GgmlDType::F16).unwrap());
        let kept = gguf_matmul_as(q.clone(), true).unwrap();
        let wide = gguf_matmul_as(q, false).unwrap();
        assert!(matches!(kept, QMatMul::TensorF16(_)) && matches!(wide, QMatMul::Tensor(_)));
        let (a, b) = (kept.forward(&x).unwrap(), wide.forward(&x).unwrap());
        assert_eq!(a.dtype(), DType::F32);
        let err = (a - &b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        let scale = b.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(err > 0.0 && err < 2e-3 * scale.max(1.0), "f16 vs f32 max-abs {err} (scale {scale})");
        let q8 = Arc::new(QTensor::quantize(&w, GgmlDType::Q8_0).unwrap());
        assert!(matches!(gguf_matmul_as(q8, true).unwrap(), QMatMul::QTensor(_)));
    }
}
