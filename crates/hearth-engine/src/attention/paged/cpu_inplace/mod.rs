//! Attention in place on the CPU: each query token reads its row's keys and values straight from the paged
//! blocks (no gather, no padded sub-blocks), kept in f32 or f16 and computed in f32, with the work split over the
//! model's kernel pool (`crate::work_pool`: the threads its quantized matmuls use, so the two never fight over the
//! cores).
//!
//! Keys are taken in **chunks** of [`chunk_keys`] positions aligned to absolute positions (a fixed function of
//! the head size). Per query and chunk the kernel computes a partial softmax — the chunk's maximum score `m`, the
//! sum `l` of `exp(s − m)` and the unnormalized weighted sum of values — and the partials are folded in chunk
//! order (online softmax, as flash attention does). A chunk's keys and values are loaded once for all the queries
//! of a tile of tokens, so they stay in cache while the queries pass over them.
//!
//! A token's arithmetic depends only on its own query and the keys and values at the positions it sees: the
//! chunk boundaries, the order inside a chunk and the fold are fixed, whatever the step, batch, piece,
//! prompt-cache hit or thread count. When there are too few (tile, kv head) units to keep every thread busy — one
//! decoding row at a long context — the chunks of a unit are split over threads and their partials stored, then
//! folded in the same order: a prompt token and the same token decoded one at a time therefore give
//! bit-identical results (batch invariance for free), and so do the K/V rows a later prompt-cache hit reuses.
//! AVX2+FMA with a vectorized `exp` where the CPU has them, plain loops otherwise.
//!
//! Pieces: the entry and the choice between folding units as they go and splitting them ([`attend`]), the KV
//! element types (`elem`), one call's work and a unit's fold (`job`), the split for few units (`split`), and the
//! per-chunk kernels (`chunk`).

mod chunk;
mod elem;
mod job;
mod split;
#[cfg(test)]
mod tests;

use super::write_row;
use crate::attention::{AttnParams, BatchContext};
use crate::kv::PagedKv;
use crate::work_pool::par_chunks;
use crate::{Error, Result};
use candle_core::{CpuStorage, DType, Storage, Tensor};
use elem::KvElem;
use job::{Job, Shape, SharedOut};

/// Whether this backend serves a KV cache kept in `dtype` on `device` (f32, f16 or an encoding's bytes on the
/// CPU).
pub fn supports(dtype: DType, device: &candle_core::Device) -> bool {
    device.is_cpu() && matches!(dtype, DType::F32 | DType::F16 | DType::U8)
}

/// Tokens per tile: their queries share each chunk of keys and values loaded from memory.
const TILE: usize = 8;

/// Keys per chunk of the online softmax for head size `d`: about 128 KiB of keys (and as much of values), a
/// multiple of 4. A fixed function of `d`, so results never depend on the machine.
pub fn chunk_keys(d: usize) -> usize {
    (32768 / d.max(1)).clamp(64, 512) / 4 * 4
}

/// Units of work wanted per thread before chunks are split over threads (load balance).
const UNITS_PER_THREAD: usize = 4;

/// Append this step's k/v of every row of `ctx` at `layer` and attend. `q`: (T, H, D), `k`/`v`: (T, KvH, D).
pub fn attend(
    kv: &PagedKv,
    layer: usize,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    ctx: &BatchContext,
    p: &AttnParams,
) -> Result<Tensor> {
    let (kbuf, vbuf) = kv.layer(layer)?;
    // The cache may keep a narrower dtype than the model computes in, or encoded rows.
    let (k, v) = (super::encode_rows(kv, k, true)?, super::encode_rows(kv, v, false)?);
    for row in &ctx.rows {
        write_row(kv, layer, &k, &v, row)?;
    }
    let (t, h, d) = q.dims3()?;
    let (_, kvh, _) = k.dims3()?;
    if kvh == 0 || h % kvh != 0 {
        return Err(Error::InvalidRequest(format!("{h} query heads do not group over {kvh} kv heads")));
    }
    let mut qf = q.to_dtype(DType::F32)?.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let enc = kv.encoding();
    if enc.key.rotated(true) {
        // the keys were rotated before they were stored: so is every query head that scores them
        qf.chunks_exact_mut(d).for_each(crate::kv::codec::rotate);
    }
    let shape = (t, h, kvh, d);
    let (ks, kl) = kbuf.storage_and_layout();
    let (vs, vl) = vbuf.storage_and_layout();
    let mut out = match (&*ks, &*vs) {
        (Storage::Cpu(CpuStorage::F32(kd)), Storage::Cpu(CpuStorage::F32(vd))) => {
            run(kv, &kd[kl.start_offset()..], &vd[vl.start_offset()..], &qf, shape, ctx, p)?
        }
        (Storage::Cpu(CpuStorage::F16(kd)), Storage::Cpu(CpuStorage::F16(vd))) => {
            run(kv, &kd[kl.start_offset()..], &vd[vl.start_offset()..], &qf, shape, ctx, p)?
        }
        (Storage::Cpu(CpuStorage::U8(kd)), Storage::Cpu(CpuStorage::U8(vd))) => {
            coded(kv, &kd[kl.start_offset()..], &vd[vl.start_offset()..], &qf, shape, ctx, p)?
        }
        _ => {
            return Err(Error::Unsupported(
                "in-place CPU attention needs an f32, f16 or encoded KV cache on the CPU".into(),
            ))
        }
    };
    drop((ks, vs));
    if enc.value.rotated(false) {
        // the values were rotated before they were stored: their weighted sums are rotated back, per head
        out.chunks_exact_mut(d).for_each(crate::kv::codec::unrotate);
    }
    Ok(Tensor::from_vec(out, (t, h * d), q.device())?.to_dtype(q.dtype())?)
}

/// [`run`] over encoded rows: the kernels for the cache's key and value codes.
fn coded(
    kv: &PagedKv,
    kd: &[u8],
    vd: &[u8],
    qf: &[f32],
    shape: (usize, usize, usize, usize),
    ctx: &BatchContext,
    p: &AttnParams,
) -> Result<Vec<f32>> {
    use crate::kv::RowCode::{LloydMax as L, Q4_0, Q8_0};
    use elem::{units_of as u, Lm, Q4, Q8};
    macro_rules! codes {
        ($($k:pat, $v:pat => $K:ty, $V:ty;)*) => {
            match (kv.encoding().key, kv.encoding().value) {
                $(($k, $v) => run(kv, u::<$K>(kd), u::<$V>(vd), qf, shape, ctx, p),)*
                _ => Err(Error::Unsupported(format!("no CPU attention kernel reads a {} KV cache", kv.encoding().name()))),
            }
        };
    }
    codes! {
        Q8_0, Q8_0 => Q8, Q8;
        Q4_0, Q4_0 => Q4, Q4;
        Q8_0, L(4) => Q8, Lm<4>;
        Q8_0, L(3) => Q8, Lm<3>;
        Q8_0, L(2) => Q8, Lm<2>;
        L(4), L(4) => Lm<4>, Lm<4>;
        L(4), L(3) => Lm<4>, Lm<3>;
        L(4), L(2) => Lm<4>, Lm<2>;
        L(3), L(3) => Lm<3>, Lm<3>;
        L(3), L(4) => Lm<3>, Lm<4>;
        L(3), L(2) => Lm<3>, Lm<2>;
        L(4), Q8_0 => Lm<4>, Q8;
        L(3), Q8_0 => Lm<3>, Q8;
    }
}

/// Attend every token of `ctx` over the cache's `kd`/`vd` (already holding this step's rows): (T, H·D) values.
fn run<K: KvElem, V: KvElem>(
    kv: &PagedKv,
    kd: &[K],
    vd: &[V],
    qf: &[f32],
    (t, h, kvh, d): (usize, usize, usize, usize),
    ctx: &BatchContext,
    p: &AttnParams,
) -> Result<Vec<f32>> {
    // Every token's block table and position, in packing order; each row's table checked once against its last
    // position and the buffers (the kernels then index without checks).
    let bs = kv.block_size();
    let rows_held = (kd.len() / K::units(d)).min(vd.len() / V::units(d)) / kvh;
    let mut tokens = Vec::with_capacity(t);
    for row in &ctx.rows {
        let table = kv.table(row.slot)?;
        let last = row.pos0 + row.len - 1;
        if table.len() * bs <= last || table.iter().any(|&b| (b as usize + 1) * bs > rows_held) {
            return Err(Error::InvalidRequest(format!("position {last} is outside its block table")));
        }
        tokens.extend((0..row.len).map(|i| (table, row.pos0 + i)));
    }
    if tokens.len() != t {
        return Err(Error::InvalidRequest(format!("{t} queries for {} packed tokens", tokens.len())));
    }
    let groups = h / kvh;
    let job = Job {
        shape: Shape { kv_heads: kvh, dim: d, block_size: bs, groups, heads: h, chunk: chunk_keys(d) },
        q: qf,
        kd,
        vd,
        tokens: &tokens,
        p,
        fast: chunk::fast() && d.is_multiple_of(8),
    };
    // Tiles: up to TILE consecutive tokens of one row, each with every kv head.
    let mut tiles = Vec::new();
    for row in &ctx.rows {
        tiles.extend((0..row.len).step_by(TILE).map(|i| (row.start + i, TILE.min(row.len - i))));
    }
    let mut out = vec![0f32; t * h * d];
    let out_ptr = SharedOut(out.as_mut_ptr());
    let units = tiles.len() * kvh;
    let threads = candle_core::utils::get_num_threads().max(1);
    if units >= UNITS_PER_THREAD * threads {
        // Enough units: each folds its partials as it goes.
        par_chunks(units, 1, |range| {
            for u in range {
                let (t0, count) = tiles[u / kvh];
                job.fold_unit(t0, count, u % kvh, out_ptr);
            }
        });
    } else {
        job.split(&tiles, threads, out_ptr);
    }
    Ok(out)
}
