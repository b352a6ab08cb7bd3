//! The packed k-quant kernel with 512-bit vectors (AVX-512 F, BW, VL and VNNI): 16 weight rows per vector, two
//! 8-row groups packed side by side (the same packing as the 256-bit kernel, each group into one half of every
//! vector). `vpdpbusd` on a zmm register issues as often as on a ymm one on the CPUs measured, so each instruction
//! does twice the work. The arithmetic per lane is the 256-bit kernel's: exact i32 sums, then the two FMAs of
//! [`float_step`](super::x86::float_step), so the results are bit-identical to it and to the tile kernel.

use super::packed::{act_qs, pack, PackedKernel, SLOT_D, SLOT_F, SLOT_OFF, SLOT_SC};
use super::x86::KKind;
use crate::cpu_matmul::quant::XBlockK;
use crate::cpu_matmul::x86::act_rows;
use core::arch::x86_64::*;
use std::cell::RefCell;

/// One super-block of 16 weight rows: the slots of [`super::packed::KPack`], 16 lanes wide (rows 0..8 in the low
/// half of every vector, 8..16 in the high half).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(crate) struct KPack16([__m512i; SLOT_F + 1]);

const ZERO_PACK16: KPack16 = unsafe { std::mem::zeroed() };

thread_local! {
    /// This thread's packed panel (grown to the widest matrix it has run).
    static PACK16: RefCell<Vec<KPack16>> = const { RefCell::new(Vec::new()) };
}

/// Whether this CPU runs the 512-bit kernel and `HEARTH_AVX512` allows it (checked once).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::levers::get().avx512 && supported())
}

/// Whether this CPU has what the 512-bit kernel uses.
pub fn supported() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// MR activation rows against a packed pair of groups (nb super-blocks at `pk`): lane i of result r is weight
/// row i's dot product with activation row r.
#[inline(always)]
unsafe fn micro<K: KKind, const MR: usize>(pk: *const KPack16, nb: usize, xs: [*const XBlockK; MR]) -> [__m512; MR] {
    let mut acc = [_mm512_setzero_ps(); MR];
    for b in 0..nb {
        let p = &(*pk.add(b)).0;
        let ys = act_qs(&xs, b);
        let mut isum = [_mm512_setzero_si512(); MR];
        // two independent chains, as in the 256-bit kernel
        let (pairs, steps) = if K::HALF { (8, 4) } else { (4, 8) };
        for h in 0..pairs {
            let mut a = [[_mm512_setzero_si512(); MR]; 2];
            for t in 0..steps {
                for (e, chain) in a.iter_mut().enumerate() {
                    let (c, g) = if K::HALF { (h, 4 * e + t) } else { (2 * h + e, t) };
                    let w = p[8 * c + g];
                    for r in 0..MR {
                        let y = _mm512_set1_epi32(std::ptr::read_unaligned(ys[r].add(8 * c + g)));
                        chain[r] = _mm512_dpbusd_epi32(chain[r], w, y);
                    }
                }
            }
            let (s0, s1) = if K::HALF {
                (p[SLOT_SC + 2 * h], p[SLOT_SC + 2 * h + 1])
            } else {
                (p[SLOT_SC + 4 * h], p[SLOT_SC + 4 * h + 2])
            };
            for r in 0..MR {
                let scaled = _mm512_add_epi32(_mm512_mullo_epi32(a[0][r], s0), _mm512_mullo_epi32(a[1][r], s1));
                isum[r] = _mm512_add_epi32(isum[r], scaled);
            }
        }
        let (d, f) = (_mm512_castsi512_ps(p[SLOT_D]), _mm512_castsi512_ps(p[SLOT_F]));
        for r in 0..MR {
            let xb = &*xs[r].add(b);
            let bs = xb.bsums.as_ptr() as *const i32;
            let mut off = _mm512_setzero_si512();
            for q in 0..8 {
                off = _mm512_dpwssd_epi32(off, p[SLOT_OFF + q], _mm512_set1_epi32(std::ptr::read_unaligned(bs.add(q))));
            }
            // float_step, lane by lane
            let xd = _mm512_set1_ps(xb.d);
            let a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(d, xd), acc[r]);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(off), _mm512_mul_ps(f, xd), a);
        }
    }
    acc
}

/// The 512-bit packed kernel: 16 weight rows a vector.
pub(crate) struct Zmm<K>(std::marker::PhantomData<K>);

impl<K: KKind> PackedKernel for Zmm<K> {
    type P = KPack16;
    const BYTES: usize = K::BYTES;
    const WIDTH: usize = 16;
    const MR: usize = 8;
    fn scratch(len: usize) -> *mut KPack16 {
        PACK16.with(|cell| {
            let mut buf = cell.borrow_mut();
            if buf.len() < len {
                buf.resize(len, ZERO_PACK16);
            }
            buf.as_mut_ptr()
        })
    }
    #[inline(always)]
    unsafe fn pack(rows: &[*const u8; 16], b: usize, out: *mut KPack16) {
        let (lo, hi) = rows.split_at(8);
        let slots = out as *mut __m256i;
        pack::<K>(&*(lo.as_ptr() as *const [*const u8; 8]), b, slots, 2);
        pack::<K>(&*(hi.as_ptr() as *const [*const u8; 8]), b, slots.add(1), 2);
    }

    #[inline(always)]
    unsafe fn tile<const MR: usize>(
        pk: *const KPack16,
        nb: usize,
        x: *const XBlockK,
        r: usize,
        dst: *mut f32,
        n: usize,
        valid: usize,
    ) {
        let v = micro::<K, MR>(pk, nb, act_rows::<_, MR>(x, r, nb));
        for (i, v) in v.into_iter().enumerate() {
            let mut lanes = [0f32; 16];
            _mm512_storeu_ps(lanes.as_mut_ptr(), v);
            std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst.add((r + i) * n), valid);
        }
    }
}
