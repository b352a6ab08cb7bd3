//! Fused per-layer kernels (`fused.cu`) for dense models on a CUDA device.

use super::launch::Launch;
use super::{by_float_dtype, contiguous, cuda_of, sfx_c};
use crate::Result;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaStorage, Layout, Shape, Tensor};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused.ptx"));
const MODULE: &str = "hearth_fused";

/// (h + a, rmsnorm(h + a) * w) over the last dim; h, a (rows, C), w (C,) all of one dtype.
pub fn add_rms_norm(h: &Tensor, a: &Tensor, w: &Tensor, eps: f32) -> Result<(Tensor, Tensor)> {
    let shape = h.shape().clone();
    let c = h.dim(candle_core::D::Minus1)?;
    let rows = h.elem_count() / c.max(1);
    let h2 = h.contiguous()?.reshape((rows, c))?;
    let op = AddRmsNorm { a: a.contiguous()?.reshape((rows, c))?, w: w.contiguous()?, eps };
    let out = h2.apply_op1_no_bwd(&op)?; // (2, rows, c): h + a, then the normed rows
    Ok((out.get(0)?.reshape(&shape)?, out.get(1)?.reshape(&shape)?))
}

/// Which activation multiplies the up projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    Silu,
    GeluTanh,
}

/// act(gu[.., :I]) * gu[.., I:] for a fused gate|up projection gu (T, 2I). Returns (T, I).
pub fn act_mul(gu: &Tensor, act: Act) -> Result<Tensor> {
    Ok(gu.contiguous()?.apply_op1_no_bwd(&ActMul { act })?)
}

/// Split a fused q|k|v projection (T, (H + 2 KvH) * D), rotate q and k (cos/sin (T, D/2) f32), write k and v to
/// their cache rows `slots` (T,) u32 of `k_cache`/`v_cache` (rows, KvH, D), and return q (T, H, D).
#[allow(clippy::too_many_arguments)]
pub fn qkv_rope(
    qkv: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    interleaved: bool,
    k_cache: &Tensor,
    v_cache: &Tensor,
    slots: &Tensor,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
) -> Result<Tensor> {
    let op = QkvRope {
        cos: cos.contiguous()?,
        sin: sin.contiguous()?,
        interleaved,
        k: k_cache.clone(),
        v: v_cache.clone(),
        slots: slots.clone(),
        heads,
        kv_heads,
        head_dim,
    };
    Ok(qkv.contiguous()?.apply_op1_no_bwd(&op)?)
}

macro_rules! cpu_unsupported {
    ($name:literal) => {
        fn cpu_fwd(
            &self,
            _: &candle_core::CpuStorage,
            _: &Layout,
        ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
            candle_core::bail!(concat!($name, " runs on CUDA only"))
        }
    };
}

struct AddRmsNorm {
    a: Tensor,
    w: Tensor,
    eps: f32,
}

impl candle_core::CustomOp1 for AddRmsNorm {
    fn name(&self) -> &'static str {
        "hearth-add-rmsnorm"
    }
    cpu_unsupported!("hearth-add-rmsnorm");

    fn cuda_fwd(&self, hs: &CudaStorage, hl: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (rows, c) = hl.shape().dims2()?;
        let (h0, h1) = contiguous(hl, "h")?;
        let (as_, al) = self.a.storage_and_layout();
        let (ws, wl) = self.w.storage_and_layout();
        let (a0, a1) = contiguous(al, "a")?;
        let (w0, w1) = contiguous(wl, "w")?;
        let dev = hs.device().clone();
        // Up to 1024 threads per row, each holding `vpt` values (a power of two up to 16: rows of <= 16384).
        let threads = c.div_ceil(32).clamp(1, 32) * 32;
        let Some(vpt) = [1usize, 2, 4, 8, 16].into_iter().find(|v| v * threads >= c) else {
            candle_core::bail!("hearth add_rmsnorm: rows of {c} values exceed the kernel's 16384");
        };
        let func = dev.get_or_load_custom_func(&format!("add_rmsnorm_{}_v{vpt}", sfx_c(hs.dtype())?), MODULE, PTX)?;
        let threads = threads as u32;
        let cfg = LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 };
        let (ci, eps) = (c as i32, self.eps);
        macro_rules! launch {
            ($ty:ty) => {{
                let h = hs.as_cuda_slice::<$ty>()?.slice(h0..h1);
                let a = cuda_of(&as_)?.as_cuda_slice::<$ty>()?.slice(a0..a1);
                let w = cuda_of(&ws)?.as_cuda_slice::<$ty>()?.slice(w0..w1);
                // SAFETY: the kernel writes all 2 * rows * c outputs.
                let out = unsafe { dev.alloc::<$ty>(2 * rows * c)? };
                let (ho, y) = (out.slice(..rows * c), out.slice(rows * c..));
                let stream = dev.cuda_stream();
                let mut b = Launch::new(&stream, &func);
                b.ptr(&h).ptr(&a).ptr(&ho).ptr(&y).ptr(&w).val(&ci).val(&eps);
                // SAFETY: shapes checked above; one block per row.
                unsafe { b.launch(cfg) }.w()?;
                drop((ho, y));
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }};
        }
        let out = by_float_dtype!(hs, "hearth-add-rmsnorm", launch);
        Ok((out, Shape::from((2, rows, c))))
    }
}

struct ActMul {
    act: Act,
}

impl candle_core::CustomOp1 for ActMul {
    fn name(&self) -> &'static str {
        "hearth-act-mul"
    }
    cpu_unsupported!("hearth-act-mul");

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (t, two_i) = l.shape().dims2()?;
        if two_i % 2 != 0 {
            candle_core::bail!("hearth-act-mul: odd fused gate|up width {two_i}");
        }
        let inter = two_i / 2;
        let n = t * inter;
        let (s0, s1) = contiguous(l, "gate|up")?;
        let dev = s.device().clone();
        let name = match self.act {
            Act::Silu => "silu_mul",
            Act::GeluTanh => "gelu_mul",
        };
        let func = dev.get_or_load_custom_func(&format!("{name}_{}", sfx_c(s.dtype())?), MODULE, PTX)?;
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(256).clamp(1, 8192) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (ii, nn) = (inter as i32, n);
        macro_rules! launch {
            ($ty:ty) => {{
                let gu = s.as_cuda_slice::<$ty>()?.slice(s0..s1);
                // SAFETY: the grid-stride loop writes all n outputs.
                let out = unsafe { dev.alloc::<$ty>(n)? };
                let stream = dev.cuda_stream();
                let mut b = Launch::new(&stream, &func);
                b.ptr(&gu).ptr(&out).val(&ii).val(&nn);
                // SAFETY: sizes checked above.
                unsafe { b.launch(cfg) }.w()?;
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }};
        }
        let out = by_float_dtype!(s, "hearth-act-mul", launch);
        Ok((out, Shape::from((t, inter))))
    }
}

struct QkvRope {
    cos: Tensor,
    sin: Tensor,
    interleaved: bool,
    k: Tensor,
    v: Tensor,
    slots: Tensor,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl candle_core::CustomOp1 for QkvRope {
    fn name(&self) -> &'static str {
        "hearth-qkv-rope"
    }
    cpu_unsupported!("hearth-qkv-rope");

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (t, width) = l.shape().dims2()?;
        let (h, kvh, d) = (self.heads, self.kv_heads, self.head_dim);
        if width != (h + 2 * kvh) * d || d % 2 != 0 || d > 2048 {
            candle_core::bail!("hearth-qkv-rope: width {width} is not ({h} + 2 * {kvh}) * {d}");
        }
        let (q0, q1) = contiguous(l, "q|k|v")?;
        let (cs, cl) = self.cos.storage_and_layout();
        let (ss, sl) = self.sin.storage_and_layout();
        let (ks, kl) = self.k.storage_and_layout();
        let (vs, vl) = self.v.storage_and_layout();
        let (ps, pl) = self.slots.storage_and_layout();
        let ((c0, c1), (s0, s1)) = (contiguous(cl, "cos")?, contiguous(sl, "sin")?);
        let ((k0, k1), (v0, v1), (p0, p1)) =
            (contiguous(kl, "K cache")?, contiguous(vl, "V cache")?, contiguous(pl, "slots")?);
        if c1 - c0 != t * d / 2 || s1 - s0 != t * d / 2 || p1 - p0 != t {
            candle_core::bail!("hearth-qkv-rope: rope tables or slots do not match {t} tokens of head dim {d}");
        }
        let cos = cuda_of(&cs)?.as_cuda_slice::<f32>()?.slice(c0..c1);
        let sin = cuda_of(&ss)?.as_cuda_slice::<f32>()?.slice(s0..s1);
        let slots = cuda_of(&ps)?.as_cuda_slice::<u32>()?.slice(p0..p1);
        let dev = s.device().clone();
        let func = dev.get_or_load_custom_func(&format!("qkv_rope_{}", sfx_c(s.dtype())?), MODULE, PTX)?;
        let cfg = LaunchConfig {
            grid_dim: (t as u32, (h + 2 * kvh) as u32, 1),
            block_dim: ((d / 2) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (hi, ki, di, il) = (h as i32, kvh as i32, d as i32, self.interleaved as i32);
        macro_rules! launch {
            ($ty:ty) => {{
                let qkv = s.as_cuda_slice::<$ty>()?.slice(q0..q1);
                let kc = cuda_of(&ks)?.as_cuda_slice::<$ty>()?.slice(k0..k1);
                let vc = cuda_of(&vs)?.as_cuda_slice::<$ty>()?.slice(v0..v1);
                // SAFETY: the kernel writes every (t, head, d) of q.
                let out = unsafe { dev.alloc::<$ty>(t * h * d)? };
                let stream = dev.cuda_stream();
                let mut b = Launch::new(&stream, &func);
                b.ptr(&qkv)
                    .ptr(&cos)
                    .ptr(&sin)
                    .ptr(&out)
                    .ptr(&kc)
                    .ptr(&vc)
                    .ptr(&slots)
                    .val(&hi)
                    .val(&ki)
                    .val(&di)
                    .val(&il);
                // SAFETY: the caches are written at rows slots[t] < rows (reserved by the scheduler); one stream
                // orders this write before the attention that reads them.
                unsafe { b.launch(cfg) }.w()?;
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }};
        }
        let out = by_float_dtype!(s, "hearth-qkv-rope", launch);
        Ok((out, Shape::from((t, h, d))))
    }
}
