//! Attention over paged KV storage, with its backend chosen once when the engine starts: on the CPU the kernel
//! that reads the blocks in place ([`cpu_inplace`], kill switch `HEARTH_CPU_ATTN=0`), on a CUDA device the
//! kernels that write and read the blocks in place (`attention::cuda::paged`, kill switch
//! `HEARTH_CUDA_PAGED_ATTN=0`) when they support the model's heads, head size and dtype, and otherwise the
//! portable gather-then-attend backend ([`gather`], any device).

pub mod cpu_inplace;
pub mod gather;

use super::{AttnParams, BatchContext, KvStore, RowSpan};
use crate::kv::{KvEncoding, PagedKv};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};

/// The dtype the paged KV cache keeps for a model that computes in `dtype` on `device`: f16 on the CPU where the
/// in-place backend serves it and `HEARTH_CPU_KV_F16` is on, the model's dtype everywhere else.
pub fn kv_dtype(dtype: DType, device: &Device) -> DType {
    let l = crate::levers::get();
    if device.is_cpu() && dtype == DType::F32 && l.cpu_attn && l.cpu_kv_f16 {
        DType::F16
    } else {
        dtype
    }
}

enum Backend {
    Gather,
    CpuInPlace,
    #[cfg(feature = "cuda")]
    Cuda(super::cuda::paged::CudaPaged),
}

/// The engine's KV store: paged storage plus the attention backend that serves it.
pub struct PagedAttention {
    kv: PagedKv,
    backend: Backend,
    /// Linear-attention layers' state, in chunks that divide the block size (snapshots at block boundaries).
    recurrent: crate::recurrent::RecurrentStates,
}

impl PagedAttention {
    /// Storage for `num_blocks` blocks of `block_size` tokens of a model with these heads, on `device`, kept in
    /// `encoding` (see [`kv_dtype`] and [`kv_encoding`]). An encoding no backend here reads is an error.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        num_layers: usize,
        num_blocks: usize,
        block_size: usize,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        encoding: impl Into<KvEncoding>,
        device: &Device,
    ) -> Result<Self> {
        let encoding = encoding.into();
        let dtype = encoding.storage_dtype();
        let kv = PagedKv::new(num_layers, num_blocks, block_size, kv_heads, head_dim, encoding, device)?;
        #[cfg(feature = "cuda")]
        let backend = match super::cuda::paged::CudaPaged::choose(device, heads, kv_heads, head_dim, encoding) {
            Some(c) => Backend::Cuda(c),
            None => Backend::Gather,
        };
        #[cfg(not(feature = "cuda"))]
        let backend = {
            let _ = heads;
            Backend::Gather
        };
        let backend = match backend {
            Backend::Gather if crate::levers::get().cpu_attn && cpu_inplace::supports(dtype, device) => {
                Backend::CpuInPlace
            }
            b => b,
        };
        if encoding.is_quantized() && matches!(backend, Backend::Gather) {
            return Err(Error::Unsupported(format!(
                "a {} KV cache is read by the CPU's in-place attention (HEARTH_CPU_ATTN on) and, for {}, by the \
                 CUDA paged kernels (HEARTH_CUDA_PAGED_ATTN on, head size 64, 128 or 256, at most 1024 / head size \
                 query heads per kv head); neither serves this model here",
                encoding.name(),
                cuda_served()
            )));
        }
        let recurrent = crate::recurrent::RecurrentStates::new(crate::recurrent::chunk_for_block(block_size));
        Ok(Self { kv, backend, recurrent })
    }

    /// Which backend serves attention, in words.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Gather => "gather",
            Backend::CpuInPlace => "cpu-paged",
            #[cfg(feature = "cuda")]
            Backend::Cuda(_) => "cuda-paged",
        }
    }

    /// Whether a decode step over this store can be captured as a CUDA graph: the CUDA paged kernels serve it with
    /// a float cache (they then read fixed metadata buffers: [`crate::attention::FixedMeta`]).
    pub fn takes_fixed_meta(&self) -> bool {
        match &self.backend {
            #[cfg(feature = "cuda")]
            Backend::Cuda(c) => c.float_cache(),
            _ => false,
        }
    }

    pub fn storage(&self) -> &PagedKv {
        &self.kv
    }

    pub fn storage_mut(&mut self) -> &mut PagedKv {
        &mut self.kv
    }

    pub fn states(&mut self) -> &mut crate::recurrent::RecurrentStates {
        &mut self.recurrent
    }
}

impl KvStore for PagedAttention {
    fn recurrent(&mut self) -> Option<&mut crate::recurrent::RecurrentStates> {
        Some(&mut self.recurrent)
    }

    #[allow(unused_variables)]
    fn attend_qkv(
        &mut self,
        layer: usize,
        qkv: &Tensor,
        rope: &super::RopeTables,
        heads: super::Heads,
        ctx: &BatchContext,
        p: &AttnParams,
    ) -> Result<Option<Tensor>> {
        match &mut self.backend {
            Backend::Gather | Backend::CpuInPlace => Ok(None),
            // runs that attend both ways: the portable path (`attend`)
            #[cfg(feature = "cuda")]
            Backend::Cuda(_) if ctx.has_both_ways() => Ok(None),
            // the CUDA kernels take no attention sinks: the portable path attends those layers (`attend`)
            #[cfg(feature = "cuda")]
            Backend::Cuda(_) if p.sinks.is_some() => Ok(None),
            #[cfg(feature = "cuda")]
            Backend::Cuda(c) => c.attend_qkv(&self.kv, layer, qkv, rope, heads, ctx, p).map(Some),
        }
    }

    fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        ctx: &BatchContext,
        p: &AttnParams,
    ) -> Result<Tensor> {
        if ctx.has_both_ways() && !matches!(self.backend, Backend::Gather) {
            // Runs of tokens that attend each other both ways (Gemma 3's images) are attended by the portable
            // kernels, which read float caches.
            if self.kv.encoding().is_quantized() {
                return Err(Error::Unsupported(format!(
                    "images whose tokens attend each other both ways (Gemma 3) over a {} KV cache: their prompt is \
                     attended by the portable kernels, which read float caches; serve this model with the default \
                     --kv-cache-dtype",
                    self.kv.encoding().name()
                )));
            }
            // the cache's dtype (f16 on the CPU) may not be the model's
            let (k, v) = (encode_rows(&self.kv, k, true)?, encode_rows(&self.kv, v, false)?);
            return gather::attend(&self.kv, layer, q, &k, &v, ctx, p);
        }
        match &mut self.backend {
            Backend::Gather => gather::attend(&self.kv, layer, q, k, v, ctx, p),
            Backend::CpuInPlace => cpu_inplace::attend(&self.kv, layer, q, k, v, ctx, p),
            #[cfg(feature = "cuda")]
            Backend::Cuda(_) if p.sinks.is_some() => {
                if self.kv.encoding().is_quantized() {
                    return Err(Error::Unsupported(format!(
                        "attention sinks over a {} KV cache on CUDA: the CUDA kernels do not take sinks, and the \
                         portable kernels that do read float caches only",
                        self.kv.encoding().name()
                    )));
                }
                gather::attend(&self.kv, layer, q, k, v, ctx, p)
            }
            #[cfg(feature = "cuda")]
            Backend::Cuda(c) => c.attend(&self.kv, layer, q, k, v, ctx, p),
        }
    }
}

/// The encoding a model computing in `dtype` keeps its KV in on `device`: `choice` (`--kv-cache-dtype`), or
/// [`kv_dtype`]'s for `auto` (None). A choice the device's attention cannot read, or the model's heads cannot
/// hold, is an error that says why.
pub fn kv_encoding(choice: Option<KvEncoding>, dtype: DType, device: &Device, head_dim: usize) -> Result<KvEncoding> {
    let Some(enc) = choice else { return Ok(kv_dtype(dtype, device).into()) };
    if let Some(why) = enc.unfit(head_dim) {
        return Err(Error::Unsupported(why));
    }
    let cpu = device.is_cpu();
    let levers = crate::levers::get();
    let cuda_reads = !cpu && cuda_encoded(enc) && levers.cuda_paged_attn;
    let why = match enc {
        e if e.is_quantized() && cpu && levers.cpu_attn => return Ok(enc),
        e if e.is_quantized() && cpu => "the CPU's in-place attention reads it, and HEARTH_CPU_ATTN=0 is set".into(),
        e if e.is_quantized() && cuda_reads && matches!(dtype, DType::BF16 | DType::F16) => return Ok(enc),
        e if e.is_quantized() && cuda_reads => "the CUDA kernels read it for models computing in bf16 or f16".into(),
        e if e.is_quantized() && cuda_encoded(enc) => {
            "the CUDA paged kernels read it, and HEARTH_CUDA_PAGED_ATTN=0 is set".into()
        }
        e if e.is_quantized() => format!("the CUDA kernels read {}; the CPU reads every encoding", cuda_served()),
        KvEncoding::F32 | KvEncoding::F16 if cpu => return Ok(enc),
        _ if cpu => "the CPU keeps f32 or f16 (or an encoding: q8_0, q4_0, turbo:kXvY)".into(),
        // the CUDA kernels keep the KV in the dtype the model computes in
        e if e == KvEncoding::from(dtype) => return Ok(enc),
        _ => format!("this device keeps the KV in the dtype the model computes in, or an encoding: {}", cuda_served()),
    };
    Err(Error::Unsupported(format!(
        "--kv-cache-dtype {} cannot be used here ({}): {why}",
        enc.name(),
        if cpu { "cpu" } else { "cuda" }
    )))
}

/// Whether the CUDA kernels read `enc` (a build without them: never).
fn cuda_encoded(enc: KvEncoding) -> bool {
    #[cfg(feature = "cuda")]
    return super::cuda::encoded::serves(enc);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = enc;
        false
    }
}

/// The encodings the CUDA kernels read, in `--kv-cache-dtype`'s words.
fn cuda_served() -> String {
    #[cfg(feature = "cuda")]
    return super::cuda::encoded::served();
    #[cfg(not(feature = "cuda"))]
    "none in this build (no `cuda` feature)".into()
}

/// The step's packed k (`key`) or v rows ((T, KvH, D), the model's dtype) as the cache keeps them: cast to its
/// dtype, or encoded ((T, KvH, row bytes), rotated first where the code rotates), once per token and layer.
pub(super) fn encode_rows(kv: &PagedKv, x: &Tensor, key: bool) -> Result<Tensor> {
    let enc = kv.encoding();
    if !enc.is_quantized() {
        return Ok(x.to_dtype(enc.storage_dtype())?);
    }
    let code = if key { enc.key } else { enc.value };
    let (t, h, d) = x.dims3()?;
    let mut values = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    if code.rotated(key) {
        values.chunks_exact_mut(d).for_each(crate::kv::codec::rotate);
    }
    let mut bytes = Vec::new();
    crate::kv::encoding::encode(code, &values, d, &mut bytes);
    Ok(Tensor::from_vec(bytes, (t, h, code.units(d)), x.device())?)
}

/// Write one row's new k/v (`k`/`v`: the step's packed (T, KvH, D) as the cache keeps them) into its blocks, one
/// contiguous run per block.
fn write_row(kv: &PagedKv, layer: usize, k: &Tensor, v: &Tensor, row: &RowSpan) -> Result<()> {
    let (kbuf, vbuf) = kv.layer(layer)?;
    let bs = kv.block_size();
    let table = kv.table(row.slot)?;
    let mut i = 0;
    while i < row.len {
        let pos = row.pos0 + i;
        let run = (bs - pos % bs).min(row.len - i);
        let dst = kv.row_of(table, pos)?;
        kbuf.slice_set(&k.narrow(0, row.start + i, run)?.contiguous()?, 0, dst)?;
        vbuf.slice_set(&v.narrow(0, row.start + i, run)?.contiguous()?, 0, dst)?;
        i += run;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--kv-cache-dtype` is resolved at load: auto follows the device, an encoding the CPU cannot keep or a head
    /// size q8_0 cannot hold is an error that names the reason.
    #[test]
    fn a_cache_encoding_is_resolved_or_refused_with_its_reason() {
        let cpu = Device::Cpu;
        assert_eq!(kv_encoding(None, DType::F32, &cpu, 64).unwrap(), kv_dtype(DType::F32, &cpu).into());
        assert_eq!(kv_encoding(Some(KvEncoding::Q8_0), DType::F32, &cpu, 128).unwrap(), KvEncoding::Q8_0);
        assert_eq!(kv_encoding(Some(KvEncoding::F32), DType::F32, &cpu, 64).unwrap(), KvEncoding::F32);
        let head = kv_encoding(Some(KvEncoding::Q8_0), DType::F32, &cpu, 96).unwrap_err().to_string();
        assert!(head.contains("head size") && head.contains("96"), "{head}");
        let bf16 = kv_encoding(Some(KvEncoding::BF16), DType::F32, &cpu, 64).unwrap_err().to_string();
        assert!(bf16.contains("--kv-cache-dtype bf16") && bf16.contains("cpu"), "{bf16}");
    }
}
