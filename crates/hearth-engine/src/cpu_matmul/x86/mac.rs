//! The int8 dot products of the 32-value block kernels, one form per instruction set: AVX2 (`vpmaddubsw` +
//! `vpmaddwd`), AVX-VNNI (VEX `vpdpbusd`) and AVX512-VNNI (the same 256-bit `vpdpbusd`, EVEX-encoded). Each block's
//! sum is an exact i32 in every form.

use core::arch::x86_64::*;

/// u8 × i8 dot products of 4-byte groups added to i32 lanes.
pub trait Mac {
    /// Activation rows per tile of the 32-value block kernel (AVX-512 has 32 vector registers, AVX2 16).
    const MR: usize;
    /// Whether `dot_us` is one instruction (`vpdpbusd`); the AVX2 form takes three.
    const INT8_DOT: bool;
    /// init + Σ_{4 bytes} u·s (u unsigned, s signed; |u| <= 31 so the AVX2 i16 step cannot saturate).
    unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i;
    /// A signed weight vector (Q8_0) in the form [`Mac::dot_ss`] takes.
    unsafe fn prep_ss(w: __m256i) -> __m256i;
    /// acc + Σ_{4 bytes} w·y for signed w (as [`Mac::prep_ss`] left it) and y; the +128 offset the VNNI forms
    /// give w is corrected by the activation block's `corr`.
    unsafe fn dot_ss(acc: __m256i, w: __m256i, y: __m256i) -> __m256i;
}

pub struct Avx2;
pub struct Vnni;
pub struct Vnni512;

impl Mac for Avx2 {
    const MR: usize = 4;
    const INT8_DOT: bool = false;
    #[inline(always)]
    unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i {
        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
        _mm256_add_epi32(init, p)
    }
    #[inline(always)]
    unsafe fn prep_ss(w: __m256i) -> __m256i {
        w
    }
    #[inline(always)]
    unsafe fn dot_ss(acc: __m256i, w: __m256i, y: __m256i) -> __m256i {
        // |w|·(y·sign(w)): |w| <= 128 and |y| <= 127, so pairs stay within i16.
        let aw = _mm256_sign_epi8(w, w);
        let sy = _mm256_sign_epi8(y, w);
        Self::dot_us(acc, aw, sy)
    }
}

impl Mac for Vnni {
    const MR: usize = 4;
    const INT8_DOT: bool = true;
    #[inline(always)]
    unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(init, u, s)
    }
    #[inline(always)]
    unsafe fn prep_ss(w: __m256i) -> __m256i {
        // (w + 128) as u8; corr = -128·Σy takes the offset back out
        _mm256_xor_si256(w, _mm256_set1_epi8(-128i8))
    }
    #[inline(always)]
    unsafe fn dot_ss(acc: __m256i, w: __m256i, y: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(acc, w, y)
    }
}

impl Mac for Vnni512 {
    const MR: usize = 8;
    const INT8_DOT: bool = true;
    #[inline(always)]
    unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(init, u, s)
    }
    #[inline(always)]
    unsafe fn prep_ss(w: __m256i) -> __m256i {
        _mm256_xor_si256(w, _mm256_set1_epi8(-128i8))
    }
    #[inline(always)]
    unsafe fn dot_ss(acc: __m256i, w: __m256i, y: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, w, y)
    }
}
