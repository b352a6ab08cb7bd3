//! Tensor-core attention for prompt pieces (`prefill_tc.cu`): a step's rows with several new tokens are cut into
//! query tiles of [`tile_tokens`] consecutive tokens (64 query rows of (token, head) per kv head), each attended
//! by one block on the tensor cores; the rest (decode tokens, short pieces) stays on the CUDA-core kernel.
//!
//! 16-bit caches only (bf16, f16), head dims 64/128/256, G = heads / kv_heads a power of two up to 16.
//! `HEARTH_CUDA_TC_PREFILL=0` sends every token to the CUDA-core kernel.

use crate::attention::BatchContext;
use crate::Result;
use candle_core::cuda_backend::cudarc::driver::CudaContext;
use candle_core::{DType, Device, Tensor};

pub(super) const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/prefill_tc.ptx"));
pub(super) const MODULE: &str = "hearth_prefill_tc";
/// TC_WARPS * 32 in the kernel.
pub(super) const THREADS: u32 = 128;
/// TC_M: query rows per block.
const ROWS: usize = 64;
/// Shared memory one block may have on an H100/H200 (227 KB); [`device_fits`] checks the actual device.
pub const MAX_SMEM: usize = 227 * 1024;

/// Dynamic shared memory of one block for head dim `d`: the kernel's `TcLayout<D>::BYTES` (Q, K, V tiles of
/// 16-bit rows padded by 8, S f32 rows of 64 + 4, P 16-bit rows of 64 + 8, O f32 rows of d + 4, 3 floats per row).
pub fn smem_bytes(d: usize) -> usize {
    3 * 64 * (d + 8) * 2 + ROWS * 68 * 4 + ROWS * 72 * 2 + ROWS * (d + 4) * 4 + 3 * ROWS * 4
}

/// Query tokens per tile when the tensor-core kernel serves this shape, else None.
pub fn tile_tokens(heads: usize, kv_heads: usize, head_dim: usize, dtype: DType) -> Option<usize> {
    if !crate::levers::get().cuda_tc_prefill
        || kv_heads == 0
        || !heads.is_multiple_of(kv_heads)
        || !matches!(dtype, DType::BF16 | DType::F16)
    {
        return None;
    }
    let g = heads / kv_heads;
    let ok = g.is_power_of_two() && g <= 16 && matches!(head_dim, 64 | 128 | 256) && smem_bytes(head_dim) <= MAX_SMEM;
    ok.then_some(ROWS / g)
}

/// Fewest keys one split block of the tensor-core kernel takes (a multiple of its 64-key tile).
const TC_SPLIT_MIN_KEYS: usize = 512;
/// Blocks a split launch aims for: 2 per multiprocessor of an H100/H200.
const TC_FILL_BLOCKS: usize = 264;

/// Keys per split block when a step's query tiles give too few (tile, kv head) blocks to fill the GPU and their
/// keys are long — a short piece after a prompt-cache hit on a long context — or None: one block per (tile, kv
/// head) sees all its keys (`HEARTH_CUDA_TC_SPLIT=0`: always). Returns (keys per split, splits).
pub fn split_keys(n_tiles: usize, kv_heads: usize, max_keys: usize) -> Option<(usize, usize)> {
    let blocks = n_tiles * kv_heads;
    if !crate::levers::get().cuda_tc_split || blocks == 0 || blocks * 2 > TC_FILL_BLOCKS {
        return None;
    }
    let want = TC_FILL_BLOCKS.div_ceil(blocks);
    let per = max_keys.div_ceil(want).div_ceil(64).max(TC_SPLIT_MIN_KEYS / 64) * 64;
    let z = max_keys.div_ceil(per);
    (z > 1).then_some((per, z))
}

/// Whether `ctx`'s device runs the kernel for head dim `d`: compute capability 8.0 or newer (bf16 WMMA; the PTX
/// holds no kernel below it) and enough opt-in shared memory per block (an A100 has 163 KB, Ada 99 KB).
pub fn device_fits(ctx: &CudaContext, d: usize) -> bool {
    use candle_core::cuda_backend::cudarc::driver::sys::CUdevice_attribute as A;
    let major = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).unwrap_or(0);
    let smem = ctx.attribute(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).unwrap_or(0);
    major >= 8 && smem_bytes(d) <= smem.max(0) as usize
}

/// A step's split of its packed tokens: query tiles for the tensor-core kernel, the rest for the CUDA-core one.
pub struct TcPlan {
    /// (n_tiles, 2) u32: packed index of a tile's first token, its token count.
    pub tiles: Tensor,
    pub n_tiles: usize,
    /// Packed indices of the tokens the CUDA-core kernel attends, (n_rest,) u32; None when there are none.
    pub rest: Option<Tensor>,
    pub n_rest: usize,
    /// The group size (heads / kv_heads) the tiles were cut for.
    pub group: usize,
}

/// The step's query tiles for a layer shape ([`BatchContext::query_tiles`] of [`tile_tokens`] tokens), uploaded to
/// `dev`; None when the kernel does not serve the shape or the device, or no row has enough new tokens.
pub fn plan(
    ctx: &BatchContext,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    dtype: DType,
    dev: &Device,
) -> Result<Option<TcPlan>> {
    let Some(bq) = tile_tokens(heads, kv_heads, head_dim, dtype) else { return Ok(None) };
    if !device_fits(dev.as_cuda_device()?.cuda_stream().context(), head_dim) {
        return Ok(None);
    }
    let group = heads / kv_heads;
    let (tiles, rest) = ctx.query_tiles(bq);
    if tiles.is_empty() {
        return Ok(None);
    }
    let n_tiles = tiles.len() / 2;
    let n_rest = rest.len();
    Ok(Some(TcPlan {
        tiles: Tensor::from_vec(tiles, (n_tiles, 2), dev)?,
        n_tiles,
        rest: if rest.is_empty() { None } else { Some(Tensor::from_vec(rest, n_rest, dev)?) },
        n_rest,
        group,
    }))
}
