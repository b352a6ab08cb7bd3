//! Decode kernels for the k-quants: Q4_K, Q5_K and Q6_K weights against activations quantized as candle's (and
//! ggml's) Q8_K, with exact integer sums per 256-value super-block.
//!
//! Weight super-block layouts (GGML, little-endian, as candle stores them); 256 values in 8 chunks of 32:
//! * Q4_K, 144 bytes: `d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]`. Chunk c = 2j + h is the low (h = 0)
//!   or high (h = 1) nibbles of `qs[32j..32j + 32]`; its 6-bit scale sc_c and min m_c are packed in `scales`;
//!   value = d·sc_c·q − dmin·m_c.
//! * Q5_K, 176 bytes: `d: f16, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]`: as Q4_K, and bit c of
//!   `qh[l]` is the 5th bit of value l of chunk c.
//! * Q6_K, 210 bytes: `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16`. Chunk c = 4n + t (n the 128-value
//!   half): the low (t < 2) or high (t >= 2) nibbles of `ql[64n + 32(t & 1)..][..32]`, with 2 more bits
//!   `(qh[32n + l] >> 2t) & 3`; value = d·sc_s·(q − 32), one scale per 16 values.
//!
//! Per super-block and activation row the kernel computes Σ_c Σ_l scale·q·y (`vpmaddubsw`, then `vpmaddwd` by the
//! chunk's scales and an add; with VNNI the multiply by the scales and the add are one `vpdpwssd`) and an offset
//! term Σ_s coef_s·bsum_s over the activation's 16-value sums (Q4_K/Q5_K: the mins; Q6_K: the scales, for the
//! −32), both exact i32; the f32 result is d_y·(d·Σ + f·offset) with f = −dmin
//! (Q4_K/Q5_K) or −32·d (Q6_K). candle computes the same integers, so results equal its up to f32 accumulation
//! order. A row's result does not depend on how many rows share the call.

use super::quant::{quantize_row_k, XBlockK, QK_K};
use super::Isa;
use crate::work_pool::par_chunks;
use crate::Result;
use candle_core::quantized::GgmlDType;
use std::cell::RefCell;

/// Bytes per 256-value super-block.
pub fn block_bytes(dtype: GgmlDType) -> usize {
    match dtype {
        GgmlDType::Q4K => 144,
        GgmlDType::Q5K => 176,
        GgmlDType::Q6K => 210,
        _ => 0,
    }
}

thread_local! {
    static XQ: RefCell<Vec<XBlockK>> = const { RefCell::new(Vec::new()) };
}

/// `out (m, n) = x (m, k) @ W^T` for a k-quant `w` of n rows, with `isa`'s instructions (the caller checked the
/// CPU has them).
#[allow(clippy::too_many_arguments)]
pub fn decode_matmul(
    dtype: GgmlDType,
    isa: Isa,
    w: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    out: &mut [f32],
) -> Result<()> {
    let out_ptr = out.as_mut_ptr() as usize;
    let nb = k / QK_K;
    super::frame::blocked_matmul(
        &XQ,
        XBlockK::ZERO,
        (dtype, QK_K, block_bytes(dtype)),
        w,
        n,
        k,
        m,
        |xq| {
            // rows of x quantized in parallel when there are many (prefill)
            let xq_ptr = xq.as_mut_ptr() as usize;
            par_chunks(m, 8, |rows| {
                for r in rows {
                    // SAFETY: each chunk writes only its own rows' blocks.
                    let o = unsafe { std::slice::from_raw_parts_mut((xq_ptr as *mut XBlockK).add(r * nb), nb) };
                    quantize_row_k(&x[r * k..(r + 1) * k], o);
                }
            });
        },
        |xq, rows| {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the caller checked that the CPU supports `isa`; each chunk writes only the output columns
            // of its rows.
            unsafe {
                x86::run(dtype, isa, w.as_ptr(), nb, xq, m, n, rows, out_ptr as *mut f32)
            }
            #[cfg(not(target_arch = "x86_64"))]
            unreachable!("no Isa exists off x86_64 ({rows:?}, {out_ptr}, {nb}, {})", xq.len())
        },
    )
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use crate::cpu_matmul::x86::{rows_avx2, rows_vnni, rows_vnni512, Mat, TileKernel, Tiled};
    use crate::cpu_simd::{f16_at, hsum};
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

    pub trait KKind {
        const BYTES: usize;
        unsafe fn prep(p: *const u8) -> Prep;
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

    impl KKind for Q4K {
        const BYTES: usize = 144;
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
    /// |q| <= 63, so no pair saturates), multiplied by the scales and added in pairs to the i32 lanes.
    pub trait KMac {
        unsafe fn acc(sum: __m256i, q: __m256i, y: __m256i, s: __m256i) -> __m256i;
    }

    pub struct Avx2;
    pub struct Vnni;
    pub struct Vnni512;

    impl KMac for Avx2 {
        #[inline(always)]
        unsafe fn acc(sum: __m256i, q: __m256i, y: __m256i, s: __m256i) -> __m256i {
            _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), s))
        }
    }

    impl KMac for Vnni {
        #[inline(always)]
        unsafe fn acc(sum: __m256i, q: __m256i, y: __m256i, s: __m256i) -> __m256i {
            _mm256_dpwssd_avx_epi32(sum, _mm256_maddubs_epi16(q, y), s)
        }
    }

    impl KMac for Vnni512 {
        #[inline(always)]
        unsafe fn acc(sum: __m256i, q: __m256i, y: __m256i, s: __m256i) -> __m256i {
            _mm256_dpwssd_epi32(sum, _mm256_maddubs_epi16(q, y), s)
        }
    }

    /// NR weight rows against MR activation rows.
    #[inline(always)]
    unsafe fn tile<K: KKind, M: KMac, const NR: usize, const MR: usize>(
        ws: [*const u8; NR],
        nb: usize,
        xs: [*const XBlockK; MR],
    ) -> [[f32; MR]; NR] {
        let mut acc = [[_mm256_setzero_ps(); MR]; NR];
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
                        sum[i][r] = M::acc(sum[i][r], q, y, s);
                    }
                }
            }
            for i in 0..NR {
                for r in 0..MR {
                    let xb = &*xs[r].add(b);
                    let bs = _mm256_loadu_si256(xb.bsums.as_ptr() as *const __m256i);
                    let off = _mm256_madd_epi16(bs, preps[i].off);
                    let a =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[i][r]), _mm256_set1_ps(preps[i].d * xb.d), acc[i][r]);
                    acc[i][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(off), _mm256_set1_ps(preps[i].f * xb.d), a);
                }
            }
        }
        let mut res = [[0f32; MR]; NR];
        for i in 0..NR {
            for r in 0..MR {
                res[i][r] = hsum(acc[i][r]);
            }
        }
        res
    }

    pub struct KBlocks<K, M>(std::marker::PhantomData<(K, M)>);

    impl<K: KKind, M: KMac> TileKernel for KBlocks<K, M> {
        type X = XBlockK;
        const BYTES: usize = K::BYTES;
        #[inline(always)]
        unsafe fn tile<const MR: usize>(w: *const u8, nb: usize, xs: [*const XBlockK; MR]) -> [f32; MR] {
            tile::<K, M, 1, MR>([w], nb, xs)[0]
        }
        #[inline(always)]
        unsafe fn pair(w0: *const u8, w1: *const u8, nb: usize, x: *const XBlockK) -> (f32, f32) {
            let [[a], [b]] = tile::<K, M, 2, 1>([w0, w1], nb, [x]);
            (a, b)
        }
    }

    /// # Safety
    /// The CPU must support `isa`; `w` holds n rows of nb super-blocks of `dtype`; `xq` holds m rows of nb
    /// blocks; `out` has m·n values.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run(
        dtype: GgmlDType,
        isa: Isa,
        w: *const u8,
        nb: usize,
        xq: &[XBlockK],
        m: usize,
        n: usize,
        range: std::ops::Range<usize>,
        out: *mut f32,
    ) {
        let mat = Mat { w, nb, x: xq.as_ptr(), m, n, out };
        match dtype {
            GgmlDType::Q4K => rows::<Q4K>(isa, mat, range),
            GgmlDType::Q5K => rows::<Q5K>(isa, mat, range),
            GgmlDType::Q6K => rows::<Q6K>(isa, mat, range),
            _ => unreachable!("checked by decode_matmul"),
        }
    }

    #[inline(always)]
    unsafe fn rows<K: KKind>(isa: Isa, mat: Mat<XBlockK>, range: std::ops::Range<usize>) {
        match isa {
            Isa::Avx2 => rows_avx2::<Tiled<KBlocks<K, Avx2>>>(mat, range),
            Isa::AvxVnni => rows_vnni::<Tiled<KBlocks<K, Vnni>>>(mat, range),
            Isa::Avx512Vnni => rows_vnni512::<Tiled<KBlocks<K, Vnni512>>>(mat, range),
        }
    }
}
