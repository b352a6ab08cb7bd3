//! GPU tests of the quantized skinny matmuls (`gpu::qgemv`, the `cuda` feature; needs an NVIDIA GPU, so CI never
//! builds them). Built by `scripts/build-cuda --tests`, run on the device machine (`bench/gpu/device_qgemv.sh`).
//!
//! * every GGML type the kernels read, 1 to 8 rows, f32/bf16/f16 activations, against candle's CUDA quantized
//!   matmul (llama.cpp's MMVQ arithmetic: the same q8_1 activations, its scales rounded to f16 where ours stay f32)
//!   and against the exact product of the dequantized matrix in f64 (the q8_1 rounding's error);
//! * the kernel that computes its input from the residual add + RMSNorm against `fused::add_rms_norm` then the
//!   plain kernel, and its gated epilogue against the plain output through `fused::act_mul`;
//! * the shapes it declines (more rows than 8, rows too long for its shared memory, types it does not read).
#![cfg(feature = "cuda")]

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use hearth_engine::gpu::{fused, qgemv};
use std::sync::Arc;

mod gpu_support;
use gpu_support::*;

const TYPES: [GgmlDType; 7] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

fn host(n: usize, k: usize, seed: u64) -> Tensor {
    Tensor::from_vec(noise(n * k, seed), (n, k), &Device::Cpu).unwrap()
}

/// A random (n, k) matrix quantized to `t` on the host, and its copy on the GPU.
fn quantized(n: usize, k: usize, t: GgmlDType, seed: u64, dev: &Device) -> (Arc<QTensor>, Arc<QTensor>) {
    let q = QTensor::quantize(&host(n, k, seed), t).unwrap();
    let bytes = q.data().unwrap().into_owned();
    let storage = candle_core::quantized::QStorage::from_data(std::borrow::Cow::Owned(bytes), dev, t).unwrap();
    (Arc::new(q), Arc::new(QTensor::new(storage, (n, k)).unwrap()))
}

fn to_host(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

/// Relative RMS difference: ||a - b|| / ||b||.
fn rel(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut d, mut n) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        d += (*x as f64 - *y as f64).powi(2);
        n += (*y as f64).powi(2);
    }
    (d / n.max(1e-30)).sqrt()
}

/// x (m, k) · w_hostᵀ in f64 over the dequantized matrix.
fn exact(x: &[f32], w: &QTensor, m: usize) -> Vec<f32> {
    let (n, k) = w.shape().dims2().unwrap();
    let wd: Vec<f32> = w.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    let mut y = vec![0f32; m * n];
    for r in 0..m {
        for c in 0..n {
            let s: f64 = (0..k).map(|i| x[r * k + i] as f64 * wd[c * k + i] as f64).sum();
            y[r * n + c] = s as f32;
        }
    }
    y
}

/// Every type, shapes with a partial last piece of 32 units (K 576, 1280), many columns per warp (n 3000), K up to
/// the 8B shape's 14336, 1 to 8 rows, each activation dtype: within 4e-3 (f32; bf16/f16 add their output rounding)
/// of candle's MMVQ on the same values, and within 2.5e-2 of the exact product (8-bit activations).
#[test]
fn qgemv_matches_candle_and_the_exact_product() {
    let dev = gpu();
    let mut seed = 7;
    for t in TYPES {
        let kq = t.block_size() == 256;
        for (n, k) in [(96usize, 256usize), (200, 576), (3000, 1280), (64, 4096), (40, 14336)] {
            if k % t.block_size() != 0 {
                continue;
            }
            seed += 1;
            let (wh, wg) = quantized(n, k, t, seed, &dev);
            for m in [1usize, 3, 8] {
                let xh = host(m, k, seed + 1000);
                // One bound for every type: the k-quants' min term takes the quantized activations' sum as llama.cpp's
                // does (with the values' own sum it sat 9.0e-3 from candle's on an H100, Q4_K at K 256).
                for (dtype, tol) in [(DType::F32, 4e-3), (DType::BF16, 1.2e-2), (DType::F16, 6e-3)] {
                    let x = xh.to_dtype(dtype).unwrap().to_device(&dev).unwrap();
                    let got = qgemv::matmul(&x, &wg).unwrap();
                    // qgemv.rs's smem_bytes: the rows' q8_1 copy and ~18 KB of staging and sums, at most 96 KB
                    let fits = m * k * 5 / 4 + 18_500 <= 96 * 1024;
                    let Some(got) = got else {
                        assert!(!fits, "{t:?} n{n} k{k} m{m} {dtype:?}: declined a shape it takes");
                        continue;
                    };
                    assert!(fits, "{t:?} n{n} k{k} m{m}: took a shape beyond its shared memory");
                    assert_eq!(got.dims(), &[m, n]);
                    let got = to_host(&got);
                    let xr = to_host(&x);
                    let xf = Tensor::from_vec(xr.clone(), (m, k), &dev).unwrap();
                    let candle = to_host(&QMatMul::QTensor(wg.clone()).forward(&xf).unwrap());
                    let e = rel(&got, &candle);
                    eprintln!("{t:?} n{n} k{k} m{m} {dtype:?}: vs candle {e:.2e}");
                    assert!(e < tol, "{t:?} n{n} k{k} m{m} {dtype:?}: {e} from candle's MMVQ (k-quant {kq})");
                    if dtype == DType::F32 && n * k <= 64 * 4096 {
                        let ex = rel(&got, &exact(&xr, &wh, m));
                        assert!(ex < 2.5e-2, "{t:?} n{n} k{k} m{m}: {ex} from the exact product");
                    }
                }
            }
        }
    }
}

/// The norm-fused form against `fused::add_rms_norm` then the plain kernel (h + a bit for bit; y within the q8_1
/// rounding of a norm whose sum of squares is added in another order), for 1 and 5 rows; the gated epilogue
/// against the plain output through `fused::act_mul` (the same sums, possibly split over warps differently).
#[test]
fn qgemv_add_norm_and_gated_match_separate_kernels() {
    let dev = gpu();
    let eps = 1e-6f32;
    for (t, n, k) in [(GgmlDType::Q4_0, 512usize, 2048usize), (GgmlDType::Q6K, 300, 1536), (GgmlDType::Q4K, 1024, 4096)]
    {
        let (_, w) = quantized(n, k, t, 11, &dev);
        for m in [1usize, 5] {
            for dtype in [DType::F32, DType::BF16] {
                let d = |x: Tensor| x.to_dtype(dtype).unwrap().to_device(&dev).unwrap();
                let h = d(host(m, k, 21));
                let a = d(host(m, k, 22));
                let wn = d(Tensor::from_vec(noise(k, 23), k, &Device::Cpu).unwrap().affine(0.2, 1.0).unwrap());
                let (h_want, x_want) = fused::add_rms_norm(&h, &a, &wn, eps).unwrap();
                let y_want = qgemv::matmul(&x_want, &w).unwrap().expect("plain kernel");
                let (h_got, y_got) =
                    qgemv::matmul_add_norm(&h, Some(&a), &wn, eps, &w, None).unwrap().expect("norm-fused kernel");
                assert_eq!(to_host(&h_got), to_host(&h_want), "{t:?} m{m} {dtype:?}: h + a");
                let e = rel(&to_host(&y_got), &to_host(&y_want));
                eprintln!("{t:?} n{n} k{k} m{m} {dtype:?}: add+norm vs separate {e:.2e}");
                assert!(e < 1e-2, "{t:?} m{m} {dtype:?}: add+norm {e}");
                for act in [fused::Act::Silu, fused::Act::GeluTanh] {
                    let (_, gated) =
                        qgemv::matmul_add_norm(&h, Some(&a), &wn, eps, &w, Some(act)).unwrap().expect("gated");
                    let (_, gu) = qgemv::matmul_add_norm(&h, Some(&a), &wn, eps, &w, None).unwrap().unwrap();
                    let want = fused::act_mul(&gu, act).unwrap();
                    assert_eq!(gated.dims(), want.dims());
                    let e = rel(&to_host(&gated), &to_host(&want));
                    assert!(e < 1e-2, "{t:?} m{m} {dtype:?} {act:?}: gated epilogue {e}");
                }
            }
        }
    }
}

#[test]
fn qgemv_declines_what_it_does_not_take() {
    let dev = gpu();
    let (_, w) = quantized(64, 1024, GgmlDType::Q4_0, 3, &dev);
    let x = |m: usize, k: usize| Tensor::from_vec(noise(m * k, 5), (m, k), &dev).unwrap();
    assert!(qgemv::matmul(&x(9, 1024), &w).unwrap().is_none(), "nine rows");
    assert!(qgemv::matmul(&x(2, 512), &w).unwrap().is_none(), "K differs");
    let (_, long) = quantized(8, 14336, GgmlDType::Q8_0, 4, &dev);
    assert!(qgemv::matmul(&x(8, 14336), &long).unwrap().is_none(), "8 rows of 14336 exceed the shared memory");
    assert!(qgemv::matmul(&x(4, 14336), &long).unwrap().is_some(), "4 rows of 14336 fit");
    let (_, q5_1) = quantized(64, 1024, GgmlDType::Q5_1, 6, &dev);
    assert!(qgemv::matmul(&x(1, 1024), &q5_1).unwrap().is_none(), "Q5_1 is candle's");
    assert!(!qgemv::supported(GgmlDType::Q2K) && qgemv::supported(GgmlDType::Q6K));
}
