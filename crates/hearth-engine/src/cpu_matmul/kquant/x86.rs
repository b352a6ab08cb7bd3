//! The k-quant tile kernels: one weight row (or two) straight from its GGML super-blocks against a few
//! activation rows; the weight kinds ([`KKind`]) the packed kernel shares.

use super::*;
use crate::cpu_matmul::x86::{f16x8, TileKernel};
use crate::cpu_simd::{f16_at, hsum_i32};
use core::arch::x86_64::*;

/// What one super-block's 8 chunks share.
pub struct Prep {
    /// The scales as i16, in the layout the kind's `scales` shuffles from (both 128-bit halves alike).
    sc: [__m256i; 2],
    /// 16 i16: the coefficient of each 16-value activation sum in the offset term.
    off: __m256i,
    /// The factor of the scaled sum.
    d: f32,
    /// The factor of the offset term.
    f: f32,
}

/// The scalars of one super-block of 8 weight rows as the packed kernel takes them, lane i = row i: per 16
/// values the scale (`sc`), the offset coefficients of the activation's 16-value sums 2q and 2q + 1 as an i16
/// pair (`off`), and the factors `d` and `f` (as in [`Prep`]).
pub struct Scalars8 {
    pub sc: [__m256i; 16],
    pub off: [__m256i; 8],
    pub d: __m256,
    pub f: __m256,
}

/// The 8×16 byte transpose: column s (byte s of each of the 8 rows, row i in byte i) in the low (even s) or
/// high (odd s) 8 bytes of result s / 2. Only the first `COLS / 2` results are computed.
#[inline(always)]
unsafe fn transpose_bytes<const COLS: usize>(r: [__m128i; 8]) -> [__m128i; 8] {
    let mut out = [_mm_setzero_si128(); 8];
    for half in 0..COLS.div_ceil(8) {
        // bytes 8·half.. of row pairs, interleaved: i16 lanes (row 2p, row 2p + 1) per byte position
        let pair = |a: __m128i, b: __m128i| if half == 0 { _mm_unpacklo_epi8(a, b) } else { _mm_unpackhi_epi8(a, b) };
        let (p0, p1, p2, p3) = (pair(r[0], r[1]), pair(r[2], r[3]), pair(r[4], r[5]), pair(r[6], r[7]));
        // rows 0..4 and 4..8 as i32 lanes per byte position: positions 0..4 (lo) and 4..8 (hi)
        let (a_lo, a_hi) = (_mm_unpacklo_epi16(p0, p1), _mm_unpackhi_epi16(p0, p1));
        let (b_lo, b_hi) = (_mm_unpacklo_epi16(p2, p3), _mm_unpackhi_epi16(p2, p3));
        let o = &mut out[4 * half..4 * half + 4];
        o[0] = _mm_unpacklo_epi32(a_lo, b_lo);
        o[1] = _mm_unpackhi_epi32(a_lo, b_lo);
        o[2] = _mm_unpacklo_epi32(a_hi, b_hi);
        o[3] = _mm_unpackhi_epi32(a_hi, b_hi);
    }
    out
}

/// Column `s` of [`transpose_bytes`]' result: 8 bytes, in the low half.
#[inline(always)]
unsafe fn column(t: &[__m128i; 8], s: usize) -> __m128i {
    let v = t[s / 2];
    if s.is_multiple_of(2) {
        v
    } else {
        _mm_unpackhi_epi64(v, v)
    }
}

pub trait KKind {
    const BYTES: usize;
    /// Whether each 16 values have their own scale (Q6_K); else a chunk's 32 share one (Q4_K, Q5_K).
    const HALF: bool;
    /// Steps of 4 values whose `vpmaddubsw` products can be summed in i16 without overflow (2·q_max·128 per
    /// step): 8 for Q4_K (q < 16), 4 for Q5_K (q < 32), 2 for Q6_K (q < 64).
    const I16_STEPS: usize;
    unsafe fn prep(p: *const u8) -> Prep;
    /// Offsets of the 32-byte vectors that `chunk` reads (each output byte of `chunk` depends only on the bytes
    /// at its own position in them, so `chunk` of transposed vectors is the transposed `chunk`).
    const VECS: &'static [usize];
    /// The scalars of the super-blocks at `p` (8 rows), for packing.
    unsafe fn scalars8(p: &[*const u8; 8]) -> Scalars8;
    /// The 32 unsigned weights (0..64) of chunk `c`.
    unsafe fn chunk(p: *const u8, c: usize) -> __m256i;
    /// Chunk c's scales as 16 i16: its first 16 values' in the low 128 bits, the next 16's in the high.
    unsafe fn scales(prep: &Prep, c: usize) -> __m256i;
}

/// A `vpshufb` mask that puts i16 lane `lo` of a 128-bit half in every lane of the low half and lane `hi`
/// in every lane of the high half.
#[inline(always)]
unsafe fn pick_i16(lo: usize, hi: usize) -> __m256i {
    let l = (2 * lo as i16) | ((2 * lo as i16 + 1) << 8);
    let h = (2 * hi as i16) | ((2 * hi as i16 + 1) << 8);
    _mm256_set_m128i(_mm_set1_epi16(h), _mm_set1_epi16(l))
}

/// 8 packed bytes duplicated into 16 i16 lanes: b0, b0, b1, b1, ...
#[inline(always)]
unsafe fn dup_u8_to_i16(bytes: u64) -> __m256i {
    let v = _mm_cvtsi64_si128(bytes as i64);
    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v))
}

/// The 6-bit scales and mins of Q4_K/Q5_K (12 bytes at `p`) as 8 bytes each.
#[inline(always)]
unsafe fn scales_mins(p: *const u8) -> (u64, u64) {
    let u0 = std::ptr::read_unaligned(p as *const u32) as u64;
    let u1 = std::ptr::read_unaligned(p.add(4) as *const u32) as u64;
    let u2 = std::ptr::read_unaligned(p.add(8) as *const u32) as u64;
    const LOW6: u64 = 0x3f3f_3f3f;
    const LOW4: u64 = 0x0f0f_0f0f;
    const TOP2: u64 = 0x0303_0303;
    // sc_j = s[j] & 63 and m_j = s[j + 4] & 63 for j < 4; for j = 4 + i: sc = (s[8 + i] & 15) | (s[i] >> 6) << 4,
    // m = (s[8 + i] >> 4) | (s[4 + i] >> 6) << 4.
    let sc = (u0 & LOW6) | (((u2 & LOW4) | (((u0 >> 6) & TOP2) << 4)) << 32);
    let mn = (u1 & LOW6) | ((((u2 >> 4) & LOW4) | (((u1 >> 6) & TOP2) << 4)) << 32);
    (sc, mn)
}

/// The 32 nibbles of chunk `c` of a 128-byte nibble array at `qs`.
#[inline(always)]
unsafe fn nibble_chunk(qs: *const u8, c: usize) -> __m256i {
    let q = _mm256_loadu_si256(qs.add(32 * (c / 2)) as *const __m256i);
    let q = if c.is_multiple_of(2) { q } else { _mm256_srli_epi16::<4>(q) };
    _mm256_and_si256(q, _mm256_set1_epi8(0x0f))
}

pub struct Q4K;
pub struct Q5K;
pub struct Q6K;

/// Q4_K's and Q5_K's scalars for 8 rows: the 6-bit scales and mins at `p + 4`, `d` and `dmin` at `p`. One scale
/// per chunk (in `sc[2c]`; the odd entries are unused) and one min, for both of its 16-value sums.
#[inline(always)]
unsafe fn scalars8_4k(p: &[*const u8; 8]) -> Scalars8 {
    let (mut sc, mut mn) = ([_mm_setzero_si128(); 8], [_mm_setzero_si128(); 8]);
    for i in 0..8 {
        let (s, m) = scales_mins(p[i].add(4));
        sc[i] = _mm_cvtsi64_si128(s as i64);
        mn[i] = _mm_cvtsi64_si128(m as i64);
    }
    let (sc, mn) = (transpose_bytes::<8>(sc), transpose_bytes::<8>(mn));
    let mut out = Scalars8 {
        sc: [_mm256_setzero_si256(); 16],
        off: [_mm256_setzero_si256(); 8],
        d: f16x8(p, 0),
        f: _mm256_xor_ps(f16x8(p, 2), _mm256_set1_ps(-0.0)),
    };
    for c in 0..8 {
        out.sc[2 * c] = _mm256_cvtepu8_epi32(column(&sc, c));
        let m = _mm256_cvtepu8_epi32(column(&mn, c));
        out.off[c] = _mm256_or_si256(m, _mm256_slli_epi32::<16>(m));
    }
    out
}

impl KKind for Q4K {
    const BYTES: usize = 144;
    const HALF: bool = false;
    const I16_STEPS: usize = 8;
    const VECS: &'static [usize] = &[16, 48, 80, 112];
    #[inline(always)]
    unsafe fn scalars8(p: &[*const u8; 8]) -> Scalars8 {
        scalars8_4k(p)
    }
    #[inline(always)]
    unsafe fn prep(p: *const u8) -> Prep {
        let (sc, mn) = scales_mins(p.add(4));
        let sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
        Prep { sc: [sc, sc], off: dup_u8_to_i16(mn), d: f16_at(p), f: -f16_at(p.add(2)) }
    }
    #[inline(always)]
    unsafe fn chunk(p: *const u8, c: usize) -> __m256i {
        nibble_chunk(p.add(16), c)
    }
    #[inline(always)]
    unsafe fn scales(prep: &Prep, c: usize) -> __m256i {
        _mm256_shuffle_epi8(prep.sc[0], pick_i16(c, c))
    }
}

impl KKind for Q5K {
    const BYTES: usize = 176;
    const HALF: bool = false;
    const I16_STEPS: usize = 4;
    const VECS: &'static [usize] = &[16, 48, 80, 112, 144];
    #[inline(always)]
    unsafe fn scalars8(p: &[*const u8; 8]) -> Scalars8 {
        scalars8_4k(p)
    }
    #[inline(always)]
    unsafe fn prep(p: *const u8) -> Prep {
        Q4K::prep(p)
    }
    #[inline(always)]
    unsafe fn scales(prep: &Prep, c: usize) -> __m256i {
        Q4K::scales(prep, c)
    }
    #[inline(always)]
    unsafe fn chunk(p: *const u8, c: usize) -> __m256i {
        let lo = nibble_chunk(p.add(48), c);
        let qh = _mm256_loadu_si256(p.add(16) as *const __m256i);
        let bit = _mm256_set1_epi8((1u8 << c) as i8);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
        _mm256_or_si256(lo, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
    }
}

impl KKind for Q6K {
    const BYTES: usize = 210;
    const HALF: bool = true;
    const I16_STEPS: usize = 2;
    const VECS: &'static [usize] = &[0, 32, 64, 96, 128, 160];
    #[inline(always)]
    unsafe fn scalars8(p: &[*const u8; 8]) -> Scalars8 {
        let mut rows = [_mm_setzero_si128(); 8];
        for i in 0..8 {
            rows[i] = _mm_loadu_si128(p[i].add(192) as *const __m128i);
        }
        let t = transpose_bytes::<16>(rows);
        let d = f16x8(p, 208);
        let mut out = Scalars8 {
            sc: [_mm256_setzero_si256(); 16],
            off: [_mm256_setzero_si256(); 8],
            d,
            f: _mm256_mul_ps(d, _mm256_set1_ps(-32.0)),
        };
        for s in 0..16 {
            out.sc[s] = _mm256_cvtepi8_epi32(column(&t, s));
        }
        for q in 0..8 {
            // (scale 2q as i16) | (scale 2q + 1) << 16
            out.off[q] = _mm256_blend_epi16::<0xAA>(out.sc[2 * q], _mm256_slli_epi32::<16>(out.sc[2 * q + 1]));
        }
        out
    }
    #[inline(always)]
    unsafe fn prep(p: *const u8) -> Prep {
        let off = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
        let sc = [_mm256_permute2x128_si256::<0x00>(off, off), _mm256_permute2x128_si256::<0x11>(off, off)];
        let d = f16_at(p.add(208));
        Prep { sc, off, d, f: -32.0 * d }
    }
    #[inline(always)]
    unsafe fn scales(prep: &Prep, c: usize) -> __m256i {
        // scales 0..8 in sc[0], 8..16 in sc[1]; chunk c uses 2c and 2c + 1
        let i = (2 * c) % 8;
        _mm256_shuffle_epi8(prep.sc[c / 4], pick_i16(i, i + 1))
    }
    #[inline(always)]
    unsafe fn chunk(p: *const u8, c: usize) -> __m256i {
        let (half, t) = (c / 4, c % 4);
        let ql = _mm256_loadu_si256(p.add(64 * half + 32 * (t & 1)) as *const __m256i);
        let ql = if t < 2 { ql } else { _mm256_srli_epi16::<4>(ql) };
        let qh = _mm256_loadu_si256(p.add(128 + 32 * half) as *const __m256i);
        let qh = match t {
            0 => qh,
            1 => _mm256_srli_epi16::<2>(qh),
            2 => _mm256_srli_epi16::<4>(qh),
            _ => _mm256_srli_epi16::<6>(qh),
        };
        let hi = _mm256_slli_epi16::<4>(_mm256_and_si256(qh, _mm256_set1_epi8(3)));
        _mm256_or_si256(_mm256_and_si256(ql, _mm256_set1_epi8(0x0f)), hi)
    }
}

/// `sum + Σ pairs (q·y)·s`: the 16-bit products of unsigned weights and signed activations (`vpmaddubsw`:
/// |q| <= 63, so no pair saturates), multiplied by the scales (`vpmaddwd`) and added to the i32 lanes (`vpaddd`),
/// on every instruction set. A fused `vpdpwssd` (AVX-VNNI / AVX-512 VNNI) puts its 5-cycle latency on each tile
/// accumulator's chain, where `vpaddd` puts 1: with one or two activation rows a tile has too few accumulators to
/// hide it, and the fused form lost a paired A/B (docs/benchmarks.md).
#[inline(always)]
unsafe fn scaled_acc(sum: __m256i, q: __m256i, y: __m256i, s: __m256i) -> __m256i {
    _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), s))
}

/// NR weight rows against MR activation rows.
#[inline(always)]
unsafe fn tile<K: KKind, const NR: usize, const MR: usize>(
    ws: [*const u8; NR],
    nb: usize,
    xs: [*const XBlockK; MR],
) -> [[f32; MR]; NR] {
    let mut acc = [[_mm_setzero_ps(); MR]; NR];
    for b in 0..nb {
        let ps: [*const u8; NR] = std::array::from_fn(|i| ws[i].add(b * K::BYTES));
        let preps: [Prep; NR] = std::array::from_fn(|i| K::prep(ps[i]));
        let mut sum = [[_mm256_setzero_si256(); MR]; NR];
        for c in 0..8 {
            for i in 0..NR {
                let q = K::chunk(ps[i], c);
                let s = K::scales(&preps[i], c);
                for r in 0..MR {
                    let y = _mm256_loadu_si256((*xs[r].add(b)).qs.as_ptr().add(32 * c) as *const __m256i);
                    sum[i][r] = scaled_acc(sum[i][r], q, y, s);
                }
            }
        }
        for i in 0..NR {
            for r in 0..MR {
                let xb = &*xs[r].add(b);
                let bs = _mm256_loadu_si256(xb.bsums.as_ptr() as *const __m256i);
                let off = hsum_i32(_mm256_madd_epi16(bs, preps[i].off));
                acc[i][r] = float_step(acc[i][r], hsum_i32(sum[i][r]), off, preps[i].d, preps[i].f, xb.d);
            }
        }
    }
    acc.map(|a| a.map(|v| _mm_cvtss_f32(v)))
}

/// One super-block's float steps for one output: `acc + f32(sum)·(d·d_x) + f32(off)·(f·d_x)`, two FMAs in that
/// order on the exact integer sums. Every kernel (this one and the packed one, lane by lane) takes exactly
/// these steps, so an output's bits do not depend on the kernel, on m, or on what shares the call.
#[inline(always)]
pub unsafe fn float_step(acc: __m128, sum: i32, off: i32, d: f32, f: f32, xd: f32) -> __m128 {
    let z = _mm_setzero_ps();
    let a = _mm_fmadd_ss(_mm_cvtsi32_ss(z, sum), _mm_set_ss(d * xd), acc);
    _mm_fmadd_ss(_mm_cvtsi32_ss(z, off), _mm_set_ss(f * xd), a)
}

pub struct KBlocks<K>(std::marker::PhantomData<K>);

impl<K: KKind> TileKernel for KBlocks<K> {
    type X = XBlockK;
    const BYTES: usize = K::BYTES;
    #[inline(always)]
    unsafe fn tile<const MR: usize>(w: *const u8, nb: usize, xs: [*const XBlockK; MR]) -> [f32; MR] {
        tile::<K, 1, MR>([w], nb, xs)[0]
    }
    #[inline(always)]
    unsafe fn pair(w0: *const u8, w1: *const u8, nb: usize, x: *const XBlockK) -> (f32, f32) {
        let [[a], [b]] = tile::<K, 2, 1>([w0, w1], nb, [x]);
        (a, b)
    }
}
