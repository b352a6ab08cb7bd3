//! The paged attention store: per layer, one K and one V buffer of `blocks × block_size` token rows. A sequence
//! (slot) owns a block table; its position p lives in row `table[p / bs] * bs + p % bs`. Each step writes the
//! new tokens' k/v in place, then gathers the visible positions and attends (the portable gather-then-attend
//! backend; fused kernels read the blocks directly later).

use crate::attention::{cpu, AttnParams, BatchContext, KvStore};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;

pub struct PagedKv {
    block_size: usize,
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    tables: HashMap<usize, Vec<u32>>,
}

impl PagedKv {
    pub fn new(num_layers: usize, num_blocks: usize, block_size: usize, kv_heads: usize, head_dim: usize, dtype: DType, device: &Device) -> Result<Self> {
        let rows = num_blocks * block_size;
        let mut k = Vec::with_capacity(num_layers);
        let mut v = Vec::with_capacity(num_layers);
        for _ in 0..num_layers {
            k.push(Tensor::zeros((rows, kv_heads, head_dim), dtype, device)?);
            v.push(Tensor::zeros((rows, kv_heads, head_dim), dtype, device)?);
        }
        Ok(Self { block_size, k, v, tables: HashMap::new() })
    }

    /// Bytes one token takes in the KV cache across all layers.
    pub fn bytes_per_token(num_layers: usize, kv_heads: usize, head_dim: usize, dtype: DType) -> usize {
        2 * num_layers * kv_heads * head_dim * dtype.size_in_bytes()
    }

    /// Set (replace) the block table of a slot before a step.
    pub fn set_table(&mut self, slot: usize, blocks: &[u32]) {
        let t = self.tables.entry(slot).or_default();
        t.clear();
        t.extend_from_slice(blocks);
    }

    /// Copy every layer's k/v of block `src` into block `dst` (copy-on-write of a shared partial block).
    pub fn copy_block(&mut self, src: u32, dst: u32) -> Result<()> {
        let bs = self.block_size;
        for buf in self.k.iter().chain(self.v.iter()) {
            // A deep copy: a narrow of the buffer shares its storage, which slice_set is about to write.
            let data = buf.narrow(0, src as usize * bs, bs)?.copy()?;
            buf.slice_set(&data, 0, dst as usize * bs)?;
        }
        Ok(())
    }

    pub fn clear_tables(&mut self) {
        self.tables.clear();
    }

    pub fn remove(&mut self, slot: usize) {
        self.tables.remove(&slot);
    }

    fn row_of(&self, table: &[u32], pos: usize) -> Result<usize> {
        let b = table.get(pos / self.block_size).ok_or_else(|| {
            Error::InvalidRequest(format!("position {pos} has no KV block (table of {} blocks)", table.len()))
        })?;
        Ok(*b as usize * self.block_size + pos % self.block_size)
    }
}

impl KvStore for PagedKv {
    fn attend(&mut self, layer: usize, q: &Tensor, k: &Tensor, v: &Tensor, ctx: &BatchContext, p: &AttnParams) -> Result<Tensor> {
        let (kbuf, vbuf) = (&self.k[layer], &self.v[layer]);
        let mut outs = Vec::with_capacity(ctx.rows.len());
        for row in &ctx.rows {
            let table = self
                .tables
                .get(&row.slot)
                .ok_or_else(|| Error::InvalidRequest(format!("slot {} has no block table", row.slot)))?;
            // 1. write the new tokens, one contiguous run per block
            let mut i = 0;
            while i < row.len {
                let pos = row.pos0 + i;
                let run = (self.block_size - pos % self.block_size).min(row.len - i);
                let dst = self.row_of(table, pos)?;
                kbuf.slice_set(&k.narrow(0, row.start + i, run)?.contiguous()?, 0, dst)?;
                vbuf.slice_set(&v.narrow(0, row.start + i, run)?.contiguous()?, 0, dst)?;
                i += run;
            }
            // 2. gather the visible positions (a sliding window needs only its last `w` keys)
            let end = row.pos0 + row.len;
            let kv_pos0 = match p.window {
                Some(w) => (row.pos0 + 1).saturating_sub(w),
                None => 0,
            };
            let idx: Vec<u32> = (kv_pos0..end).map(|pos| self.row_of(table, pos).map(|r| r as u32)).collect::<Result<_>>()?;
            let idx = Tensor::from_vec(idx, end - kv_pos0, kbuf.device())?;
            let kr = kbuf.index_select(&idx, 0)?.transpose(0, 1)?.contiguous()?;
            let vr = vbuf.index_select(&idx, 0)?.transpose(0, 1)?.contiguous()?;
            // 3. attend
            let qr = q.narrow(0, row.start, row.len)?;
            outs.push(cpu::attend_row(&qr, &kr, &vr, row.pos0, kv_pos0, p)?);
        }
        Ok(Tensor::cat(&outs, 0)?)
    }
}
