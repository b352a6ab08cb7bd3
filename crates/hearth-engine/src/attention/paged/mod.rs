//! Attention over paged KV storage, with its backend chosen once when the engine starts: on the CPU the kernel
//! that reads the blocks in place ([`super::cpu_paged`], kill switch `HEARTH_CPU_ATTN=0`), on a CUDA device the
//! kernels that write and read the blocks in place (`attention::cuda::paged`, kill switch
//! `HEARTH_CUDA_PAGED_ATTN=0`) when they support the model's heads, head size and dtype, and otherwise the
//! portable gather-then-attend backend ([`super::paged_gather`]).

use super::{AttnParams, BatchContext, KvStore};
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
    Cpu,
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
            Backend::Gather if crate::levers::get().cpu_attn && super::cpu_paged::supports(dtype, device) => {
                Backend::Cpu
            }
            b => b,
        };
        Ok(Self { kv, backend })
    }

    /// Which backend serves attention, in words.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Gather => "gather",
            Backend::Cpu => "cpu-paged",
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
            Backend::Gather | Backend::Cpu => Ok(None),
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
            Backend::Gather => super::paged_gather::attend(&self.kv, layer, q, k, v, ctx, p),
            Backend::Cpu => super::cpu_paged::attend(&self.kv, layer, q, k, v, ctx, p),
            #[cfg(feature = "cuda")]
            Backend::Cuda(c) => c.attend(&self.kv, layer, q, k, v, ctx, p),
        }
    }
}
