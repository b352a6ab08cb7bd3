//! Quantized skinny matmuls (`qgemv.cu`) for decode steps of GGUF models on the GPU: up to [`MAX_ROWS`] input rows
//! times a matrix kept in GGUF's block layout (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K), read in place, with the
//! activations in the model's dtype (f32, bf16 or f16). The input rows are quantized to llama.cpp's q8_1 inside the
//! kernel and dotted in integer arithmetic, as llama.cpp's MMVQ kernels do; launched with programmatic dependent
//! launch like the dense one-row kernels, and with the same fused forms: the residual add + RMSNorm computed by the
//! kernel ([`matmul_add_norm`]) and the gated activation as the gate|up matrix's epilogue.
//!
//! Opt-in (`HEARTH_GPU_QGEMV=1`): the kernels are correct but were slower than candle's in their first A/B
//! (docs/benchmarks.md); the default sends these shapes to candle's quantized kernels (which quantize x in a launch
//! of their own, without PDL) and keeps q|k|v and gate|up as separate matrices. More rows than [`MAX_ROWS`], or rows
//! whose quantized copy would not fit the block's shared memory, go to candle's kernels too.

use super::fused::Act;
use super::gemv::{dims_with_last, rows_of, Input};
use super::launch::Launch;
use super::{contiguous, cuda_of, sfx_c};
use crate::Result;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::sys::CUfunction_attribute;
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, LaunchConfig};
use candle_core::cuda_backend::WrapErr;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{CudaStorage, Layout, Shape, Tensor};
use std::sync::Arc;

const PTX_BF16: &str = include_str!(concat!(env!("OUT_DIR"), "/qgemv_bf16.ptx"));
const PTX_F16: &str = include_str!(concat!(env!("OUT_DIR"), "/qgemv_f16.ptx"));
const PTX_F32: &str = include_str!(concat!(env!("OUT_DIR"), "/qgemv_f32.ptx"));
/// Warps per block (qgemv.cu's WARPS).
const WARPS: usize = 8;
/// 16-byte vectors of a warp's staging buffer (qgemv.cu's STAGE_VECS).
const STAGE_VECS: usize = 140;
/// 32-value units a warp stages at a time (qgemv.cu's PIECE).
const PIECE: usize = 64;
/// The most input rows the kernels take.
pub const MAX_ROWS: usize = 8;
/// The most shared memory a block may ask for: the quantized rows beyond it go to candle's kernels (so that two
/// blocks still fit a multiprocessor).
const MAX_SMEM: usize = 96 * 1024;
/// Shared memory per multiprocessor the grid is sized against (an H100/H200 has 228 KB).
const SMEM_PER_SM: usize = 200 * 1024;
/// Blocks per multiprocessor of the persistent grid, at most: the kernels are built for 3 resident blocks of 8 warps
/// (`__launch_bounds__(256, 3)`: at most 80 registers a thread).
const BLOCKS_PER_SM: usize = 3;

/// The kernels' name for a GGML type they read, or None.
fn type_name(t: GgmlDType) -> Option<&'static str> {
    Some(match t {
        GgmlDType::Q4_0 => "q4_0",
        GgmlDType::Q4_1 => "q4_1",
        GgmlDType::Q5_0 => "q5_0",
        GgmlDType::Q8_0 => "q8_0",
        GgmlDType::Q4K => "q4_k",
        GgmlDType::Q5K => "q5_k",
        GgmlDType::Q6K => "q6_k",
        _ => return None,
    })
}

/// Whether the kernels read this GGML type.
pub fn supported(t: GgmlDType) -> bool {
    type_name(t).is_some()
}

/// Whether quantized matmuls of a few rows go to these kernels (`HEARTH_GPU_QGEMV=1`).
pub fn on() -> bool {
    crate::levers::get().gpu_qgemv
}

/// The dynamic shared memory of a launch over `m` rows of K values (qgemv.cu's layout).
fn smem_bytes(m: usize, k: usize, mr: usize) -> usize {
    let xds = (m * (k / 32) * 8).div_ceil(16) * 16;
    m * k + xds + WARPS * 2 * mr * 4 + WARPS * 4 + WARPS * STAGE_VECS * 16
}

/// The instantiation's row capacity for m rows.
fn row_capacity(m: usize) -> usize {
    if m == 1 {
        1
    } else {
        MAX_ROWS
    }
}

/// (rows, K) when x (.., K) times w fits the kernels: CUDA, a float dtype, 1..=MAX_ROWS rows, w a 2-D CUDA matrix
/// of a type they read, K whole blocks, the rows' quantized copy within [`MAX_SMEM`].
fn fits(x: &Tensor, w: &QTensor) -> Result<Option<(usize, usize)>> {
    use candle_core::DType::{BF16, F16, F32};
    if !x.device().is_cuda() || !matches!(x.dtype(), F32 | BF16 | F16) || !supported(w.dtype()) || x.rank() < 2 {
        return Ok(None);
    }
    let Ok((n, wk)) = w.shape().dims2() else { return Ok(None) };
    let k = x.dim(candle_core::D::Minus1)?;
    let m = x.elem_count() / k.max(1);
    if n == 0 || k != wk || !k.is_multiple_of(w.dtype().block_size()) || m == 0 || m > MAX_ROWS {
        return Ok(None);
    }
    if !matches!(w.device(), candle_core::Device::Cuda(_)) || smem_bytes(m, k, row_capacity(m)) > MAX_SMEM {
        return Ok(None);
    }
    Ok(Some((m, k)))
}

/// x (.., K), at most [`MAX_ROWS`] rows, · w (N, K)ᵀ for a quantized CUDA matrix, in x's dtype; None when the
/// kernels do not take it (see [`fits`]) — the caller uses candle's kernels. Ignores `HEARTH_GPU_QGEMV` (the
/// default path asks [`on`] first).
pub fn matmul(x: &Tensor, w: &Arc<QTensor>) -> Result<Option<Tensor>> {
    let Some((m, _)) = fits(x, w)? else { return Ok(None) };
    let Some(x2) = rows_of(x, m)? else { return Ok(None) };
    let n = w.shape().dims2()?.0;
    let y = x2.apply_op1_no_bwd(&QGemv { w: w.clone(), input: Input::Plain })?;
    Ok(Some(y.reshape(dims_with_last(x, n))?))
}

/// (h + a, rmsnorm(h + a) * wn · w (N, K)ᵀ) for up to [`MAX_ROWS`] rows, the add and the norm computed by the
/// kernel (gemv.cu's per-value arithmetic), with the gated activation as the epilogue when `gated` names it
/// ((.., N / 2) outputs). Without `a`, the norm of h alone (h returned as is). None where the kernels do not take
/// the shapes: the caller runs the norm and the matmul.
pub fn matmul_add_norm(
    h: &Tensor,
    a: Option<&Tensor>,
    wn: &Tensor,
    eps: f32,
    w: &Arc<QTensor>,
    gated: Option<Act>,
) -> Result<Option<(Tensor, Tensor)>> {
    let Some((m, k)) = fits(h, w)? else { return Ok(None) };
    let n = w.shape().dims2()?.0;
    if (gated.is_some() && !n.is_multiple_of(2))
        || wn.dtype() != h.dtype()
        || wn.elem_count() != k
        || a.is_some_and(|a| a.dtype() != h.dtype() || a.dims() != h.dims())
    {
        return Ok(None);
    }
    let Some(h2) = rows_of(h, m)? else { return Ok(None) };
    let a2 = match a {
        Some(a) => match rows_of(a, m)? {
            Some(a2) => Some(a2),
            None => return Ok(None),
        },
        None => None,
    };
    let wn = wn.contiguous()?;
    if !wn.layout().start_offset().is_multiple_of(16 / wn.dtype().size_in_bytes()) {
        return Ok(None);
    }
    let width = if gated.is_some() { n / 2 } else { n };
    let with_h = a2.is_some();
    let out = h2.apply_op1_no_bwd(&QGemv { w: w.clone(), input: Input::AddNorm { a: a2, wn, eps, gated } })?;
    // The output: [h + a (m rows of K, when a was given)][the epilogue's m rows of `width`].
    let (h_new, y) = if with_h {
        (out.narrow(0, 0, m * k)?.reshape(h.dims())?, out.narrow(0, m * k, m * width)?)
    } else {
        (h.clone(), out)
    };
    Ok(Some((h_new, y.reshape(dims_with_last(h, width))?)))
}

struct QGemv {
    w: Arc<QTensor>,
    input: Input,
}

impl QGemv {
    fn kernel_name(&self, ty: &str, mr: usize, sfx: &str) -> String {
        let mode = match &self.input {
            Input::Plain => "plain",
            Input::AddNorm { gated: None, .. } => "addnorm",
            Input::AddNorm { gated: Some(Act::Silu), .. } => "addnorm_silu",
            Input::AddNorm { gated: Some(Act::GeluTanh), .. } => "addnorm_gelu",
        };
        format!("qgemv_{ty}_{mode}_m{mr}_{sfx}")
    }

    /// The kernel, its launch shape and its column split for m rows of K and `cols` output columns.
    fn plan(
        &self,
        dev: &candle_core::CudaDevice,
        sfx: &str,
        ty: &str,
        m: usize,
        k: usize,
        cols: usize,
    ) -> candle_core::Result<(impl std::ops::Deref<Target = CudaFunction>, LaunchConfig, usize)> {
        let (module, ptx) = match sfx {
            "bf16" => ("hearth_qgemv_bf16", PTX_BF16),
            "f16" => ("hearth_qgemv_f16", PTX_F16),
            _ => ("hearth_qgemv_f32", PTX_F32),
        };
        let mr = row_capacity(m);
        let func = dev.get_or_load_custom_func(&self.kernel_name(ty, mr, sfx), module, ptx)?;
        let smem = smem_bytes(m, k, mr);
        if smem > 48 * 1024 {
            func.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32)
                .w()?;
        }
        let pieces = (k / 32).div_ceil(PIECE);
        let sms = super::launch::device_props(&dev.cuda_stream()).sms;
        let per_sm = (SMEM_PER_SM / smem).clamp(1, BLOCKS_PER_SM);
        let split = split_for(cols, pieces, sms * per_sm * WARPS);
        let grid = (cols * split).div_ceil(WARPS).min(sms * per_sm).max(1);
        let cfg = LaunchConfig {
            grid_dim: (grid as u32, 1, 1),
            block_dim: ((WARPS * 32) as u32, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        Ok((func, cfg, split))
    }
}

/// Warps per column: the split (1, 2, 4 or 8 warps, each at least one piece of units) that takes the fewest
/// rounds of the grid's `target` warps times pieces a warp walks, the smaller on a tie. A column count just above
/// the grid's warps would leave most warps idle in a second round; splitting the columns fills it (the down
/// projection of an 8B model on 132 multiprocessors: 12 piece-rounds instead of 14).
fn split_for(cols: usize, pieces: usize, target: usize) -> usize {
    let cost = |s: usize| (cols * s).div_ceil(target.max(1)) * pieces.div_ceil(s);
    let mut best = 1;
    let mut s = 2;
    while s <= WARPS && s <= pieces {
        if cost(s) < cost(best) {
            best = s;
        }
        s *= 2;
    }
    best
}

impl candle_core::CustomOp1 for QGemv {
    fn name(&self) -> &'static str {
        "hearth-qgemv"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("hearth-qgemv runs on CUDA only")
    }

    fn cuda_fwd(&self, xs: &CudaStorage, xl: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (m, k) = xl.shape().dims2()?;
        let (n, wk) = self.w.shape().dims2()?;
        let Some(ty) = type_name(self.w.dtype()) else {
            candle_core::bail!("hearth-qgemv: no kernel reads {:?}", self.w.dtype())
        };
        if wk != k || m == 0 || m > MAX_ROWS || !k.is_multiple_of(self.w.dtype().block_size()) {
            candle_core::bail!("hearth-qgemv: x ({m}, {k}) does not fit w ({n}, {wk})");
        }
        let gated = self.input.gated();
        if gated.is_some() && !n.is_multiple_of(2) {
            candle_core::bail!("hearth-qgemv: a gated epilogue needs an even gate|up width, not {n}");
        }
        let (x0, x1) = contiguous(xl, "x")?;
        let dev = xs.device().clone();
        let stream = dev.cuda_stream();
        let cols = if gated.is_some() { n / 2 } else { n };
        let (func, cfg, split) = self.plan(&dev, sfx_c(xs.dtype())?, ty, m, k, cols)?;
        let w_ptr = self.w.device_ptr()? as u64;
        let (ni, ki, mi, si) = (n as i32, k as i32, m as i32, split as i32);
        macro_rules! launch {
            ($ty:ty) => {{
                let x = xs.as_cuda_slice::<$ty>()?.slice(x0..x1);
                let (h_len, eps, norm) = match &self.input {
                    Input::AddNorm { a, wn, eps, .. } => (if a.is_some() { m * k } else { 0 }, *eps, Some((a, wn))),
                    Input::Plain => (0, 0f32, None),
                };
                // SAFETY: the kernel writes all m * cols outputs and, with a, the m * k values of h + a before them.
                let out = unsafe { dev.alloc::<$ty>(h_len + m * cols)? };
                let (h_out, y) = (out.slice(..h_len), out.slice(h_len..));
                let guards = match norm {
                    Some((a, wn)) => Some((a.as_ref().map(|a| a.storage_and_layout()), wn.storage_and_layout())),
                    None => None,
                };
                let mut b = Launch::new(&stream, &func);
                b.plain(!crate::levers::get().gpu_gemv_pdl).ptr(&x);
                let (a_slice, wn_slice);
                match &guards {
                    Some((a_guard, (wns, wnl))) => {
                        a_slice = match a_guard {
                            Some((as_, al)) => {
                                let (a0, a1) = contiguous(al, "a")?;
                                if a1 - a0 != m * k {
                                    candle_core::bail!(
                                        "hearth-qgemv: the residual has {} values, not {}",
                                        a1 - a0,
                                        m * k
                                    );
                                }
                                Some(cuda_of(as_)?.as_cuda_slice::<$ty>()?.slice(a0..a1))
                            }
                            None => None,
                        };
                        let (n0, n1) = contiguous(wnl, "norm weight")?;
                        if n1 - n0 != k {
                            candle_core::bail!("hearth-qgemv: the norm weight has {} values, not {k}", n1 - n0);
                        }
                        wn_slice = Some(cuda_of(wns)?.as_cuda_slice::<$ty>()?.slice(n0..n1));
                    }
                    None => {
                        a_slice = None;
                        wn_slice = None;
                    }
                }
                match &a_slice {
                    Some(a) => b.ptr(a),
                    None => b.null(),
                };
                match &wn_slice {
                    Some(wn) => b.ptr(wn),
                    None => b.null(),
                };
                if h_len > 0 {
                    b.ptr(&h_out)
                } else {
                    b.null()
                };
                b.val(&eps).weight(w_ptr).ptr(&y).val(&ni).val(&ki).val(&mi).val(&si);
                // SAFETY: x holds m rows of k (checked above), w is the QTensor's padded device buffer of n rows of
                // k / block_size blocks, the shared memory is sized as the kernel lays it out, and the kernel reads
                // only weights before its pdl_wait.
                unsafe { b.launch(cfg) }.w()?;
                drop((h_out, y));
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }};
        }
        let out = super::by_float_dtype!(xs, "hearth-qgemv", launch);
        let h_len = match &self.input {
            Input::AddNorm { a: Some(_), .. } => m * k,
            _ => 0,
        };
        let len = h_len + m * cols;
        Ok((out, Shape::from(len)))
    }
}
