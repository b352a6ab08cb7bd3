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

use super::x86::{self, KBlocks, KKind, KMac, Scalars8};
use super::Isa;
use crate::cpu_matmul::quant::XBlockK;
use crate::cpu_matmul::x86::mac::Mac;
use crate::cpu_matmul::x86::{
    act_rows, rows_avx2, rows_vnni, rows_vnni512, store_lanes, transpose8, Mat, RowKernel, Tiled,
};
use candle_core::quantized::GgmlDType;
use core::arch::x86_64::*;
use std::cell::RefCell;

/// Activation rows from which a call packs its weights (fewer: the tile kernel, straight from the weights).
pub const PACK_MIN_M: usize = 4;

/// Groups of 8 weight rows packed together: each activation tile runs against all of them while it is in L1.
pub const PANEL: usize = 4;

/// One super-block of 8 weight rows, transposed: lane i of every vector is row i.
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
#[inline(always)]
unsafe fn pack<K: KKind>(rows: &[*const u8; 8], b: usize) -> KPack {
    let mut p = [rows[0]; 8];
    for i in 0..8 {
        p[i] = rows[i].add(b * K::BYTES);
    }
    let mut t = Transposed([[0; 224]; 8]);
    for &o in K::VECS {
        let mut v = [_mm256_setzero_si256(); 8];
        for i in 0..8 {
            v[i] = _mm256_loadu_si256(p[i].add(o) as *const __m256i);
        }
        for (g, v) in transpose8(v).into_iter().enumerate() {
            _mm256_storeu_si256(t.0[g].as_mut_ptr().add(o) as *mut __m256i, v);
        }
    }
    let mut w = [[_mm256_setzero_si256(); 8]; 8];
    for (c, wc) in w.iter_mut().enumerate() {
        for (g, v) in wc.iter_mut().enumerate() {
            *v = K::chunk(t.0[g].as_ptr(), c);
        }
    }
    let Scalars8 { sc, off, d, f } = K::scalars8(&p);
    KPack { w, sc, off, d, f }
}

/// MR activation rows against a packed group of 8 weight rows (nb super-blocks at `pk`): lane i of result r
/// is weight row i's dot product with activation row r.
#[inline(always)]
unsafe fn micro<K: KKind, M: Mac, const MR: usize>(
    pk: *const KPack,
    nb: usize,
    xs: [*const XBlockK; MR],
) -> [__m256; MR] {
    let mut acc = [_mm256_setzero_ps(); MR];
    for b in 0..nb {
        let p = &*pk.add(b);
        let mut ys = [std::ptr::null::<i32>(); MR];
        for r in 0..MR {
            ys[r] = (*xs[r].add(b)).qs.as_ptr() as *const i32;
        }
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
        for r in 0..MR {
            let xb = &*xs[r].add(b);
            let bs = xb.bsums.as_ptr() as *const i32;
            let mut off = _mm256_setzero_si256();
            for q in 0..8 {
                let pair = _mm256_set1_epi32(std::ptr::read_unaligned(bs.add(q)));
                off = _mm256_add_epi32(off, _mm256_madd_epi16(p.off[q], pair));
            }
            // float_step, lane by lane
            let xd = _mm256_set1_ps(xb.d);
            let a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(p.d, xd), acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(off), _mm256_mul_ps(p.f, xd), a);
        }
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

/// The k-quant row kernel: the tile kernel ([`KBlocks`] with the scale step `KM`) below [`PACK_MIN_M`]
/// activation rows, the packed kernel (dot product `M`) from there.
pub(crate) struct KRows<K, KM, M>(std::marker::PhantomData<(K, KM, M)>);

impl<K: KKind, KM: KMac, M: Mac> RowKernel for KRows<K, KM, M> {
    type X = XBlockK;
    #[inline(always)]
    unsafe fn rows(a: Mat<XBlockK>, rows: std::ops::Range<usize>) {
        if a.m < PACK_MIN_M {
            return Tiled::<KBlocks<K, KM>>::rows(a, rows);
        }
        let Mat { w, nb, x, m, n, out } = a;
        let row_bytes = nb * K::BYTES;
        // No closure around the kernel: a closure does not inherit the caller's target features.
        let pk = PACK.with(|cell| {
            let mut buf = cell.borrow_mut();
            if buf.len() < PANEL * nb {
                buf.resize(PANEL * nb, ZERO_PACK);
            }
            buf.as_mut_ptr()
        });
        let mut j0 = rows.start;
        while j0 < rows.end {
            let j1 = rows.end.min(j0 + 8 * PANEL);
            let groups = (j1 - j0).div_ceil(8);
            for gi in 0..groups {
                let g0 = j0 + 8 * gi;
                let valid = (j1 - g0).min(8);
                // a short last group repeats its last row; those lanes are not stored
                let mut group = [w; 8];
                for (i, g) in group.iter_mut().enumerate() {
                    *g = w.add((g0 + i.min(valid - 1)) * row_bytes);
                }
                for b in 0..nb {
                    pk.add(gi * nb + b).write(pack::<K>(&group, b));
                }
            }
            let group = |gi: usize| (pk.add(gi * nb) as *const KPack, out.add(j0 + 8 * gi), (j1 - j0 - 8 * gi).min(8));
            let mut r = 0;
            if M::MR == 8 {
                while r + 8 <= m {
                    for gi in 0..groups {
                        let (p, dst, valid) = group(gi);
                        tile_rows::<K, M, 8>(p, nb, x, r, dst, n, valid);
                    }
                    r += 8;
                }
            }
            while r + 4 <= m {
                for gi in 0..groups {
                    let (p, dst, valid) = group(gi);
                    tile_rows::<K, M, 4>(p, nb, x, r, dst, n, valid);
                }
                r += 4;
            }
            while r < m {
                for gi in 0..groups {
                    let (p, dst, valid) = group(gi);
                    tile_rows::<K, M, 1>(p, nb, x, r, dst, n, valid);
                }
                r += 1;
            }
            j0 = j1;
        }
    }
}

/// Output columns `range` of `out (m, n) = xq @ W^T` for a k-quant `w`: the tile kernel below [`PACK_MIN_M`]
/// activation rows, the packed one from there, compiled for `isa`.
///
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
        GgmlDType::Q4K => rows::<x86::Q4K>(isa, mat, range),
        GgmlDType::Q5K => rows::<x86::Q5K>(isa, mat, range),
        GgmlDType::Q6K => rows::<x86::Q6K>(isa, mat, range),
        _ => unreachable!("checked by decode_matmul"),
    }
}

#[inline(always)]
unsafe fn rows<K: KKind>(isa: Isa, mat: Mat<XBlockK>, range: std::ops::Range<usize>) {
    use crate::cpu_matmul::x86::mac;
    match isa {
        Isa::Avx2 => rows_avx2::<KRows<K, x86::Avx2, mac::Avx2>>(mat, range),
        Isa::AvxVnni => rows_vnni::<KRows<K, x86::Vnni, mac::Vnni>>(mat, range),
        Isa::Avx512Vnni => rows_vnni512::<KRows<K, x86::Vnni512, mac::Vnni512>>(mat, range),
    }
}
