//! Packing: 8 weight rows' blocks unpacked to bytes and transposed so that each vector lane is one weight row.

use super::formats::Kind;
use super::mac::Mac;
use core::arch::x86_64::*;
use std::cell::RefCell;

/// One block of 8 weight rows, transposed for the lanes-are-rows kernel: `w[g]` holds the 4 bytes
/// `4g..4g+4` of each of the 8 rows (lane i = row i), in the form the `Mac` expects; `d` and `m` are the rows'
/// scales and mins (zero for the types without one).
#[repr(C, align(32))]
#[derive(Clone, Copy)]
pub(crate) struct Packed {
    pub(super) w: [__m256i; 8],
    pub(super) d: __m256,
    pub(super) m: __m256,
}

thread_local! {
    /// This thread's packed group (grown to the widest matrix it has run).
    pub(super) static PACK: RefCell<Vec<Packed>> = const { RefCell::new(Vec::new()) };
}

/// The 8×8 transpose of 32-bit lanes: lane i of result g is lane g of `a[i]`.
#[inline(always)]
pub(crate) unsafe fn transpose8(a: [__m256i; 8]) -> [__m256i; 8] {
    let t0 = _mm256_unpacklo_epi32(a[0], a[1]);
    let t1 = _mm256_unpackhi_epi32(a[0], a[1]);
    let t2 = _mm256_unpacklo_epi32(a[2], a[3]);
    let t3 = _mm256_unpackhi_epi32(a[2], a[3]);
    let t4 = _mm256_unpacklo_epi32(a[4], a[5]);
    let t5 = _mm256_unpackhi_epi32(a[4], a[5]);
    let t6 = _mm256_unpacklo_epi32(a[6], a[7]);
    let t7 = _mm256_unpackhi_epi32(a[6], a[7]);
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    [
        _mm256_permute2x128_si256::<0x20>(u0, u4),
        _mm256_permute2x128_si256::<0x20>(u1, u5),
        _mm256_permute2x128_si256::<0x20>(u2, u6),
        _mm256_permute2x128_si256::<0x20>(u3, u7),
        _mm256_permute2x128_si256::<0x31>(u0, u4),
        _mm256_permute2x128_si256::<0x31>(u1, u5),
        _mm256_permute2x128_si256::<0x31>(u2, u6),
        _mm256_permute2x128_si256::<0x31>(u3, u7),
    ]
}

/// The f16 at byte `at` of each of 8 blocks, as f32 lanes.
#[inline(always)]
pub(crate) unsafe fn f16x8(p: &[*const u8; 8], at: usize) -> __m256 {
    let h = |i: usize| std::ptr::read_unaligned(p[i].add(at) as *const i16);
    _mm256_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7)))
}

/// Block b of 8 weight rows, unpacked and transposed.
#[inline(always)]
pub(super) unsafe fn unpack8<K: Kind, M: Mac>(rows: &[*const u8; 8], b: usize) -> Packed {
    let mut p = *rows;
    let mut w = [_mm256_setzero_si256(); 8];
    for i in 0..8 {
        p[i] = rows[i].add(b * K::BYTES);
        w[i] = K::prep::<M>(K::load(p[i]));
    }
    let d = f16x8(&p, K::D_AT);
    let m = if K::HAS_MIN { f16x8(&p, K::M_AT) } else { _mm256_setzero_ps() };
    Packed { w: transpose8(w), d, m }
}

/// Pointers to activation rows `r..r + MR` of x (nb blocks a row).
#[inline(always)]
pub(crate) unsafe fn act_rows<X, const MR: usize>(x: *const X, r: usize, nb: usize) -> [*const X; MR] {
    let mut xs = [x; MR];
    for (i, p) in xs.iter_mut().enumerate() {
        *p = x.add((r + i) * nb);
    }
    xs
}

/// The first `valid` lanes of `v[i]` (activation row `r + i` against a group of 8 weight rows) to
/// `dst[(r + i) · n..]`.
#[inline(always)]
pub(crate) unsafe fn store_lanes<const MR: usize>(v: [__m256; MR], dst: *mut f32, r: usize, n: usize, valid: usize) {
    for (i, v) in v.into_iter().enumerate() {
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), v);
        std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst.add((r + i) * n), valid);
    }
}
