//! Decode kernels: int8 dot products of quantized weight rows with quantized activation rows.
//!
//! Weight block layouts (GGML, little-endian, as candle stores them):
//! * Q4_1, 20 bytes: `d: f16, m: f16, qs: [u8; 16]`; value j = (qs[j] & 15)·d + m, value j+16 = (qs[j] >> 4)·d + m.
//! * Q5_0, 22 bytes: `d: f16, qh: u32, qs: [u8; 16]`; 5th bit of value i is bit i of qh; value = (q - 16)·d.
//! * Q8_0, 34 bytes: `d: f16, qs: [i8; 32]`.

use super::quant::{quantize_rows, XBlock, QK};
use super::{par_chunks, Isa, Pool};
use crate::{Error, Result};
use candle_core::quantized::GgmlDType;
use std::cell::RefCell;

/// Bytes per 32-value block.
pub fn block_bytes(dtype: GgmlDType) -> usize {
    match dtype {
        GgmlDType::Q4_1 => 20,
        GgmlDType::Q5_0 => 22,
        GgmlDType::Q8_0 => 34,
        _ => 0,
    }
}

/// The correction multiplier the activation blocks must carry for this weight type and ISA.
fn corr_mult(dtype: GgmlDType, isa: Isa) -> i32 {
    match (dtype, isa) {
        (GgmlDType::Q5_0, _) => 16,
        (GgmlDType::Q8_0, Isa::AvxVnni | Isa::Avx512Vnni) => 128,
        _ => 0,
    }
}

thread_local! {
    static XQ: RefCell<Vec<XBlock>> = const { RefCell::new(Vec::new()) };
}

/// Output rows per parallel chunk: enough weight bytes per chunk (~16 KiB) to amortize the hand-out.
pub(crate) fn grain(row_bytes: usize) -> usize {
    (16 * 1024 / row_bytes.max(1)).clamp(4, 256)
}

/// The frame both int8 paths share: check W's size, quantize x (m rows of `k / block_vals` blocks) into this
/// thread's reused buffer `scratch`, then hand the output columns (weight rows) to `run` over the work pool.
#[allow(clippy::too_many_arguments)]
pub(crate) fn blocked_matmul<X: Copy + Sync>(
    scratch: &'static std::thread::LocalKey<RefCell<Vec<X>>>,
    zero: X,
    (dtype, block_vals, bytes): (GgmlDType, usize, usize),
    w: &[u8],
    n: usize,
    k: usize,
    m: usize,
    quantize: impl FnOnce(&mut [X]),
    run: impl Fn(&[X], std::ops::Range<usize>) + Sync,
) -> Result<()> {
    if bytes == 0 {
        return Err(Error::Unsupported(format!("fast decode matmul for {dtype:?}")));
    }
    if !k.is_multiple_of(block_vals) || w.len() != n * (k / block_vals) * bytes {
        return Err(Error::InvalidModel(format!("{dtype:?} weight of {} bytes for {n}x{k}", w.len())));
    }
    let nb = k / block_vals;
    scratch.with(|cell| {
        let mut xq = cell.borrow_mut();
        if xq.len() < m * nb {
            xq.resize(m * nb, zero);
        }
        let xq = &mut xq[..m * nb];
        quantize(xq);
        let xq: &[X] = xq;
        par_chunks(Pool::Candle, n, grain(nb * bytes), |rows| run(xq, rows));
    });
    Ok(())
}

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
    let nb = k / QK;
    blocked_matmul(
        &XQ,
        XBlock::ZERO,
        (dtype, QK, block_bytes(dtype)),
        w,
        n,
        k,
        m,
        |xq| quantize_rows(x, xq, corr_mult(dtype, isa), cfg!(target_arch = "x86_64")),
        |xq, rows| {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the caller checked that the CPU supports `isa`; each chunk writes only the output
            // columns of its own weight rows.
            unsafe {
                x86::run(dtype, isa, w.as_ptr(), nb, xq, m, n, rows, out_ptr as *mut f32)
            }
            #[cfg(not(target_arch = "x86_64"))]
            unreachable!("no Isa exists off x86_64 ({rows:?}, {out_ptr}, {nb}, {})", xq.len())
        },
    )
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::*;
    use core::arch::x86_64::*;

    /// u8 × i8 dot products of 4-byte groups added to i32 lanes.
    pub trait Mac {
        /// init + Σ_{4 bytes} u·s (u unsigned, s signed; |u| <= 31 so the AVX2 i16 step cannot saturate).
        unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i;
        /// Σ_{4 bytes} w·y for signed w and y; `corr` is the activation block's correction for +128 offsets.
        unsafe fn dot_ss(corr: __m256i, w: __m256i, y: __m256i) -> __m256i;
    }

    pub struct Avx2;
    pub struct Vnni;
    pub struct Vnni512;

    impl Mac for Avx2 {
        #[inline(always)]
        unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i {
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
            _mm256_add_epi32(init, p)
        }
        #[inline(always)]
        unsafe fn dot_ss(_corr: __m256i, w: __m256i, y: __m256i) -> __m256i {
            // |w|·(y·sign(w)): |w| <= 128 and |y| <= 127, so pairs stay within i16.
            let aw = _mm256_sign_epi8(w, w);
            let sy = _mm256_sign_epi8(y, w);
            _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sy), _mm256_set1_epi16(1))
        }
    }

    impl Mac for Vnni {
        #[inline(always)]
        unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i {
            _mm256_dpbusd_avx_epi32(init, u, s)
        }
        #[inline(always)]
        unsafe fn dot_ss(corr: __m256i, w: __m256i, y: __m256i) -> __m256i {
            // (w + 128) as u8 times y, minus 128·Σy (corr = -128·lane sums of y)
            let wu = _mm256_xor_si256(w, _mm256_set1_epi8(-128i8));
            _mm256_dpbusd_avx_epi32(corr, wu, y)
        }
    }

    impl Mac for Vnni512 {
        #[inline(always)]
        unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i {
            _mm256_dpbusd_epi32(init, u, s)
        }
        #[inline(always)]
        unsafe fn dot_ss(corr: __m256i, w: __m256i, y: __m256i) -> __m256i {
            let wu = _mm256_xor_si256(w, _mm256_set1_epi8(-128i8));
            _mm256_dpbusd_epi32(corr, wu, y)
        }
    }

    #[inline(always)]
    pub(crate) unsafe fn f16_at(p: *const u8) -> f32 {
        let h = std::ptr::read_unaligned(p as *const u16);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
    }

    /// exp(x) for x <= ~88 (Cephes' single-precision polynomial, ~2 ulp; below -87.3 the result is 0).
    #[inline(always)]
    pub(crate) unsafe fn exp8(x: __m256) -> __m256 {
        let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(-87.336_54));
        let x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.336_54)), _mm256_set1_ps(88.376_26));
        let fx = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
            x,
            _mm256_set1_ps(std::f32::consts::LOG2_E),
        ));
        let r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693_359_4), x);
        let r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut y = _mm256_set1_ps(1.987_569_1e-4);
        for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
            y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(c));
        }
        let r2 = _mm256_mul_ps(r, r);
        let y = _mm256_add_ps(_mm256_fmadd_ps(y, r2, r), _mm256_set1_ps(1.0));
        let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)));
        _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(pow2)))
    }

    /// The sum of a vector's 8 lanes.
    #[inline(always)]
    pub(crate) unsafe fn hsum(v: __m256) -> f32 {
        let r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
        let r = _mm_add_ss(r, _mm_movehdup_ps(r));
        _mm_cvtss_f32(r)
    }

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
        /// Weight bytes (as the Mac expects them), d, m.
        unsafe fn load(p: *const u8) -> (__m256i, f32, f32);
        unsafe fn dot<M: Mac>(w: __m256i, y: __m256i, corr: *const i32) -> __m256i;
    }

    pub struct KQ4_1;
    pub struct KQ5_0;
    pub struct KQ8_0;

    impl Kind for KQ4_1 {
        const BYTES: usize = 20;
        const HAS_MIN: bool = true;
        #[inline(always)]
        unsafe fn load(p: *const u8) -> (__m256i, f32, f32) {
            (nibbles(p.add(4)), f16_at(p), f16_at(p.add(2)))
        }
        #[inline(always)]
        unsafe fn dot<M: Mac>(w: __m256i, y: __m256i, _corr: *const i32) -> __m256i {
            M::dot_us(_mm256_setzero_si256(), w, y)
        }
    }

    impl Kind for KQ5_0 {
        const BYTES: usize = 22;
        const HAS_MIN: bool = false;
        #[inline(always)]
        unsafe fn load(p: *const u8) -> (__m256i, f32, f32) {
            let qh = std::ptr::read_unaligned(p.add(2) as *const u32);
            let hi = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
            (_mm256_or_si256(nibbles(p.add(6)), hi), f16_at(p), 0.0)
        }
        #[inline(always)]
        unsafe fn dot<M: Mac>(w: __m256i, y: __m256i, corr: *const i32) -> __m256i {
            // Σ (q - 16)·y = Σ q·y - 16·Σ y; corr holds -16·(lane sums of y)
            M::dot_us(_mm256_loadu_si256(corr as *const __m256i), w, y)
        }
    }

    impl Kind for KQ8_0 {
        const BYTES: usize = 34;
        const HAS_MIN: bool = false;
        #[inline(always)]
        unsafe fn load(p: *const u8) -> (__m256i, f32, f32) {
            (_mm256_loadu_si256(p.add(2) as *const __m256i), f16_at(p), 0.0)
        }
        #[inline(always)]
        unsafe fn dot<M: Mac>(w: __m256i, y: __m256i, corr: *const i32) -> __m256i {
            M::dot_ss(_mm256_loadu_si256(corr as *const __m256i), w, y)
        }
    }

    /// Dot products of one weight row (nb blocks at `w`) with MR activation rows.
    #[inline(always)]
    unsafe fn row_tile<K: Kind, M: Mac, const MR: usize>(
        w: *const u8,
        nb: usize,
        xs: [*const XBlock; MR],
    ) -> [f32; MR] {
        let mut acc = [_mm256_setzero_ps(); MR];
        let mut sm = [0f32; MR];
        for b in 0..nb {
            let (wv, dw, mw) = K::load(w.add(b * K::BYTES));
            for r in 0..MR {
                let xb = &*xs[r].add(b);
                let y = _mm256_loadu_si256(xb.qs.as_ptr() as *const __m256i);
                let dot = K::dot::<M>(wv, y, xb.corr.as_ptr());
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * xb.d), acc[r]);
                if K::HAS_MIN {
                    sm[r] += mw * xb.s;
                }
            }
        }
        let mut res = [0f32; MR];
        for r in 0..MR {
            res[r] = hsum(acc[r]) + sm[r];
        }
        res
    }

    /// Two weight rows against one activation row: two independent accumulator chains for m = 1.
    #[inline(always)]
    unsafe fn row_pair<K: Kind, M: Mac>(w0: *const u8, w1: *const u8, nb: usize, x: *const XBlock) -> (f32, f32) {
        let mut a0 = _mm256_setzero_ps();
        let mut a1 = _mm256_setzero_ps();
        let mut s0 = 0f32;
        let mut s1 = 0f32;
        for b in 0..nb {
            let xb = &*x.add(b);
            let y = _mm256_loadu_si256(xb.qs.as_ptr() as *const __m256i);
            let (wv0, dw0, mw0) = K::load(w0.add(b * K::BYTES));
            let (wv1, dw1, mw1) = K::load(w1.add(b * K::BYTES));
            let d0 = K::dot::<M>(wv0, y, xb.corr.as_ptr());
            let d1 = K::dot::<M>(wv1, y, xb.corr.as_ptr());
            a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_set1_ps(dw0 * xb.d), a0);
            a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_set1_ps(dw1 * xb.d), a1);
            if K::HAS_MIN {
                s0 += mw0 * xb.s;
                s1 += mw1 * xb.s;
            }
        }
        (hsum(a0) + s0, hsum(a1) + s1)
    }

    /// One weight format's dot products against one kind of activation block: what [`rows_impl`] runs.
    pub(crate) trait RowKernel {
        /// The quantized activation block.
        type X;
        /// Bytes of one weight block.
        const BYTES: usize;
        /// One weight row (nb blocks at `w`) against MR activation rows.
        unsafe fn tile<const MR: usize>(w: *const u8, nb: usize, xs: [*const Self::X; MR]) -> [f32; MR];
        /// Two weight rows against one activation row (two independent accumulator chains for m = 1).
        unsafe fn pair(w0: *const u8, w1: *const u8, nb: usize, x: *const Self::X) -> (f32, f32);
    }

    /// The 32-value block formats (Q4_1, Q5_0, Q8_0) with int8 activations and the dot product `M`.
    pub struct Blocks32<K, M>(std::marker::PhantomData<(K, M)>);

    impl<K: Kind, M: Mac> RowKernel for Blocks32<K, M> {
        type X = XBlock;
        const BYTES: usize = K::BYTES;
        #[inline(always)]
        unsafe fn tile<const MR: usize>(w: *const u8, nb: usize, xs: [*const XBlock; MR]) -> [f32; MR] {
            row_tile::<K, M, MR>(w, nb, xs)
        }
        #[inline(always)]
        unsafe fn pair(w0: *const u8, w1: *const u8, nb: usize, x: *const XBlock) -> (f32, f32) {
            row_pair::<K, M>(w0, w1, nb, x)
        }
    }

    /// Activation rows kept hot in L1 while a chunk's weight rows stream past.
    const ACT_TILE: usize = 16;

    /// Output columns `rows` (weight rows) of `out (m, n) = x (m, nb blocks) @ W^T`.
    #[inline(always)]
    pub(crate) unsafe fn rows_impl<R: RowKernel>(
        w: *const u8,
        nb: usize,
        x: *const R::X,
        m: usize,
        n: usize,
        rows: std::ops::Range<usize>,
        out: *mut f32,
    ) {
        let row_bytes = nb * R::BYTES;
        if m == 1 {
            // Two rows at a time for two independent accumulator chains, taken from the two halves of the
            // range so that each half is read front to back (adjacent-row pairs defeat the stream prefetcher).
            let half = rows.len() / 2;
            for i in 0..half {
                let (j0, j1) = (rows.start + i, rows.start + half + i);
                let (a, b) = R::pair(w.add(j0 * row_bytes), w.add(j1 * row_bytes), nb, x);
                *out.add(j0) = a;
                *out.add(j1) = b;
            }
            if rows.len() % 2 == 1 {
                let j = rows.end - 1;
                *out.add(j) = R::tile::<1>(w.add(j * row_bytes), nb, [x])[0];
            }
            return;
        }
        // Cache blocking: a tile of ACT_TILE activation rows stays in L1 while the chunk's weight rows stream by.
        let mut r0 = 0;
        while r0 < m {
            let r1 = m.min(r0 + ACT_TILE);
            for j in rows.clone() {
                let wr = w.add(j * row_bytes);
                let mut r = r0;
                while r < r1 {
                    let left = r1 - r;
                    let xr = |i: usize| x.add((r + i) * nb);
                    if left >= 4 {
                        let v = R::tile::<4>(wr, nb, [xr(0), xr(1), xr(2), xr(3)]);
                        for (i, v) in v.into_iter().enumerate() {
                            *out.add((r + i) * n + j) = v;
                        }
                        r += 4;
                    } else if left == 3 {
                        let v = R::tile::<3>(wr, nb, [xr(0), xr(1), xr(2)]);
                        for (i, v) in v.into_iter().enumerate() {
                            *out.add((r + i) * n + j) = v;
                        }
                        r += 3;
                    } else if left == 2 {
                        let v = R::tile::<2>(wr, nb, [xr(0), xr(1)]);
                        for (i, v) in v.into_iter().enumerate() {
                            *out.add((r + i) * n + j) = v;
                        }
                        r += 2;
                    } else {
                        *out.add(r * n + j) = R::tile::<1>(wr, nb, [xr(0)])[0];
                        r += 1;
                    }
                }
            }
            r0 = r1;
        }
    }

    /// [`rows_impl`] compiled for AVX2 + FMA + F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn rows_avx2<R: RowKernel>(
        w: *const u8,
        nb: usize,
        x: *const R::X,
        m: usize,
        n: usize,
        rows: std::ops::Range<usize>,
        out: *mut f32,
    ) {
        rows_impl::<R>(w, nb, x, m, n, rows, out)
    }

    /// [`rows_impl`] compiled for AVX2 + FMA + F16C + AVX-VNNI.
    #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
    pub(crate) unsafe fn rows_vnni<R: RowKernel>(
        w: *const u8,
        nb: usize,
        x: *const R::X,
        m: usize,
        n: usize,
        rows: std::ops::Range<usize>,
        out: *mut f32,
    ) {
        rows_impl::<R>(w, nb, x, m, n, rows, out)
    }

    /// [`rows_impl`] compiled for AVX2 + FMA + F16C + AVX512-VNNI + AVX512-VL.
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub(crate) unsafe fn rows_vnni512<R: RowKernel>(
        w: *const u8,
        nb: usize,
        x: *const R::X,
        m: usize,
        n: usize,
        rows: std::ops::Range<usize>,
        out: *mut f32,
    ) {
        rows_impl::<R>(w, nb, x, m, n, rows, out)
    }

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
        let x = xq.as_ptr();
        match (dtype, isa) {
            (GgmlDType::Q4_1, Isa::Avx2) => rows_avx2::<Blocks32<KQ4_1, Avx2>>(w, nb, x, m, n, rows, out),
            (GgmlDType::Q4_1, Isa::AvxVnni) => rows_vnni::<Blocks32<KQ4_1, Vnni>>(w, nb, x, m, n, rows, out),
            (GgmlDType::Q5_0, Isa::Avx2) => rows_avx2::<Blocks32<KQ5_0, Avx2>>(w, nb, x, m, n, rows, out),
            (GgmlDType::Q5_0, Isa::AvxVnni) => rows_vnni::<Blocks32<KQ5_0, Vnni>>(w, nb, x, m, n, rows, out),
            (GgmlDType::Q8_0, Isa::Avx2) => rows_avx2::<Blocks32<KQ8_0, Avx2>>(w, nb, x, m, n, rows, out),
            (GgmlDType::Q8_0, Isa::AvxVnni) => rows_vnni::<Blocks32<KQ8_0, Vnni>>(w, nb, x, m, n, rows, out),
            (GgmlDType::Q4_1, Isa::Avx512Vnni) => rows_vnni512::<Blocks32<KQ4_1, Vnni512>>(w, nb, x, m, n, rows, out),
            (GgmlDType::Q5_0, Isa::Avx512Vnni) => rows_vnni512::<Blocks32<KQ5_0, Vnni512>>(w, nb, x, m, n, rows, out),
            (GgmlDType::Q8_0, Isa::Avx512Vnni) => rows_vnni512::<Blocks32<KQ8_0, Vnni512>>(w, nb, x, m, n, rows, out),
            _ => unreachable!("checked by decode_matmul"),
        }
    }
}
