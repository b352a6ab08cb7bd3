//! Decode kernels: int8 dot products of quantized weight rows with quantized activation rows.
//!
//! Weight block layouts (GGML, little-endian, as candle stores them):
//! * Q4_1, 20 bytes: `d: f16, m: f16, qs: [u8; 16]`; value j = (qs[j] & 15)·d + m, value j+16 = (qs[j] >> 4)·d + m.
//! * Q5_0, 22 bytes: `d: f16, qh: u32, qs: [u8; 16]`; 5th bit of value i is bit i of qh; value = (q - 16)·d.
//! * Q8_0, 34 bytes: `d: f16, qs: [i8; 32]`.

use super::quant::{quantize_rows, XBlock, QK};
use super::{par_chunks, Isa};
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
        par_chunks(n, grain(nb * bytes), |rows| run(xq, rows));
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
        /// Activation rows per tile of the 32-value block kernel (AVX-512 has 32 vector registers, AVX2 16).
        const MR: usize;
        /// init + Σ_{4 bytes} u·s (u unsigned, s signed; |u| <= 31 so the AVX2 i16 step cannot saturate).
        unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i;
        /// A signed weight vector (Q8_0) in the form [`Mac::dot_ss`] takes.
        unsafe fn prep_ss(w: __m256i) -> __m256i;
        /// acc + Σ_{4 bytes} w·y for signed w (as [`Mac::prep_ss`] left it) and y; the +128 offset the VNNI forms
        /// give w is corrected by the activation block's `corr`.
        unsafe fn dot_ss(acc: __m256i, w: __m256i, y: __m256i) -> __m256i;
    }

    pub struct Avx2;
    pub struct Vnni;
    pub struct Vnni512;

    impl Mac for Avx2 {
        const MR: usize = 4;
        #[inline(always)]
        unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i {
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
            _mm256_add_epi32(init, p)
        }
        #[inline(always)]
        unsafe fn prep_ss(w: __m256i) -> __m256i {
            w
        }
        #[inline(always)]
        unsafe fn dot_ss(acc: __m256i, w: __m256i, y: __m256i) -> __m256i {
            // |w|·(y·sign(w)): |w| <= 128 and |y| <= 127, so pairs stay within i16.
            let aw = _mm256_sign_epi8(w, w);
            let sy = _mm256_sign_epi8(y, w);
            Self::dot_us(acc, aw, sy)
        }
    }

    impl Mac for Vnni {
        const MR: usize = 4;
        #[inline(always)]
        unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i {
            _mm256_dpbusd_avx_epi32(init, u, s)
        }
        #[inline(always)]
        unsafe fn prep_ss(w: __m256i) -> __m256i {
            // (w + 128) as u8; corr = -128·Σy takes the offset back out
            _mm256_xor_si256(w, _mm256_set1_epi8(-128i8))
        }
        #[inline(always)]
        unsafe fn dot_ss(acc: __m256i, w: __m256i, y: __m256i) -> __m256i {
            _mm256_dpbusd_avx_epi32(acc, w, y)
        }
    }

    impl Mac for Vnni512 {
        const MR: usize = 8;
        #[inline(always)]
        unsafe fn dot_us(init: __m256i, u: __m256i, s: __m256i) -> __m256i {
            _mm256_dpbusd_epi32(init, u, s)
        }
        #[inline(always)]
        unsafe fn prep_ss(w: __m256i) -> __m256i {
            _mm256_xor_si256(w, _mm256_set1_epi8(-128i8))
        }
        #[inline(always)]
        unsafe fn dot_ss(acc: __m256i, w: __m256i, y: __m256i) -> __m256i {
            _mm256_dpbusd_epi32(acc, w, y)
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
        /// Byte offsets of the block's f16 scale d and (where `HAS_MIN`) min m.
        const D_AT: usize = 0;
        const M_AT: usize = 2;
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

    /// One block of 8 weight rows, transposed for the lanes-are-rows kernel: `w[g]` holds the 4 bytes
    /// `4g..4g+4` of each of the 8 rows (lane i = row i), in the form the `Mac` expects; `d` and `m` are the rows'
    /// scales and mins (zero for the types without one).
    #[repr(C, align(32))]
    #[derive(Clone, Copy)]
    pub(crate) struct Packed {
        w: [__m256i; 8],
        d: __m256,
        m: __m256,
    }

    thread_local! {
        static PACK: RefCell<Vec<Packed>> = const { RefCell::new(Vec::new()) };
    }

    /// The 8×8 transpose of 32-bit lanes: lane i of result g is lane g of `a[i]`.
    #[inline(always)]
    unsafe fn transpose8(a: [__m256i; 8]) -> [__m256i; 8] {
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
    unsafe fn f16x8(p: &[*const u8; 8], at: usize) -> __m256 {
        let h = |i: usize| std::ptr::read_unaligned(p[i].add(at) as *const i16);
        _mm256_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7)))
    }

    /// Block b of 8 weight rows, unpacked and transposed.
    #[inline(always)]
    unsafe fn unpack8<K: Kind, M: Mac>(rows: &[*const u8; 8], b: usize) -> Packed {
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

    /// Weight bytes from which one activation row takes [`row_pair`] instead of the 8-row kernel (which does
    /// less arithmetic per weight and wins on every matrix up to SmolLM2's 30 MB head, measured on a 2-core Zen 4:
    /// Gemma 3's 178 MB head ran 4.1-4.8 ms with pairs, 5.7-6.0 with 8 rows).
    /// (16 KiB in unit tests, so that their small matrices run both kernels.)
    const STREAM_BYTES: usize = if cfg!(test) { 16 << 10 } else { 64 << 20 };

    /// The sum of 8 i32 lanes (exact).
    #[inline(always)]
    unsafe fn hsum_i32(v: __m256i) -> i32 {
        let r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
        let r = _mm_add_epi32(r, _mm_shuffle_epi32::<0b01>(r));
        _mm_cvtsi128_si32(r)
    }

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
                    _mm_prefetch::<_MM_HINT_T0>(
                        next.wrapping_add((b * (8 * K::BYTES).div_ceil(64) + l) * 64) as *const i8
                    );
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
        let mut xs = [x; MR];
        for (i, p) in xs.iter_mut().enumerate() {
            *p = x.add((r + i) * nb);
        }
        let v = micro::<K, M, MR>(pk, rows, nb, xs);
        for (i, v) in v.into_iter().enumerate() {
            let mut lanes = [0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), v);
            std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst.add((r + i) * n), valid);
        }
    }

    /// Output columns `rows` (weight rows) of `out (m, n) = x (m, nb blocks) @ W^T`: what the ISA entry points
    /// ([`rows_avx2`], ...) compile for their target features.
    pub(crate) trait RowKernel {
        /// The quantized activation block.
        type X;
        /// Output columns `rows` of `a`.
        unsafe fn rows(a: Mat<Self::X>, rows: std::ops::Range<usize>);
    }

    /// One matmul's operands: W (n rows of nb blocks at `w`), x (m rows of nb blocks), out (m, n).
    pub(crate) struct Mat<X> {
        pub w: *const u8,
        pub nb: usize,
        pub x: *const X,
        pub m: usize,
        pub n: usize,
        pub out: *mut f32,
    }

    /// One weight format's per-row dot products, run by [`rows_impl`] (the k-quants).
    pub(crate) trait TileKernel {
        /// The quantized activation block.
        type X;
        /// Bytes of one weight block.
        const BYTES: usize;
        /// One weight row (nb blocks at `w`) against MR activation rows.
        unsafe fn tile<const MR: usize>(w: *const u8, nb: usize, xs: [*const Self::X; MR]) -> [f32; MR];
        /// Two weight rows against one activation row (two independent accumulator chains for m = 1).
        unsafe fn pair(w0: *const u8, w1: *const u8, nb: usize, x: *const Self::X) -> (f32, f32);
    }

    /// A [`TileKernel`] driven by [`rows_impl`].
    pub(crate) struct Tiled<T>(std::marker::PhantomData<T>);

    impl<T: TileKernel> RowKernel for Tiled<T> {
        type X = T::X;
        #[inline(always)]
        unsafe fn rows(a: Mat<T::X>, rows: std::ops::Range<usize>) {
            rows_impl::<T>(a.w, a.nb, a.x, a.m, a.n, rows, a.out)
        }
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
            if m == 1 && n * row_bytes >= STREAM_BYTES {
                // One activation row against a matrix far beyond the caches (a vocabulary head) is memory-bound: two
                // weight rows at a time, taken from the two halves of the range so that each is read front to back
                // (eight interleaved rows read it 1.3-1.5x slower, even with the prefetches).
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

    /// Activation rows kept hot in L1 while a chunk's weight rows stream past.
    const ACT_TILE: usize = 16;

    /// Output columns `rows` (weight rows) of `out (m, n) = x (m, nb blocks) @ W^T`.
    #[inline(always)]
    pub(crate) unsafe fn rows_impl<R: TileKernel>(
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

    /// [`RowKernel::rows`] compiled for AVX2 + FMA + F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn rows_avx2<R: RowKernel>(a: Mat<R::X>, rows: std::ops::Range<usize>) {
        R::rows(a, rows)
    }

    /// [`RowKernel::rows`] compiled for AVX2 + FMA + F16C.+ AVX-VNNI.
    #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
    pub(crate) unsafe fn rows_vnni<R: RowKernel>(a: Mat<R::X>, rows: std::ops::Range<usize>) {
        R::rows(a, rows)
    }

    /// [`RowKernel::rows`] compiled for AVX2 + FMA + F16C.+ AVX512-VNNI + AVX512-VL.
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub(crate) unsafe fn rows_vnni512<R: RowKernel>(a: Mat<R::X>, rows: std::ops::Range<usize>) {
        R::rows(a, rows)
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
}
