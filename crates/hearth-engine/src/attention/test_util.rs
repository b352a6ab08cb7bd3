//! Test helpers for the paged attention backends.

use super::{AttnParams, BatchContext};
use crate::kv::{KvEncoding, PagedKv};
use crate::Result;
use candle_core::{DType, Device, Tensor};

/// A deterministic pseudo-random f32 tensor.
pub fn rnd(shape: (usize, usize, usize), seed: f64) -> Tensor {
    let len = shape.0 * shape.1 * shape.2;
    let v: Vec<f32> = (0..len).map(|i| ((i as f64 * 0.731 + seed).sin() * 1.7) as f32).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).expect("a tensor")
}

/// A paged backend's `attend`.
pub type Attend = fn(&PagedKv, usize, &Tensor, &Tensor, &Tensor, &BatchContext, &AttnParams) -> Result<Tensor>;

/// Outputs of one row computed in `pieces` (pos0, len) from q/k/v of shape (n, _, _), as prompt pieces or (with
/// `decoding`) as decode rows; its blocks laid out in reverse to exercise the block table.
pub fn run(f: Attend, qkv: [&Tensor; 3], pieces: &[(usize, usize)], p: &AttnParams, decoding: bool) -> Vec<Vec<f32>> {
    run_kv(f, DType::F32, qkv, pieces, p, decoding)
}

/// [`run`] over a KV cache kept in `dtype` (a float dtype or an encoding).
pub fn run_kv(
    f: Attend,
    dtype: impl Into<KvEncoding>,
    qkv: [&Tensor; 3],
    pieces: &[(usize, usize)],
    p: &AttnParams,
    decoding: bool,
) -> Vec<Vec<f32>> {
    let dev = Device::Cpu;
    let (n, kvh, d) = qkv[1].dims3().expect("3 dims");
    let nb = n.div_ceil(16);
    let blocks: Vec<u32> = (0..nb as u32).rev().collect();
    let mut kv = PagedKv::new(1, nb, 16, kvh, d, dtype, &dev).expect("kv");
    kv.set_tables([(3usize, blocks.as_slice())]);
    let mut outs = Vec::new();
    for &(pos0, len) in pieces {
        let mut ctx = BatchContext::new(&[(3, pos0, len)], false, &dev).expect("ctx");
        ctx.mark_prompt([!decoding]);
        let [q, k, v] = qkv.map(|t| t.narrow(0, pos0, len).expect("narrow"));
        outs.push(f(&kv, 0, &q, &k, &v, &ctx, p).expect("attend"));
    }
    Tensor::cat(&outs, 0).and_then(|t| t.to_vec2::<f32>()).expect("outputs")
}
