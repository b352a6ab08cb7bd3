//! Activation quantization: each 32-value block of a row of x becomes int8 values with an f16 scale, exactly as
//! candle's `BlockQ8_0::from_float` / `BlockQ8_1::from_float` compute them (same `d`, same rounding, same `s`),
//! plus per-lane sums that the kernels use to fold weight offsets into exact integer arithmetic.

use half::f16;

pub const QK: usize = 32;

/// One quantized block of activations.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct XBlock {
    /// round(x / d), with d = amax / 127 (Q8_0 and Q8_1 agree).
    pub qs: [i8; QK],
    /// `-corr_mult * Σ qs`: the exact correction for weights stored with an unsigned offset (Q5_0: 16; Q8_0 on
    /// VNNI: 128). Zero when unused.
    pub corr: i32,
    /// d, rounded to f16 (as stored in the block).
    pub d: f32,
    /// Q8_1's `s`: f16(f16(Σqs) · d_f16), as candle computes it.
    pub s: f32,
}

impl XBlock {
    pub const ZERO: XBlock = XBlock { qs: [0; QK], corr: 0, d: 0.0, s: 0.0 };
}

/// Scalar reference (and the non-x86 path): bit-identical to candle's Q8_1 `from_float`.
pub fn quantize_block_scalar(x: &[f32], corr_mult: i32) -> XBlock {
    debug_assert_eq!(x.len(), QK);
    let mut amax = 0f32;
    for &v in x {
        amax = amax.max(v.abs());
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let dh = f16::from_f32(d);
    let mut b = XBlock::ZERO;
    let mut sum = 0i32;
    for (j, &v) in x.iter().enumerate() {
        let q = (v * id).round() as i8;
        b.qs[j] = q;
        sum += q as i32;
    }
    b.corr = -corr_mult * sum;
    b.d = dh.to_f32();
    b.s = (f16::from_f32(sum as f32) * dh).to_f32();
    b
}

/// Values per k-quant super-block.
pub const QK_K: usize = 256;

/// One super-block of activations quantized for the k-quant weights, as candle's `BlockQ8K` (ggml's Q8_K).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct XBlockK {
    /// round(x / d), with d = -max / 127 for the value `max` of largest magnitude.
    pub qs: [i8; QK_K],
    /// Σ qs over each 16 values.
    pub bsums: [i16; QK_K / 16],
    /// The scale, in f32.
    pub d: f32,
}

impl XBlockK {
    pub const ZERO: XBlockK = XBlockK { qs: [0; QK_K], bsums: [0; QK_K / 16], d: 0.0 };
}

/// Quantize `x` (a multiple of 256 values) into `out`: bit-identical to candle's `BlockQ8K::from_float` (AVX2
/// where the CPU has it, plain loops otherwise; the two give the same bits).
pub fn quantize_row_k(x: &[f32], out: &mut [XBlockK]) {
    #[cfg(target_arch = "x86_64")]
    if super::isa_supported(super::Isa::Avx2) {
        // SAFETY: AVX2+FMA+F16C were detected.
        unsafe { x86::quantize_row_k_avx2(x, out) };
        return;
    }
    quantize_row_k_scalar(x, out)
}

/// The plain-loop [`quantize_row_k`].
pub fn quantize_row_k_scalar(x: &[f32], out: &mut [XBlockK]) {
    debug_assert_eq!(x.len(), out.len() * QK_K);
    for (xs, o) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
        let (mut max, mut amax) = (0f32, 0f32);
        for &v in xs {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *o = XBlockK::ZERO;
            continue;
        }
        let iscale = -127f32 / max;
        for (q, &v) in o.qs.iter_mut().zip(xs) {
            *q = (iscale * v).round().clamp(-128.0, 127.0) as i8;
        }
        for (s, qs) in o.bsums.iter_mut().zip(o.qs.chunks_exact(16)) {
            *s = qs.iter().map(|&q| q as i16).sum();
        }
        o.d = 1.0 / iscale;
    }
}

/// Quantize `m` rows of `k` values (k a multiple of 32) into `out` (m * k/32 blocks).
pub fn quantize_rows(x: &[f32], out: &mut [XBlock], corr_mult: i32, simd: bool) {
    debug_assert_eq!(x.len(), out.len() * QK);
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: callers pass simd=true only when AVX2+FMA+F16C were detected.
        unsafe { x86::quantize_rows_avx2(x, out, corr_mult) };
        return;
    }
    let _ = simd;
    for (xb, o) in x.chunks_exact(QK).zip(out.iter_mut()) {
        *o = quantize_block_scalar(xb, corr_mult);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use core::arch::x86_64::*;

    /// f32::round (half away from zero), exactly: trunc(p) + copysign(1, p) where |p - trunc(p)| >= 0.5.
    #[inline(always)]
    unsafe fn round_away(p: __m256) -> __m256 {
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
        let frac = _mm256_sub_ps(p, t); // exact
        let absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let ge_half = _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_and_ps(frac, absmask), _mm256_set1_ps(0.5));
        let one_signed = _mm256_or_ps(_mm256_andnot_ps(absmask, p), _mm256_set1_ps(1.0));
        _mm256_add_ps(t, _mm256_and_ps(ge_half, one_signed))
    }

    /// [`super::quantize_row_k_scalar`] with the maximum search and the rounding vectorized: the largest
    /// magnitude (NaN never wins, as in the scalar comparison), the first value that has it, the same product
    /// `iscale·v` per value, rounded half away from zero exactly; a NaN product becomes 0 as Rust's `as i8` makes it.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn quantize_row_k_avx2(x: &[f32], out: &mut [XBlockK]) {
        debug_assert_eq!(x.len(), out.len() * QK_K);
        let absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (xs, o) in x.chunks_exact(QK_K).zip(out.iter_mut()) {
            let p = xs.as_ptr();
            let mut mx = _mm256_setzero_ps();
            for i in (0..QK_K).step_by(8) {
                // max(a, b) returns b when either is NaN: a NaN value never replaces the running maximum
                mx = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(p.add(i)), absmask), mx);
            }
            let m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps::<1>(mx));
            let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
            if amax == 0.0 {
                *o = XBlockK::ZERO;
                continue;
            }
            let Some(&max) = xs.iter().find(|v| v.abs() == amax) else {
                *o = XBlockK::ZERO; // unreachable: amax is one of the values' magnitudes
                continue;
            };
            let iscale = -127f32 / max;
            let iv = _mm256_set1_ps(iscale);
            let (lo, hi) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
            for i in (0..QK_K).step_by(32) {
                let q: [__m256i; 4] = std::array::from_fn(|j| {
                    let y = _mm256_mul_ps(iv, _mm256_loadu_ps(p.add(i + 8 * j)));
                    let y = _mm256_and_ps(y, _mm256_cmp_ps::<_CMP_ORD_Q>(y, y)); // NaN -> 0
                    _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(round_away(y), lo), hi))
                });
                let a = _mm256_packs_epi32(q[0], q[1]);
                let b = _mm256_packs_epi32(q[2], q[3]);
                let q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), perm);
                _mm256_storeu_si256(o.qs.as_mut_ptr().add(i) as *mut __m256i, q8);
            }
            for (s, qs) in o.bsums.iter_mut().zip(o.qs.chunks_exact(16)) {
                *s = qs.iter().map(|&q| q as i16).sum();
            }
            o.d = 1.0 / iscale;
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn quantize_rows_avx2(x: &[f32], out: &mut [XBlock], corr_mult: i32) {
        let absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let ones_u8 = _mm256_set1_epi8(1);
        let ones_i16 = _mm256_set1_epi16(1);
        let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (bi, o) in out.iter_mut().enumerate() {
            let p = x.as_ptr().add(bi * QK);
            let v0 = _mm256_loadu_ps(p);
            let v1 = _mm256_loadu_ps(p.add(8));
            let v2 = _mm256_loadu_ps(p.add(16));
            let v3 = _mm256_loadu_ps(p.add(24));
            let mx = _mm256_max_ps(
                _mm256_max_ps(_mm256_and_ps(v0, absmask), _mm256_and_ps(v1, absmask)),
                _mm256_max_ps(_mm256_and_ps(v2, absmask), _mm256_and_ps(v3, absmask)),
            );
            let m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps::<1>(mx));
            let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let m1 = _mm_max_ss(m2, _mm_movehdup_ps(m2));
            let amax = _mm_cvtss_f32(m1);
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let dh = f16::from_f32(d);
            let idv = _mm256_set1_ps(id);
            let i0 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v0, idv)));
            let i1 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v1, idv)));
            let i2 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v2, idv)));
            let i3 = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v3, idv)));
            // i32 -> i16 -> i8; the 128-bit-lane interleave of pack is undone by the permute.
            let a = _mm256_packs_epi32(i0, i1);
            let b = _mm256_packs_epi32(i2, i3);
            let q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), perm);
            _mm256_storeu_si256(o.qs.as_mut_ptr() as *mut __m256i, q);
            // lane sums of 4 consecutive values, then the total
            let lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(ones_u8, q), ones_i16);
            let l4 = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256::<1>(lanes));
            let l2 = _mm_add_epi32(l4, _mm_unpackhi_epi64(l4, l4));
            let l1 = _mm_add_epi32(l2, _mm_shuffle_epi32::<0b01>(l2));
            let sum = _mm_cvtsi128_si32(l1);
            o.corr = -corr_mult * sum;
            o.d = dh.to_f32();
            o.s = (f16::from_f32(sum as f32) * dh).to_f32();
        }
    }
}
