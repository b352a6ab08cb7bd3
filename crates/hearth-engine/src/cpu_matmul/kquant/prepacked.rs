//! Q4_K weights repacked once, at load, into 8-row groups whose vector lanes are rows, still 4 bits a value
//! ([`Q4Pack`], 1216 bytes per super-block of 8 rows against GGML's 1152): the packed kernel's layout without its
//! per-call packing, so it serves every m, one activation row included.
//!
//! Per super-block of 8 rows and activation row: 32 nibble vectors (and + shift: 64 byte vectors), 64
//! `vpdpbusd` against broadcast 4-byte groups of the activation, 8 `vpmulld` by the chunks' scales, then the
//! offset term and the float steps of [`float_step`](super::x86::float_step) lane by lane. The integers are the
//! packed kernel's (the repacking is exact: `tests` compares it against [`super::packed::pack`]) and so are the
//! float steps: an output is bit-identical to the tile and packed kernels', at any m and on every ISA.

use super::packed::{act_qs, drive_with, finish_parts, pack, KPack, PackedKernel, PANEL};
use super::packed::{SLOT_D, SLOT_F, SLOT_OFF, SLOT_SC};
use super::x86::Q4K;
use crate::cpu_matmul::quant::XBlockK;
use crate::cpu_matmul::x86::mac::Mac;
use crate::cpu_matmul::x86::{act_rows, store_lanes, Mat, RowKernel};
use core::arch::x86_64::*;

/// One super-block of 8 Q4_K weight rows: lane i of every vector is row i.
#[repr(C, align(32))]
#[derive(Clone, Copy)]
pub struct Q4Pack {
    /// `q[c][h]`: values `4h..4h + 4` of chunk c in the low nibbles, values `4h + 16..4h + 20` in the high ones.
    q: [[__m256i; 4]; 8],
    /// `sc[8c + i]`: chunk c's 6-bit scale of row i; `mn` its min.
    sc: [u8; 64],
    mn: [u8; 64],
    d: __m256,
    f: __m256,
}

/// Q4_K rows repacked: groups of 8 rows (the last padded with copies of the last row), each `nb` super-blocks.
pub struct PackedQ4K {
    blocks: Vec<Q4Pack>,
    pub n: usize,
    pub nb: usize,
}

impl PackedQ4K {
    pub fn as_ptr(&self) -> *const Q4Pack {
        self.blocks.as_ptr()
    }
}

/// Repack `n` Q4_K rows of `nb` super-blocks (GGML layout at `w`).
///
/// # Safety
/// The CPU must have AVX2 and F16C; `w` holds `n · nb · 144` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn repack(w: &[u8], n: usize, nb: usize) -> PackedQ4K {
    let row_bytes = nb * 144;
    let groups = n.div_ceil(8);
    let mut blocks = Vec::with_capacity(groups * nb);
    let mut tmp = std::mem::MaybeUninit::<KPack>::uninit();
    for g in 0..groups {
        let rows: [*const u8; 8] = std::array::from_fn(|i| w.as_ptr().add((8 * g + i).min(n - 1) * row_bytes));
        for b in 0..nb {
            pack::<Q4K>(&rows, b, tmp.as_mut_ptr() as *mut __m256i, 1);
            blocks.push(compress(&*tmp.as_ptr()));
        }
    }
    PackedQ4K { blocks, n, nb }
}

/// A packed Q4_K super-block in 4 bits a value: the weights' nibbles paired, the scales and mins as bytes.
#[inline(always)]
unsafe fn compress(p: &KPack) -> Q4Pack {
    let mut out = Q4Pack { q: [[_mm256_setzero_si256(); 4]; 8], sc: [0; 64], mn: [0; 64], d: p.d(), f: p.f() };
    for c in 0..8 {
        for h in 0..4 {
            // values < 16: the shifted high half stays within its byte
            out.q[c][h] = _mm256_or_si256(p.w(c, h), _mm256_slli_epi16::<4>(p.w(c, h + 4)));
        }
        let (mut sc, mut mn) = ([0i32; 8], [0i32; 8]);
        _mm256_storeu_si256(sc.as_mut_ptr() as *mut __m256i, p.sc(2 * c));
        _mm256_storeu_si256(mn.as_mut_ptr() as *mut __m256i, p.off(c));
        for i in 0..8 {
            out.sc[8 * c + i] = sc[i] as u8;
            out.mn[8 * c + i] = (mn[i] & 0xffff) as u8;
        }
    }
    out
}

/// A repacked super-block of 8 rows as [`pack`] packs it (its slots at `out + v · step`): the packed kernels run
/// on repacked weights at many activation rows.
#[inline(always)]
pub(super) unsafe fn expand(p: &Q4Pack, out: *mut __m256i, step: usize) {
    let slot = |v: usize| out.add(v * step);
    let mask = _mm256_set1_epi8(0x0f);
    for c in 0..8 {
        for h in 0..4 {
            let v = p.q[c][h];
            slot(8 * c + h).write(_mm256_and_si256(v, mask));
            slot(8 * c + h + 4).write(_mm256_and_si256(_mm256_srli_epi16::<4>(v), mask));
        }
        slot(SLOT_SC + 2 * c).write(lanes_u8(p.sc.as_ptr().add(8 * c)));
        let m = lanes_u8(p.mn.as_ptr().add(8 * c));
        slot(SLOT_OFF + c).write(_mm256_or_si256(m, _mm256_slli_epi32::<16>(m)));
    }
    slot(SLOT_D).write(_mm256_castps_si256(p.d));
    slot(SLOT_F).write(_mm256_castps_si256(p.f));
}

/// 8 bytes at `p` as 8 i32 lanes.
#[inline(always)]
unsafe fn lanes_u8(p: *const u8) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i))
}

/// MR activation rows against G groups of 8 rows (nb super-blocks at each `pk`), their super-blocks taken in
/// step (G streams of weights in flight): lane i of result [g][r] is group g's row i's dot product with
/// activation row r.
#[inline(always)]
unsafe fn micro<M: Mac, const MR: usize, const G: usize>(
    pk: [*const Q4Pack; G],
    nb: usize,
    xs: [*const XBlockK; MR],
) -> [[__m256; MR]; G] {
    let mut acc = [[_mm256_setzero_ps(); MR]; G];
    for b in 0..nb {
        let ys = act_qs(&xs, b);
        for (g, acc) in acc.iter_mut().enumerate() {
            superblock::<M, MR>(&*pk[g].add(b), b, &xs, &ys, acc);
        }
    }
    acc
}

/// One super-block `p` (the b-th) of a group against MR activation rows (`ys`: their int8 values), added to `acc`.
#[inline(always)]
unsafe fn superblock<M: Mac, const MR: usize>(
    p: &Q4Pack,
    b: usize,
    xs: &[*const XBlockK; MR],
    ys: &[*const i32; MR],
    acc: &mut [__m256; MR],
) {
    let mask = _mm256_set1_epi8(0x0f);
    {
        let mut isum = [_mm256_setzero_si256(); MR];
        // Four independent chains of dot products per pair of chunks (each chunk's low and high nibbles), so
        // that one activation row has enough in flight to hide `vpdpbusd`'s latency.
        for pair in 0..4 {
            let mut a = [[[_mm256_setzero_si256(); MR]; 2]; 2];
            for (e, chains) in a.iter_mut().enumerate() {
                let c = 2 * pair + e;
                for h in 0..4 {
                    let v = p.q[c][h];
                    let lo = _mm256_and_si256(v, mask);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask);
                    for r in 0..MR {
                        let y_lo = _mm256_set1_epi32(std::ptr::read_unaligned(ys[r].add(8 * c + h)));
                        let y_hi = _mm256_set1_epi32(std::ptr::read_unaligned(ys[r].add(8 * c + h + 4)));
                        chains[0][r] = M::dot_us(chains[0][r], lo, y_lo);
                        chains[1][r] = M::dot_us(chains[1][r], hi, y_hi);
                    }
                }
            }
            let s0 = lanes_u8(p.sc.as_ptr().add(16 * pair));
            let s1 = lanes_u8(p.sc.as_ptr().add(16 * pair + 8));
            for r in 0..MR {
                let c0 = _mm256_add_epi32(a[0][0][r], a[0][1][r]);
                let c1 = _mm256_add_epi32(a[1][0][r], a[1][1][r]);
                let scaled = _mm256_add_epi32(_mm256_mullo_epi32(c0, s0), _mm256_mullo_epi32(c1, s1));
                isum[r] = _mm256_add_epi32(isum[r], scaled);
            }
        }
        let off: [__m256i; 8] = std::array::from_fn(|c| {
            let m = lanes_u8(p.mn.as_ptr().add(8 * c));
            _mm256_or_si256(m, _mm256_slli_epi32::<16>(m))
        });
        finish_parts(&off, p.d, p.f, b, xs, &isum, acc);
    }
}

#[inline(always)]
unsafe fn tile<M: Mac, const MR: usize>(pk: *const Q4Pack, nb: usize, x: *const XBlockK, r: usize, at: Out) {
    let xs = act_rows::<_, MR>(x, r, nb);
    let [v] = micro::<M, MR, 1>([pk], nb, xs);
    store_lanes(v, at.dst, r, at.n, at.valid);
}

/// One activation row against two groups at once (two streams of weights: one sequential stream per core
/// leaves DRAM bandwidth unused).
#[inline(always)]
unsafe fn pair<M: Mac>(pk: [*const Q4Pack; 2], nb: usize, x: *const XBlockK, at: [Out; 2]) {
    let v = micro::<M, 1, 2>(pk, nb, [x]);
    for (v, at) in v.into_iter().zip(at) {
        store_lanes(v, at.dst, 0, at.n, at.valid);
    }
}

/// Where a group's outputs go: its first column in `out`, the row stride, how many of its lanes are real rows.
#[derive(Clone, Copy)]
struct Out {
    dst: *mut f32,
    n: usize,
    valid: usize,
}

/// Activation rows from which the repacked weights are expanded for the packed kernel `T` (fewer: this module's
/// kernel reads them as they are).
pub const EXPAND_MIN_M: usize = 16;

/// The prepacked kernel with dot product `M` below [`EXPAND_MIN_M`] activation rows, the packed kernel `T` on
/// expanded groups from there, as a [`RowKernel`]: `Mat::w` points at a [`PackedQ4K`]'s blocks and `rows` starts
/// at a multiple of 8 (of 16 from [`EXPAND_MIN_M`] rows).
pub(crate) struct Prepacked<M, T>(std::marker::PhantomData<(M, T)>);

impl<M: Mac, T: PackedKernel> RowKernel for Prepacked<M, T> {
    type X = XBlockK;
    #[inline(always)]
    unsafe fn rows(a: Mat<XBlockK>, rows: std::ops::Range<usize>) {
        let Mat { w, nb, x, m, n, out } = a;
        let pk = w as *const Q4Pack;
        if m >= EXPAND_MIN_M {
            let scratch = T::scratch(8 * PANEL / T::WIDTH * nb);
            let last = n.div_ceil(8) - 1;
            return drive_with::<T>(a, rows, scratch, |g0, valid, dst| {
                // the second group of a 16-row panel that has only one: the first again (its lanes not stored)
                let ga = pk.add(g0 / 8 * nb);
                let gb = if valid > 8 { pk.add((g0 / 8 + 1).min(last) * nb) } else { ga };
                for b in 0..nb {
                    T::expand([ga.add(b), gb.add(b)], dst.add(b));
                }
            });
        }
        let group = |j: usize| (pk.add(j / 8 * nb), Out { dst: out.add(j), n, valid: (rows.end - j).min(8) });
        if m == 1 {
            // groups from the two halves of the range, in step: each half read front to back
            let groups = rows.len().div_ceil(8);
            let half = groups / 2;
            for i in 0..half {
                let (a, b) = (group(rows.start + 8 * i), group(rows.start + 8 * (half + i)));
                pair::<M>([a.0, b.0], nb, x, [a.1, b.1]);
            }
            if groups % 2 == 1 {
                let (p, at) = group(rows.start + 8 * (groups - 1));
                tile::<M, 1>(p, nb, x, 0, at);
            }
            return;
        }
        let mut j = rows.start;
        while j < rows.end {
            let p = pk.add(j / 8 * nb);
            let at = Out { dst: out.add(j), n, valid: (rows.end - j).min(8) };
            let mut r = 0;
            while r + 4 <= m {
                tile::<M, 4>(p, nb, x, r, at);
                r += 4;
            }
            match m - r {
                3 => tile::<M, 3>(p, nb, x, r, at),
                2 => tile::<M, 2>(p, nb, x, r, at),
                1 => tile::<M, 1>(p, nb, x, r, at),
                _ => {}
            }
            j += 8;
        }
    }
}
