//! The k-quant kernel for many activation rows (prefill, large decode batches): 8 weight rows' super-blocks are
//! unpacked to bytes and transposed so that each vector lane is one weight row, as the 32-value block kernel
//! packs; then every activation row runs `vpdpbusd` (or its AVX2 form) against broadcast 4-byte groups of its
//! values. Per 16 values (Q6_K) or 32 (Q4_K, Q5_K) that gives an exact i32 dot product per lane, which `vpmulld`
//! multiplies by the lane's scale into the super-block's exact sum; the offset term (mins, Q6_K's −32) comes
//! from the activation's 16-value sums (`vpmaddwd` against i16 coefficient pairs). Each lane then takes exactly
//! the float steps of [`float_step`](super::x86::float_step), so an output is bit-identical to the tile kernel's, at any m.
//!
//! Per super-block and activation row this is 64 `vpdpbusd` and 8–16 `vpmulld` for 8 weight rows, against the
//! tile kernel's 128 `vpmaddubsw` + 128 scale steps: the packing (8 transposes per super-block of 8 rows) is
//! paid once per call and group, so the kernel runs from [`PACK_MIN_M`] activation rows up.

use super::x86::{KBlocks, KKind, Scalars8};
use crate::cpu_matmul::quant::XBlockK;
use crate::cpu_matmul::x86::mac::Mac;
use crate::cpu_matmul::x86::{act_rows, store_lanes, transpose8, Mat, RowKernel, Tiled};
use core::arch::x86_64::*;
use std::cell::RefCell;

/// Activation rows from which a call packs its weights (fewer: the tile kernel, straight from the weights).
pub const PACK_MIN_M: usize = 4;

/// Groups of 8 weight rows packed together: each activation tile runs against all of them while it is in L1.
pub const PANEL: usize = 4;

/// One super-block of 8 weight rows, transposed: lane i of every vector is row i. Its vectors in order are the
/// "slots" [`pack`] writes ([`KPack16`] has the same slots, 16 rows wide).
#[repr(C, align(32))]
#[derive(Clone, Copy)]
pub(crate) struct KPack {
    /// `w[c][g]`: values `4g..4g + 4` of chunk c (unsigned, as the kind's `chunk` gives them).
    w: [[__m256i; 8]; 8],
    /// `sc[s]`: the scale of values `16s..16s + 16` (Q4_K/Q5_K use the even s: one scale per chunk).
    sc: [__m256i; 16],
    /// `off[q]`: the offset coefficients of the 16-value sums 2q and 2q + 1, an i16 pair.
    off: [__m256i; 8],
    d: __m256,
    f: __m256,
}

const ZERO_PACK: KPack = unsafe { std::mem::zeroed() };

impl KPack {
    /// Values `4g..4g + 4` of chunk c, lane i row i's.
    pub(super) fn w(&self, c: usize, g: usize) -> __m256i {
        self.w[c][g]
    }
    /// The scale of values `16s..16s + 16`.
    pub(super) fn sc(&self, s: usize) -> __m256i {
        self.sc[s]
    }
    /// The offset coefficients of the 16-value sums 2q and 2q + 1 (an i16 pair).
    pub(super) fn off(&self, q: usize) -> __m256i {
        self.off[q]
    }
    pub(super) fn d(&self) -> __m256 {
        self.d
    }
    pub(super) fn f(&self) -> __m256 {
        self.f
    }
}

/// The slots of a packed super-block: `w[c][g]` at `8c + g`, then `sc`, `off`, `d` and `f`.
pub(super) const SLOT_SC: usize = 64;
pub(super) const SLOT_OFF: usize = 80;
pub(super) const SLOT_D: usize = 88;
pub(super) const SLOT_F: usize = 89;

/// The int8 values of super-block `b` of each of the MR activation rows at `xs`, as 4-byte groups.
#[inline(always)]
pub(super) unsafe fn act_qs<const MR: usize>(xs: &[*const XBlockK; MR], b: usize) -> [*const i32; MR] {
    let mut ys = [std::ptr::null::<i32>(); MR];
    for r in 0..MR {
        ys[r] = (*xs[r].add(b)).qs.as_ptr() as *const i32;
    }
    ys
}

thread_local! {
    /// This thread's packed panel (grown to the widest matrix it has run).
    static PACK: RefCell<Vec<KPack>> = const { RefCell::new(Vec::new()) };
}

/// 8 virtual super-blocks: bytes `o + 4g..o + 4g + 4` of vector o of each of 8 rows, lane by lane, at `o` in
/// block g, for the vectors a kind's `chunk` reads.
#[repr(C, align(32))]
struct Transposed([[u8; 224]; 8]);

/// Super-block `b` of 8 weight rows, packed: the raw vectors that hold the quants are transposed first (4–6
/// transposes, where transposing the 8 unpacked chunks would take 8), then unpacked chunk by chunk.
/// Slot v goes to `out + v · step` (32-byte vectors): step 1 fills a [`KPack`], step 2 one half of a [`KPack16`].
#[inline(always)]
pub(super) unsafe fn pack<K: KKind>(rows: &[*const u8; 8], b: usize, out: *mut __m256i, step: usize) {
    let mut p = [rows[0]; 8];
    for i in 0..8 {
        p[i] = rows[i].add(b * K::BYTES);
    }
    // Only the kind's vectors are written, and `chunk` reads only those: no need to clear the rest.
    let mut t = std::mem::MaybeUninit::<Transposed>::uninit();
    let tp = t.as_mut_ptr() as *mut u8;
    for &o in K::VECS {
        let mut v = [_mm256_setzero_si256(); 8];
        for i in 0..8 {
            v[i] = _mm256_loadu_si256(p[i].add(o) as *const __m256i);
        }
        for (g, v) in transpose8(v).into_iter().enumerate() {
            _mm256_storeu_si256(tp.add(224 * g + o) as *mut __m256i, v);
        }
    }
    // written in place: the packed group is 2.9 KiB, a copy would cost as much as a transpose
    let slot = |v: usize| out.add(v * step);
    for c in 0..8 {
        for g in 0..8 {
            slot(8 * c + g).write(K::chunk(tp.add(224 * g), c));
        }
    }
    let Scalars8 { sc, off, d, f } = K::scalars8(&p);
    for (s, v) in sc.into_iter().enumerate() {
        slot(SLOT_SC + s).write(v);
    }
    for (q, v) in off.into_iter().enumerate() {
        slot(SLOT_OFF + q).write(v);
    }
    slot(SLOT_D).write(_mm256_castps_si256(d));
    slot(SLOT_F).write(_mm256_castps_si256(f));
}

/// MR activation rows against a packed group of 8 weight rows (nb super-blocks at `pk`): lane i of result r
/// is weight row i's dot product with activation row r.
#[inline(always)]
unsafe fn micro<K: KKind, M: Mac, const MR: usize>(
    pk: *const KPack,
    nb: usize,
    xs: [*const XBlockK; MR],
) -> [__m256; MR] {
    if !M::INT8_DOT {
        return micro_avx2::<K, MR>(pk, nb, xs);
    }
    let mut acc = [_mm256_setzero_ps(); MR];
    for b in 0..nb {
        let p = &*pk.add(b);
        let ys = act_qs(&xs, b);
        let mut isum = [_mm256_setzero_si256(); MR];
        // Two independent chains of dot products, each with its own scale: the two 16-value halves of a chunk
        // (Q6_K), or two chunks (Q4_K, Q5_K).
        let (pairs, steps) = if K::HALF { (8, 4) } else { (4, 8) };
        for h in 0..pairs {
            let mut a = [[_mm256_setzero_si256(); MR]; 2];
            for t in 0..steps {
                for (e, chain) in a.iter_mut().enumerate() {
                    let (c, g) = if K::HALF { (h, 4 * e + t) } else { (2 * h + e, t) };
                    let w = p.w[c][g];
                    for r in 0..MR {
                        let y = _mm256_set1_epi32(std::ptr::read_unaligned(ys[r].add(8 * c + g)));
                        chain[r] = M::dot_us(chain[r], w, y);
                    }
                }
            }
            let (s0, s1) = if K::HALF { (p.sc[2 * h], p.sc[2 * h + 1]) } else { (p.sc[4 * h], p.sc[4 * h + 2]) };
            for r in 0..MR {
                let scaled = _mm256_add_epi32(_mm256_mullo_epi32(a[0][r], s0), _mm256_mullo_epi32(a[1][r], s1));
                isum[r] = _mm256_add_epi32(isum[r], scaled);
            }
        }
        finish(p, b, &xs, &isum, &mut acc);
    }
    acc
}

/// A super-block's end for MR activation rows: the offset term from the activation's 16-value sums, then
/// [`float_step`](super::x86::float_step) lane by lane.
#[inline(always)]
unsafe fn finish<const MR: usize>(
    p: &KPack,
    b: usize,
    xs: &[*const XBlockK; MR],
    isum: &[__m256i; MR],
    acc: &mut [__m256; MR],
) {
    finish_parts(&p.off, p.d, p.f, b, xs, isum, acc)
}

/// [`finish`] from a super-block's offset coefficients and factors.
#[inline(always)]
pub(super) unsafe fn finish_parts<const MR: usize>(
    off_coef: &[__m256i; 8],
    d: __m256,
    f: __m256,
    b: usize,
    xs: &[*const XBlockK; MR],
    isum: &[__m256i; MR],
    acc: &mut [__m256; MR],
) {
    for r in 0..MR {
        let xb = &*xs[r].add(b);
        let bs = xb.bsums.as_ptr() as *const i32;
        let mut off = _mm256_setzero_si256();
        for (q, coef) in off_coef.iter().enumerate() {
            let pair = _mm256_set1_epi32(std::ptr::read_unaligned(bs.add(q)));
            off = _mm256_add_epi32(off, _mm256_madd_epi16(*coef, pair));
        }
        let xd = _mm256_set1_ps(xb.d);
        let a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(d, xd), acc[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(off), _mm256_mul_ps(f, xd), a);
    }
}

/// [`micro`] without `vpdpbusd` (AVX2): the `vpmaddubsw` products of [`KKind::I16_STEPS`] steps are summed in
/// i16, then one `vpmaddwd` by the lane's scale (as an i16 pair) gives scale · their sum in i32: about 17
/// instructions per 32 values and activation row where emulating `vpdpbusd` (`vpmaddubsw`, `vpmaddwd` by ones,
/// add) and `vpmulld` take 27. The same exact integers.
#[inline(always)]
unsafe fn micro_avx2<K: KKind, const MR: usize>(pk: *const KPack, nb: usize, xs: [*const XBlockK; MR]) -> [__m256; MR] {
    let mut acc = [_mm256_setzero_ps(); MR];
    for b in 0..nb {
        let p = &*pk.add(b);
        let ys = act_qs(&xs, b);
        let mut isum = [_mm256_setzero_si256(); MR];
        // one scale per segment: 16 values (Q6_K) or 32 (Q4_K, Q5_K)
        let (segs, seg_steps) = if K::HALF { (16, 4) } else { (8, 8) };
        for sg in 0..segs {
            let (c, g0) = if K::HALF { (sg / 2, 4 * (sg % 2)) } else { (sg, 0) };
            let s = p.sc[if K::HALF { sg } else { 2 * sg }];
            // (scale, scale) as i16 in each lane (Q6_K's scales are signed)
            let s16 = _mm256_blend_epi16::<0xAA>(s, _mm256_slli_epi32::<16>(s));
            let mut t = 0;
            while t < seg_steps {
                let mut a16 = [_mm256_setzero_si256(); MR];
                for g in g0 + t..g0 + t + K::I16_STEPS.min(seg_steps) {
                    let w = p.w[c][g];
                    for r in 0..MR {
                        let y = _mm256_set1_epi32(std::ptr::read_unaligned(ys[r].add(8 * c + g)));
                        a16[r] = _mm256_add_epi16(a16[r], _mm256_maddubs_epi16(w, y));
                    }
                }
                for r in 0..MR {
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(a16[r], s16));
                }
                t += K::I16_STEPS;
            }
        }
        finish(p, b, &xs, &isum, &mut acc);
    }
    acc
}

/// Activation rows `r..r + MR` against the packed group at `pk`: its `valid` lanes go to `dst[row · n + i]`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_rows<K: KKind, M: Mac, const MR: usize>(
    pk: *const KPack,
    nb: usize,
    x: *const XBlockK,
    r: usize,
    dst: *mut f32,
    n: usize,
    valid: usize,
) {
    let xs = act_rows::<_, MR>(x, r, nb);
    store_lanes(micro::<K, M, MR>(pk, nb, xs), dst, r, n, valid);
}

/// A packed kernel that [`drive`] runs: its packed super-block of `WIDTH` weight rows, how to pack one, and its
/// tiles of activation rows (the widest `MR`, then 4, then 1).
pub(super) trait PackedKernel {
    type P;
    /// Bytes of one weight super-block.
    const BYTES: usize;
    /// Weight rows per packed super-block.
    const WIDTH: usize;
    /// Activation rows of the widest tile (4 or 8).
    const MR: usize;
    /// This thread's room for `len` packed super-blocks (grown as needed, reused across calls).
    fn scratch(len: usize) -> *mut Self::P;
    /// Packs super-block `b` of the first `WIDTH` rows at `rows` into `out`.
    unsafe fn pack(rows: &[*const u8; 16], b: usize, out: *mut Self::P);
    /// Activation rows `r..r + MR` against a packed group at `pk`: its `valid` lanes go to `dst[row · n + i]`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const MR: usize>(
        pk: *const Self::P,
        nb: usize,
        x: *const XBlockK,
        r: usize,
        dst: *mut f32,
        n: usize,
        valid: usize,
    );
}

/// Output columns `rows` of `a` by the packed kernel `T`, a panel of [`PANEL`] · 8 weight rows at a time: the
/// panel's groups are packed into `pk` (room for a panel of `a.nb` super-blocks), then every tile of activation
/// rows runs against all of them.
#[inline(always)]
pub(super) unsafe fn drive<T: PackedKernel>(a: Mat<XBlockK>, rows: std::ops::Range<usize>, pk: *mut T::P) {
    let (w, nb) = (a.w, a.nb);
    let row_bytes = nb * T::BYTES;
    drive_with::<T>(a, rows, pk, |g0, valid, out| {
        // a short last group repeats its last row; those lanes are not stored
        let mut group = [w; 16];
        for (i, g) in group.iter_mut().enumerate().take(T::WIDTH) {
            *g = w.add((g0 + i.min(valid - 1)) * row_bytes);
        }
        for b in 0..nb {
            T::pack(&group, b, out.add(b));
        }
    })
}

/// [`drive`] with the packing of a group of `T::WIDTH` rows (its first row, its real rows, its `nb` packed
/// super-blocks to write) given.
#[inline(always)]
pub(super) unsafe fn drive_with<T: PackedKernel>(
    a: Mat<XBlockK>,
    rows: std::ops::Range<usize>,
    pk: *mut T::P,
    pack_group: impl Fn(usize, usize, *mut T::P),
) {
    let Mat { nb, x, m, n, out, .. } = a;
    let mut j0 = rows.start;
    while j0 < rows.end {
        let j1 = rows.end.min(j0 + 8 * PANEL);
        let groups = (j1 - j0).div_ceil(T::WIDTH);
        for gi in 0..groups {
            let g0 = j0 + T::WIDTH * gi;
            pack_group(g0, (j1 - g0).min(T::WIDTH), pk.add(gi * nb));
        }
        let at = |gi: usize| {
            let g0 = T::WIDTH * gi;
            (pk.add(gi * nb) as *const T::P, out.add(j0 + g0), (j1 - j0 - g0).min(T::WIDTH))
        };
        let mut r = 0;
        if T::MR == 8 {
            while r + 8 <= m {
                for gi in 0..groups {
                    let (p, dst, valid) = at(gi);
                    T::tile::<8>(p, nb, x, r, dst, n, valid);
                }
                r += 8;
            }
        }
        while r + 4 <= m {
            for gi in 0..groups {
                let (p, dst, valid) = at(gi);
                T::tile::<4>(p, nb, x, r, dst, n, valid);
            }
            r += 4;
        }
        while r < m {
            for gi in 0..groups {
                let (p, dst, valid) = at(gi);
                T::tile::<1>(p, nb, x, r, dst, n, valid);
            }
            r += 1;
        }
        j0 = j1;
    }
}

/// The 256-bit packed kernel: 8 weight rows a vector, dot product `M`.
pub(crate) struct Ymm<K, M>(std::marker::PhantomData<(K, M)>);

impl<K: KKind, M: Mac> PackedKernel for Ymm<K, M> {
    type P = KPack;
    const BYTES: usize = K::BYTES;
    const WIDTH: usize = 8;
    const MR: usize = M::MR;
    fn scratch(len: usize) -> *mut KPack {
        PACK.with(|cell| {
            let mut buf = cell.borrow_mut();
            if buf.len() < len {
                buf.resize(len, ZERO_PACK);
            }
            buf.as_mut_ptr()
        })
    }
    #[inline(always)]
    unsafe fn pack(rows: &[*const u8; 16], b: usize, out: *mut KPack) {
        let group: &[*const u8; 8] = &*(rows.as_ptr() as *const [*const u8; 8]);
        pack::<K>(group, b, out as *mut __m256i, 1);
    }

    #[inline(always)]
    unsafe fn tile<const MR: usize>(
        pk: *const KPack,
        nb: usize,
        x: *const XBlockK,
        r: usize,
        dst: *mut f32,
        n: usize,
        valid: usize,
    ) {
        tile_rows::<K, M, MR>(pk, nb, x, r, dst, n, valid)
    }
}

/// The k-quant row kernel: the tile kernel ([`KBlocks`]) below [`PACK_MIN_M`] activation rows, the packed kernel
/// `T` from there.
pub(crate) struct KRows<K, T>(std::marker::PhantomData<(K, T)>);

impl<K: KKind, T: PackedKernel> RowKernel for KRows<K, T> {
    type X = XBlockK;
    #[inline(always)]
    unsafe fn rows(a: Mat<XBlockK>, rows: std::ops::Range<usize>) {
        if a.m < PACK_MIN_M {
            return Tiled::<KBlocks<K>>::rows(a, rows);
        }
        let pk = T::scratch(8 * PANEL / T::WIDTH * a.nb);
        drive::<T>(a, rows, pk)
    }
}
