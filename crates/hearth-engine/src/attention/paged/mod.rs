//! Attention over paged KV storage, with its backend chosen once when the engine starts: on the CPU the kernel
//! that reads the blocks in place ([`cpu_inplace`], kill switch `HEARTH_CPU_ATTN=0`), on a CUDA device the
//! kernels that write and read the blocks in place (`attention::cuda::paged`, kill switch
//! `HEARTH_CUDA_PAGED_ATTN=0`) when they support the model's heads, head size and dtype, and otherwise the
//! portable gather-then-attend backend ([`gather`], any device).

pub mod cpu_inplace;
pub mod gather;

use super::{AttnParams, BatchContext, KvStore, RowSpan};
use crate::kv::PagedKv;
use crate::Result;
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
}

impl PagedAttention {
    /// Storage for `num_blocks` blocks of `block_size` tokens of a model with these heads, on `device`, kept in
    /// `dtype` (see [`kv_dtype`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        num_layers: usize,
        num_blocks: usize,
        block_size: usize,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let kv = PagedKv::new(num_layers, num_blocks, block_size, kv_heads, head_dim, dtype, device)?;
        #[cfg(feature = "cuda")]
        let backend = match super::cuda::paged::CudaPaged::choose(device, heads, kv_heads, head_dim, dtype) {
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
        Ok(Self { kv, backend })
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

    pub fn storage_mut(&mut self) -> &mut PagedKv {
        &mut self.kv
    }
}

impl KvStore for PagedAttention {
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
        match &mut self.backend {
            Backend::Gather => gather::attend(&self.kv, layer, q, k, v, ctx, p),
            Backend::CpuInPlace => cpu_inplace::attend(&self.kv, layer, q, k, v, ctx, p),
            #[cfg(feature = "cuda")]
            Backend::Cuda(c) => c.attend(&self.kv, layer, q, k, v, ctx, p),
        }
    }
}

/// Write one row's new k/v (`k`/`v`: the step's packed (T, KvH, D)) into its blocks, one contiguous run per block.
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
