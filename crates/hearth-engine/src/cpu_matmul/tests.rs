//! Kernel tests against candle's own CPU implementation (the scalar reference).
//!
//! Tolerances (max |ours - ref| / max |ref| over the whole output):
//! * decode path vs candle `QMatMul`: [`DECODE_TOL`] = 2e-6 (observed worst 4.9e-7; a one-ulp error in one
//!   block scale of W shows as >= 2.7e-5). Activations are quantized bit-identically (checked
//!   separately) and every block sum is an exact integer on both sides, so only the f32 accumulation order
//!   differs (18-64 block terms: a few ulp of the largest partial sum).
//! * across m, position in the call and ISA: bit-identical (the serving engine's batch invariance).

use super::quant::{quantize_block_scalar, quantize_row_k, quantize_rows, XBlock, XBlockK, QK, QK_K};
use super::*;
use candle_core::quantized::QStorage;
use half::f16;
use std::borrow::Cow;

const DECODE_TOL: f32 = 2e-6;

/// Deterministic values with per-row scale variety, a few outliers and exact zeros.
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    (0..len)
        .map(|i| {
            let v = next();
            let scale = 0.1 + ((i / 32) % 7) as f32;
            if i % 97 == 5 {
                v * 20.0
            } else if i % 89 == 3 {
                0.0
            } else {
                v * scale
            }
        })
        .collect()
}

fn tensor(rows: usize, cols: usize, seed: u64) -> Tensor {
    Tensor::from_vec(values(rows * cols, seed), (rows, cols), &Device::Cpu).unwrap()
}

fn isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|&i| isa_supported(i)).collect()
}

/// max |a - b| / max |b|
fn rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    if a.iter().any(|v| !v.is_finite()) {
        return f32::INFINITY;
    }
    diff / scale
}

fn candle_ref(w: &Arc<QTensor>, x: &Tensor) -> Vec<f32> {
    QMatMul::QTensor(w.clone()).forward(x).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

fn ours_decode(w: &QTensor, isa: Isa, x: &Tensor) -> Vec<f32> {
    let (m, _) = x.dims2().unwrap();
    let n = w.shape().dims2().unwrap().0;
    let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
    let mut out = vec![f32::NAN; m * n];
    decode_matmul(w, isa, &xs, m, &mut out).unwrap();
    out
}

fn quantized(n: usize, k: usize, dtype: GgmlDType, seed: u64) -> Arc<QTensor> {
    Arc::new(QTensor::quantize(&tensor(n, k, seed), dtype).unwrap())
}

/// A copy of `w` with `edit` applied to its raw block bytes.
fn edited(w: &QTensor, edit: impl FnOnce(&mut [u8])) -> Arc<QTensor> {
    let mut bytes = w.data().unwrap().into_owned();
    edit(&mut bytes);
    let storage = QStorage::from_data(Cow::Owned(bytes), &Device::Cpu, w.dtype()).unwrap();
    Arc::new(QTensor::new(storage, w.shape().clone()).unwrap())
}

const DECODE_TYPES: [GgmlDType; 3] = [GgmlDType::Q4_1, GgmlDType::Q5_0, GgmlDType::Q8_0];
const K_QUANT_TYPES: [GgmlDType; 3] = [GgmlDType::Q4K, GgmlDType::Q5K, GgmlDType::Q6K];
// k-quant shapes: n a multiple of 8 (candle's repacked Q4_K tiles) and not (its plain path); 1, 2 and 3 super-blocks.
const K_SHAPES: [(usize, usize); 4] = [(64, 256), (67, 512), (40, 768), (640, 1024)];
const MS: [usize; 4] = [1, 3, 17, 64];
// k not a multiple of 256 keeps candle's Q8_0 on its plain vec_dot path (the repacked one quantizes x differently);
// odd n exercises the m = 1 row pairing tail.
const SHAPES: [(usize, usize); 3] = [(67, 576), (96, 640), (5, 64)];

fn parse_q8(bytes: &[u8], with_s: bool) -> Vec<(u16, u16, Vec<i8>)> {
    let bs = if with_s { 36 } else { 34 };
    bytes
        .chunks_exact(bs)
        .map(|b| {
            let d = u16::from_le_bytes([b[0], b[1]]);
            let (s, off) = if with_s { (u16::from_le_bytes([b[2], b[3]]), 4) } else { (0, 2) };
            (d, s, b[off..off + 32].iter().map(|&v| v as i8).collect())
        })
        .collect()
}

#[test]
fn activation_quantization_is_bit_identical_to_candle() {
    let k = 640;
    let m = 5;
    let mut xs = values(m * k, 7);
    // exact rounding ties: amax 127 gives d = 1, so x = j + 0.5 must round away from zero
    for (j, v) in xs[..32].iter_mut().enumerate() {
        *v = if j == 0 { 127.0 } else { (j as f32 - 16.0) + 0.5 };
    }
    xs[32..64].iter_mut().for_each(|v| *v = 0.0); // d = 0
    let x = Tensor::from_vec(xs.clone(), (m, k), &Device::Cpu).unwrap();
    let q81 = parse_q8(&QTensor::quantize(&x, GgmlDType::Q8_1).unwrap().data().unwrap(), true);
    let q80 = parse_q8(&QTensor::quantize(&x, GgmlDType::Q8_0).unwrap().data().unwrap(), false);
    for simd in [false, true] {
        if simd && !isa_supported(Isa::Avx2) {
            continue;
        }
        let mut ours = vec![XBlock::ZERO; m * k / QK];
        quantize_rows(&xs, &mut ours, 16, simd);
        for (i, b) in ours.iter().enumerate() {
            let (d1, s1, qs1) = &q81[i];
            let (d0, _, qs0) = &q80[i];
            assert_eq!(f16::from_f32(b.d).to_bits(), *d1, "block {i} d (simd={simd})");
            assert_eq!(*d0, *d1);
            assert_eq!(f16::from_f32(b.s).to_bits(), *s1, "block {i} s (simd={simd})");
            assert_eq!(&b.qs[..], &qs1[..], "block {i} qs (simd={simd})");
            assert_eq!(qs0, qs1);
            let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
            assert_eq!(b.corr, -16 * sum, "block {i} corr");
            assert_eq!(*b, quantize_block_scalar(&xs[i * QK..(i + 1) * QK], 16));
        }
    }
    assert_eq!(q81[0].2[1], -15); // -14.5 rounds away from zero
    assert_eq!(q81[0].2[31], 16); // 15.5
}

#[test]
fn decode_matches_candle_qmatmul() {
    let isas = isas();
    assert!(!isas.is_empty(), "these tests need an AVX2 CPU");
    let mut worst = 0f32;
    for dtype in DECODE_TYPES {
        for (si, &(n, k)) in SHAPES.iter().enumerate() {
            let w = quantized(n, k, dtype, 100 + si as u64);
            for m in MS {
                let x = tensor(m, k, 1000 + m as u64);
                let reference = candle_ref(&w, &x);
                for &isa in &isas {
                    let e = rel_err(&ours_decode(&w, isa, &x), &reference);
                    worst = worst.max(e);
                    if std::env::var("KERNEL_TEST_VERBOSE").is_ok() {
                        eprintln!("{dtype:?} {isa:?} n={n} k={k} m={m}: {e:e}");
                    }
                    assert!(e <= DECODE_TOL, "{dtype:?} {isa:?} n={n} k={k} m={m}: rel err {e:e}");
                }
            }
        }
    }
    eprintln!("decode: worst rel err {worst:e} (tolerance {DECODE_TOL:e})");
}

#[test]
fn decode_rows_are_the_same_whatever_shares_the_call() {
    // The serving engine's batch invariance: a row's output is bit-identical at any m, any position in the call
    // and on every ISA (each block's integer sum is exact; the float steps per row are fixed). n = 67 leaves a
    // short last group of weight rows; m = 23 runs tiles of 8 and 4 and single rows. One row alone takes the two-row
    // kernel on the larger matrix (over the tests' 16 KiB threshold) and the 8-row one on the smaller (Q4_1, Q5_0;
    // Q8_0 takes the two-row kernel on both: HEARTH_Q8_ROW_PAIRS).
    let isas = isas();
    for (dtype, (n, k)) in DECODE_TYPES.into_iter().flat_map(|d| [(d, (67, 576)), (d, (13, 64))]) {
        let w = quantized(n, k, dtype, 41);
        let x = tensor(23, k, 42);
        let all = ours_decode(&w, Isa::Avx2, &x);
        for &isa in &isas {
            let other = ours_decode(&w, isa, &x);
            for (j, (a, b)) in other.iter().zip(&all).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{dtype:?} {n}x{k} {isa:?} value {j}");
            }
            for r in [0, 5, 17, 22] {
                let one = ours_decode(&w, isa, &x.narrow(0, r, 1).unwrap());
                for (j, (a, b)) in one.iter().zip(&all[r * n..(r + 1) * n]).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "{dtype:?} {n}x{k} {isa:?} row {r} col {j}");
                }
            }
        }
    }
}

#[test]
fn decode_catches_a_one_ulp_block_scale_error() {
    // The tolerance must be tight enough to see one block's scale (or Q4_1 min) off by one f16 ulp.
    for dtype in DECODE_TYPES {
        let (n, k) = (67, 576);
        let w = quantized(n, k, dtype, 5);
        let x = tensor(3, k, 6);
        let reference = candle_ref(&w, &x);
        let bytes = blocks32::block_bytes(dtype);
        let block = 40 * (k / QK) + 7; // row 40, block 7
        let mut offsets = vec![0usize]; // d
        if dtype == GgmlDType::Q4_1 {
            offsets.push(2); // m
        }
        for off in offsets {
            let bad = edited(&w, |b| {
                let p = block * bytes + off;
                let h = u16::from_le_bytes([b[p], b[p + 1]]) ^ 1;
                b[p..p + 2].copy_from_slice(&h.to_le_bytes());
            });
            for isa in isas() {
                let e = rel_err(&ours_decode(&bad, isa, &x), &reference);
                if std::env::var("KERNEL_TEST_VERBOSE").is_ok() {
                    eprintln!("mutated {dtype:?} {isa:?} offset {off}: {e:e}");
                }
                assert!(e > DECODE_TOL, "{dtype:?} {isa:?} offset {off}: a wrong scale went unnoticed ({e:e})");
            }
        }
        // and a wrong output scale of 1e-5
        for isa in isas() {
            let scaled: Vec<f32> = ours_decode(&w, isa, &x).iter().map(|v| v * (1.0 + 1e-5)).collect();
            assert!(rel_err(&scaled, &reference) > DECODE_TOL);
        }
    }
}

#[test]
fn k_quant_activation_quantization_is_bit_identical_to_candle() {
    let k = 768;
    let m = 3;
    let mut xs = values(m * k, 17);
    xs[256..512].iter_mut().for_each(|v| *v = 0.0); // d = 0
    xs[512 + 9] = -50.0; // the largest magnitude is negative
    let x = Tensor::from_vec(xs.clone(), (m, k), &Device::Cpu).unwrap();
    let bytes = QTensor::quantize(&x, GgmlDType::Q8K).unwrap().data().unwrap().into_owned();
    let mut ours = vec![XBlockK::ZERO; m * k / QK_K];
    for (xr, o) in xs.chunks_exact(k).zip(ours.chunks_exact_mut(k / QK_K)) {
        quantize_row_k(xr, o);
    }
    // candle's BlockQ8K: d: f32, qs: [i8; 256], bsums: [i16; 16]
    for (i, (b, ours)) in bytes.chunks_exact(4 + QK_K + 32).zip(&ours).enumerate() {
        assert_eq!(f32::from_le_bytes([b[0], b[1], b[2], b[3]]).to_bits(), ours.d.to_bits(), "block {i} d");
        let qs: Vec<i8> = b[4..4 + QK_K].iter().map(|&v| v as i8).collect();
        assert_eq!(&qs[..], &ours.qs[..], "block {i} qs");
        let bsums: Vec<i16> = b[4 + QK_K..].chunks_exact(2).map(|p| i16::from_le_bytes([p[0], p[1]])).collect();
        assert_eq!(&bsums[..], &ours.bsums[..], "block {i} bsums");
    }
    assert_eq!(ours[1], XBlockK::ZERO);
    assert_eq!(ours[2].qs[9], -127); // the largest magnitude, -50, maps to -127 (iscale = -127 / max)
}

/// The vectorized Q8_K quantization gives the plain loop's bits, on ties (x.5 products), values that reach
/// ±127 exactly, a repeated largest magnitude of either sign, NaN and zero blocks.
#[test]
fn k_quant_activation_quantization_simd_matches_scalar() {
    let k = 5 * QK_K;
    let mut xs = values(k, 23);
    // block 0: every product iscale·v lands on a tie (max = -127 -> iscale = 1)
    for (i, v) in xs[..QK_K].iter_mut().enumerate() {
        *v = (i as f32 - 128.0) * 0.5;
    }
    xs[7] = -127.0;
    xs[QK_K + 3] = 9.0; // block 1: the largest magnitude twice, positive first
    xs[QK_K + 40] = -9.0;
    xs[2 * QK_K + 5] = f32::NAN; // block 2: a NaN value
    xs[3 * QK_K..4 * QK_K].iter_mut().for_each(|v| *v = 0.0); // block 3: zeros
    let (mut a, mut b) = (vec![XBlockK::ZERO; k / QK_K], vec![XBlockK::ZERO; k / QK_K]);
    quantize_row_k(&xs, &mut a);
    super::quant::quantize_row_k_scalar(&xs, &mut b);
    for (i, (a, b)) in a.iter().zip(&b).enumerate() {
        assert_eq!((a.d.to_bits(), &a.qs[..], &a.bsums[..]), (b.d.to_bits(), &b.qs[..], &b.bsums[..]), "block {i}");
    }
}

#[test]
fn k_quant_decode_matches_candle_qmatmul() {
    assert!(isa_supported(Isa::Avx2), "these tests need an AVX2 CPU");
    let mut worst = 0f32;
    for dtype in K_QUANT_TYPES {
        for (si, &(n, k)) in K_SHAPES.iter().enumerate() {
            let w = quantized(n, k, dtype, 200 + si as u64);
            for m in MS {
                let x = tensor(m, k, 2000 + m as u64);
                let reference = candle_ref(&w, &x);
                let avx2 = ours_decode(&w, Isa::Avx2, &x);
                let e = rel_err(&avx2, &reference);
                worst = worst.max(e);
                if std::env::var("KERNEL_TEST_VERBOSE").is_ok() {
                    eprintln!("{dtype:?} n={n} k={k} m={m}: {e:e}");
                }
                assert!(e <= DECODE_TOL, "{dtype:?} n={n} k={k} m={m}: rel err {e:e}");
                // The VNNI forms sum the same integers in the same order: bit-identical to AVX2.
                for isa in isas() {
                    let other = ours_decode(&w, isa, &x);
                    for (j, (a, b)) in other.iter().zip(&avx2).enumerate() {
                        assert_eq!(a.to_bits(), b.to_bits(), "{dtype:?} {isa:?} n={n} k={k} m={m} value {j}");
                    }
                }
            }
        }
    }
    eprintln!("k-quant decode: worst rel err {worst:e} (tolerance {DECODE_TOL:e})");
}

#[test]
fn k_quant_rows_are_the_same_whatever_shares_the_call() {
    // The serving engine's batch invariance: a row's output is bit-identical at any m and position, whether the
    // tile kernel (m < 4) or the packed one (m >= 4, tiles of 8, 4 and 1 rows) computes it.
    for (isa, dtype) in isas().into_iter().flat_map(|i| K_QUANT_TYPES.map(|d| (i, d))) {
        let (n, k) = (67, 512);
        let w = quantized(n, k, dtype, 31);
        let x = tensor(23, k, 32);
        let all = ours_decode(&w, isa, &x);
        for (r0, len) in [(0, 1), (5, 1), (22, 1), (3, 2), (10, 3), (1, 5), (7, 13)] {
            let part = ours_decode(&w, isa, &x.narrow(0, r0, len).unwrap());
            for (j, (a, b)) in part.iter().zip(&all[r0 * n..(r0 + len) * n]).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{isa:?} {dtype:?} rows {r0}+{len} value {j}");
            }
        }
    }
}

#[test]
fn prepacked_weights_are_bit_identical_to_the_ggml_kernels() {
    // Q4_K repacked at load: every output bit-identical to the tile (m < 4) and packed kernels' on the GGML
    // layout, at every m (tiles of 4, 3, 2 and 1 rows; from 16 rows expanded for the packed kernels) and with a
    // last group of fewer than 8 rows.
    let cases = isas().into_iter().map(|i| (i, GgmlDType::Q4K));
    for ((isa, dtype), &(n, k)) in cases.flat_map(|c| K_SHAPES.iter().map(move |s| (c, s))) {
        let w = quantized(n, k, dtype, 41);
        // SAFETY: every supported ISA has AVX2 and F16C.
        let packed = unsafe { kquant::prepacked::Packed::new(dtype, &w.data().unwrap(), n, k / quant::QK_K) }.unwrap();
        for m in [1, 2, 3, 4, 5, 7, 9, 16, 23, 64] {
            let x = tensor(m, k, 42 + m as u64);
            let want = ours_decode(&w, isa, &x);
            let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
            let mut got = vec![f32::NAN; m * n];
            kquant::prepacked_matmul(&packed, isa, &xs, m, &mut got).unwrap();
            for (j, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{isa:?} {dtype:?} {n}x{k} m={m} value {j}: {a} vs {b}");
            }
        }
    }
}

#[test]
fn k_quant_decode_catches_a_wrong_scale_or_min() {
    // One 6-bit sub-block scale (Q4_K/Q5_K: also a min) or Q6_K's i8 scale off by one in one super-block,
    // and the super-block's f16 d off by one ulp: each must exceed the tolerance.
    for dtype in K_QUANT_TYPES {
        let (n, k) = (67, 512);
        let w = quantized(n, k, dtype, 41);
        let bytes = kquant::block_bytes(dtype);
        let block = (40 * (k / QK_K) + 1) * bytes; // row 40, super-block 1
                                                   // (byte offset, xor mask): Q4_K/Q5_K scale bytes 4..16 (byte 4: sc_0 low bits; byte 8: m_0); Q6_K scales
                                                   // at 192..208 and d at 208.
        let edits: Vec<(usize, u8)> = match dtype {
            GgmlDType::Q6K => vec![(192 + 3, 1), (208, 1)],
            _ => vec![(4 + 2, 1), (4 + 4 + 1, 1), (0, 1), (2, 1)],
        };
        // 3 rows: the tile kernel; 9: the packed one
        for m in [3, 9] {
            let x = tensor(m, k, 42);
            let reference = candle_ref(&w, &x);
            for &(off, mask) in &edits {
                let bad = edited(&w, |b| b[block + off] ^= mask);
                let e = rel_err(&ours_decode(&bad, Isa::Avx2, &x), &reference);
                if std::env::var("KERNEL_TEST_VERBOSE").is_ok() {
                    eprintln!("mutated {dtype:?} byte {off}, m={m}: {e:e}");
                }
                assert!(e > DECODE_TOL, "{dtype:?} byte {off} m={m}: a wrong scale went unnoticed ({e:e})");
            }
        }
    }
}

const PLAN_TYPES: [GgmlDType; 7] = [
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q6K,
    GgmlDType::Q5K,
    GgmlDType::Q4_0,
];

#[test]
fn forward_follows_the_plan_and_matches_candle() {
    for (isa, dtype) in isas().into_iter().flat_map(|i| PLAN_TYPES.map(|d| (i, d))) {
        let (n, k) = (67, 512);
        let w = quantized(n, k, dtype, 31);
        let Some(fast) = FastQMatMul::with_plan(w.clone(), isa, Plan::for_weight(dtype)) else {
            assert_eq!(Plan::for_weight(dtype).path(1), Path::Candle, "{dtype:?}");
            assert_eq!(Plan::for_weight(dtype).path(512), Path::Candle, "{dtype:?}");
            assert!(!decode_supported(dtype), "{dtype:?}");
            continue;
        };
        for m in [1, 3, 17, 64, 300] {
            // the int8 kernels at every m
            assert_eq!(fast.path(m), Path::Decode, "{dtype:?} m={m}");
            // 3-D input: (1, m, k)
            let x = tensor(m, k, 40 + m as u64).unsqueeze(0).unwrap();
            let y = fast.forward(&x).unwrap();
            assert_eq!(y.dims(), &[1, m, n]);
            let ours: Vec<f32> = y.flatten_all().unwrap().to_vec1().unwrap();
            let e = rel_err(&ours, &candle_ref(&w, &x.squeeze(0).unwrap()));
            assert!(e <= DECODE_TOL, "{dtype:?} m={m}: rel err {e:e}");
        }
    }
}

#[test]
fn a_row_does_not_depend_on_its_batch() {
    // 300 rows in one call (packed tiles of 8 or 4) vs the same rows one at a time: bit-identical
    for (isa, dtype) in
        isas().into_iter().flat_map(|i| DECODE_TYPES.into_iter().chain(K_QUANT_TYPES).map(move |d| (i, d)))
    {
        let (n, k) = (67, if K_QUANT_TYPES.contains(&dtype) { 512 } else { 576 });
        let w = quantized(n, k, dtype, 77);
        let fast = FastQMatMul::with_plan(w.clone(), isa, Plan::for_weight(dtype)).unwrap();
        let x = tensor(300, k, 78);
        let all: Vec<f32> = fast.forward(&x).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        for r in 0..300 {
            let one: Vec<f32> =
                fast.forward(&x.narrow(0, r, 1).unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            for (j, (a, b)) in one.iter().zip(&all[r * n..(r + 1) * n]).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{isa:?} {dtype:?} row {r} col {j}");
            }
        }
    }
}

#[test]
fn plan_paths_and_fallbacks() {
    let isa = isas()[0];
    let p = Plan { decode_below: 4 };
    assert_eq!((p.path(1), p.path(4)), (Path::Decode, Path::Candle));
    // unsupported types get no fast path at all
    let w = quantized(8, 64, GgmlDType::Q8_1, 1);
    assert!(FastQMatMul::with_plan(w, isa, Plan { decode_below: 8 }).is_none());
    assert_eq!(Plan::for_weight(GgmlDType::Q4_0).path(1), Path::Candle);
    // the int8 path at every m, a vocabulary-sized head included
    for dtype in DECODE_TYPES.into_iter().chain(K_QUANT_TYPES) {
        assert_eq!((Plan::for_weight(dtype).path(1), Plan::for_weight(dtype).path(4096)), (Path::Decode, Path::Decode));
    }
    // dense weights stay with candle
    let dense = QMatMul::Tensor(tensor(8, 64, 1));
    assert!(FastQMatMul::new(&dense).is_none());
}

#[test]
fn kill_switch_setting() {
    let det = Some(Isa::AvxVnni);
    assert_eq!(isa_from_setting(None, det), det);
    assert_eq!(isa_from_setting(Some("1"), det), det);
    assert_eq!(isa_from_setting(Some("0"), det), None);
    assert_eq!(isa_from_setting(Some("off"), det), None);
    assert_eq!(isa_from_setting(Some("avx2"), det), Some(Isa::Avx2));
    assert_eq!(isa_from_setting(None, None), None);
}

/// End-to-end check on a real model (needs the cached GGUF): run twice, with `HEARTH_FAST_QUANT=0` and without,
/// each with `KERNELS_DUMP=/path.json`, and compare the dumps (single-pass and chunked last-position logits;
/// `KERNELS_CHUNK=1` feeds the prompt one token at a time, as decoding does).
/// `cargo test -p hearth-engine --lib cpu_matmul::tests::dump_model_logits -- --ignored`
#[test]
#[ignore]
fn dump_model_logits() {
    use crate::attention::ContiguousKv;
    use crate::generate::forward_one;
    use crate::loader::load;
    let alias = std::env::var("KERNELS_MODEL").unwrap_or_else(|_| "smollm2-135m".into());
    let m = load(&alias, &Device::Cpu, None).unwrap();
    let ids = m
        .tokenizer
        .encode(
            "The quick brown fox jumps over the lazy dog. "
                .repeat(std::env::var("KERNELS_REPEAT").ok().and_then(|s| s.parse().ok()).unwrap_or(6))
                .as_str(),
            true,
        )
        .unwrap();
    let n = m.model.config().num_layers;
    let mut kv = ContiguousKv::new(n, ids.len());
    let one = forward_one(m.model.as_ref(), &mut kv, 0, &ids, 0, false, &Device::Cpu).unwrap().pop().unwrap();
    let mut kv = ContiguousKv::new(n, ids.len());
    let mut chunked = Vec::new();
    let mut pos = 0;
    let chunk = std::env::var("KERNELS_CHUNK").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
    for c in ids.chunks(chunk) {
        chunked = forward_one(m.model.as_ref(), &mut kv, 0, c, pos, false, &Device::Cpu).unwrap().pop().unwrap();
        pos += c.len();
    }
    let max = one.iter().zip(&chunked).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    eprintln!("{alias}: {} prompt tokens, isa {:?}, chunked vs single-pass max diff {max}", ids.len(), active_isa());
    if let Ok(path) = std::env::var("KERNELS_DUMP") {
        let json = serde_json::json!({ "single": one, "chunked": chunked });
        std::fs::write(path, json.to_string()).unwrap();
    }
}

/// Every k-quant and 32-block tensor of a real GGUF (`KERNELS_GGUF=/path.gguf`) through the int8 path against
/// candle, at m = 1 and 5. `cargo test -p hearth-engine --lib cpu_matmul::tests::real_weights -- --ignored`
#[test]
#[ignore]
fn real_weights_match_candle() {
    let path = std::env::var("KERNELS_GGUF").expect("KERNELS_GGUF=/path/to/model.gguf");
    let mut file = std::fs::File::open(&path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
    let mut worst = 0f32;
    for (name, info) in &content.tensor_infos {
        if !decode_supported(info.ggml_dtype) || info.shape.dims().len() != 2 || name.contains("token_embd") {
            continue;
        }
        let w = Arc::new(content.tensor(&mut file, name, &Device::Cpu).unwrap());
        let (_, k) = w.shape().dims2().unwrap();
        for m in [1, 5] {
            let x = tensor(m, k, name.len() as u64 + m as u64);
            let e = rel_err(&ours_decode(&w, Isa::Avx2, &x), &candle_ref(&w, &x));
            worst = worst.max(e);
            assert!(e <= DECODE_TOL, "{name} {:?} m={m}: rel err {e:e}", info.ggml_dtype);
        }
    }
    eprintln!("{path}: worst rel err {worst:e}");
}

#[test]
fn stacked_weights_give_each_part_bit_identically() {
    // The CPU's fused q|k|v and gate|up: parts of one type stacked row-wise (their bytes one after another) must
    // give exactly the outputs of the separate matmuls, on the serving engine's row-independent path.
    for dtype in DECODE_TYPES.into_iter().chain(K_QUANT_TYPES) {
        let k = 512;
        let parts: Vec<Arc<QTensor>> =
            [64, 24, 40].iter().enumerate().map(|(i, &n)| quantized(n, k, dtype, 50 + i as u64)).collect();
        let bytes: Vec<u8> = parts.iter().flat_map(|q| q.data().unwrap().into_owned()).collect();
        let storage = QStorage::from_data(Cow::Owned(bytes), &Device::Cpu, dtype).unwrap();
        let stacked = QMatMul::QTensor(Arc::new(QTensor::new(storage, (128, k)).unwrap()));
        let fused = FastQMatMul::new(&stacked).unwrap();
        for m in [1, 3, 64] {
            let x = tensor(m, k, 60 + m as u64);
            let y = fused.forward(&x).unwrap();
            let mut col = 0;
            for q in &parts {
                let n = q.shape().dims2().unwrap().0;
                let alone = FastQMatMul::new(&QMatMul::QTensor(q.clone())).unwrap().forward(&x).unwrap();
                let a: Vec<f32> = alone.flatten_all().unwrap().to_vec1().unwrap();
                let b: Vec<f32> = y.narrow(1, col, n).unwrap().flatten_all().unwrap().to_vec1().unwrap();
                assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()), "{dtype:?} m={m} part at {col}");
                col += n;
            }
        }
    }
}
