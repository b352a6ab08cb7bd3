//! Skinny matmuls (`gemv.cu`) for the dense linear layers of decode steps, launched with programmatic dependent
//! launch (`gpu::launch`) so that their weight streams start before the previous kernel ends.
//!
//! * One input row (batch-1 decode) with K up to 4096 bf16/f16 values (2048 f32): the persistent `gemv_row`
//!   kernel, by default (`HEARTH_GPU_GEMV=0` sends it to cuBLAS). It beat cuBLAS on every such 8B shape in
//!   bench/gpu/gemv_probe.cu; the 14336-wide down projection stays on cuBLAS (no variant tried beat it) unless
//!   `HEARTH_GPU_GEMV_SPLIT=1` sends K up to 4x longer to `gemv_row_split` (each column over 2 or 4 warps; built
//!   and covered by the GPU test, not yet run or measured on a GPU).
//! * 1..=8 rows, any K: `gemv_*_m{M}`, one warp per column. Not faster than cuBLAS on the 8B shapes
//!   (docs/benchmarks.md), so the default path uses it for no shape; `HEARTH_GPU_GEMV_ROWS=N` (2..=8) opts decode
//!   steps of up to N rows into it.

use super::launch::Launch;
use super::{by_float_dtype, contiguous, cuda_of, env_off, sfx_c};
use crate::Result;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaStorage, Layout, Shape, Tensor};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/gemv.ptx"));
const MODULE: &str = "hearth_gemv";
/// The most input rows one launch takes (the few-row kernels are instantiated for 1..=8).
pub const MAX_ROWS: usize = 8;
/// Warps (output columns in flight) per block (gemv.cu's WARPS).
const WARPS: usize = 4;
/// 16-byte vectors per lane the one-row kernel holds: its K is at most 32 lanes * this many vectors.
const ROW_CHUNK: usize = 16;
/// Blocks per multiprocessor of the one-row kernel's persistent grid (4 measured best of 4 and 6 blocks of 4 warps
/// and 2 of 8, gemv_probe.cu). The kernel takes 224 registers (x is held unpacked), so 2 blocks are resident per
/// multiprocessor and the grid runs in two rounds — as in the probe, whose kernel compiles to the same count.
const ROW_BLOCKS_PER_SM: usize = 4;

/// Whether the one-row kernel is on (`HEARTH_GPU_GEMV=0` turns it off).
fn row_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !env_off("HEARTH_GPU_GEMV"))
}

/// `HEARTH_GPU_GEMV_PDL=0`: launch the skinny matmuls without programmatic dependent launch (the other kernels
/// keep it).
fn gemv_pdl() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| !env_off("HEARTH_GPU_GEMV_PDL"))
}

/// The most rows the few-row kernel takes on the default path: `HEARTH_GPU_GEMV_ROWS` (2..=8), else 0 (none).
fn rows_on() -> usize {
    static ROWS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *ROWS.get_or_init(|| std::env::var("HEARTH_GPU_GEMV_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(0).min(MAX_ROWS))
}

/// The dtypes the kernels are built for.
fn float_dtype(dtype: candle_core::DType) -> bool {
    use candle_core::DType::{BF16, F16, F32};
    matches!(dtype, F32 | BF16 | F16)
}

/// How many warps the one-row kernels split a column over for K values of this dtype: 1 (`gemv_row`), 2 or 4
/// (`gemv_row_split`), or None when even a quarter of K exceeds what a warp holds (the few-row kernel then).
pub fn one_row_split(k: usize, dtype: candle_core::DType) -> Option<usize> {
    if !float_dtype(dtype) {
        return None;
    }
    let per_warp = 32 * ROW_CHUNK; // 16-byte vectors a warp holds
    let vectors = k / (16 / dtype.size_in_bytes());
    [1usize, 2, 4].into_iter().find(|s| vectors.div_ceil(*s) <= per_warp)
}

/// Whether the default path sends one row of K values to the one-row kernels: `gemv_row` always (unless
/// `HEARTH_GPU_GEMV=0`), `gemv_row_split` only when `HEARTH_GPU_GEMV_SPLIT=1` opts in (not yet measured on a GPU).
fn row_fits(k: usize, dtype: candle_core::DType) -> bool {
    static SPLIT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    match one_row_split(k, dtype) {
        Some(1) => true,
        Some(_) => *SPLIT.get_or_init(|| super::env_on("HEARTH_GPU_GEMV_SPLIT")),
        None => false,
    }
}

/// x (.., K) with M rows in all · w (N, K)ᵀ through a skinny kernel (for M = 1 the one-row kernel, its column split
/// over 2 or 4 warps for K up to 4x longer; else the few-row kernel), or None when neither applies (not CUDA, M > 8, dtypes differ, K not a multiple of a
/// 16-byte vector, or w not a plain contiguous matrix): the caller uses cuBLAS.
pub fn matmul(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    if !x.device().is_cuda() || !float_dtype(x.dtype()) || x.dtype() != w.dtype() || x.rank() < 2 || w.rank() != 2 {
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

/// The default path's choice: [`matmul`] for one row whose K fits the one-row kernel (unless `HEARTH_GPU_GEMV=0`),
/// or for up to `HEARTH_GPU_GEMV_ROWS` rows when that opts in; None otherwise (the caller uses cuBLAS).
pub fn matmul_if_on(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    let k = x.dim(candle_core::D::Minus1)?;
    let m = x.elem_count() / k.max(1);
    let take = (m == 1 && row_on() && row_fits(k, x.dtype())) || (m >= 2 && m <= rows_on());
    if !take {
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
        let stream = dev.cuda_stream();
        let threads = (WARPS * 32) as u32;
        let split = if m == 1 { one_row_split(k, xs.dtype()) } else { None };
        let (name, grid) = match split {
            Some(s) => {
                let sms = super::launch::device_props(&stream).sms;
                // Columns a block takes per step: WARPS / s.
                let grid = n.div_ceil(WARPS / s).min(sms * ROW_BLOCKS_PER_SM);
                let name = if s == 1 { format!("gemv_row_{}", sfx_c(xs.dtype())?) } else { format!("gemv_row_split_{}_s{s}", sfx_c(xs.dtype())?) };
                (name, grid)
            }
            None => (format!("gemv_{}_m{m}", sfx_c(xs.dtype())?), n.div_ceil(WARPS)),
        };
        let func = dev.get_or_load_custom_func(&name, MODULE, PTX)?;
        let cfg = LaunchConfig { grid_dim: (grid as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let (ni, ki) = (n as i32, k as i32);
        macro_rules! launch {
            ($ty:ty) => {{
                let x = xs.as_cuda_slice::<$ty>()?.slice(x0..x1);
                let w = cuda_of(&ws)?.as_cuda_slice::<$ty>()?.slice(w0..w1);
                // SAFETY: the kernel writes all m * n outputs.
                let out = unsafe { dev.alloc::<$ty>(m * n)? };
                let mut b = Launch::new(&stream, &func);
                b.plain(!gemv_pdl());
                b.ptr(&x).ptr(&w).ptr(&out).val(&ni).val(&ki);
                // SAFETY: shapes checked above; `matmul` checked K and the offsets against the 16-byte vectors (and
                // the one-row kernel's K limit); the kernels read only weights before their pdl_wait.
                unsafe { b.launch(cfg) }.w()?;
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }};
        }
        let out = by_float_dtype!(xs, "hearth-gemv", launch);
        Ok((out, Shape::from((m, n))))
    }
}
