//! Q4_K weights repacked once, at load, into 8-row groups whose vector lanes are rows, at about their GGML size
//! ([`q4k::Q4Pack`]: 1216 bytes per super-block of 8 rows against GGML's 1152): the packed kernel's layout
//! without its per-call packing, so it serves every m, one activation row included. The driver is written against
//! [`Compact`], a repacked super-block; Q6_K's (low nibbles and 2-bit planes) was measured and lost to its tile
//! kernel on GGML's layout (its unpacking costs more than the packing it saves), so only Q4_K is repacked.
//!
//! Per super-block of 8 rows and activation row: the weights' bytes rebuilt from their nibbles, 64 `vpdpbusd`
//! against broadcast 4-byte groups of the activation, `vpmulld` by the scales, then
//! the offset term and the float steps of [`float_step`](super::x86::float_step) lane by lane. The integers are
//! the packed kernel's (a repacked block is made from [`super::packed::pack`]'s and expands back into it) and so
//! are the float steps: an output is bit-identical to the tile and packed kernels', at any m and on every ISA.

pub mod q4k;

use super::packed::{act_qs, drive_with, pack, KPack, PackedKernel, Ymm, PANEL};
use super::wide::{KPack16, Zmm};
use super::x86::KKind;
use crate::cpu_matmul::quant::XBlockK;
use crate::cpu_matmul::x86::mac::Mac;
use crate::cpu_matmul::x86::{act_rows, store_lanes, Mat, RowKernel};
use core::arch::x86_64::*;

/// A repacked super-block of 8 rows of the k-quant `K`.
pub(crate) trait Compact: Copy + Send + Sync + 'static {
    type K: KKind;
    /// Bytes of one GGML super-block of one row.
    const GGML_BYTES: usize;
    /// The repacked form of a packed super-block (exact: [`Compact::expand`] gives it back).
    unsafe fn compress(p: &KPack) -> Self;
    /// The packed super-block, its slots at `out + v · step` (step 2: one half of a 16-row one).
    unsafe fn expand(&self, out: *mut __m256i, step: usize);
    /// This super-block (the b-th) against MR activation rows (`ys`: their int8 values), added to `acc`.
    unsafe fn superblock<M: Mac, const MR: usize>(
        &self,
        b: usize,
        xs: &[*const XBlockK; MR],
        ys: &[*const i32; MR],
        acc: &mut [__m256; MR],
    );
}

/// Rows repacked: groups of 8 rows (the last padded with copies of the last row), each `nb` super-blocks.
pub struct Repacked<C> {
    blocks: Vec<C>,
    pub n: usize,
    pub nb: usize,
}

/// A weight repacked at load.
pub struct Packed(Repacked<q4k::Q4Pack>);

impl Packed {
    /// (n, nb): rows and super-blocks per row.
    pub fn dims(&self) -> (usize, usize) {
        (self.0.n, self.0.nb)
    }

    /// The repacked groups.
    pub fn as_ptr(&self) -> *const u8 {
        self.0.blocks.as_ptr() as *const u8
    }

    /// Repack `n` rows of `nb` super-blocks of `dtype` (GGML layout at `w`); None for a type not repacked.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C; `w` holds `n` rows of `nb` super-blocks.
    pub unsafe fn new(dtype: candle_core::quantized::GgmlDType, w: &[u8], n: usize, nb: usize) -> Option<Self> {
        (dtype == candle_core::quantized::GgmlDType::Q4K).then(|| Self(repack(w, n, nb)))
    }
}

/// Repack `n` rows of `nb` super-blocks (GGML layout at `w`) of `C`'s type.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn repack<C: Compact>(w: &[u8], n: usize, nb: usize) -> Repacked<C> {
    let row_bytes = nb * C::GGML_BYTES;
    assert!(w.len() >= n * row_bytes && n > 0, "repack: {} bytes for {n} rows of {row_bytes}", w.len());
    let groups = n.div_ceil(8);
    let mut blocks = Vec::with_capacity(groups * nb);
    let mut tmp = std::mem::MaybeUninit::<KPack>::uninit();
    for g in 0..groups {
        let rows: [*const u8; 8] = std::array::from_fn(|i| w.as_ptr().add((8 * g + i).min(n - 1) * row_bytes));
        for b in 0..nb {
            pack::<C::K>(&rows, b, tmp.as_mut_ptr() as *mut __m256i, 1);
            blocks.push(C::compress(&*tmp.as_ptr()));
        }
    }
    Repacked { blocks, n, nb }
}

/// A packed kernel that takes repacked groups of `C`.
pub(super) trait Expand<C: Compact>: PackedKernel {
    /// Packs a repacked super-block (`groups`: its 8-row groups, as many as the kernel's width takes) into
    /// `out`, as [`PackedKernel::pack`] packs the same rows.
    unsafe fn expand(groups: [*const C; 2], out: *mut Self::P);
}

impl<K: KKind, M: Mac, C: Compact> Expand<C> for Ymm<K, M> {
    #[inline(always)]
    unsafe fn expand(groups: [*const C; 2], out: *mut KPack) {
        (*groups[0]).expand(out as *mut __m256i, 1);
    }
}

impl<K: KKind, C: Compact> Expand<C> for Zmm<K> {
    #[inline(always)]
    unsafe fn expand(groups: [*const C; 2], out: *mut KPack16) {
        let slots = out as *mut __m256i;
        (*groups[0]).expand(slots, 2);
        (*groups[1]).expand(slots.add(1), 2);
    }
}

/// 8 bytes at `p` as 8 i32 lanes.
#[inline(always)]
pub(super) unsafe fn lanes_u8(p: *const u8) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i))
}

/// MR activation rows against G groups of 8 rows (nb super-blocks at each `pk`), their super-blocks taken in
/// step (G streams of weights in flight): lane i of result [g][r] is group g's row i's dot product with
/// activation row r.
#[inline(always)]
unsafe fn micro<C: Compact, M: Mac, const MR: usize, const G: usize>(
    pk: [*const C; G],
    nb: usize,
    xs: [*const XBlockK; MR],
) -> [[__m256; MR]; G] {
    let mut acc = [[_mm256_setzero_ps(); MR]; G];
    for b in 0..nb {
        let ys = act_qs(&xs, b);
        for (g, acc) in acc.iter_mut().enumerate() {
            (*pk[g].add(b)).superblock::<M, MR>(b, &xs, &ys, acc);
        }
    }
    acc
}

#[inline(always)]
unsafe fn tile<C: Compact, M: Mac, const MR: usize>(pk: *const C, nb: usize, x: *const XBlockK, r: usize, at: Out) {
    let xs = act_rows::<_, MR>(x, r, nb);
    let [v] = micro::<C, M, MR, 1>([pk], nb, xs);
    store_lanes(v, at.dst, r, at.n, at.valid);
}

/// One activation row against two groups at once (two streams of weights: one sequential stream per core
/// leaves DRAM bandwidth unused).
#[inline(always)]
unsafe fn pair<C: Compact, M: Mac>(pk: [*const C; 2], nb: usize, x: *const XBlockK, at: [Out; 2]) {
    let v = micro::<C, M, 1, 2>(pk, nb, [x]);
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
/// expanded groups from there, as a [`RowKernel`]: `Mat::w` points at a [`Repacked`]'s groups of `C` and `rows`
/// starts at a multiple of 8 (of 16 from [`EXPAND_MIN_M`] rows).
pub(crate) struct Prepacked<C, M, T>(std::marker::PhantomData<(C, M, T)>);

impl<C: Compact, M: Mac, T: Expand<C>> RowKernel for Prepacked<C, M, T> {
    type X = XBlockK;
    #[inline(always)]
    unsafe fn rows(a: Mat<XBlockK>, rows: std::ops::Range<usize>) {
        let Mat { w, nb, x, m, n, out } = a;
        let pk = w as *const C;
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
                pair::<C, M>([a.0, b.0], nb, x, [a.1, b.1]);
            }
            if groups % 2 == 1 {
                let (p, at) = group(rows.start + 8 * (groups - 1));
                tile::<C, M, 1>(p, nb, x, 0, at);
            }
            return;
        }
        let mut j = rows.start;
        while j < rows.end {
            let p = pk.add(j / 8 * nb);
            let at = Out { dst: out.add(j), n, valid: (rows.end - j).min(8) };
            let mut r = 0;
            while r + 4 <= m {
                tile::<C, M, 4>(p, nb, x, r, at);
                r += 4;
            }
            match m - r {
                3 => tile::<C, M, 3>(p, nb, x, r, at),
                2 => tile::<C, M, 2>(p, nb, x, r, at),
                1 => tile::<C, M, 1>(p, nb, x, r, at),
                _ => {}
            }
            j += 8;
        }
    }
}
