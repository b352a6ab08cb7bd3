//! The 32-value block kernel (Q4_1, Q5_0, Q8_0 against int8 activations): 8 weight rows per vector, lanes are
//! rows, every activation row against them; and its dispatch by weight type and instruction set.

use super::formats::{Kind, KQ4_1, KQ5_0, KQ8_0};
use super::mac::{Avx2, Mac, Vnni, Vnni512};
use super::pack::{act_rows, store_lanes, unpack8, Packed, PACK};
use super::rows::{rows_avx2, rows_vnni, rows_vnni512, Mat, RowKernel};
use crate::cpu_matmul::quant::XBlock;
use crate::cpu_matmul::Isa;
use crate::cpu_simd::{f16_at, hsum_i32};
use candle_core::quantized::GgmlDType;
use core::arch::x86_64::*;

/// One block of a packed group against MR activation rows: lane i of `acc[r]` and `sm[r]` advance for weight
/// row i and activation row r. Each block's integer sum is exact and each lane's float steps are the same
/// whatever MR, group, call or `Mac`: a row's result is bit-identical at any m and on every ISA.
#[inline(always)]
unsafe fn step<K: Kind, M: Mac, const MR: usize>(
    p: &Packed,
    b: usize,
    xs: &[*const XBlock; MR],
    acc: &mut [__m256; MR],
    sm: &mut [__m256; MR],
) {
    for r in 0..MR {
        let xb = &*xs[r].add(b);
        let y = xb.qs.as_ptr() as *const i32;
        // two independent chains: exact integers, any order
        let mut is = [_mm256_set1_epi32(xb.corr), _mm256_setzero_si256()];
        for g in 0..8 {
            let yg = _mm256_set1_epi32(std::ptr::read_unaligned(y.add(g)));
            is[g % 2] = K::dot::<M>(is[g % 2], p.w[g], yg);
        }
        let is = _mm256_add_epi32(is[0], is[1]);
        let sc = _mm256_mul_ps(p.d, _mm256_set1_ps(xb.d));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), sc, acc[r]);
        if K::HAS_MIN {
            sm[r] = _mm256_add_ps(sm[r], _mm256_mul_ps(p.m, _mm256_set1_ps(xb.s)));
        }
    }
}

/// Weight bytes from which one activation row takes [`row_pair`] instead of the 8-row kernel: the 8-row kernel
/// does less arithmetic per weight and wins on smaller matrices (up to a small model's vocabulary head); beyond,
/// one row is memory-bound and two front-to-back streams read faster than eight interleaved ones. Q8_0 takes
/// [`row_pair`] at any size ([`Kind::ROW_PAIRS`]).
/// (16 KiB in unit tests, so that their small matrices run both kernels.)
const STREAM_BYTES: usize = if cfg!(test) { 16 << 10 } else { 64 << 20 };

/// Two weight rows against one activation row, with exactly the float steps of a lane of [`step`] (scalar
/// FMA of the exact block sum, then the min term): bit-identical to the 8-row kernel.
#[inline(always)]
unsafe fn row_pair<K: Kind, M: Mac>(w0: *const u8, w1: *const u8, nb: usize, x: *const XBlock) -> (f32, f32) {
    let (mut a0, mut a1) = (_mm_setzero_ps(), _mm_setzero_ps());
    let (mut s0, mut s1) = (_mm_setzero_ps(), _mm_setzero_ps());
    for b in 0..nb {
        let xb = &*x.add(b);
        let y = _mm256_loadu_si256(xb.qs.as_ptr() as *const __m256i);
        let (p0, p1) = (w0.add(b * K::BYTES), w1.add(b * K::BYTES));
        let z = _mm256_setzero_si256();
        let i0 = hsum_i32(K::dot::<M>(z, K::prep::<M>(K::load(p0)), y)) + xb.corr;
        let i1 = hsum_i32(K::dot::<M>(z, K::prep::<M>(K::load(p1)), y)) + xb.corr;
        let xd = _mm_set_ss(xb.d);
        let d0 = _mm_mul_ss(_mm_set_ss(f16_at(p0.add(K::D_AT))), xd);
        let d1 = _mm_mul_ss(_mm_set_ss(f16_at(p1.add(K::D_AT))), xd);
        a0 = _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), i0), d0, a0);
        a1 = _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), i1), d1, a1);
        if K::HAS_MIN {
            let xs = _mm_set_ss(xb.s);
            s0 = _mm_add_ss(s0, _mm_mul_ss(_mm_set_ss(f16_at(p0.add(K::M_AT))), xs));
            s1 = _mm_add_ss(s1, _mm_mul_ss(_mm_set_ss(f16_at(p1.add(K::M_AT))), xs));
        }
    }
    (_mm_cvtss_f32(_mm_add_ss(a0, s0)), _mm_cvtss_f32(_mm_add_ss(a1, s1)))
}

/// MR activation rows against 8 weight rows, `Σ_b fma(f32(Σ_32 w·y), d_w·d_x) + Σ_b m_w·s_x` per lane: from
/// a group packed at `pk`, or (`pk` null) unpacked from `rows` block by block (few activation rows: packing
/// would not pay).
#[inline(always)]
unsafe fn micro<K: Kind, M: Mac, const MR: usize>(
    pk: *const Packed,
    rows: &[*const u8; 8],
    nb: usize,
    xs: [*const XBlock; MR],
) -> [__m256; MR] {
    let mut acc = [_mm256_setzero_ps(); MR];
    let mut sm = [_mm256_setzero_ps(); MR];
    for b in 0..nb {
        if pk.is_null() {
            // Eight interleaved row streams defeat the hardware prefetcher: fetch the next-but-one group (rows
            // 16..24 from here, contiguous) line by line, spread over this group's blocks.
            // (Past the matrix's end the addresses are only prefetched, never read.)
            let next = rows[0].wrapping_add(16 * nb * K::BYTES);
            for l in 0..(8 * K::BYTES).div_ceil(64) {
                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add((b * (8 * K::BYTES).div_ceil(64) + l) * 64) as *const i8);
            }
            step::<K, M, MR>(&unpack8::<K, M>(rows, b), b, &xs, &mut acc, &mut sm);
        } else {
            step::<K, M, MR>(&*pk.add(b), b, &xs, &mut acc, &mut sm);
        }
    }
    for r in 0..MR {
        acc[r] = _mm256_add_ps(acc[r], sm[r]);
    }
    acc
}

/// Activation rows `r..r + MR` against a group of 8 weight rows (packed at `pk`, or null: unpacked from `rows`
/// on the fly): the group's `valid` lanes go to `dst[row · n + i]`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_rows<K: Kind, M: Mac, const MR: usize>(
    pk: *const Packed,
    rows: &[*const u8; 8],
    nb: usize,
    x: *const XBlock,
    r: usize,
    dst: *mut f32,
    n: usize,
    valid: usize,
) {
    let xs = act_rows::<_, MR>(x, r, nb);
    store_lanes(micro::<K, M, MR>(pk, rows, nb, xs), dst, r, n, valid);
}

/// The 32-value block formats (Q4_1, Q5_0, Q8_0) with int8 activations and the dot product `M`: the
/// lanes-are-rows kernel at every m.
pub struct Blocks32<K, M>(std::marker::PhantomData<(K, M)>);

impl<K: Kind, M: Mac> RowKernel for Blocks32<K, M> {
    type X = XBlock;
    /// 8 weight rows at a time are unpacked to bytes and transposed (straight from registers for 1-3
    /// activation rows, else into this thread's scratch), then every activation row runs against them, MR at
    /// a time.
    #[inline(always)]
    unsafe fn rows(a: Mat<XBlock>, rows: std::ops::Range<usize>) {
        let Mat { w, nb, x, m, n, out } = a;
        let row_bytes = nb * K::BYTES;
        if m == 1 && (n * row_bytes >= STREAM_BYTES || K::ROW_PAIRS && crate::levers::get().q8_row_pairs) {
            // One activation row against a matrix far beyond the caches (a vocabulary head) is memory-bound: two
            // weight rows at a time, taken from the two halves of the range so that each is read front to back
            // (eight interleaved rows read it slower, even with the prefetches).
            let half = rows.len() / 2;
            for i in 0..half {
                let (j0, j1) = (rows.start + i, rows.start + half + i);
                let (a, b) = row_pair::<K, M>(w.add(j0 * row_bytes), w.add(j1 * row_bytes), nb, x);
                *out.add(j0) = a;
                *out.add(j1) = b;
            }
            if rows.len() % 2 == 1 {
                let j = rows.end - 1;
                *out.add(j) = row_pair::<K, M>(w.add(j * row_bytes), w.add(j * row_bytes), nb, x).0;
            }
            return;
        }
        // No closure around the kernel: a closure does not inherit the caller's target features.
        let pk = PACK.with(|cell| {
            let mut buf = cell.borrow_mut();
            if buf.len() < nb {
                buf.resize(
                    nb,
                    Packed { w: [_mm256_setzero_si256(); 8], d: _mm256_setzero_ps(), m: _mm256_setzero_ps() },
                );
            }
            buf.as_mut_ptr()
        });
        let mut j0 = rows.start;
        while j0 < rows.end {
            let valid = (rows.end - j0).min(8);
            // a short last group repeats its last row; those lanes are not stored
            let mut group = [w; 8];
            for (i, g) in group.iter_mut().enumerate() {
                *g = w.add((j0 + i.min(valid - 1)) * row_bytes);
            }
            let dst = out.add(j0);
            match m {
                1 => tile_rows::<K, M, 1>(std::ptr::null(), &group, nb, x, 0, dst, n, valid),
                2 => tile_rows::<K, M, 2>(std::ptr::null(), &group, nb, x, 0, dst, n, valid),
                3 => tile_rows::<K, M, 3>(std::ptr::null(), &group, nb, x, 0, dst, n, valid),
                _ => {
                    // The group's 8 rows are read block by block, 8 strided streams: fetch the next group's
                    // (contiguous) rows line by line, spread over this group's blocks.
                    // (Past the matrix's end the addresses are only prefetched, never read.)
                    let next = group[0].wrapping_add(8 * row_bytes);
                    let lines = (8 * row_bytes).div_ceil(64);
                    let per_block = lines.div_ceil(nb);
                    for b in 0..nb {
                        for l in b * per_block..((b + 1) * per_block).min(lines) {
                            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(l * 64) as *const i8);
                        }
                        pk.add(b).write(unpack8::<K, M>(&group, b));
                    }
                    let mut r = 0;
                    if M::MR == 8 {
                        while r + 8 <= m {
                            tile_rows::<K, M, 8>(pk, &group, nb, x, r, dst, n, valid);
                            r += 8;
                        }
                    }
                    while r + 4 <= m {
                        tile_rows::<K, M, 4>(pk, &group, nb, x, r, dst, n, valid);
                        r += 4;
                    }
                    while r < m {
                        tile_rows::<K, M, 1>(pk, &group, nb, x, r, dst, n, valid);
                        r += 1;
                    }
                }
            }
            j0 += valid;
        }
    }
}

/// Output columns `rows` of `out (m, n) = xq @ W^T` for a 32-value block `w`, by the kernel compiled for `isa`.
///
/// # Safety
/// The CPU must support `isa`; `w` holds n rows of nb blocks of `dtype`; `xq` holds m rows of nb blocks
/// quantized with this (dtype, isa)'s correction; `out` has m·n values.
#[allow(clippy::too_many_arguments)]
pub unsafe fn run(
    dtype: GgmlDType,
    isa: Isa,
    w: *const u8,
    nb: usize,
    xq: &[XBlock],
    m: usize,
    n: usize,
    rows: std::ops::Range<usize>,
    out: *mut f32,
) {
    let mat = Mat { w, nb, x: xq.as_ptr(), m, n, out };
    match (dtype, isa) {
        (GgmlDType::Q4_1, Isa::Avx2) => rows_avx2::<Blocks32<KQ4_1, Avx2>>(mat, rows),
        (GgmlDType::Q4_1, Isa::AvxVnni) => rows_vnni::<Blocks32<KQ4_1, Vnni>>(mat, rows),
        (GgmlDType::Q5_0, Isa::Avx2) => rows_avx2::<Blocks32<KQ5_0, Avx2>>(mat, rows),
        (GgmlDType::Q5_0, Isa::AvxVnni) => rows_vnni::<Blocks32<KQ5_0, Vnni>>(mat, rows),
        (GgmlDType::Q8_0, Isa::Avx2) => rows_avx2::<Blocks32<KQ8_0, Avx2>>(mat, rows),
        (GgmlDType::Q8_0, Isa::AvxVnni) => rows_vnni::<Blocks32<KQ8_0, Vnni>>(mat, rows),
        (GgmlDType::Q4_1, Isa::Avx512Vnni) => rows_vnni512::<Blocks32<KQ4_1, Vnni512>>(mat, rows),
        (GgmlDType::Q5_0, Isa::Avx512Vnni) => rows_vnni512::<Blocks32<KQ5_0, Vnni512>>(mat, rows),
        (GgmlDType::Q8_0, Isa::Avx512Vnni) => rows_vnni512::<Blocks32<KQ8_0, Vnni512>>(mat, rows),
        _ => unreachable!("checked by decode_matmul"),
    }
}
