//! The 32-value block formats' int8 path: quantized weight rows against activation rows quantized to int8 blocks
//! (the x86 kernels are in `x86`).
//!
//! Weight block layouts (GGML, little-endian, as candle stores them):
//! * Q4_1, 20 bytes: `d: f16, m: f16, qs: [u8; 16]`; value j = (qs[j] & 15)·d + m, value j+16 = (qs[j] >> 4)·d + m.
//! * Q5_0, 22 bytes: `d: f16, qh: u32, qs: [u8; 16]`; 5th bit of value i is bit i of qh; value = (q - 16)·d.
//! * Q8_0, 34 bytes: `d: f16, qs: [i8; 32]`.

use super::frame::{blocked_matmul, grain, Split};
use super::quant::{quantize_rows, XBlock, QK};
use super::Isa;
use crate::Result;
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

/// `out (m, n) = x (m, k) @ W^T` for a Q4_1, Q5_0 or Q8_0 `w` of n rows, with `isa`'s instructions (the caller
/// checked the CPU has them).
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
        |row_bytes| Split { grain: grain(row_bytes), align: 1 },
        |xq| quantize_rows(x, xq, corr_mult(dtype, isa), cfg!(target_arch = "x86_64")),
        |xq, rows| {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the caller checked that the CPU supports `isa`; each chunk writes only the output
            // columns of its own weight rows.
            unsafe {
                super::x86::run(dtype, isa, w.as_ptr(), nb, xq, m, n, rows, out_ptr as *mut f32)
            }
            #[cfg(not(target_arch = "x86_64"))]
            unreachable!("no Isa exists off x86_64 ({rows:?}, {out_ptr}, {nb}, {})", xq.len())
        },
    )
}
