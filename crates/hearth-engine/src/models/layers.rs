//! Pieces shared by the model files: linear layers (quantized or dense), RMSNorm, LayerNorm, rotary embeddings
//! with the supported scalings, and the head projection (the gated MLP: `super::mlp`).

pub use super::linear::Linear;
pub use super::norm::RmsNorm;
use crate::weights::config::RopeScaling;
use crate::weights::{ExpertPart, ModelConfig, Weights};
use crate::work_pool::KernelPool;
use crate::Result;
use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Tensor};
use std::cell::Cell;

/// Where and how a model is being built.
pub struct Loader<'a> {
    pub weights: &'a Weights,
    pub cfg: &'a ModelConfig,
    pub device: &'a Device,
    pub dtype: DType,
    /// Dequantize quantized matrices to `dtype` at load (exact reference math, more memory).
    pub dequantize: bool,
    /// `--kv-cache-dtype` (None: auto).
    pub kv_cache: Option<crate::kv::KvEncoding>,
    /// llama.cpp's `mmproj` file for a GGUF model's vision tower, and its path (`--mmproj`).
    pub mmproj: Option<(&'a crate::weights::GgufFile, &'a std::path::Path)>,
    /// The pool the model's CPU kernels run on, as the weights loaded so far decide ([`Loader::kernel_pool`]).
    pool: Cell<KernelPool>,
}

impl<'a> Loader<'a> {
    pub fn new(weights: &'a Weights, cfg: &'a ModelConfig, device: &'a Device, dtype: DType, dequantize: bool) -> Self {
        Self {
            weights,
            cfg,
            device,
            dtype,
            dequantize,
            kv_cache: None,
            mmproj: None,
            pool: Cell::new(KernelPool::default()),
        }
    }

    /// The pool the model's CPU kernels run on: candle's when candle's kernels decode any of its weights (read
    /// once every weight is loaded).
    pub fn kernel_pool(&self) -> KernelPool {
        self.pool.get()
    }

    /// A linear layer over `w`, noted in the model's kernel pool.
    pub(crate) fn new_linear(&self, w: QMatMul, b: Option<Tensor>) -> Linear {
        crate::cpu_matmul::note_weight(&self.pool, &w);
        Linear::new(w, b)
    }
    /// The KV cache's encoding: `--kv-cache-dtype`'s (an error where this device or model cannot keep it), else
    /// the activations' dtype under `dequantize` (exact reference math), else [`crate::attention::kv_dtype`]'s
    /// choice for this device. Keys under 8 bits on a model with attention biases (Qwen2) get a warning.
    pub fn kv_encoding(&self) -> Result<crate::kv::KvEncoding> {
        let enc = match self.kv_cache {
            None if self.dequantize => self.dtype.into(),
            choice => crate::attention::kv_encoding(choice, self.dtype, self.device, self.cfg.head_dim)?,
        };
        if enc.is_quantized() && self.cfg.attention_sinks && !self.device.is_cpu() {
            return Err(crate::Error::Unsupported(format!(
                "--kv-cache-dtype {} with {}'s attention sinks on this device: its kernels for encoded caches take \
                 no sinks (the CPU serves both; on the GPU use the model's dtype)",
                enc.name(),
                self.cfg.arch_name
            )));
        }
        if enc.key.is_quantized() && enc.key.bits() < 8 && self.cfg.attention_bias {
            tracing::warn!(
                "--kv-cache-dtype {}: this model's attention has biases, and keys of fewer than 8 bits lose it \
                 (its answers degrade badly); q8_0, turbo:k8v4 or turbo:k8v3 keep 8-bit keys",
                enc.name()
            );
        }
        Ok(enc)
    }

    pub fn linear(&self, prefix: &str, bias: bool) -> Result<Linear> {
        let w = self.dense_if_asked(self.weights.matrix(&format!("{prefix}.weight"), self.dtype, self.device)?)?;
        let b =
            if bias { Some(self.weights.vector(&format!("{prefix}.bias"), self.dtype, self.device)?) } else { None };
        Ok(self.new_linear(w, b))
    }

    /// The token embedding table, checked against the configured vocabulary (a token id the config allows but
    /// the table lacks would fail every batch it appears in).
    pub fn embedding(&self) -> Result<crate::weights::EmbeddingTable> {
        let e = self.weights.embedding("model.embed_tokens.weight", self.dtype, self.device)?;
        if e.rows() < self.cfg.vocab_size {
            return Err(crate::Error::InvalidModel(format!(
                "the embedding table has {} rows but the vocabulary is {}",
                e.rows(),
                self.cfg.vocab_size
            )));
        }
        Ok(e)
    }

    /// The LM head: `lm_head` when the model has its own, else the tied embedding table.
    pub fn lm_head(&self, embed: &crate::weights::EmbeddingTable) -> Result<Linear> {
        if !self.cfg.tie_word_embeddings && self.weights.contains("lm_head.weight") {
            return self.linear("lm_head", false);
        }
        Ok(self.new_linear(self.dense_if_asked(embed.as_matmul()?)?, None))
    }

    fn dense_if_asked(&self, w: QMatMul) -> Result<QMatMul> {
        Ok(match w {
            QMatMul::QTensor(q) if self.dequantize => QMatMul::Tensor(q.dequantize(self.device)?.to_dtype(self.dtype)?),
            other => other,
        })
    }

    /// Expert `expert`'s `proj` matrix of layer `layer`'s routed feed-forward ([`Weights::expert_matrix`]), with
    /// its bias where the model's experts have them.
    pub fn expert_linear(&self, layer: usize, expert: usize, proj: &str) -> Result<Linear> {
        let w = self.weights.expert_matrix(ExpertPart { layer, expert, proj }, self.dtype, self.device)?;
        Ok(self.new_linear(self.dense_if_asked(w)?, self.expert_bias(layer, expert, proj)?))
    }

    /// Expert `expert`'s `proj` bias, where the model's experts have biases (None otherwise).
    fn expert_bias(&self, layer: usize, expert: usize, proj: &str) -> Result<Option<Tensor>> {
        match &self.cfg.moe {
            Some(m) if m.biases => {
                Ok(Some(self.weights.expert_bias(ExpertPart { layer, expert, proj }, self.dtype, self.device)?))
            }
            _ => Ok(None),
        }
    }

    /// A small vector of `len` values in f32 on the host (attention sinks).
    pub fn vector_f32(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let v = self.weights.vector(name, DType::F32, &Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?;
        let n = v.len();
        (n == len).then_some(v).ok_or_else(|| crate::Error::InvalidModel(format!("`{name}`: {n} values, not {len}")))
    }

    pub fn rms_norm(&self, name: &str) -> Result<RmsNorm> {
        let w = self.weights.vector(&format!("{name}.weight"), DType::F32, self.device)?;
        let w = if self.cfg.norm_weight_offset != 0.0 { (w + self.cfg.norm_weight_offset)? } else { w };
        let w_act = if self.gpu_fused() { Some(w.to_dtype(self.dtype)?) } else { None };
        Ok(RmsNorm { w, w_act, eps: self.cfg.rms_norm_eps as f32 })
    }

    /// Whether this model gets hearth's fused GPU kernels (a CUDA build on a CUDA device, `HEARTH_GPU_FUSED` on).
    pub fn gpu_fused(&self) -> bool {
        #[cfg(feature = "cuda")]
        {
            self.device.is_cuda() && crate::gpu::fused_on()
        }
        #[cfg(not(feature = "cuda"))]
        {
            false
        }
    }

    /// Several projections of the same input as one matmul (their outputs concatenated in order), when the fused
    /// GPU path is on and every weight is dense, or on the CPU when every weight is quantized in one type that
    /// hearth's CPU kernels decode (`HEARTH_CPU_FUSED`); None otherwise (the caller loads them one by one).
    pub fn fused_linear(&self, prefixes: &[String], bias: bool) -> Result<Option<Linear>> {
        if self.cpu_stacks() && !bias {
            return self.fused_quantized(prefixes);
        }
        let quantized = matches!(self.weights, Weights::Gguf(_)) && !self.dequantize;
        if quantized {
            // On the GPU, quantized matrices of one type are stacked for hearth's quantized kernels (`gpu::qgemv`).
            if !self.gpu_stacks() {
                return Ok(None);
            }
            let Some(mut fused) = self.fused_quantized(prefixes)? else { return Ok(None) };
            if bias {
                let bs = prefixes
                    .iter()
                    .map(|p| self.weights.vector(&format!("{p}.bias"), self.dtype, self.device))
                    .collect::<Result<Vec<_>>>()?;
                fused.b = Some(Tensor::cat(&bs, 0)?);
            }
            return Ok(Some(fused));
        }
        if !self.gpu_fused() {
            return Ok(None);
        }
        let mut ws = Vec::with_capacity(prefixes.len());
        let mut bs = Vec::new();
        for p in prefixes {
            match self.dense_if_asked(self.weights.matrix(&format!("{p}.weight"), self.dtype, self.device)?)? {
                QMatMul::Tensor(w) => ws.push(w),
                _ => return Ok(None),
            }
            if bias {
                bs.push(self.weights.vector(&format!("{p}.bias"), self.dtype, self.device)?);
            }
        }
        let w = Tensor::cat(&ws, 0)?;
        let b = if bias { Some(Tensor::cat(&bs, 0)?) } else { None };
        Ok(Some(self.new_linear(QMatMul::Tensor(w), b)))
    }

    /// CPU: quantized matrices of one type and width stacked row-wise into one (their GGML rows are whole blocks,
    /// so the stack is the bytes one after another): one activation quantization and one hand-out to the work
    /// pool instead of one per projection. Each output is computed exactly as the separate matmul would.
    fn fused_quantized(&self, prefixes: &[String]) -> Result<Option<Linear>> {
        // Read on the host and stacked there: the stack alone goes to a GPU.
        let mut parts = Vec::with_capacity(prefixes.len());
        for p in prefixes {
            parts.push(self.weights.matrix(&format!("{p}.weight"), self.dtype, &Device::Cpu)?);
        }
        self.stack_quantized(parts)
    }

    /// Expert `expert`'s gate and up matrices of layer `layer` as one (gate rows, then up rows) where
    /// [`Loader::fused_linear`] would stack a dense MLP's on this device (CPU, quantized, `HEARTH_CPU_FUSED`); None
    /// otherwise.
    pub fn fused_expert_gate_up(&self, layer: usize, expert: usize) -> Result<Option<Linear>> {
        if !self.cpu_stacks() {
            return Ok(None);
        }
        let parts = ["gate_proj", "up_proj"]
            .iter()
            .map(|proj| self.weights.expert_matrix(ExpertPart { layer, expert, proj }, self.dtype, self.device))
            .collect::<Result<Vec<_>>>()?;
        let Some(mut fused) = self.stack_quantized(parts)? else { return Ok(None) };
        // gate's bias, then up's, as the stacked rows
        if let (Some(g), Some(u)) =
            (self.expert_bias(layer, expert, "gate_proj")?, self.expert_bias(layer, expert, "up_proj")?)
        {
            fused.b = Some(Tensor::cat(&[g, u], 0)?);
        }
        Ok(Some(fused))
    }

    /// Whether this model's CPU matmuls of one input are stacked into one (quantized GGUF weights kept as stored,
    /// on the CPU, `HEARTH_CPU_FUSED` on).
    fn cpu_stacks(&self) -> bool {
        let quantized = matches!(self.weights, Weights::Gguf(_)) && !self.dequantize;
        quantized && self.device.is_cpu() && crate::levers::get().cpu_fused
    }

    /// Whether this model's GPU matmuls of one input are stacked into one (quantized GGUF weights kept as stored,
    /// hearth's fused GPU kernels and its quantized matmuls on).
    fn gpu_stacks(&self) -> bool {
        #[cfg(feature = "cuda")]
        {
            self.gpu_fused() && crate::gpu::qgemv::on()
        }
        #[cfg(not(feature = "cuda"))]
        {
            false
        }
    }

    /// Whether hearth's kernels of this device read a stack of this GGML type.
    fn stackable(&self, dtype: candle_core::quantized::GgmlDType) -> bool {
        #[cfg(feature = "cuda")]
        if self.device.is_cuda() {
            return crate::gpu::qgemv::supported(dtype);
        }
        crate::cpu_matmul::decode_supported(dtype)
    }

    /// Quantized matrices of one type and width as one (None where any is not, or hearth cannot decode the type).
    fn stack_quantized(&self, matrices: Vec<QMatMul>) -> Result<Option<Linear>> {
        let mut parts = Vec::with_capacity(matrices.len());
        for m in matrices {
            match m {
                QMatMul::QTensor(q) => parts.push(q),
                _ => return Ok(None),
            }
        }
        let dtype = parts[0].dtype();
        let Ok((_, k)) = parts[0].shape().dims2() else { return Ok(None) };
        let same = parts.iter().all(|q| q.dtype() == dtype && q.shape().dims2().ok().map(|d| d.1) == Some(k));
        if !same || !self.stackable(dtype) {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        let mut n = 0;
        for q in &parts {
            bytes.extend_from_slice(&q.data()?);
            n += q.shape().dims2()?.0;
        }
        let storage = candle_core::quantized::QStorage::from_data(std::borrow::Cow::Owned(bytes), self.device, dtype)?;
        let w = candle_core::quantized::QTensor::new(storage, (n, k))?;
        Ok(Some(self.new_linear(QMatMul::from_arc(std::sync::Arc::new(w))?, None)))
    }
}

/// LayerNorm computed in f32 with the two-pass variance (the reference's math; the one-pass `E[x²] - E[x]²`
/// loses precision on post-residual activations): y = (x - mean) / sqrt(var + eps) * w + b.
#[derive(Clone)]
pub struct LayerNorm {
    w: Tensor,
    b: Tensor,
    eps: f64,
}

impl LayerNorm {
    /// `{prefix}.weight` and `{prefix}.bias`.
    pub fn load(weights: &Weights, prefix: &str, eps: f64, device: &Device) -> Result<Self> {
        let w = weights.vector(&format!("{prefix}.weight"), DType::F32, device)?;
        let b = weights.vector(&format!("{prefix}.bias"), DType::F32, device)?;
        Ok(Self { w, b, eps })
    }

    /// x: (.., hidden) in any dtype; the result has x's dtype.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        let x = x.to_dtype(DType::F32)?;
        let last = candle_core::D::Minus1;
        let centered = x.broadcast_sub(&x.mean_keepdim(last)?)?;
        let var = centered.sqr()?.mean_keepdim(last)?;
        let y = centered.broadcast_div(&(var + self.eps)?.sqrt()?)?.broadcast_mul(&self.w)?.broadcast_add(&self.b)?;
        Ok(y.to_dtype(dtype)?)
    }
}

/// Rotary embedding tables for one base frequency, indexed by absolute position.
#[derive(Clone)]
pub struct Rope {
    /// (1, D/2) inverse frequencies.
    inv: Tensor,
    max_pos: usize,
    interleaved: bool,
    /// What cos and sin are multiplied by (YaRN's attention factor; 1 for the rest).
    factor: f64,
}

/// Inverse frequencies for `dim` rotary dims with the given base and scaling (HF's `_compute_*_parameters`).
pub fn inv_freqs(dim: usize, base: f64, scaling: &RopeScaling) -> Vec<f32> {
    let mut f: Vec<f64> = (0..dim / 2).map(|i| 1.0 / base.powf(2.0 * i as f64 / dim as f64)).collect();
    match scaling {
        RopeScaling::None => {}
        RopeScaling::Linear { factor } => f.iter_mut().for_each(|x| *x /= factor),
        RopeScaling::FreqFactors(div) => {
            for (x, d) in f.iter_mut().zip(div.iter()) {
                *x /= *d as f64;
            }
        }
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
            let low_wavelen = original_max_position_embeddings / low_freq_factor;
            let high_wavelen = original_max_position_embeddings / high_freq_factor;
            for x in f.iter_mut() {
                let wavelen = 2.0 * std::f64::consts::PI / *x;
                if wavelen > low_wavelen {
                    *x /= factor;
                } else if wavelen >= high_wavelen {
                    let smooth = (original_max_position_embeddings / wavelen - low_freq_factor)
                        / (high_freq_factor - low_freq_factor);
                    *x = (1.0 - smooth) * *x / factor + smooth * *x;
                }
            }
        }
        RopeScaling::Yarn { factor, beta_fast, beta_slow, original_max_position_embeddings, truncate, .. } => {
            let d = dim as f64;
            // the dimension at which a frequency turns `rotations` times over the original context
            let correction = |rotations: f64| {
                d * (original_max_position_embeddings / (rotations * 2.0 * std::f64::consts::PI)).ln()
                    / (2.0 * base.ln())
            };
            let (mut low, mut high) = (correction(*beta_fast), correction(*beta_slow));
            if *truncate {
                (low, high) = (low.floor(), high.ceil());
            }
            let (low, high) = (low.max(0.0), high.min(d - 1.0));
            let span = if low == high { 0.001 } else { high - low };
            for (i, x) in f.iter_mut().enumerate() {
                let ramp = ((i as f64 - low) / span).clamp(0.0, 1.0);
                // extrapolated (the base frequency) where the ramp is 0, interpolated (divided by factor) at 1
                *x = *x / factor * ramp + *x * (1.0 - ramp);
            }
        }
    }
    f.into_iter().map(|x| x as f32).collect()
}

impl Rope {
    pub fn new(
        dim: usize,
        base: f64,
        scaling: &RopeScaling,
        max_pos: usize,
        interleaved: bool,
        device: &Device,
    ) -> Result<Self> {
        let inv = inv_freqs(dim, base, scaling);
        let half = inv.len();
        let inv = Tensor::from_vec(inv, (1, half), device)?;
        Ok(Self { inv, max_pos, interleaved, factor: scaling.attention_factor() })
    }

    pub fn max_positions(&self) -> usize {
        self.max_pos
    }

    /// The tables at this batch's positions, computed once per forward and shared by every layer: `cos` and `sin`
    /// of `position · inv_freq`, the same f32 operations a precomputed `(max_pos, D/2)` table would hold (such a
    /// table would cost 2 × 16 MiB per rotary base at Gemma 3's 32k positions).
    pub fn at(&self, positions: &Tensor) -> Result<RopeAt> {
        let t = positions.dim(0)?;
        let freqs = positions.to_dtype(DType::F32)?.reshape((t, 1))?.broadcast_mul(&self.inv)?;
        let (cos, sin) = (freqs.cos()?, freqs.sin()?);
        let (cos, sin) = if self.factor == 1.0 { (cos, sin) } else { ((cos * self.factor)?, (sin * self.factor)?) };
        Ok(RopeAt { cos, sin, interleaved: self.interleaved })
    }
}

impl Rope {
    /// Multimodal rope (M-RoPE): `positions` (3, T) u32, the rotary frequencies split into `sections` (temporal,
    /// height, width), each section turned by its own component (transformers' `mrope_section`).
    pub fn at_sections(&self, positions: &Tensor, sections: &[usize]) -> Result<RopeAt> {
        let (parts, t) = positions.dims2()?;
        let half = self.inv.dim(1)?;
        if parts != sections.len() || sections.iter().sum::<usize>() != half {
            return Err(crate::Error::InvalidModel(format!(
                "M-RoPE sections {sections:?} do not split {half} frequencies over {parts} position components"
            )));
        }
        let pos = positions.to_dtype(DType::F32)?;
        let mut cols = Vec::with_capacity(sections.len());
        let mut off = 0;
        for (i, &n) in sections.iter().enumerate() {
            let p = pos.get(i)?.reshape((t, 1))?;
            cols.push(p.broadcast_mul(&self.inv.narrow(1, off, n)?)?);
            off += n;
        }
        let freqs = Tensor::cat(&cols, 1)?;
        let (cos, sin) = (freqs.cos()?, freqs.sin()?);
        let (cos, sin) = if self.factor == 1.0 { (cos, sin) } else { ((cos * self.factor)?, (sin * self.factor)?) };
        Ok(RopeAt { cos, sin, interleaved: self.interleaved })
    }
}

/// `h` (T, hidden) with rows `start..start + n` replaced by each `(start, rows)` (rows: (n, hidden), cast to
/// h's dtype): a multimodal model's image embeddings in place of its placeholder tokens.
pub fn splice_rows(h: &Tensor, parts: &[(usize, Tensor)]) -> Result<Tensor> {
    let t = h.dim(0)?;
    let mut sorted: Vec<&(usize, Tensor)> = parts.iter().collect();
    sorted.sort_by_key(|p| p.0);
    let mut pieces = Vec::with_capacity(2 * sorted.len() + 1);
    let mut at = 0;
    for (start, rows) in sorted {
        let n = rows.dim(0)?;
        if *start < at || start + n > t {
            return Err(crate::Error::InvalidRequest(format!(
                "image rows {start}..{} overlap or pass the batch's {t} tokens",
                start + n
            )));
        }
        if *start > at {
            pieces.push(h.narrow(0, at, start - at)?);
        }
        pieces.push(rows.to_dtype(h.dtype())?);
        at = start + n;
    }
    if at < t {
        pieces.push(h.narrow(0, at, t - at)?);
    }
    Ok(Tensor::cat(&pieces, 0)?)
}

/// Rotary tables for the packed tokens of one batch.
pub struct RopeAt {
    cos: Tensor,
    sin: Tensor,
    interleaved: bool,
}

impl RopeAt {
    /// The gathered tables, (T, D/2) f32 each, for kernels that rotate in place.
    pub fn tables(&self) -> crate::attention::RopeTables<'_> {
        crate::attention::RopeTables { cos: &self.cos, sin: &self.sin, interleaved: self.interleaved }
    }

    /// x: (T, H, D) -> rotated (T, H, D), each token at its own position.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        let x4 = x.to_dtype(DType::F32)?.unsqueeze(0)?.contiguous()?; // (1, T, H, D)
        let y = if self.interleaved {
            // rope_i wants (B, H, T, D).
            let xt = x4.transpose(1, 2)?.contiguous()?;
            candle_nn::rotary_emb::rope_i(&xt, &self.cos, &self.sin)?.transpose(1, 2)?
        } else {
            candle_nn::rotary_emb::rope_thd(&x4, &self.cos, &self.sin)?
        };
        Ok(y.squeeze(0)?.to_dtype(dtype)?)
    }
}

/// Select the rows of `hidden` (T, hidden) whose logits are wanted.
pub fn select_rows(hidden: &Tensor, indices: &[u32]) -> Result<Tensor> {
    if indices.len() == hidden.dim(0)? {
        return Ok(hidden.clone());
    }
    let idx = Tensor::new(indices, hidden.device())?;
    Ok(hidden.index_select(&idx, 0)?)
}

/// Final logits in f32, optionally soft-capped: cap * tanh(logits / cap).
pub fn finish_logits(logits: Tensor, softcap: Option<f64>) -> Result<Tensor> {
    let logits = logits.to_dtype(DType::F32)?;
    Ok(match softcap {
        Some(c) => ((logits / c)?.tanh()? * c)?,
        None => logits,
    })
}

/// (T, H*D) -> (T, H, D)
pub fn split_heads(x: &Tensor, heads: usize, head_dim: usize) -> Result<Tensor> {
    let t = x.dim(0)?;
    Ok(x.reshape((t, heads, head_dim))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_scaling_keeps_high_freqs_and_divides_low() {
        let s = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        let plain = inv_freqs(128, 500_000.0, &RopeScaling::None);
        let scaled = inv_freqs(128, 500_000.0, &s);
        assert_eq!(plain[0], scaled[0]); // wavelength 2π < high_wavelen: unchanged
        let last = plain.len() - 1;
        assert!((scaled[last] - plain[last] / 8.0).abs() < 1e-12); // longest wavelength: divided by factor
    }

    #[test]
    fn layer_norm_matches_its_definition() {
        let dev = Device::Cpu;
        let ln = LayerNorm {
            w: Tensor::new(&[1f32, 2.0, 0.5], &dev).unwrap(),
            b: Tensor::new(&[0f32, 1.0, -1.0], &dev).unwrap(),
            eps: 1e-12,
        };
        // Large offset, small spread: where the one-pass variance cancels badly.
        let x = Tensor::new(&[[1000.0f32, 1001.0, 1002.0]], &dev).unwrap();
        let y = ln.forward(&x).unwrap().to_vec2::<f32>().unwrap();
        let s = (2.0f32 / 3.0).sqrt();
        let want = [-1.0 / s, 1.0, 0.5 / s - 1.0];
        for (a, b) in y[0].iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{:?} vs {want:?}", y[0]);
        }
    }

    #[test]
    fn rope_at_position_zero_is_identity() {
        let dev = Device::Cpu;
        for inter in [false, true] {
            let r = Rope::new(8, 10_000.0, &RopeScaling::None, 4, inter, &dev).unwrap();
            let x = Tensor::arange(0f32, 16.0, &dev).unwrap().reshape((1, 2, 8)).unwrap();
            let y = r.at(&Tensor::new(&[0u32], &dev).unwrap()).unwrap().apply(&x).unwrap();
            assert_eq!(x.to_vec3::<f32>().unwrap(), y.to_vec3::<f32>().unwrap());
        }
    }
}
