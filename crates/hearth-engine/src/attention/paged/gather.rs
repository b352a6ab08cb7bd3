//! The portable paged backend: write each row's new k/v into its blocks, gather the row's visible positions, and
//! attend them with the f32 math of `attention::portable`. Runs on any device.

use super::write_row;
use crate::attention::{portable, AttnParams, BatchContext, PIECE_ALIGN};
use crate::kv::PagedKv;
use crate::Result;
use candle_core::Tensor;

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
    let mut outs = Vec::with_capacity(ctx.rows.len());
    for row in &ctx.rows {
        let table = kv.table(row.slot)?;
        // 1. write the new tokens
        write_row(kv, layer, k, v, row)?;
        // 2. gather the visible positions (a sliding window needs only its last `w` keys)
        let end = row.pos0 + row.len;
        let first_visible = |pos: usize| match p.window {
            Some(w) => (pos + 1).saturating_sub(w),
            None => 0,
        };
        // A prompt row is attended in whole sub-blocks of the PIECE_ALIGN grid, padded with zero queries before
        // its first token (a piece that starts after a prompt-cache hit) and zero keys after its last (the end of
        // the prompt or of the piece): every prompt token then gets the arithmetic of the same shapes, keys and
        // mask, however its prompt was cut and wherever a hit ended. A decode row attends its one token.
        let from = if row.prompt { row.pos0 / PIECE_ALIGN * PIECE_ALIGN } else { row.pos0 };
        let base = first_visible(from);
        let idx: Vec<u32> = (base..end).map(|pos| kv.row_of(table, pos).map(|r| r as u32)).collect::<Result<_>>()?;
        let idx = Tensor::from_vec(idx, end - base, kbuf.device())?;
        let kr = kbuf.index_select(&idx, 0)?.transpose(0, 1)?.contiguous()?;
        let vr = vbuf.index_select(&idx, 0)?.transpose(0, 1)?.contiguous()?;
        // A row whose runs attend both ways (an image's tokens, each run whole in this piece) is attended in one
        // block over all its keys: a run's queries see its keys to the run's end.
        let both_ways = ctx.both_ways(row.slot);
        if !both_ways.is_empty() {
            let k0 = first_visible(row.pos0);
            let (ks, vs) = (kr.narrow(1, k0 - base, end - k0)?, vr.narrow(1, k0 - base, end - k0)?);
            let qr = q.narrow(0, row.start, row.len)?;
            outs.push(portable::attend_row(&qr, &ks, &vs, (row.pos0, k0), &both_ways, p)?);
            continue;
        }
        // 3. attend, sub-block by sub-block: each sees exactly the keys up to its own end.
        let mut s = from;
        while s < end {
            let grid_end = (s / PIECE_ALIGN + 1) * PIECE_ALIGN;
            let e = grid_end.min(end);
            let k0 = first_visible(s);
            let real = s.max(row.pos0);
            let qr = q.narrow(0, row.start + real - row.pos0, e - real)?;
            let mut ks = kr.narrow(1, k0 - base, e - k0)?;
            let mut vs = vr.narrow(1, k0 - base, e - k0)?;
            let (front, back) = if row.prompt { (real - s, grid_end - e) } else { (0, 0) };
            let qr = pad(&qr, 0, front, back)?;
            if back > 0 {
                ks = pad(&ks, 1, 0, back)?;
                vs = pad(&vs, 1, 0, back)?;
            }
            let out = portable::attend_row(&qr, &ks, &vs, (s, k0), &[], p)?;
            outs.push(if front + back > 0 { out.narrow(0, front, e - real)? } else { out });
            s = e;
        }
    }
    Ok(Tensor::cat(&outs, 0)?)
}

/// `t` with `front` zero rows before and `back` after, along `dim`.
fn pad(t: &Tensor, dim: usize, front: usize, back: usize) -> Result<Tensor> {
    if front + back == 0 {
        return Ok(t.clone());
    }
    let zeros = |n: usize| {
        let mut shape = t.dims().to_vec();
        shape[dim] = n;
        Tensor::zeros(shape, t.dtype(), t.device())
    };
    let mut parts = Vec::with_capacity(3);
    if front > 0 {
        parts.push(zeros(front)?);
    }
    parts.push(t.clone());
    if back > 0 {
        parts.push(zeros(back)?);
    }
    Ok(Tensor::cat(&parts, dim)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::test_util::rnd;

    fn run(qkv: [&Tensor; 3], pieces: &[(usize, usize)], p: &AttnParams) -> Vec<Vec<f32>> {
        crate::attention::test_util::run(attend, qkv, pieces, p, false)
    }

    /// A prompt token's attention is bit-identical however its prompt was cut into pieces, wherever a
    /// prompt-cache hit ended, and whatever tokens follow it in the prompt (full and sliding-window attention).
    #[test]
    fn prompt_tokens_attend_the_same_for_any_cut_hit_or_continuation() {
        let (h, kvh, d, n) = (4, 2, 8, 77);
        let (q, k, v) = (rnd((n, h, d), 0.1), rnd((n, kvh, d), 0.2), rnd((n, kvh, d), 0.3));
        for window in [None, Some(20)] {
            let p = AttnParams { scale: 0.35, window, softcap: None, sinks: None };
            let cold = run([&q, &k, &v], &[(0, n)], &p);
            for hit in [16, 48, 50, 64, 76] {
                let warm = run([&q, &k, &v], &[(0, hit), (hit, n - hit)], &p);
                assert_eq!(&warm[hit..], &cold[hit..], "hit {hit}, window {window:?}");
            }
            // Another prompt that shares the first `m` tokens and goes on differently (or ends): the shared
            // tokens' outputs (hence the KV of the next layer, which a later hit reuses) are the same.
            for (m, len) in [(40, 45), (50, 77), (64, 66), (17, 33)] {
                let [q2, k2, v2] = [(&q, 1.1), (&k, 1.2), (&v, 1.3)].map(|(t, seed)| {
                    let (_, a, b) = t.dims3().unwrap();
                    Tensor::cat(&[&t.narrow(0, 0, m).unwrap(), &rnd((len - m, a, b), seed)], 0).unwrap()
                });
                let other = run([&q2, &k2, &v2], &[(0, len)], &p);
                assert_eq!(&other[..m], &cold[..m], "shared {m} of {len}, window {window:?}");
            }
        }
    }
}
