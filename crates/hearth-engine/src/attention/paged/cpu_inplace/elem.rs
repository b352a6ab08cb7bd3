//! The KV cache's row encodings as the kernels read them (f32; f16 under `HEARTH_CPU_KV_F16`; q8_0 bytes under
//! `--kv-cache-dtype q8_0`): widened to f32 on load, so every sum runs in f32 whatever the cache keeps.

use crate::kv::encoding::{q8_value, Q8_BLOCK};

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

/// A q8_0 head row's bytes (`crate::kv::encoding`): d int8 values, then an f16 scale per [`Q8_BLOCK`] values.
impl KvElem for u8 {
    fn units(d: usize) -> usize {
        crate::kv::KvEncoding::Q8_0.head_units(d)
    }
    #[inline(always)]
    fn get(row: &[u8], i: usize, d: usize) -> f32 {
        q8_value(row, i, d)
    }
    const RUN: usize = Q8_BLOCK;
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scale8(row: *const u8, c: usize, d: usize) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        let bits = row.add(d + 2 * (c / Q8_BLOCK)).cast::<u16>().read_unaligned();
        _mm256_cvtph_ps(_mm_set1_epi16(bits as i16))
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8_scaled(row: *const u8, c: usize, scale: core::arch::x86_64::__m256) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(row.add(c).cast::<__m128i>())));
        _mm256_mul_ps(q, scale)
    }
}
