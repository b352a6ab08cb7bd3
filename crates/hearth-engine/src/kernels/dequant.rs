//! Weight dequantization to f32 for the prefill path, parallel over rows. Q4_1, Q5_0 and Q8_0 have AVX2
//! loops that produce exactly candle's `to_float` values (same operations, no fused multiply-add); the other
//! types call candle's `GgmlType::to_float` on row ranges.

use super::{par_chunks, Isa, Pool};
use crate::{Error, Result};
use candle_core::quantized::k_quants::{self, GgmlType};
use candle_core::quantized::GgmlDType;

/// Output rows per parallel chunk (~64 KiB of f32 output).
fn grain(k: usize) -> usize {
    (16 * 1024 / k.max(1)).max(1)
}

struct OutPtr(*mut f32);
unsafe impl Sync for OutPtr {}
unsafe impl Send for OutPtr {}

/// Row length of the dequantized W: k, or k + k/32 with `split_min`.
pub fn row_len(k: usize, split_min: bool) -> usize {
    if split_min {
        k + k / 32
    } else {
        k
    }
}

/// W (n, k) as f32 rows, in a new buffer (see [`dequantize_into`]).
pub fn dequantize(dtype: GgmlDType, isa: Isa, w: &[u8], n: usize, k: usize, split_min: bool) -> Result<Vec<f32>> {
    let mut out = vec![0f32; n * row_len(k, split_min)];
    dequantize_into(dtype, isa, w, n, k, split_min, &mut out)?;
    Ok(out)
}

/// W (n, k) as f32 rows into `out` (n · row_len values). With `split_min` (Q4_1 only) each row is
/// `k + k/32` long: the values without the block minimum (q·d), then the k/32 block minima m, so that
/// `[x', s] · row` reproduces Σ_b d·Σq·x' + m·s.
pub fn dequantize_into(
    dtype: GgmlDType,
    isa: Isa,
    w: &[u8],
    n: usize,
    k: usize,
    split_min: bool,
    out: &mut [f32],
) -> Result<()> {
    let bs = dtype.block_size();
    let ts = dtype.type_size();
    if !k.is_multiple_of(bs) || w.len() != n * (k / bs) * ts {
        return Err(Error::InvalidModel(format!("{dtype:?} weight of {} bytes for {n}x{k}", w.len())));
    }
    if split_min && dtype != GgmlDType::Q4_1 {
        return Err(Error::Unsupported(format!("split_min dequantization of {dtype:?}")));
    }
    if out.len() != n * row_len(k, split_min) {
        return Err(Error::InvalidRequest(format!("dequantize_into: {} output values for {n}x{k}", out.len())));
    }
    let row_bytes = (k / bs) * ts;
    let ks = row_len(k, split_min);
    let ptr = OutPtr(out.as_mut_ptr());
    let run = |rows: std::ops::Range<usize>, f: &(dyn Fn(&[u8], &mut [f32]) + Sync)| {
        let ptr = &ptr;
        // SAFETY: chunks are disjoint row ranges of `out` (n*ks values).
        let dst = unsafe { std::slice::from_raw_parts_mut(ptr.0.add(rows.start * ks), rows.len() * ks) };
        f(&w[rows.start * row_bytes..rows.end * row_bytes], dst)
    };
    macro_rules! generic {
        ($t:ty) => {{
            if std::mem::size_of::<$t>() != ts {
                return Err(Error::Unsupported(format!("{dtype:?} block size mismatch")));
            }
            par_chunks(Pool::Rayon, n, grain(k), |rows| run(rows, &|src, dst| to_float::<$t>(src, dst)))
        }};
    }
    match dtype {
        #[cfg(target_arch = "x86_64")]
        GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q8_0 => {
            let _ = isa; // every Isa includes AVX2
            par_chunks(Pool::Rayon, n, grain(k), |rows| {
                run(rows, &|src, dst| unsafe { x86::dequant_avx2(dtype, src, dst, k / 32, split_min) })
            })
        }
        #[cfg(not(target_arch = "x86_64"))]
        GgmlDType::Q4_1 => generic!(k_quants::BlockQ4_1),
        #[cfg(not(target_arch = "x86_64"))]
        GgmlDType::Q5_0 => generic!(k_quants::BlockQ5_0),
        #[cfg(not(target_arch = "x86_64"))]
        GgmlDType::Q8_0 => generic!(k_quants::BlockQ8_0),
        GgmlDType::Q4_0 => generic!(k_quants::BlockQ4_0),
        GgmlDType::Q5_1 => generic!(k_quants::BlockQ5_1),
        GgmlDType::Q2K => generic!(k_quants::BlockQ2K),
        GgmlDType::Q3K => generic!(k_quants::BlockQ3K),
        GgmlDType::Q4K => generic!(k_quants::BlockQ4K),
        GgmlDType::Q5K => generic!(k_quants::BlockQ5K),
        GgmlDType::Q6K => generic!(k_quants::BlockQ6K),
        other => return Err(Error::Unsupported(format!("fast dequantize for {other:?}"))),
    }
    Ok(())
}

fn to_float<T: GgmlType>(src: &[u8], dst: &mut [f32]) {
    let sz = std::mem::size_of::<T>();
    assert_eq!(src.len() % sz, 0);
    assert_eq!(src.as_ptr() as usize % std::mem::align_of::<T>(), 0, "misaligned quantized weight");
    // SAFETY: candle's block types are plain repr(C) data; size and alignment checked above.
    let blocks = unsafe { std::slice::from_raw_parts(src.as_ptr() as *const T, src.len() / sz) };
    T::to_float(blocks, dst);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use core::arch::x86_64::*;

    #[inline(always)]
    unsafe fn f16_at(p: *const u8) -> f32 {
        let h = std::ptr::read_unaligned(p as *const u16);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
    }

    /// 32 signed bytes (as two halves) -> 4×8 f32 of q·d (+ m), stored at dst.
    #[inline(always)]
    unsafe fn store_i8x32(lo: __m128i, hi: __m128i, d: __m256, m: Option<__m256>, dst: *mut f32) {
        let parts = [lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)];
        for (i, p) in parts.into_iter().enumerate() {
            let f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(p)), d);
            let f = match m {
                Some(m) => _mm256_add_ps(f, m),
                None => f,
            };
            _mm256_storeu_ps(dst.add(8 * i), f);
        }
    }

    /// # Safety
    /// AVX2+FMA+F16C; `src` holds whole rows of `nb` blocks of `dtype`, `dst` the matching rows of 32·nb values
    /// (plus nb minima per row with `split_min`, Q4_1 only).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dequant_avx2(dtype: GgmlDType, src: &[u8], dst: &mut [f32], nb: usize, split_min: bool) {
        let mask = _mm_set1_epi8(0x0f);
        let d = dst.as_mut_ptr();
        match dtype {
            GgmlDType::Q4_1 => {
                let ks = 32 * nb + if split_min { nb } else { 0 };
                for (i, blk) in src.chunks_exact(20).enumerate() {
                    let (r, b) = (i / nb, i % nb);
                    let p = blk.as_ptr();
                    let q = _mm_loadu_si128(p.add(4) as *const __m128i);
                    let lo = _mm_and_si128(q, mask);
                    let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), mask);
                    let dv = _mm256_set1_ps(f16_at(p));
                    let row = d.add(r * ks);
                    if split_min {
                        store_i8x32(lo, hi, dv, None, row.add(32 * b));
                        *row.add(32 * nb + b) = f16_at(p.add(2));
                    } else {
                        store_i8x32(lo, hi, dv, Some(_mm256_set1_ps(f16_at(p.add(2)))), row.add(32 * b));
                    }
                }
            }
            GgmlDType::Q5_0 => {
                let shuf = _mm_set_epi64x(0x0101010101010101, 0);
                let sel = _mm_set1_epi64x(0x7fbfdfeff7fbfdfe);
                let ones = _mm_set1_epi64x(-1);
                let sixteen = _mm_set1_epi8(16);
                for (b, blk) in src.chunks_exact(22).enumerate() {
                    let p = blk.as_ptr();
                    let qh = std::ptr::read_unaligned(p.add(2) as *const u32);
                    let q = _mm_loadu_si128(p.add(6) as *const __m128i);
                    // bits 0..16 -> bytes of lo, bits 16..32 -> bytes of hi
                    let bits_lo =
                        _mm_cmpeq_epi8(_mm_or_si128(_mm_shuffle_epi8(_mm_set1_epi32(qh as i32), shuf), sel), ones);
                    let bits_hi = _mm_cmpeq_epi8(
                        _mm_or_si128(_mm_shuffle_epi8(_mm_set1_epi32((qh >> 16) as i32), shuf), sel),
                        ones,
                    );
                    let lo = _mm_or_si128(_mm_and_si128(q, mask), _mm_and_si128(bits_lo, sixteen));
                    let hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi16::<4>(q), mask), _mm_and_si128(bits_hi, sixteen));
                    let lo = _mm_sub_epi8(lo, sixteen);
                    let hi = _mm_sub_epi8(hi, sixteen);
                    store_i8x32(lo, hi, _mm256_set1_ps(f16_at(p)), None, d.add(32 * b));
                }
            }
            GgmlDType::Q8_0 => {
                for (b, blk) in src.chunks_exact(34).enumerate() {
                    let p = blk.as_ptr();
                    let lo = _mm_loadu_si128(p.add(2) as *const __m128i);
                    let hi = _mm_loadu_si128(p.add(18) as *const __m128i);
                    store_i8x32(lo, hi, _mm256_set1_ps(f16_at(p)), None, d.add(32 * b));
                }
            }
            _ => unreachable!(),
        }
    }
}
