//! The 32-value weight block formats (Q4_1, Q5_0, Q8_0): where a block's scale, min and values are, and how its
//! values meet the activation's in a [`Mac`] form.

use super::mac::Mac;
use core::arch::x86_64::*;

/// 16 packed nibbles -> 32 bytes: low nibbles (values 0..16) then high nibbles (16..32).
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p as *const __m128i);
    let b = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(q), _mm_srli_epi16::<4>(q));
    _mm256_and_si256(b, _mm256_set1_epi8(0x0f))
}

/// 32 bits -> 32 bytes, 0xFF where the bit is set.
#[inline(always)]
unsafe fn bits_to_bytes(bits: u32) -> __m256i {
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let b = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuf);
    let sel = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(b, sel), _mm256_set1_epi64x(-1))
}

pub trait Kind {
    const BYTES: usize;
    const HAS_MIN: bool;
    /// Byte offsets of the block's f16 scale d and (where `HAS_MIN`) min m.
    const D_AT: usize = 0;
    const M_AT: usize = 2;
    /// One activation row reads any matrix two weight rows at a time (`blocks32::row_pair`), not only those
    /// beyond the caches (`HEARTH_Q8_ROW_PAIRS`): Q8_0, whose bytes need no unpacking, so the 8-row kernel's
    /// transposition costs more than it saves.
    const ROW_PAIRS: bool = false;
    /// The block's values, one per byte (value i in byte i).
    unsafe fn load(p: *const u8) -> __m256i;
    /// The loaded bytes in the form [`Kind::dot`] takes.
    unsafe fn prep<M: Mac>(w: __m256i) -> __m256i;
    /// acc + Σ_{4 bytes} w·y (before the activation block's `corr`).
    unsafe fn dot<M: Mac>(acc: __m256i, w: __m256i, y: __m256i) -> __m256i;
}

pub struct KQ4_1;
pub struct KQ5_0;
pub struct KQ8_0;

impl Kind for KQ4_1 {
    const BYTES: usize = 20;
    const HAS_MIN: bool = true;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        nibbles(p.add(4))
    }
    #[inline(always)]
    unsafe fn prep<M: Mac>(w: __m256i) -> __m256i {
        w
    }
    #[inline(always)]
    unsafe fn dot<M: Mac>(acc: __m256i, w: __m256i, y: __m256i) -> __m256i {
        M::dot_us(acc, w, y)
    }
}

impl Kind for KQ5_0 {
    const BYTES: usize = 22;
    const HAS_MIN: bool = false;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        let qh = std::ptr::read_unaligned(p.add(2) as *const u32);
        let hi = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles(p.add(6)), hi)
    }
    #[inline(always)]
    unsafe fn prep<M: Mac>(w: __m256i) -> __m256i {
        w
    }
    #[inline(always)]
    unsafe fn dot<M: Mac>(acc: __m256i, w: __m256i, y: __m256i) -> __m256i {
        // Σ (q - 16)·y = Σ q·y - 16·Σ y; corr holds -16·Σ y
        M::dot_us(acc, w, y)
    }
}

impl Kind for KQ8_0 {
    const BYTES: usize = 34;
    const HAS_MIN: bool = false;
    const ROW_PAIRS: bool = true;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        _mm256_loadu_si256(p.add(2) as *const __m256i)
    }
    #[inline(always)]
    unsafe fn prep<M: Mac>(w: __m256i) -> __m256i {
        M::prep_ss(w)
    }
    #[inline(always)]
    unsafe fn dot<M: Mac>(acc: __m256i, w: __m256i, y: __m256i) -> __m256i {
        M::dot_ss(acc, w, y)
    }
}
