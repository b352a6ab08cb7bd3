//! Q4_K's repacked super-block ([`Q4Pack`]): 4 bits a value, the scales and mins as bytes.

use super::{lanes_u8, Compact};
use crate::cpu_matmul::kquant::packed::{finish_parts, KPack, SLOT_D, SLOT_F, SLOT_OFF, SLOT_SC};
use crate::cpu_matmul::kquant::x86::Q4K;
use crate::cpu_matmul::quant::XBlockK;
use crate::cpu_matmul::x86::mac::Mac;
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

impl Compact for Q4Pack {
    type K = Q4K;
    const GGML_BYTES: usize = 144;

    /// A packed Q4_K super-block in 4 bits a value: the weights' nibbles paired, the scales and mins as bytes.
    #[inline(always)]
    unsafe fn compress(p: &KPack) -> Self {
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
    unsafe fn expand(&self, out: *mut __m256i, step: usize) {
        let slot = |v: usize| out.add(v * step);
        let mask = _mm256_set1_epi8(0x0f);
        for c in 0..8 {
            for h in 0..4 {
                let v = self.q[c][h];
                slot(8 * c + h).write(_mm256_and_si256(v, mask));
                slot(8 * c + h + 4).write(_mm256_and_si256(_mm256_srli_epi16::<4>(v), mask));
            }
            slot(SLOT_SC + 2 * c).write(lanes_u8(self.sc.as_ptr().add(8 * c)));
            slot(SLOT_OFF + c).write(self.offset(c));
        }
        slot(SLOT_D).write(_mm256_castps_si256(self.d));
        slot(SLOT_F).write(_mm256_castps_si256(self.f));
    }

    /// One super-block `p` (the b-th) of a group against MR activation rows (`ys`: their int8 values), added to `acc`.
    #[inline(always)]
    unsafe fn superblock<M: Mac, const MR: usize>(
        &self,
        b: usize,
        xs: &[*const XBlockK; MR],
        ys: &[*const i32; MR],
        acc: &mut [__m256; MR],
    ) {
        let mask = _mm256_set1_epi8(0x0f);
        let mut isum = [_mm256_setzero_si256(); MR];
        // Four independent chains of dot products per pair of chunks (each chunk's low and high nibbles), so
        // that one activation row has enough in flight to hide `vpdpbusd`'s latency.
        for pair in 0..4 {
            let mut a = [[[_mm256_setzero_si256(); MR]; 2]; 2];
            for (e, chains) in a.iter_mut().enumerate() {
                let c = 2 * pair + e;
                for h in 0..4 {
                    let v = self.q[c][h];
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
            let s0 = lanes_u8(self.sc.as_ptr().add(16 * pair));
            let s1 = lanes_u8(self.sc.as_ptr().add(16 * pair + 8));
            for r in 0..MR {
                let c0 = _mm256_add_epi32(a[0][0][r], a[0][1][r]);
                let c1 = _mm256_add_epi32(a[1][0][r], a[1][1][r]);
                let scaled = _mm256_add_epi32(_mm256_mullo_epi32(c0, s0), _mm256_mullo_epi32(c1, s1));
                isum[r] = _mm256_add_epi32(isum[r], scaled);
            }
        }
        let off: [__m256i; 8] = std::array::from_fn(|c| self.offset(c));
        finish_parts(&off, self.d, self.f, b, xs, &isum, acc);
    }
}

impl Q4Pack {
    /// The offset coefficients of chunk c's two 16-value sums (its min twice, an i16 pair).
    #[inline(always)]
    unsafe fn offset(&self, c: usize) -> __m256i {
        let m = lanes_u8(self.mn.as_ptr().add(8 * c));
        _mm256_or_si256(m, _mm256_slli_epi32::<16>(m))
    }
}
