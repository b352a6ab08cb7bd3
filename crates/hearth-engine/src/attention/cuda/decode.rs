//! Decode attention with the rotary embedding folded in and the key splits merged in a thread-block cluster
//! (`decode_cluster.cu`): for a decode-only step of few rows, one launch a layer reads the q|k|v projection's output,
//! rotates q and the token's own k, writes the own k/v rows into the paged cache, attends, and merges its splits
//! through distributed shared memory — in place of `qkv_rope`, the split attention and its merge (three launches,
//! two kernel boundaries). Compute capability 9.0+ (clusters).
//!
//! Decode-only steps of at most [`Params::decode_cluster`] tokens take it (`HEARTH_CUDA_DECODE_CLUSTER`, 0: none;
//! default 64, where a paired A/B on the H200 had it ahead at 1, 8 and 32 streams: docs/benchmarks.md). One-wave launches
//! load a tile's value rows in one batch (`HEARTH_CUDA_DECODE_PV32=0`: four).

use super::{contiguous_view, supports, Params, StepMeta, ATTN_THREADS, FILL_BLOCKS, SPLIT_MIN_KEYS};
use crate::attention::RopeTables;
use crate::gpu::launch::Launch;
use crate::gpu::{by_float_dtype, contiguous, sfx_c};
use crate::Result;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaStorage, Layout, Shape, Tensor};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/decode_cluster.ptx"));
const MODULE: &str = "hearth_decode_cluster";
/// The most splits (blocks of a cluster) per (token, kv head): the portable cluster size.
const MAX_CLUSTER: usize = 8;

/// A launch of at most one block per multiprocessor (batch-1 decode) takes the kernel form that loads a tile's 32
/// value rows in one batch (~200 registers: one block per multiprocessor) instead of four batches of 8 — the same
/// bits (it only adds exact zeros). On by default because paired A/Bs on the H200 had it ahead at batch 1
/// (docs/benchmarks.md); `HEARTH_CUDA_DECODE_PV32=0` turns it off.
fn pv32_on() -> bool {
    crate::levers::get().cuda_decode_pv32
}

/// Cluster kernel launches so far in this process (the GPU tests check that a decode step took it).
static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times the cluster kernel has been launched in this process.
pub fn launches() -> u64 {
    LAUNCHES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Splits per (token, kv head) and keys per split for `blocks` (token, kv head) pairs seeing up to `visible` keys:
/// toward FILL_BLOCKS blocks in all, at most MAX_CLUSTER splits, at least SPLIT_MIN_KEYS keys a split (a multiple
/// of 32).
fn plan(blocks: usize, visible: usize) -> (usize, usize) {
    let want = (FILL_BLOCKS / blocks.max(1)).clamp(1, MAX_CLUSTER);
    let per = visible.div_ceil(want).div_ceil(32).max(SPLIT_MIN_KEYS / 32) * 32;
    (visible.div_ceil(per).max(1), per)
}

/// Attention of a decode-only step from its q|k|v projection `qkv` (T, (H + 2 KvH) * D): the own k/v rows written
/// into the caches, the output (T, H, D); None when the cluster kernel does not serve this step (not decode-only,
/// more tokens than `p.decode_cluster`, no clusters on this device, an unsupported shape): the caller
/// runs `qkv_rope` and [`super::paged_attention`].
#[allow(clippy::too_many_arguments)]
pub fn rope_attention(
    qkv: &Tensor,
    rope: &RopeTables,
    k_cache: &Tensor,
    v_cache: &Tensor,
    meta: &StepMeta,
    p: Params,
    head_dim: usize,
    enc: Option<&'static super::encoded::Module>,
) -> Result<Option<Tensor>> {
    let t = qkv.dim(0)?;
    let Some(cuda) = qkv.device().as_cuda_device().ok() else { return Ok(None) };
    let dtype = qkv.dtype();
    let width = (p.heads + 2 * p.kv_heads) * head_dim;
    if !meta.decode_only
        || meta.tc.is_some()
        || t == 0
        || t > p.decode_cluster
        || super::diag_skip_attention()
        || qkv.dims() != [t, width]
        || !enc.map_or(dtype == k_cache.dtype(), |m| m.dtype == dtype)
        || !supports(p.heads, p.kv_heads, head_dim, dtype)
        || rope.cos.dims() != [t, head_dim / 2]
        || rope.sin.dims() != [t, head_dim / 2]
        || !crate::gpu::launch::clusters_on(&cuda.cuda_stream())
    {
        return Ok(None);
    }
    let op = DecodeCluster {
        cos: rope.cos.contiguous()?,
        sin: rope.sin.contiguous()?,
        interleaved: rope.interleaved,
        k: k_cache.clone(),
        v: v_cache.clone(),
        meta,
        p,
        d: head_dim,
        enc,
    };
    Ok(Some(qkv.contiguous()?.apply_op1_no_bwd(&op)?))
}

struct DecodeCluster<'a> {
    cos: Tensor,
    sin: Tensor,
    interleaved: bool,
    k: Tensor,
    v: Tensor,
    meta: &'a StepMeta,
    p: Params,
    d: usize,
    enc: Option<&'static super::encoded::Module>,
}

impl candle_core::CustomOp1 for DecodeCluster<'_> {
    fn name(&self) -> &'static str {
        "hearth-decode-cluster"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, Shape)> {
        candle_core::bail!("hearth-decode-cluster runs on CUDA only")
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> candle_core::Result<(CudaStorage, Shape)> {
        let (t, _) = l.shape().dims2()?;
        let (p, d) = (self.p, self.d);
        let (h, kvh) = (p.heads, p.kv_heads);
        let (q0, q1) = contiguous(l, "q|k|v")?;
        let guards = [&self.cos, &self.sin, &self.k, &self.v].map(|x| x.storage_and_layout());
        let metas = [&self.meta.slots, &self.meta.tables, &self.meta.tok_row, &self.meta.tok_pos]
            .map(|x| x.storage_and_layout());
        let [cos, sin] = [0, 1].map(|i| contiguous_view::<f32, _>(&guards[i], "rope table"));
        let (cos, sin) = (cos?, sin?);
        let [slots, tables, rows, pos] = [0, 1, 2, 3].map(|i| contiguous_view::<u32, _>(&metas[i], "step metadata"));
        let (slots, tables, rows, pos) = (slots?, tables?, rows?, pos?);
        if slots.len() != t || rows.len() != t || pos.len() != t {
            candle_core::bail!("hearth-decode-cluster: step metadata for {} tokens, not {t}", slots.len());
        }
        let visible = if p.window > 0 { self.meta.max_keys.min(p.window) } else { self.meta.max_keys };
        let (z, per) = plan(t * kvh, visible);
        let dev = s.device().clone();
        let gm = (h / kvh).next_power_of_two();
        let one_wave = t * kvh * z <= crate::gpu::launch::device_props(&dev.cuda_stream()).sms;
        let batched = crate::levers::get().cuda_pv_batch;
        let pv = if pv32_on() && one_wave && batched { "_pv32" } else { "" };
        let sfx = sfx_c(s.dtype())?;
        let func = match self.enc {
            Some(m) => {
                dev.get_or_load_custom_func(&format!("decode_cluster_enc_{sfx}_d{d}_g{gm}{pv}"), m.name, m.ptx)?
            }
            None => dev.get_or_load_custom_func(&format!("decode_cluster_{sfx}_d{d}_g{gm}{pv}"), MODULE, PTX)?,
        };
        let cfg = LaunchConfig {
            grid_dim: (t as u32, kvh as u32, z as u32),
            block_dim: (ATTN_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (hi, ki, bs, mb, win) =
            (h as i32, kvh as i32, p.block_size as i32, self.meta.max_blocks as i32, p.window as i32);
        let (per_i, il, batched) = (per as i32, self.interleaved as i32, batched as i32);
        macro_rules! launch {
            ($ty:ty, $cty:ty) => {{
                let qkv = s.as_cuda_slice::<$ty>()?.slice(q0..q1);
                let kc = contiguous_view::<$cty, _>(&guards[2], "the K cache")?;
                let vc = contiguous_view::<$cty, _>(&guards[3], "the V cache")?;
                // SAFETY: the kernel writes every (token, head, d) of the output (each cluster block its share).
                let out = unsafe { dev.alloc::<$ty>(t * h * d)? };
                let stream = dev.cuda_stream();
                let mut b = Launch::new(&stream, &func);
                b.cluster((1, 1, z as u32));
                b.ptr(&qkv)
                    .ptr(&cos)
                    .ptr(&sin)
                    .ptr(&kc)
                    .ptr(&vc)
                    .ptr(&slots)
                    .ptr(&tables)
                    .ptr(&rows)
                    .ptr(&pos)
                    .ptr(&out);
                b.val(&hi)
                    .val(&ki)
                    .val(&bs)
                    .val(&mb)
                    .val(&win)
                    .val(&p.scale)
                    .val(&p.softcap)
                    .val(&per_i)
                    .val(&il)
                    .val(&batched);
                // SAFETY: tables hold valid block ids for every visible position and slots the tokens' own rows
                // (reserved by the scheduler); the rope tables hold t rows of d / 2 (checked by the caller); the grid
                // is z clusters deep (z <= 8, the portable cluster size).
                unsafe { b.launch(cfg) }.w()?;
                LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                CudaStorage::wrap_cuda_slice(out, dev.clone())
            }};
            ($ty:ty) => {{
                match self.enc {
                    Some(_) => launch!($ty, u8),
                    None => launch!($ty, $ty),
                }
            }};
        }
        let out = by_float_dtype!(s, "hearth-decode-cluster", launch);
        Ok((out, Shape::from((t, h, d))))
    }
}
