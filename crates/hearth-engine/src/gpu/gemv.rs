//! Skinny matmul (`gemv.cu`) for the dense linear layers of decode steps with at most [`MAX_ROWS`] rows.
//!
//! Opt-in (`HEARTH_GPU_GEMV=1`): it lost its paired A/B against cuBLAS on the H200 (docs/benchmarks.md: equal at
//! one row, 1.3x slower at eight), so dense matmuls go through cuBLAS by default.

use super::{by_float_dtype, contiguous, cuda_of, env_on, sfx_c};
use crate::Result;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaStorage, Layout, Shape, Tensor};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/gemv.ptx"));
const MODULE: &str = "hearth_gemv";
/// The most input rows one launch takes (kernels are instantiated for 1..=8).
pub const MAX_ROWS: usize = 8;
/// Output columns per block (gemv.cu's WARPS * ROWS).
const COLS_PER_BLOCK: usize = 8;

fn gemv_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| env_on("HEARTH_GPU_GEMV"))
}

/// x (.., K) with M rows in all · w (N, K)ᵀ through the skinny kernel, or None when it does not apply (not CUDA, M > 8, dtypes
/// differ, K not a multiple of a 16-byte vector, or w not a plain contiguous matrix): the caller uses cuBLAS.
pub fn matmul(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    if !x.device().is_cuda() || x.dtype() != w.dtype() || x.rank() < 2 || w.rank() != 2 {
        return Ok(None);
    }
    let (k, (n, wk)) = (x.dim(candle_core::D::Minus1)?, w.dims2()?);
    let m = x.elem_count() / k.max(1);
    let vec = 16 / x.dtype().size_in_bytes();
    if m == 0 || m > MAX_ROWS || k != wk || k % vec != 0 || !w.is_contiguous() {
        return Ok(None);
    }
    if w.layout().start_offset() % vec != 0 {
        return Ok(None);
    }
    let mut out_dims = x.dims().to_vec();
    *out_dims.last_mut().expect("rank >= 2") = n;
    let x = x.contiguous()?.reshape((m, k))?;
    if x.layout().start_offset() % vec != 0 {
        return Ok(None);
    }
    Ok(Some(x.apply_op1_no_bwd(&Gemv { w: w.clone() })?.reshape(out_dims)?))
}

/// [`matmul`] when `HEARTH_GPU_GEMV=1` asks for it; None otherwise (the caller uses cuBLAS).
pub fn matmul_if_on(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    if !gemv_on() {
        return Ok(None);
    }
    matmul(x, w)
}

struct Gemv {
    w: Tensor,
}

impl candle_core::CustomOp1 for Gemv {
    fn name(&self) -> &'static str {
        "hearth-gemv"
    }

    fn cpu_fwd(&self, _: &candle_core::CpuStorage, _: &Layout) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("hearth-gemv runs on CUDA only")
    }

    fn cuda_fwd(&self, xs: &CudaStorage, xl: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (m, k) = xl.shape().dims2()?;
        let (n, wk) = self.w.dims2()?;
        if wk != k || m == 0 || m > MAX_ROWS {
            candle_core::bail!("hearth-gemv: x ({m}, {k}) does not fit w ({n}, {wk})");
        }
        let (x0, x1) = contiguous(xl, "x")?;
        let (ws, wl) = self.w.storage_and_layout();
        let (w0, w1) = contiguous(wl, "w")?;
        let dev = xs.device().clone();
        let func = dev.get_or_load_custom_func(&format!("gemv_{}_m{m}", sfx_c(xs.dtype())?), MODULE, PTX)?;
        let cfg = LaunchConfig { grid_dim: (n.div_ceil(COLS_PER_BLOCK) as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
        let (ni, ki) = (n as i32, k as i32);
        macro_rules! launch {
            ($ty:ty) => {{
                let x = xs.as_cuda_slice::<$ty>()?.slice(x0..x1);
                let w = cuda_of(&ws)?.as_cuda_slice::<$ty>()?.slice(w0..w1);
                // SAFETY: the kernel writes all m * n outputs.
                let out = unsafe { dev.alloc::<$ty>(m * n)? };
                let mut b = func.builder();
                b.arg(&x);
                b.arg(&w);
                b.arg(&out);
                b.arg(&ni);
                b.arg(&ki);
                // SAFETY: shapes checked above; `matmul` checked K and the offsets against the 16-byte vectors.
                unsafe { b.launch(cfg) }.w()?;
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }};
        }
        let out = by_float_dtype!(xs, "hearth-gemv", launch);
        Ok((out, Shape::from((m, n))))
    }
}
