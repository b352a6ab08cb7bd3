//! Skinny matmuls (`gemv.cu`) for the dense linear layers of decode steps, launched with programmatic dependent
//! launch (`gpu::launch`) so that their weight streams start before the previous kernel ends.
//!
//! * One input row (batch-1 decode): the persistent one-row kernels, by default (`HEARTH_GPU_GEMV=0` sends every
//!   shape to cuBLAS). K up to 4096 bf16/f16 values (2048 f32) takes `gemv_row`; K up to 4x longer (the 8B shape's
//!   14336-wide down projection) splits each column over 2 or 4 warps (`HEARTH_GPU_GEMV_SPLIT=0` sends those to
//!   cuBLAS). Both beat cuBLAS on every 8B shape in bench/gpu/gemv_probe.cu (docs/benchmarks.md).
//! * [`matmul_add_norm`]: the one-row kernel that computes its input row itself from the residual add and RMSNorm
//!   before it (the q|k|v and gate|up projections and the LM head): one `add_rmsnorm` launch less per projection,
//!   64 a step on the 8B shape (`HEARTH_GPU_GEMV_NORM=0` turns it off). The down projection does not compute
//!   its own input (the gated activation) this way: in the one-row kernel that was slower than the two kernels
//!   (docs/benchmarks.md).
//!
//! Several rows go to cuBLAS, which reads each weight once for all rows (docs/benchmarks.md).

use super::fused::Act;
use super::launch::Launch;
use super::{by_float_dtype, contiguous, cuda_of, sfx_c};
use crate::Result;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaStorage, Layout, Shape, Tensor};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/gemv.ptx"));
const MODULE: &str = "hearth_gemv";
/// Warps (output columns in flight) per block (gemv.cu's WARPS).
const WARPS: usize = 4;
/// 16-byte vectors per lane the one-row kernel holds: its K is at most 32 lanes * this many vectors.
const ROW_CHUNK: usize = 16;
/// Blocks per multiprocessor of the one-row kernel's persistent grid (4 measured best of 4 and 6 blocks of 4 warps
/// and 2 of 8, gemv_probe.cu; 2 gave no gain in a serving A/B). The kernels take ~220 registers (x is held in
/// registers), so 2 blocks are resident per multiprocessor and the grid runs in two rounds.
const ROW_BLOCKS_PER_SM: usize = 4;

/// The dtypes the kernels are built for.
fn float_dtype(dtype: candle_core::DType) -> bool {
    use candle_core::DType::{BF16, F16, F32};
    matches!(dtype, F32 | BF16 | F16)
}

/// How many warps the one-row kernels split a column over for K values of this dtype: 1 (`gemv_row`), 2 or 4
/// (`gemv_row_split`), or None when even a quarter of K exceeds what a warp holds (cuBLAS then).
pub fn one_row_split(k: usize, dtype: candle_core::DType) -> Option<usize> {
    if !float_dtype(dtype) {
        return None;
    }
    let per_warp = 32 * ROW_CHUNK; // 16-byte vectors a warp holds
    let vectors = k / (16 / dtype.size_in_bytes());
    [1usize, 2, 4].into_iter().find(|s| vectors.div_ceil(*s) <= per_warp)
}

/// Whether the default path sends one row of K values to the one-row kernels: `gemv_row` always (unless
/// `HEARTH_GPU_GEMV=0`), `gemv_row_split` unless `HEARTH_GPU_GEMV_SPLIT=0`.
fn row_fits(k: usize, dtype: candle_core::DType) -> bool {
    let levers = crate::levers::get();
    levers.gpu_gemv
        && match one_row_split(k, dtype) {
            Some(1) => true,
            Some(_) => levers.gpu_gemv_split,
            None => false,
        }
}

/// The shared checks: a CUDA float x of K values per row matching w (N, K) contiguous, 16-byte vectors and aligned
/// starts. Returns (rows, K) or None.
fn fits(x: &Tensor, w: &Tensor, k: usize) -> Result<Option<usize>> {
    if !x.device().is_cuda() || !float_dtype(x.dtype()) || x.dtype() != w.dtype() || x.rank() < 2 || w.rank() != 2 {
        return Ok(None);
    }
    let (n, wk) = w.dims2()?;
    let m = x.elem_count() / x.dim(candle_core::D::Minus1)?.max(1);
    let vec = 16 / x.dtype().size_in_bytes();
    if n == 0 || m == 0 || k != wk || k % vec != 0 || !w.is_contiguous() || w.layout().start_offset() % vec != 0 {
        return Ok(None);
    }
    Ok(Some(m))
}

/// x reshaped to (rows, width), contiguous, or None when its start is not 16-byte aligned.
pub(super) fn rows_of(x: &Tensor, m: usize) -> Result<Option<Tensor>> {
    let width = x.dim(candle_core::D::Minus1)?;
    let x = x.contiguous()?.reshape((m, width))?;
    Ok((x.layout().start_offset() % (16 / x.dtype().size_in_bytes()) == 0).then_some(x))
}

/// x's dims with the last one replaced by `n`.
pub(super) fn dims_with_last(x: &Tensor, n: usize) -> Vec<usize> {
    let mut d = x.dims().to_vec();
    if let Some(l) = d.last_mut() {
        *l = n;
    }
    d
}

/// x (.., K), one row in all, · w (N, K)ᵀ through the one-row kernel (its column split over 2 or 4 warps for K up
/// to 4x longer), or None when it does not apply (not CUDA, several rows, K too long, dtypes differ, K not a
/// multiple of a 16-byte vector, or w not a plain contiguous matrix): the caller uses cuBLAS.
pub fn matmul(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    let k = x.dim(candle_core::D::Minus1)?;
    if fits(x, w, k)? != Some(1) || one_row_split(k, x.dtype()).is_none() {
        return Ok(None);
    }
    let Some(x2) = rows_of(x, 1)? else { return Ok(None) };
    let n = w.dim(0)?;
    Ok(Some(x2.apply_op1_no_bwd(&Gemv { w: w.clone(), input: Input::Plain })?.reshape(dims_with_last(x, n))?))
}

/// The default path's choice: [`matmul`] for one row whose K fits the one-row kernels (unless `HEARTH_GPU_GEMV=0` /
/// `HEARTH_GPU_GEMV_SPLIT=0`); None otherwise (the caller uses cuBLAS).
pub fn matmul_if_on(x: &Tensor, w: &Tensor) -> Result<Option<Tensor>> {
    let k = x.dim(candle_core::D::Minus1)?;
    if x.elem_count() != k || !row_fits(k, x.dtype()) {
        return Ok(None);
    }
    matmul(x, w)
}

/// For one row: (h + a, rmsnorm(h + a) * wn · w (N, K)ᵀ), the add and the norm done by the one-row kernel while it
/// loads its input (`fused::add_rms_norm`'s per-value arithmetic; its sum of squares in another order). Without
/// `a`, the norm of h alone (h is returned as is). None when the default path would not take this shape with
/// `gemv_row` (K beyond one warp's row, `HEARTH_GPU_GEMV=0`), when `HEARTH_GPU_GEMV_NORM=0`, or when the inputs
/// are not one row of K in w's dtype: the caller runs the norm and the matmul.
pub fn matmul_add_norm(
    h: &Tensor,
    a: Option<&Tensor>,
    wn: &Tensor,
    eps: f32,
    w: &Tensor,
) -> Result<Option<(Tensor, Tensor)>> {
    add_norm(h, a, wn, eps, w, None)
}

/// [`matmul_add_norm`] over a fused gate|up matrix w (2I, K) with the gated activation as its epilogue: (h + a,
/// act(gate) * up), (.., I) — the values `fused::act_mul` makes of the matmul's output, without its launch. None
/// also when `HEARTH_GPU_GEMV_GATED=0` or 2I is odd.
pub fn matmul_add_norm_gated(
    h: &Tensor,
    a: Option<&Tensor>,
    wn: &Tensor,
    eps: f32,
    w: &Tensor,
    act: Act,
) -> Result<Option<(Tensor, Tensor)>> {
    if !crate::levers::get().gpu_gemv_gated || w.dim(0)? % 2 != 0 {
        return Ok(None);
    }
    add_norm(h, a, wn, eps, w, Some(act))
}

/// [`matmul_add_norm`], with the gated-activation epilogue when `gated` names the activation.
fn add_norm(
    h: &Tensor,
    a: Option<&Tensor>,
    wn: &Tensor,
    eps: f32,
    w: &Tensor,
    gated: Option<Act>,
) -> Result<Option<(Tensor, Tensor)>> {
    let k = h.dim(candle_core::D::Minus1)?;
    let levers = crate::levers::get();
    if !levers.gpu_gemv_norm || !levers.gpu_gemv || one_row_split(k, h.dtype()) != Some(1) {
        return Ok(None);
    }
    match fits(h, w, k)? {
        Some(1) => {}
        _ => return Ok(None),
    }
    if wn.dtype() != h.dtype()
        || wn.elem_count() != k
        || a.is_some_and(|a| a.dtype() != h.dtype() || a.elem_count() != k)
    {
        return Ok(None);
    }
    let Some(h2) = rows_of(h, 1)? else { return Ok(None) };
    let a2 = match a {
        Some(a) => match rows_of(a, 1)? {
            Some(a2) => Some(a2),
            None => return Ok(None),
        },
        None => None,
    };
    let wn = wn.contiguous()?;
    if wn.layout().start_offset() % (16 / wn.dtype().size_in_bytes()) != 0 {
        return Ok(None);
    }
    let width = out_columns(w.dim(0)?, gated);
    let with_h = a2.is_some();
    let out = h2.apply_op1_no_bwd(&Gemv { w: w.clone(), input: Input::AddNorm { a: a2, wn, eps, gated } })?;
    // The output row: [h + a (K values, when a was given)][the epilogue's `width` values].
    let (h_new, y) =
        if with_h { (out.narrow(1, 0, k)?.reshape(h.dims())?, out.narrow(1, k, width)?) } else { (h.clone(), out) };
    Ok(Some((h_new, y.reshape(dims_with_last(h, width))?)))
}

/// The output columns of a one-row launch over n matrix columns: n, or n / 2 with the gated epilogue (one per
/// gate|up pair).
fn out_columns(n: usize, gated: Option<Act>) -> usize {
    if gated.is_some() {
        n / 2
    } else {
        n
    }
}

/// Where a skinny kernel's input comes from (gemv.cu's and qgemv.cu's MODE).
pub(super) enum Input {
    /// x itself.
    Plain,
    /// The residual add (a, when given) and RMSNorm (weight wn) of h (one row only), with the gated-activation
    /// epilogue when given.
    AddNorm { a: Option<Tensor>, wn: Tensor, eps: f32, gated: Option<Act> },
}

impl Input {
    /// The gated-activation epilogue, if any.
    pub(super) fn gated(&self) -> Option<Act> {
        match self {
            Input::AddNorm { gated, .. } => *gated,
            Input::Plain => None,
        }
    }

    /// The one-row kernel for this input with each column split over `s` warps, for the dtype of suffix `sfx`.
    fn kernel_name(&self, s: usize, sfx: &str, dtype: candle_core::DType) -> candle_core::Result<String> {
        Ok(match self {
            Input::Plain if s == 1 => format!("gemv_row_{sfx}"),
            Input::Plain => format!("gemv_row_split_{sfx}_s{s}"),
            Input::AddNorm { gated: Some(Act::Silu), .. } if s == 1 => format!("gemv_row_addnorm_silu_{sfx}"),
            Input::AddNorm { gated: Some(Act::GeluTanh), .. } if s == 1 => format!("gemv_row_addnorm_gelu_{sfx}"),
            Input::AddNorm { .. } if s == 1 => format!("gemv_row_addnorm_{sfx}"),
            Input::AddNorm { .. } => candle_core::bail!(
                "hearth-gemv: the add+norm kernel holds rows of at most {} values",
                32 * ROW_CHUNK * (16 / dtype.size_in_bytes())
            ),
        })
    }
}

struct Gemv {
    w: Tensor,
    input: Input,
}

impl candle_core::CustomOp1 for Gemv {
    fn name(&self) -> &'static str {
        "hearth-gemv"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("hearth-gemv runs on CUDA only")
    }

    fn cuda_fwd(&self, xs: &CudaStorage, xl: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (m, width) = xl.shape().dims2()?;
        let (n, k) = self.w.dims2()?;
        if width != k || m != 1 {
            candle_core::bail!("hearth-gemv: x ({m}, {width}) does not fit w ({n}, {k})");
        }
        let (x0, x1) = contiguous(xl, "x")?;
        let (ws, wl) = self.w.storage_and_layout();
        let (w0, w1) = contiguous(wl, "w")?;
        let dev = xs.device().clone();
        let stream = dev.cuda_stream();
        let threads = (WARPS * 32) as u32;
        let Some(s) = one_row_split(k, xs.dtype()) else {
            candle_core::bail!("hearth-gemv: K = {k} is too long for the one-row kernels");
        };
        let sfx = sfx_c(xs.dtype())?;
        let gated = self.input.gated();
        if gated.is_some() && n % 2 != 0 {
            candle_core::bail!("hearth-gemv: a gated epilogue needs an even gate|up width, not {n}");
        }
        let cols = out_columns(n, gated);
        let sms = super::launch::device_props(&stream).sms;
        // Output columns (gate|up pairs, with the gated epilogue) a block takes per step: WARPS / s.
        let grid = cols.div_ceil(WARPS / s).min(sms * ROW_BLOCKS_PER_SM).max(1);
        let name = self.input.kernel_name(s, sfx, xs.dtype())?;
        let func = dev.get_or_load_custom_func(&name, MODULE, PTX)?;
        let cfg = LaunchConfig { grid_dim: (grid as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let (ni, ki) = (n as i32, k as i32);
        macro_rules! launch {
            ($ty:ty) => {{
                let x = xs.as_cuda_slice::<$ty>()?.slice(x0..x1);
                let w = cuda_of(&ws)?.as_cuda_slice::<$ty>()?.slice(w0..w1);
                let (out, width) = match &self.input {
                    Input::AddNorm { a, wn, eps, .. } => {
                        let h_len = if a.is_some() { k } else { 0 };
                        // SAFETY: the kernel writes all `cols` outputs and, with a, the k values of h + a before them.
                        let out = unsafe { dev.alloc::<$ty>(h_len + cols)? };
                        let (wns, wnl) = wn.storage_and_layout();
                        let (n0, n1) = contiguous(wnl, "norm weight")?;
                        if n1 - n0 != k {
                            candle_core::bail!("hearth-gemv: the norm weight has {} values, not {k}", n1 - n0);
                        }
                        let wn = cuda_of(&wns)?.as_cuda_slice::<$ty>()?.slice(n0..n1);
                        let (h_out, y) = (out.slice(..h_len), out.slice(h_len..));
                        let a_guard = a.as_ref().map(|a| a.storage_and_layout());
                        let a_slice = match &a_guard {
                            Some((as_, al)) => {
                                let (a0, a1) = contiguous(al, "a")?;
                                if a1 - a0 != k {
                                    candle_core::bail!("hearth-gemv: the residual has {} values, not {k}", a1 - a0);
                                }
                                Some(cuda_of(as_)?.as_cuda_slice::<$ty>()?.slice(a0..a1))
                            }
                            None => None,
                        };
                        let mut b = Launch::new(&stream, &func);
                        b.plain(!crate::levers::get().gpu_gemv_pdl).ptr(&x);
                        match &a_slice {
                            Some(a) => b.ptr(a),
                            None => b.null(),
                        };
                        b.ptr(&wn);
                        if h_len > 0 {
                            b.ptr(&h_out)
                        } else {
                            b.null()
                        };
                        b.val(eps).ptr(&w).ptr(&y).val(&ni).val(&ki);
                        // SAFETY: one row of k (checked by `add_norm` and above: K fits one warp's row, 16-byte
                        // aligned starts; a gated epilogue writes n / 2 values); the kernel reads only weights before
                        // its pdl_wait.
                        unsafe { b.launch(cfg) }.w()?;
                        drop((h_out, y));
                        (out, h_len + cols)
                    }
                    _ => {
                        // SAFETY: the kernel writes all n outputs.
                        let out = unsafe { dev.alloc::<$ty>(n)? };
                        let mut b = Launch::new(&stream, &func);
                        b.plain(!crate::levers::get().gpu_gemv_pdl).ptr(&x).ptr(&w).ptr(&out).val(&ni).val(&ki);
                        // SAFETY: shapes checked above; `matmul` checked K and the offsets against the
                        // 16-byte vectors and the one-row kernels' K limit; the kernels read only weights before
                        // their pdl_wait.
                        unsafe { b.launch(cfg) }.w()?;
                        (out, n)
                    }
                };
                (CudaStorage::wrap_cuda_slice(out, dev.clone()), width)
            }};
        }
        let (out, width) = by_float_dtype!(xs, "hearth-gemv", launch);
        Ok((out, Shape::from((m, width))))
    }
}
