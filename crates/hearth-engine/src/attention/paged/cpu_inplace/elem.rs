//! The KV cache's row encodings as the kernels read them (f32; f16 under `HEARTH_CPU_KV_F16`; the quantized codes
//! of `--kv-cache-dtype`, whose bytes are viewed as [`Q8`], [`Q4`] or [`Lm`] units): widened to f32 on load, so
//! every sum runs in f32 whatever the cache keeps. A widened value is exactly the scalar decoder's
//! (`crate::kv::codec`): the same integer-to-float conversion or table entry, times the same scale.

use crate::kv::codec::{lm_value, q4_value, q8_value, Q4_BLOCK, Q8_BLOCK};

/// An element of the KV cache's buffers, read a head row at a time: value `c` of the row of `d` values at `row`,
/// widened to f32. A row is [`KvElem::units`] elements.
pub trait KvElem: Copy + Send + Sync + 'static {
    /// Elements of one head row of `d` values.
    fn units(d: usize) -> usize {
        d
    }
    /// Value `i` of the head row `row` (of `d` values).
    fn get(row: &[Self], i: usize, d: usize) -> f32;
    /// Values c..c+8 of the head row at `row` (of `d` values), widened.
    ///
    /// # Safety
    /// A whole head row must be readable at `row`, c + 8 <= d with c a multiple of 8, and the CPU must have AVX2
    /// and F16C.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(row: *const Self, c: usize, d: usize) -> core::arch::x86_64::__m256 {
        Self::load8_scaled(row, c, Self::scale8(row, c, d))
    }
    /// Values per scale (a kernel that walks a row in runs of this many fetches [`KvElem::scale8`] once a run).
    const RUN: usize = usize::MAX;
    /// The scale of the run holding value c of the head row at `row`, broadcast (unused by float rows).
    ///
    /// # Safety
    /// As [`KvElem::load8`].
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn scale8(_row: *const Self, _c: usize, _d: usize) -> core::arch::x86_64::__m256 {
        core::arch::x86_64::_mm256_setzero_ps()
    }
    /// [`KvElem::load8`] given its run's [`KvElem::scale8`]: the same bits.
    ///
    /// # Safety
    /// As [`KvElem::load8`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8_scaled(row: *const Self, c: usize, scale: core::arch::x86_64::__m256)
        -> core::arch::x86_64::__m256;
}

impl KvElem for f32 {
    #[inline(always)]
    fn get(row: &[f32], i: usize, _d: usize) -> f32 {
        row[i]
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx")]
    unsafe fn load8_scaled(row: *const f32, c: usize, _s: core::arch::x86_64::__m256) -> core::arch::x86_64::__m256 {
        core::arch::x86_64::_mm256_loadu_ps(row.add(c))
    }
}

impl KvElem for half::f16 {
    #[inline(always)]
    fn get(row: &[half::f16], i: usize, _d: usize) -> f32 {
        row[i].to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx,f16c")]
    unsafe fn load8_scaled(
        row: *const half::f16,
        c: usize,
        _s: core::arch::x86_64::__m256,
    ) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        _mm256_cvtph_ps(_mm_loadu_si128(row.add(c).cast::<__m128i>()))
    }
}

/// A byte of a q8_0 row: d int8 values, then an f16 scale per [`Q8_BLOCK`] values.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct Q8(pub u8);

/// A byte of a q4_0 row: d 4-bit codes, then an f16 scale per [`Q4_BLOCK`] values.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct Q4(pub u8);

/// A byte of a row of `B`-bit Lloyd–Max codes (B = 2, 3, 4), then its f16 scale.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct Lm<const B: usize>(pub u8);

/// Bytes viewed as the units of a quantized code.
pub fn units_of<T: Coded>(bytes: &[u8]) -> &[T] {
    // SAFETY: every `Coded` type is a `repr(transparent)` wrapper of one u8.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len()) }
}

/// A quantized code's byte unit (a `repr(transparent)` u8).
pub trait Coded: KvElem {}
impl Coded for Q8 {}
impl Coded for Q4 {}
impl<const B: usize> Coded for Lm<B> {}

fn bytes_of<T: Coded>(row: &[T]) -> &[u8] {
    // SAFETY: as `units_of`.
    unsafe { std::slice::from_raw_parts(row.as_ptr().cast::<u8>(), row.len()) }
}

/// The f16 at byte `at` of a row, broadcast as f32.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn f16_at(row: *const u8, at: usize) -> core::arch::x86_64::__m256 {
    use core::arch::x86_64::*;
    let bits = row.add(at).cast::<u16>().read_unaligned();
    _mm256_cvtph_ps(_mm_set1_epi16(bits as i16))
}

/// The `B`-bit codes of values c..c+8 (c a multiple of 8) of a packed row, one per lane.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn codes8<const B: usize>(row: *const u8, c: usize) -> core::arch::x86_64::__m256i {
    use core::arch::x86_64::*;
    // the B bytes of the group (and whatever follows them, masked off below: a row's scale bytes follow its codes)
    let w = row.add(c / 8 * B).cast::<u32>().read_unaligned();
    let b = B as i32;
    let shifts = _mm256_setr_epi32(0, b, 2 * b, 3 * b, 4 * b, 5 * b, 6 * b, 7 * b);
    _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w as i32), shifts), _mm256_set1_epi32((1 << B) - 1))
}

impl KvElem for Q8 {
    fn units(d: usize) -> usize {
        crate::kv::RowCode::Q8_0.units(d)
    }
    #[inline(always)]
    fn get(row: &[Q8], i: usize, d: usize) -> f32 {
        q8_value(bytes_of(row), i, d)
    }
    const RUN: usize = Q8_BLOCK;
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scale8(row: *const Q8, c: usize, d: usize) -> core::arch::x86_64::__m256 {
        f16_at(row.cast(), d + 2 * (c / Q8_BLOCK))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8_scaled(row: *const Q8, c: usize, scale: core::arch::x86_64::__m256) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(row.add(c).cast::<__m128i>())));
        _mm256_mul_ps(q, scale)
    }
}

impl KvElem for Q4 {
    fn units(d: usize) -> usize {
        crate::kv::RowCode::Q4_0.units(d)
    }
    #[inline(always)]
    fn get(row: &[Q4], i: usize, d: usize) -> f32 {
        q4_value(bytes_of(row), i, d)
    }
    const RUN: usize = Q4_BLOCK;
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scale8(row: *const Q4, c: usize, d: usize) -> core::arch::x86_64::__m256 {
        f16_at(row.cast(), d / 2 + 2 * (c / Q4_BLOCK))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8_scaled(row: *const Q4, c: usize, scale: core::arch::x86_64::__m256) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        let q = _mm256_sub_epi32(codes8::<4>(row.cast(), c), _mm256_set1_epi32(8));
        _mm256_mul_ps(_mm256_cvtepi32_ps(q), scale)
    }
}

/// A Lloyd–Max codebook in two halves of eight levels (the upper half used by 4-bit codes only).
#[cfg(target_arch = "x86_64")]
const fn halves<const B: usize>() -> [[f32; 8]; 2] {
    use crate::kv::codec::{LM2, LM3, LM4};
    match B {
        2 => [[LM2[0], LM2[1], LM2[2], LM2[3], 0.0, 0.0, 0.0, 0.0], [0.0; 8]],
        3 => [LM3, [0.0; 8]],
        _ => [
            [LM4[0], LM4[1], LM4[2], LM4[3], LM4[4], LM4[5], LM4[6], LM4[7]],
            [LM4[8], LM4[9], LM4[10], LM4[11], LM4[12], LM4[13], LM4[14], LM4[15]],
        ],
    }
}

impl<const B: usize> KvElem for Lm<B> {
    fn units(d: usize) -> usize {
        crate::kv::RowCode::LloydMax(B as u8).units(d)
    }
    #[inline(always)]
    fn get(row: &[Lm<B>], i: usize, d: usize) -> f32 {
        lm_value(bytes_of(row), i, d, B)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scale8(row: *const Lm<B>, _c: usize, d: usize) -> core::arch::x86_64::__m256 {
        f16_at(row.cast(), d * B / 8)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8_scaled(
        row: *const Lm<B>,
        c: usize,
        scale: core::arch::x86_64::__m256,
    ) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        let idx = codes8::<B>(row.cast(), c);
        let [lo, hi] = const { halves::<B>() };
        let mut v = _mm256_permutevar8x32_ps(_mm256_loadu_ps(lo.as_ptr()), idx);
        if B == 4 {
            // codes 8..15 from the upper half: bit 3 moved to the sign bit selects it
            let upper = _mm256_permutevar8x32_ps(_mm256_loadu_ps(hi.as_ptr()), idx);
            v = _mm256_blendv_ps(v, upper, _mm256_castsi256_ps(_mm256_slli_epi32::<28>(idx)));
        }
        _mm256_mul_ps(v, scale)
    }
}
