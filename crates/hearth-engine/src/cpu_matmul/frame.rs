//! The frame both int8 paths (the 32-value blocks and the k-quants) share: check the weight's size, quantize the
//! activations into a reused per-thread buffer, hand the output columns to the work pool.

use crate::work_pool::par_chunks;
use crate::{Error, Result};
use candle_core::quantized::GgmlDType;
use std::cell::RefCell;

/// Output rows per parallel chunk: enough weight bytes per chunk (~16 KiB) to amortize the hand-out.
pub(crate) fn grain(row_bytes: usize) -> usize {
    (16 * 1024 / row_bytes.max(1)).clamp(4, 256)
}

/// How the output columns (weight rows) are split over the work pool: chunks of at least `grain` rows, each
/// starting at a multiple of `align` rows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Split {
    pub grain: usize,
    pub align: usize,
}

/// The frame both int8 paths share: check W's size, quantize x (m rows of `k / block_vals` blocks) into this
/// thread's reused buffer `scratch`, then hand the output columns (weight rows) to `run` over the work pool,
/// split as `split` says.
#[allow(clippy::too_many_arguments)]
pub(crate) fn blocked_matmul<X: Copy + Sync>(
    scratch: &'static std::thread::LocalKey<RefCell<Vec<X>>>,
    zero: X,
    (dtype, block_vals, bytes): (GgmlDType, usize, usize),
    w: &[u8],
    n: usize,
    k: usize,
    m: usize,
    split: impl FnOnce(usize) -> Split,
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
        let Split { grain, align } = split(nb * bytes);
        let align = align.max(1);
        par_chunks(n.div_ceil(align), grain.div_ceil(align), |u| run(xq, u.start * align..(u.end * align).min(n)));
    });
    Ok(())
}
