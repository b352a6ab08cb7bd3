//! Helpers of the GPU kernel tests: the device, the CUDA paged backend, deterministic noise, comparisons.
#![allow(dead_code)]

use candle_core::{DType, Device};
use hearth_engine::attention::cuda::paged::CudaPaged;

pub fn gpu() -> Device {
    Device::new_cuda(0).expect("this test needs a CUDA GPU")
}

/// The CUDA paged backend for these heads (the tests call it directly: no fallback to the portable path).
pub fn backend(dev: &Device, h: usize, kvh: usize, d: usize, dtype: DType) -> CudaPaged {
    CudaPaged::choose(dev, h, kvh, d, dtype)
        .expect("the CUDA paged backend serves this shape (and HEARTH_CUDA_PAGED_ATTN is not 0)")
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
