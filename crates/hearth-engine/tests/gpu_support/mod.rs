//! Helpers of the GPU kernel tests: the device, the CUDA paged backend, deterministic noise, comparisons.
#![allow(dead_code)]

use candle_core::{DType, Device};
use hearth_engine::attention::cuda::paged::CudaPaged;

pub fn gpu() -> Device {
    Device::new_cuda(0).expect("this test needs a CUDA GPU")
}

/// The CUDA paged backend for these heads (the tests call it directly: no fallback to the portable path).
pub fn backend(dev: &Device, h: usize, kvh: usize, d: usize, dtype: DType) -> CudaPaged {
    CudaPaged::choose(dev, h, kvh, d, dtype.into())
        .expect("the CUDA paged backend serves this shape (and HEARTH_CUDA_PAGED_ATTN is not 0)")
}

/// Block tables of `need[i]` blocks for sequence i, scattered over a pool of their sum plus `spare` blocks (ids from
/// a fixed permutation). Returns the pool size and the tables.
pub fn scattered_tables(need: &[usize], spare: usize) -> (usize, Vec<Vec<u32>>) {
    let total: usize = need.iter().sum::<usize>() + spare;
    let mut ids: Vec<u32> = (0..total as u32).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, (i * 7919 + 13) % (i + 1));
    }
    let mut at = 0;
    let tables = need
        .iter()
        .map(|&n| {
            at += n;
            ids[at - n..at].to_vec()
        })
        .collect();
    (total, tables)
}

/// Deterministic pseudo-random values in [-1, 1).
pub fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Whether this GPU (and the build's PTX) can launch thread-block clusters: the cluster decode kernel runs there.
pub fn clusters_available(dev: &Device) -> bool {
    hearth_engine::gpu::launch::clusters_on(&dev.as_cuda_device().expect("a CUDA device").cuda_stream())
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}
