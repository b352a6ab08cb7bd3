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
//! chunk's scales and an add, on every instruction set: a fused VNNI `vpdpwssd` lost, see `x86::scaled_acc`) and an offset
//! term Σ_s coef_s·bsum_s over the activation's 16-value sums (Q4_K/Q5_K: the mins; Q6_K: the scales, for the
//! −32), both exact i32; the f32 result is d_y·(d·Σ + f·offset) with f = −dmin
//! (Q4_K/Q5_K) or −32·d (Q6_K). candle computes the same integers, so results equal its up to f32 accumulation
//! order. A row's result does not depend on how many rows share the call.

use super::frame::{grain, Split};
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
        |row_bytes| split(m, row_bytes),
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
                dispatch::run(dtype, isa, w.as_ptr(), nb, xq, m, n, rows, out_ptr as *mut f32)
            }
            #[cfg(not(target_arch = "x86_64"))]
            unreachable!("no Isa exists off x86_64 ({rows:?}, {out_ptr}, {nb}, {})", xq.len())
        },
    )
}

/// `out (m, n) = x (m, k) @ W^T` for weights repacked at load (`prepacked`), with `isa`'s instructions (the
/// caller checked the CPU has them).
#[cfg(target_arch = "x86_64")]
pub fn prepacked_matmul(w: &prepacked::Packed, isa: Isa, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
    let (n, nb) = w.dims();
    let k = nb * QK_K;
    if x.len() != m * k || out.len() != m * n {
        return Err(crate::Error::InvalidRequest(format!(
            "prepacked_matmul: x has {} values, out {}, for m={m} n={n} k={k}",
            x.len(),
            out.len()
        )));
    }
    let out_ptr = out.as_mut_ptr() as usize;
    let w_ptr = w.as_ptr() as usize;
    XQ.with(|cell| {
        let mut xq = cell.borrow_mut();
        if xq.len() < m * nb {
            xq.resize(m * nb, XBlockK::ZERO);
        }
        let xq = &mut xq[..m * nb];
        let xq_ptr = xq.as_mut_ptr() as usize;
        par_chunks(m, 8, |rows| {
            for r in rows {
                // SAFETY: each chunk writes only its own rows' blocks.
                let o = unsafe { std::slice::from_raw_parts_mut((xq_ptr as *mut XBlockK).add(r * nb), nb) };
                quantize_row_k(&x[r * k..(r + 1) * k], o);
            }
        });
        let xq: &[XBlockK] = xq;
        // groups of 8 rows, ~16 KiB of weights a chunk at least; whole panels for the packed kernel
        let (grain, align) = match m >= prepacked::EXPAND_MIN_M {
            true => (packed::PANEL, 2),
            false => (grain(nb * 8 * 152).max(1), 1),
        };
        par_chunks(n.div_ceil(8 * align), grain.div_ceil(align), |g| {
            let rows = 8 * align * g.start..(8 * align * g.end).min(n);
            // SAFETY: the caller checked the CPU has `isa`; each chunk writes only its groups' output columns.
            unsafe {
                let (w, out) = (w_ptr as *const u8, out_ptr as *mut f32);
                dispatch::run_prepacked::<prepacked::q4k::Q4Pack>(isa, w, nb, xq, m, n, rows, out)
            }
        });
    });
    Ok(())
}

/// How a call's weight rows are split over the work pool: the packed kernel wants whole panels of 8-row groups.
fn split(m: usize, row_bytes: usize) -> Split {
    #[cfg(target_arch = "x86_64")]
    if m >= packed::PACK_MIN_M {
        // whole 16-row pairs for the 512-bit kernel (two 8-row groups for the 256-bit one)
        return Split { grain: 8 * packed::PANEL, align: 16 };
    }
    let _ = m;
    Split { grain: grain(row_bytes), align: 1 }
}

#[cfg(target_arch = "x86_64")]
mod dispatch;
#[cfg(target_arch = "x86_64")]
mod packed;
#[cfg(target_arch = "x86_64")]
pub mod prepacked;
#[cfg(target_arch = "x86_64")]
mod wide;
#[cfg(target_arch = "x86_64")]
mod x86;
