//! CUDA paged attention (the `cuda` feature): launches `paged_attention.cu`'s kernels on candle's CUDA tensors.
//! The KV blocks are read and written in place: no per-step gather of a sequence's keys.
//!
//! * [`write_kv`]: one launch per buffer and layer copies the step's new k (or v) rows to their cache rows.
//! * [`paged_attention`]: one launch per layer attends every packed token of the step (prefill pieces and decode
//!   tokens mixed) to its own sequence's visible keys, read through the block tables.
//!
//! The PTX is built by `build.rs` with the CUDA toolchain's `nvcc` (scripts/build-cuda).

use crate::gpu::launch::Launch;
use crate::gpu::{by_float_dtype, contiguous, cuda_of, sfx_c};
use crate::{Error, Result};
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::sys::CUfunction_attribute;
use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDevice, WrapErr};
use candle_core::{CudaStorage, DType, Layout, Shape, Tensor};
use std::ops::Deref;

pub mod decode;
pub mod encoded;
pub mod paged;
pub mod prefill;

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/paged_attention.ptx"));
const MODULE: &str = "hearth_paged_attention";
/// Threads per attention block (NWARPS * 32 in the kernel).
const ATTN_THREADS: u32 = 256;
/// The kernel's shared buffers hold GM * D <= 1024 values per block (GM: G rounded up to a power of two).
const MAX_GD: usize = 1024;

/// Per-step metadata shared by every layer, on the device.
pub struct StepMeta {
    /// Cache row of every packed token, (T,) u32.
    pub slots: Tensor,
    /// Batch row (index into `tables`) of every packed token, (T,) u32.
    pub tok_row: Tensor,
    /// Position of every packed token, (T,) u32.
    pub tok_pos: Tensor,
    /// Block tables, (R, max_blocks) u32, padded with 0.
    pub tables: Tensor,
    pub max_blocks: usize,
    /// The most keys any token of the step sees (its position + 1).
    pub max_keys: usize,
    /// Every packed token is its row's only token of the step (a decode-only step: [`decode`] may serve it).
    pub decode_only: bool,
    /// Query tiles for the tensor-core prompt kernel ([`prefill`]), when the step has prompt pieces and the
    /// kernel serves the model's shape.
    pub tc: Option<prefill::TcPlan>,
    /// 0..T as u32 (an encoded cache's fused path: `qkv_rope` writes the step's k/v rows to a scratch pair in
    /// token order, then [`encoded::encode_kv`] encodes them into the cache).
    pub identity: Option<Tensor>,
}

/// Whether the kernels handle this head shape (else the caller uses the portable path).
pub fn supports(heads: usize, kv_heads: usize, head_dim: usize, dtype: DType) -> bool {
    kv_heads > 0
        && heads % kv_heads == 0
        && matches!(head_dim, 64 | 128 | 256)
        && (heads / kv_heads).next_power_of_two() * head_dim <= MAX_GD
        && matches!(dtype, DType::F32 | DType::BF16 | DType::F16)
}

/// Write `new` (T, KvH, D) into `cache` (rows, KvH, D) at rows `slots` (T,) u32.
pub fn write_kv(cache: &Tensor, new: &Tensor, slots: &Tensor) -> Result<()> {
    let new = new.contiguous()?;
    if new.dtype() != cache.dtype() {
        return Err(Error::InvalidRequest(format!(
            "write_kv: {:?} rows into a {:?} cache",
            new.dtype(),
            cache.dtype()
        )));
    }
    cache.inplace_op3(&new, slots, &WriteKv)?;
    Ok(())
}

struct WriteKv;

impl candle_core::InplaceOp3 for WriteKv {
    fn name(&self) -> &'static str {
        "hearth-write-kv"
    }

    fn cpu_fwd(
        &self,
        _: &mut candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<()> {
        candle_core::bail!("hearth-write-kv runs on CUDA only")
    }

    fn cuda_fwd(
        &self,
        cache: &mut CudaStorage,
        cl: &Layout,
        new: &CudaStorage,
        nl: &Layout,
        slots: &CudaStorage,
        sl: &Layout,
    ) -> candle_core::Result<()> {
        let t = nl.shape().dims().first().copied().unwrap_or(0);
        if t == 0 {
            return Ok(());
        }
        let row_elems = nl.shape().elem_count() / t;
        let (c0, c1) = contiguous(cl, "the KV cache")?;
        let (n0, n1) = contiguous(nl, "new k/v")?;
        let (s0, s1) = contiguous(sl, "slots")?;
        let dev = cache.device().clone();
        let slots = slots.as_cuda_slice::<u32>()?.slice(s0..s1);
        let name = format!("write_kv_{}", sfx_c(new.dtype())?);
        let func = dev.get_or_load_custom_func(&name, MODULE, PTX)?;
        let cfg = LaunchConfig {
            grid_dim: (t as u32, 1, 1),
            block_dim: (row_elems.min(256) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let row_elems = row_elems as i32;
        macro_rules! launch {
            ($ty:ty) => {{
                let mut c = cache.as_cuda_slice_mut::<$ty>()?.slice_mut(c0..c1);
                let n = new.as_cuda_slice::<$ty>()?.slice(n0..n1);
                let mut b = func.builder();
                b.arg(&mut c);
                b.arg(&n);
                b.arg(&slots);
                b.arg(&row_elems);
                // SAFETY: the kernel writes `slots[i] * row_elems ..` for i < t; the caller's slots lie in the cache.
                unsafe { b.launch(cfg) }.w()?;
            }};
        }
        by_float_dtype!(new, "hearth-write-kv", launch);
        Ok(())
    }
}

/// The most splits one token's keys are cut into (MAX_Z in the kernel: the merge's shared arrays).
const MAX_SPLITS: usize = 256;

/// Blocks a launch aims for when it splits: 2 per multiprocessor of an H100/H200.
const FILL_BLOCKS: usize = 264;

/// The fewest keys a split block takes (a multiple of 32: a tile per warp).
const SPLIT_MIN_KEYS: usize = 64;

/// Keys per split block (a multiple of 32, at least `SPLIT_MIN_KEYS`) when a step has too few (token, kv head)
/// blocks to fill the GPU — decode steps of few rows — or None: one block per (token, kv head) then sees all its
/// keys (`HEARTH_CUDA_SPLIT_KV=0`: always). A step of `HEARTH_CUDA_SPLIT_FILL` blocks or more does not split: such a
/// step fills the GPU with its own blocks, and the merge of splits would only add work (docs/benchmarks.md).
pub fn split_keys(tokens: usize, kv_heads: usize, max_keys: usize) -> Option<usize> {
    let levers = crate::levers::get();
    let blocks = tokens * kv_heads;
    let want = FILL_BLOCKS.div_ceil(blocks.max(1));
    if !levers.cuda_split_kv || blocks == 0 || blocks >= levers.cuda_split_fill || max_keys <= 64 || want < 2 {
        return None;
    }
    let per = max_keys.div_ceil(want.min(MAX_SPLITS)).div_ceil(32).max(SPLIT_MIN_KEYS / 32) * 32;
    (max_keys.div_ceil(per) > 1).then_some(per)
}

/// A tensor's storage (its read guard) and contiguous element range.
fn guarded<'a>(
    x: &'a Tensor,
    what: &str,
) -> candle_core::Result<(impl std::ops::Deref<Target = candle_core::Storage> + 'a, (usize, usize))> {
    let (s, l) = x.storage_and_layout();
    let range = contiguous(l, what)?;
    Ok((s, range))
}

/// The contiguous device view of a tensor's storage (from `storage_and_layout`), as T.
fn contiguous_view<'a, T: candle_core::cuda_backend::CudaDType, G: std::ops::Deref<Target = candle_core::Storage>>(
    g: &'a (G, &Layout),
    what: &str,
) -> candle_core::Result<CudaView<'a, T>> {
    let (a, b) = contiguous(g.1, what)?;
    Ok(cuda_of(&g.0)?.as_cuda_slice::<T>()?.slice(a..b))
}

/// The u32 device view of a [`guarded`] tensor.
fn u32_view<G: std::ops::Deref<Target = candle_core::Storage>>(
    g: &(G, (usize, usize)),
) -> candle_core::Result<CudaView<'_, u32>> {
    let (s, (a, b)) = g;
    Ok(cuda_of(s)?.as_cuda_slice::<u32>()?.slice(*a..*b))
}

/// Attention parameters of one layer.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    pub heads: usize,
    pub kv_heads: usize,
    pub block_size: usize,
    /// 0: unlimited.
    pub window: usize,
    pub scale: f32,
    /// 0: none.
    pub softcap: f32,
    /// Decode-only steps of at most this many tokens take the cluster decode kernel ([`decode`]; 0: none). The
    /// store passes `HEARTH_CUDA_DECODE_CLUSTER` unless told otherwise (the GPU tests force the kernel on and off).
    pub decode_cluster: usize,
}

/// `HEARTH_CUDA_DIAG_SKIP_ATTN=1`: a measuring aid, not a mode to serve with — every paged attention returns zeros
/// without launching its kernels, so that a served A/B shows what the attention costs inside the real step (the
/// model's outputs are wrong; `levers` warns when it is on).
pub(crate) fn diag_skip_attention() -> bool {
    crate::levers::get().cuda_diag_skip_attn
}

/// q: (T, H, D); caches (rows, KvH, D), or (rows, KvH, row bytes) in `enc`'s encoding (its kernels' module).
/// Returns (T, H, D).
pub fn paged_attention(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    meta: &StepMeta,
    p: Params,
    enc: Option<&'static encoded::Module>,
) -> Result<Tensor> {
    if diag_skip_attention() {
        return Ok(q.zeros_like()?);
    }
    let q = q.contiguous()?;
    let op = PagedAttn { k: k_cache.clone(), v: v_cache.clone(), meta, p, enc };
    Ok(q.apply_op1_no_bwd(&op)?)
}

struct PagedAttn<'a> {
    k: Tensor,
    v: Tensor,
    meta: &'a StepMeta,
    p: Params,
    enc: Option<&'static encoded::Module>,
}

impl candle_core::CustomOp1 for PagedAttn<'_> {
    fn name(&self) -> &'static str {
        "hearth-paged-attention"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("hearth-paged-attention runs on CUDA only")
    }

    fn cuda_fwd(&self, qs: &CudaStorage, ql: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (t, h, d) = ql.shape().dims3()?;
        let p = self.p;
        let dtype_ok = self.enc.is_none_or(|m| m.dtype == qs.dtype());
        if h != p.heads || !supports(h, p.kv_heads, d, qs.dtype()) || !dtype_ok {
            candle_core::bail!(
                "hearth-paged-attention: unsupported shape {:?} for {} heads / {} kv heads",
                ql.shape(),
                p.heads,
                p.kv_heads
            );
        }
        let (q0, q1) = contiguous(ql, "q")?;
        let dev = qs.device().clone();
        let (ks, kl) = self.k.storage_and_layout();
        let (vs, vl) = self.v.storage_and_layout();
        let (k0, k1) = contiguous(kl, "the K cache")?;
        let (v0, v1) = contiguous(vl, "the V cache")?;
        let tables_g = guarded(&self.meta.tables, "block tables")?;
        let rows_g = guarded(&self.meta.tok_row, "token rows")?;
        let pos_g = guarded(&self.meta.tok_pos, "token positions")?;
        let (tables, rows, pos) = (u32_view(&tables_g)?, u32_view(&rows_g)?, u32_view(&pos_g)?);
        let tc = self.tc_plan(h, d, qs.dtype(), q0);
        let n_cc = tc.map_or(t, |tc| tc.n_rest);
        let rest_g = tc.and_then(|tc| tc.rest.as_ref()).map(|x| guarded(x, "rest tokens")).transpose()?;
        let tiles_g = tc.map(|tc| guarded(&tc.tiles, "query tiles")).transpose()?;
        let rest = rest_g.as_ref().map(u32_view).transpose()?;
        let tiles = tiles_g.as_ref().map(u32_view).transpose()?;
        let cc = self.cc_kernel(&dev, qs.dtype(), n_cc, h, d)?;
        let tck = self.tc_kernel(&dev, qs.dtype(), tc, d)?;
        macro_rules! launch {
            ($ty:ty, $cty:ty) => {{
                let q = qs.as_cuda_slice::<$ty>()?.slice(q0..q1);
                let k = cuda_of(&ks)?.as_cuda_slice::<$cty>()?.slice(k0..k1);
                let v = cuda_of(&vs)?.as_cuda_slice::<$cty>()?.slice(v0..v1);
                // SAFETY: every (token, head, d) is written: tile tokens by the tensor-core kernel, the others by
                // the CUDA-core kernel or, in split mode, its merge.
                let out = unsafe { dev.alloc::<$ty>(t * h * d)? };
                let a = AttnArgs {
                    q,
                    k,
                    v,
                    tables: &tables,
                    rows: &rows,
                    pos: &pos,
                    out: &out,
                    heads: h as i32,
                    kv_heads: p.kv_heads as i32,
                    block_size: p.block_size as i32,
                    max_blocks: self.meta.max_blocks as i32,
                    window: p.window as i32,
                    scale: p.scale,
                    softcap: p.softcap,
                };
                // Both kernels are launched with PDL where the GPU has it (gpu::launch): they wait before reading
                // q/k/v.
                let stream = dev.cuda_stream();
                if n_cc > 0 {
                    launch_cc(&stream, &a, &cc, rest.as_ref(), n_cc, d)?;
                }
                if let (Some(tc), Some(tiles)) = (tc, &tiles) {
                    launch_tc(&stream, &a, &tck, tc.n_tiles, tiles)?;
                }
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }};
            ($ty:ty) => {{
                match self.enc {
                    Some(_) => launch!($ty, u8),
                    None => launch!($ty, $ty),
                }
            }};
        }
        let out = by_float_dtype!(qs, "hearth-paged-attention", launch);
        Ok((out, Shape::from((t, h, d))))
    }
}

impl PagedAttn<'_> {
    /// The step's tensor-core plan when it serves this layer: the tensor-core kernel then takes the step's query
    /// tiles (prompt pieces) and the CUDA-core kernel only the listed rest (decode tokens, short pieces). The plan
    /// was cut at layer 0 for the model's shape and this device (`prefill::plan`); the kernel reads q rows with
    /// 16-byte loads, so the view must start on one.
    fn tc_plan(&self, h: usize, d: usize, dtype: DType, q0: usize) -> Option<&prefill::TcPlan> {
        let group = h / self.p.kv_heads;
        self.meta.tc.as_ref().filter(|tc| {
            tc.group == group && prefill::tile_tokens(h, self.p.kv_heads, d, dtype).is_some() && q0 % 8 == 0
        })
    }

    /// The CUDA-core kernel for the step's `n_cc` tokens, sized for this group (G query heads per kv head rounded
    /// up to a power of two), its keys split over several blocks when the step has too few to fill the GPU.
    fn cc_kernel(
        &self,
        dev: &CudaDevice,
        dtype: DType,
        n_cc: usize,
        h: usize,
        d: usize,
    ) -> candle_core::Result<CcKernel<impl Deref<Target = CudaFunction>>> {
        let p = self.p;
        let gm = (h / p.kv_heads).next_power_of_two();
        let visible = if p.window > 0 { self.meta.max_keys.min(p.window) } else { self.meta.max_keys };
        let split = split_keys(n_cc, p.kv_heads, visible);
        let z = split.map_or(1, |k| visible.div_ceil(k));
        let (kind, module, ptx) = match self.enc {
            Some(m) => ("paged_attn_enc", m.name, m.ptx),
            None => ("paged_attn", MODULE, PTX),
        };
        let func = dev.get_or_load_custom_func(&format!("{kind}_{}_d{d}_g{gm}", sfx_c(dtype)?), module, ptx)?;
        let cfg = LaunchConfig {
            grid_dim: (n_cc as u32, p.kv_heads as u32, z as u32),
            block_dim: (ATTN_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // Split mode: per (token, head, split) an unnormalized partial of D + 2 floats, merged by a second launch.
        let merge = match split {
            Some(_) if n_cc > 0 => {
                let f = dev.get_or_load_custom_func(&format!("{kind}_{}_d{d}_merge", sfx_c(dtype)?), module, ptx)?;
                // SAFETY: every (token, head, split) partial is written by the attention launch before the merge reads it.
                Some((f, unsafe { dev.alloc::<f32>(n_cc * h * z * (d + 2))? }))
            }
            _ => None,
        };
        Ok(CcKernel { func, cfg, split: split.unwrap_or(0) as i32, z, merge })
    }

    /// The tensor-core kernel for the plan's query tiles (none without a plan), its keys split over several blocks
    /// when the tiles are too few to fill the GPU.
    fn tc_kernel(
        &self,
        dev: &CudaDevice,
        dtype: DType,
        tc: Option<&prefill::TcPlan>,
        d: usize,
    ) -> candle_core::Result<TcKernel<impl Deref<Target = CudaFunction>>> {
        let p = self.p;
        let (kind, module, ptx) = match self.enc {
            Some(m) => ("prefill_tc_enc", m.name, m.ptx),
            None => ("prefill_tc", prefill::MODULE, prefill::PTX),
        };
        let func = match tc {
            Some(_) => {
                let f = dev.get_or_load_custom_func(&format!("{kind}_{}_d{d}", sfx_c(dtype)?), module, ptx)?;
                let bytes = prefill::smem_bytes(d);
                f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32)
                    .w()?;
                Some((f, bytes as u32))
            }
            None => None,
        };
        // A tile's keys: all of its context, or its window and its own tokens.
        let tc_keys = if p.window > 0 { self.meta.max_keys.min(p.window + 64) } else { self.meta.max_keys };
        let split = tc.and_then(|tc| prefill::split_keys(tc.n_tiles, p.kv_heads, tc_keys));
        let merge = match (tc, split) {
            (Some(tc), Some((_, z))) => {
                let f = dev.get_or_load_custom_func(&format!("{kind}_{}_d{d}_merge", sfx_c(dtype)?), module, ptx)?;
                // SAFETY: every (tile, kv head, split) writes its 64 rows of d + 2 floats before the merge reads them.
                Some((f, unsafe { dev.alloc::<f32>(tc.n_tiles * p.kv_heads * z * 64 * (d + 2))? }))
            }
            _ => None,
        };
        Ok(TcKernel { func, split, merge })
    }
}

/// The CUDA-core kernel of one launch: its function and grid, its key split (0: none) in `z` pieces, and in split
/// mode the merge with its buffer of partials.
struct CcKernel<F> {
    func: F,
    cfg: LaunchConfig,
    split: i32,
    z: usize,
    merge: Option<(F, CudaSlice<f32>)>,
}

/// The tensor-core kernel of one launch (with its dynamic shared memory), its key split (keys per block, blocks)
/// and in split mode the merge with its buffer of partials.
struct TcKernel<F> {
    func: Option<(F, u32)>,
    split: Option<(usize, usize)>,
    merge: Option<(F, CudaSlice<f32>)>,
}

/// The arguments both attention kernels start with (q .. softcap), for element type T (the caches': C).
struct AttnArgs<'a, T, C> {
    q: CudaView<'a, T>,
    k: CudaView<'a, C>,
    v: CudaView<'a, C>,
    tables: &'a CudaView<'a, u32>,
    rows: &'a CudaView<'a, u32>,
    pos: &'a CudaView<'a, u32>,
    out: &'a CudaSlice<T>,
    heads: i32,
    kv_heads: i32,
    block_size: i32,
    max_blocks: i32,
    window: i32,
    scale: f32,
    softcap: f32,
}

impl<'a, T, C> AttnArgs<'a, T, C> {
    fn push<'b>(&'b self, b: &mut Launch<'b>) {
        b.ptr(&self.q).ptr(&self.k).ptr(&self.v).ptr(self.tables).ptr(self.rows).ptr(self.pos).ptr(self.out);
        b.val(&self.heads).val(&self.kv_heads).val(&self.block_size).val(&self.max_blocks).val(&self.window);
        b.val(&self.scale).val(&self.softcap);
    }
}

/// The CUDA-core kernel over the step's `n_cc` tokens (all of them, or the rest of a tensor-core plan), then in
/// split mode its merge.
fn launch_cc<T, C>(
    stream: &CudaStream,
    a: &AttnArgs<'_, T, C>,
    cc: &CcKernel<impl Deref<Target = CudaFunction>>,
    rest: Option<&CudaView<'_, u32>>,
    n_cc: usize,
    d: usize,
) -> candle_core::Result<()> {
    let mut b = Launch::new(stream, &cc.func);
    a.push(&mut b);
    b.val(&cc.split);
    // Without a split the kernel never touches `part`: no allocation per layer.
    match &cc.merge {
        Some((_, part)) => b.ptr(part),
        None => b.null(),
    };
    let batched = crate::levers::get().cuda_pv_batch as i32;
    b.val(&batched);
    match rest {
        Some(r) => b.ptr(r),
        None => b.null(),
    };
    // SAFETY: tables hold valid block ids for every visible position (the scheduler reserved them); rest lists
    // n_cc packed token indices < t.
    unsafe { b.launch(cc.cfg) }.w()?;
    if let Some((merge, part)) = &cc.merge {
        let zi = cc.z as i32;
        let mcfg = LaunchConfig {
            grid_dim: (n_cc as u32, a.heads as u32, 1),
            block_dim: (d as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut m = Launch::new(stream, merge);
        m.ptr(part).ptr(a.out).val(&a.heads).val(&zi);
        match rest {
            Some(r) => m.ptr(r),
            None => m.null(),
        };
        // SAFETY: part holds n_cc * h * z partials of d + 2 floats; the merge writes those tokens' outputs.
        unsafe { m.launch(mcfg) }.w()?;
    }
    Ok(())
}

/// The tensor-core kernel over the plan's `n_tiles` query tiles, then in split mode its merge.
fn launch_tc<T, C>(
    stream: &CudaStream,
    a: &AttnArgs<'_, T, C>,
    tck: &TcKernel<impl Deref<Target = CudaFunction>>,
    n_tiles: usize,
    tiles: &CudaView<'_, u32>,
) -> candle_core::Result<()> {
    let Some((f, bytes)) = &tck.func else { return Ok(()) };
    let (per, z) = tck.split.unwrap_or((0, 1));
    let tcfg = LaunchConfig {
        grid_dim: (n_tiles as u32, a.kv_heads as u32, z as u32),
        block_dim: (prefill::THREADS, 1, 1),
        shared_mem_bytes: *bytes,
    };
    let mut b = Launch::new(stream, f);
    a.push(&mut b);
    let per_i = per as i32;
    b.ptr(tiles).val(&per_i);
    match &tck.merge {
        Some((_, part)) => b.ptr(part),
        None => b.null(),
    };
    // SAFETY: tiles hold [first, count] of consecutive packed tokens of one row each (< t); the block table covers
    // their positions; in split mode `part` holds every block's partials.
    unsafe { b.launch(tcfg) }.w()?;
    if let Some((merge, part)) = &tck.merge {
        let mcfg = LaunchConfig {
            grid_dim: (n_tiles as u32, a.kv_heads as u32, 1),
            block_dim: (prefill::THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let zi = z as i32;
        let mut m = Launch::new(stream, merge);
        m.ptr(part).ptr(a.out).val(&a.heads).val(&a.kv_heads).val(&zi).ptr(tiles);
        // SAFETY: part holds the tiles' z partials; the merge writes the tiles' tokens' outputs.
        unsafe { m.launch(mcfg) }.w()?;
    }
    Ok(())
}
