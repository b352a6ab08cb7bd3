//! Greedy sampling on the device (`argmax.cu`): a step whose rows all sample greedily copies one token id per row
//! to the host instead of every row's logits (R x vocab f32: 6.3 MB a step at 32 rows of a 49k vocabulary).
//!
//! On by default on CUDA; `HEARTH_GPU_ARGMAX=0` copies the logits and samples on the host.

use super::contiguous;
use super::launch::Launch;
use crate::Result;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaStorage, DType, Layout, Shape, Tensor};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/argmax.ptx"));
const MODULE: &str = "hearth_argmax";
/// ARGMAX_THREADS in the kernel.
const THREADS: u32 = 1024;

/// Whether greedy steps take their tokens from the device (`HEARTH_GPU_ARGMAX=0` turns it off).
pub fn enabled() -> bool {
    crate::levers::get().gpu_argmax
}

/// The index of each row's largest value (lowest index on ties) of f32 `logits` (R, V) on a CUDA device.
pub fn argmax_rows(logits: &Tensor) -> Result<Vec<u32>> {
    let logits = if logits.dtype() == DType::F32 { logits.contiguous()? } else { logits.to_dtype(DType::F32)? };
    Ok(logits.apply_op1_no_bwd(&Argmax)?.to_vec1::<u32>()?)
}

pub use crate::sampling::grammar::NONE_ALLOWED;

/// The best token each row's mask allows (bits of `masks`, (R, ⌈V/32⌉) u32 on the same device: token c allowed
/// when bit c % 32 of word c / 32 is set), lowest index on ties, a NaN never winning; [`NONE_ALLOWED`] where the
/// mask allows nothing. What a greedy step with grammar-constrained rows copies to the host instead of the logits.
pub fn argmax_rows_masked(logits: &Tensor, masks: &Tensor) -> Result<Vec<u32>> {
    let logits = if logits.dtype() == DType::F32 { logits.contiguous()? } else { logits.to_dtype(DType::F32)? };
    Ok(logits.apply_op2_no_bwd(&masks.contiguous()?, &MaskedArgmax)?.to_vec1::<u32>()?)
}

struct MaskedArgmax;

impl candle_core::CustomOp2 for MaskedArgmax {
    fn name(&self) -> &'static str {
        "hearth-masked-argmax"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("hearth-masked-argmax runs on CUDA only")
    }

    fn cuda_fwd(
        &self,
        s: &CudaStorage,
        l: &Layout,
        ms: &CudaStorage,
        ml: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (r, v) = l.shape().dims2()?;
        let (mr, w) = ml.shape().dims2()?;
        if v == 0 || v > i32::MAX as usize || mr != r || w != v.div_ceil(32) {
            candle_core::bail!("hearth-masked-argmax: {r} rows of {v} logits, masks {mr} x {w}");
        }
        let (s0, s1) = contiguous(l, "logits")?;
        let (m0, m1) = contiguous(ml, "masks")?;
        let dev = s.device().clone();
        let func = dev.get_or_load_custom_func("argmax_rows_masked_f32", MODULE, PTX)?;
        let cfg = LaunchConfig { grid_dim: (r as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let x = s.as_cuda_slice::<f32>()?.slice(s0..s1);
        let m = ms.as_cuda_slice::<u32>()?.slice(m0..m1);
        // SAFETY: the kernel writes one id per row.
        let out = unsafe { dev.alloc::<u32>(r)? };
        let (vi, wi) = (v as i32, w as i32);
        let stream = dev.cuda_stream();
        let mut b = Launch::new(&stream, &func);
        b.ptr(&x).ptr(&m).ptr(&out).val(&vi).val(&wi);
        // SAFETY: one block per row reads that row's v values and w mask words.
        unsafe { b.launch(cfg) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), Shape::from(r)))
    }
}

struct Argmax;

impl candle_core::CustomOp1 for Argmax {
    fn name(&self) -> &'static str {
        "hearth-argmax"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("hearth-argmax runs on CUDA only")
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (r, v) = l.shape().dims2()?;
        if v == 0 || v > i32::MAX as usize {
            candle_core::bail!("hearth-argmax: rows of {v} logits");
        }
        let (s0, s1) = contiguous(l, "logits")?;
        let dev = s.device().clone();
        let func = dev.get_or_load_custom_func("argmax_rows_f32", MODULE, PTX)?;
        let cfg = LaunchConfig { grid_dim: (r as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let x = s.as_cuda_slice::<f32>()?.slice(s0..s1);
        // SAFETY: the kernel writes one id per row.
        let out = unsafe { dev.alloc::<u32>(r)? };
        let vi = v as i32;
        let stream = dev.cuda_stream();
        let mut b = Launch::new(&stream, &func);
        b.ptr(&x).ptr(&out).val(&vi);
        // SAFETY: one block per row reads that row's v values.
        unsafe { b.launch(cfg) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), Shape::from(r)))
    }
}
