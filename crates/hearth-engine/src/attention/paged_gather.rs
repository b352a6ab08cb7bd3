//! The portable paged backend: write each row's new k/v into its blocks, gather the row's visible positions, and
//! attend them with the f32 kernel of `attention::cpu`. Runs on any device.

use crate::attention::{cpu, AttnParams, BatchContext, PIECE_ALIGN};
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
    let bs = kv.block_size();
    let mut outs = Vec::with_capacity(ctx.rows.len());
    for row in &ctx.rows {
        let table = kv.table(row.slot)?;
        // 1. write the new tokens, one contiguous run per block
        let mut i = 0;
        while i < row.len {
            let pos = row.pos0 + i;
            let run = (bs - pos % bs).min(row.len - i);
            let dst = kv.row_of(table, pos)?;
            kbuf.slice_set(&k.narrow(0, row.start + i, run)?.contiguous()?, 0, dst)?;
            vbuf.slice_set(&v.narrow(0, row.start + i, run)?.contiguous()?, 0, dst)?;
            i += run;
        }
        // 2. gather the visible positions (a sliding window needs only its last `w` keys)
        let end = row.pos0 + row.len;
        let first_visible = |pos: usize| match p.window {
            Some(w) => (pos + 1).saturating_sub(w),
            None => 0,
        };
        let base = first_visible(row.pos0);
        let idx: Vec<u32> = (base..end).map(|pos| kv.row_of(table, pos).map(|r| r as u32)).collect::<Result<_>>()?;
        let idx = Tensor::from_vec(idx, end - base, kbuf.device())?;
        let kr = kbuf.index_select(&idx, 0)?.transpose(0, 1)?.contiguous()?;
        let vr = vbuf.index_select(&idx, 0)?.transpose(0, 1)?.contiguous()?;
        // 3. attend, in sub-blocks aligned to PIECE_ALIGN positions: each sub-block sees exactly the keys up to
        //    its own end, so its result is the same whether its piece was long or short.
        let mut s = row.pos0;
        while s < end {
            let e = ((s / PIECE_ALIGN + 1) * PIECE_ALIGN).min(end);
            let k0 = first_visible(s);
            let qr = q.narrow(0, row.start + s - row.pos0, e - s)?;
            let ks = kr.narrow(1, k0 - base, e - k0)?;
            let vs = vr.narrow(1, k0 - base, e - k0)?;
            outs.push(cpu::attend_row(&qr, &ks, &vs, s, k0, p)?);
            s = e;
        }
    }
    Ok(Tensor::cat(&outs, 0)?)
}
