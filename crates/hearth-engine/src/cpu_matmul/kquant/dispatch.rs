//! Which k-quant kernel runs a call: the tile kernel below [`PACK_MIN_M`] activation rows, then the packed one,
//! 512-bit where [`wide::enabled`], each compiled for the instruction set in use.

use super::packed::{KRows, Ymm, PACK_MIN_M};
use super::prepacked::{Compact, Prepacked, EXPAND_MIN_M};
use super::wide::{self, Zmm};
use super::x86::{self, KKind};
use super::Isa;
use crate::cpu_matmul::quant::XBlockK;
use crate::cpu_matmul::x86::{rows_avx2, rows_vnni, rows_vnni512, rows_zmm, Mat};
use candle_core::quantized::GgmlDType;

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
        Isa::Avx2 => rows_avx2::<KRows<K, Ymm<K, mac::Avx2>>>(mat, range),
        Isa::AvxVnni | Isa::Avx512Vnni if mat.m >= PACK_MIN_M && wide::enabled() => {
            rows_zmm::<KRows<K, Zmm<K>>>(mat, range)
        }
        Isa::AvxVnni => rows_vnni::<KRows<K, Ymm<K, mac::Vnni>>>(mat, range),
        Isa::Avx512Vnni => rows_vnni512::<KRows<K, Ymm<K, mac::Vnni512>>>(mat, range),
    }
}

/// Output columns `range` (starting at a multiple of 8) of `out (m, n) = xq @ W^T` for weights repacked at load
/// into groups of `C` ([`prepacked`](super::prepacked)), compiled for `isa`.
///
/// # Safety
/// The CPU must support `isa`; `w` points at the repacked groups of n rows of nb super-blocks; `xq` holds m rows
/// of nb blocks; `out` has m·n values.
#[allow(clippy::too_many_arguments)]
pub unsafe fn run_prepacked<C: Compact>(
    isa: Isa,
    w: *const u8,
    nb: usize,
    xq: &[XBlockK],
    m: usize,
    n: usize,
    range: std::ops::Range<usize>,
    out: *mut f32,
) {
    use crate::cpu_matmul::x86::mac;
    let mat = Mat { w, nb, x: xq.as_ptr(), m, n, out };
    match isa {
        Isa::Avx2 => rows_avx2::<Prepacked<C, mac::Avx2, Ymm<C::K, mac::Avx2>>>(mat, range),
        Isa::AvxVnni | Isa::Avx512Vnni if m >= EXPAND_MIN_M && wide::enabled() => {
            rows_zmm::<Prepacked<C, mac::Vnni512, Zmm<C::K>>>(mat, range)
        }
        Isa::AvxVnni => rows_vnni::<Prepacked<C, mac::Vnni, Ymm<C::K, mac::Vnni>>>(mat, range),
        Isa::Avx512Vnni => rows_vnni512::<Prepacked<C, mac::Vnni512, Ymm<C::K, mac::Vnni512>>>(mat, range),
    }
}
