//! The paged attention store: per layer, one K and one V buffer of `blocks × block_size` token rows. A sequence
//! (slot) owns a block table; its position p lives in row `table[p / bs] * bs + p % bs`. Each step writes the
//! new tokens' k/v in place, then attends. On the CPU (and wherever the CUDA kernels do not apply) it gathers
//! each row's visible positions and attends them (the portable gather-then-attend backend). With the `cuda`
//! feature on a CUDA device, one kernel per layer writes the new rows and one attends every packed token through
//! the block tables, reading the blocks in place (`attention::cuda`; `HEARTH_CUDA_PAGED_ATTN=0` turns it off).

use crate::attention::{cpu, AttnParams, BatchContext, KvStore, PIECE_ALIGN};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;

pub struct PagedKv {
    block_size: usize,
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    tables: HashMap<usize, Vec<u32>>,
    /// This step's device metadata for the CUDA kernels (rebuilt at layer 0).
    #[cfg(feature = "cuda")]
    meta: Option<crate::attention::cuda::StepMeta>,
}

/// Whether the CUDA paged-attention kernels serve this device (kill switch `HEARTH_CUDA_PAGED_ATTN=0`).
#[cfg(feature = "cuda")]
fn cuda_kernels_on(device: &Device) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    device.is_cuda() && *ON.get_or_init(|| !crate::gpu::env_off("HEARTH_CUDA_PAGED_ATTN"))
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
        Ok(Self {
            block_size,
            k,
            v,
            tables: HashMap::new(),
            #[cfg(feature = "cuda")]
            meta: None,
        })
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

#[cfg(feature = "cuda")]
impl PagedKv {
    /// The step's slot mapping, token rows and padded block tables, uploaded once for all layers.
    fn build_meta(&self, ctx: &BatchContext, heads: usize, kv_heads: usize, head_dim: usize, dtype: candle_core::DType) -> Result<crate::attention::cuda::StepMeta> {
        let dev = self.k[0].device();
        let mut slots = Vec::with_capacity(ctx.num_tokens());
        let mut tok_row = Vec::with_capacity(ctx.num_tokens());
        let mut tabs: Vec<&[u32]> = Vec::with_capacity(ctx.rows.len());
        for (r, row) in ctx.rows.iter().enumerate() {
            let table = self
                .tables
                .get(&row.slot)
                .ok_or_else(|| Error::InvalidRequest(format!("slot {} has no block table", row.slot)))?;
            for pos in row.pos0..row.pos0 + row.len {
                slots.push(self.row_of(table, pos)? as u32);
                tok_row.push(r as u32);
            }
            tabs.push(table);
        }
        let max_blocks = tabs.iter().map(|t| t.len()).max().unwrap_or(0).max(1);
        let mut flat = vec![0u32; tabs.len() * max_blocks];
        for (r, t) in tabs.iter().enumerate() {
            flat[r * max_blocks..r * max_blocks + t.len()].copy_from_slice(t);
        }
        let n = slots.len();
        let max_keys = ctx.rows.iter().map(|r| r.pos0 + r.len).max().unwrap_or(0);
        Ok(crate::attention::cuda::StepMeta {
            slots: Tensor::from_vec(slots, n, dev)?,
            tok_row: Tensor::from_vec(tok_row, n, dev)?,
            tok_pos: ctx.positions.to_device(dev)?,
            tables: Tensor::from_vec(flat, (tabs.len(), max_blocks), dev)?,
            max_blocks,
            max_keys,
            merge_counters: crate::attention::cuda::merge_counters(dev)?,
            decode_only: ctx.rows.iter().all(|r| r.len == 1),
            tc: crate::attention::cuda::prefill::plan(ctx, heads, kv_heads, head_dim, dtype, dev)?,
        })
    }

    /// Whether the kernels serve these tensors; builds this step's metadata at layer 0.
    fn cuda_ready(&mut self, layer: usize, heads: usize, kv_heads: usize, head_dim: usize, dtype: candle_core::DType, ctx: &BatchContext) -> Result<bool> {
        let dev = self.k[layer].device().clone();
        if !cuda_kernels_on(&dev) || !crate::attention::cuda::supports(heads, kv_heads, head_dim, dtype) || dtype != self.k[layer].dtype() {
            return Ok(false);
        }
        if layer == 0 || self.meta.is_none() {
            self.meta = Some(self.build_meta(ctx, heads, kv_heads, head_dim, dtype)?);
        }
        Ok(true)
    }

    fn params(&self, heads: usize, kv_heads: usize, p: &AttnParams) -> crate::attention::cuda::Params {
        crate::attention::cuda::Params {
            heads,
            kv_heads,
            block_size: self.block_size,
            window: p.window.unwrap_or(0),
            scale: p.scale as f32,
            softcap: p.softcap.unwrap_or(0.0) as f32,
        }
    }

    /// The CUDA path, or None when the kernels do not apply here (then the portable path runs).
    fn attend_cuda(&mut self, layer: usize, q: &Tensor, k: &Tensor, v: &Tensor, ctx: &BatchContext, p: &AttnParams) -> Result<Option<Tensor>> {
        use crate::attention::cuda;
        let (t, h, d) = q.dims3()?;
        let kvh = k.dim(1)?;
        if !self.cuda_ready(layer, h, kvh, d, q.dtype(), ctx)? {
            return Ok(None);
        }
        let meta = self.meta.as_ref().expect("built by cuda_ready");
        cuda::write_kv(&self.k[layer], k, &meta.slots)?;
        cuda::write_kv(&self.v[layer], v, &meta.slots)?;
        let params = self.params(h, kvh, p);
        let out = cuda::paged_attention(q, &self.k[layer], &self.v[layer], meta, params)?;
        Ok(Some(out.reshape((t, h * d))?))
    }
}

impl KvStore for PagedKv {
    #[cfg(feature = "cuda")]
    fn attend_qkv(&mut self, layer: usize, qkv: &Tensor, rope: &crate::attention::RopeTables, heads: crate::attention::Heads, ctx: &BatchContext, p: &AttnParams) -> Result<Option<Tensor>> {
        if !self.cuda_ready(layer, heads.q, heads.kv, heads.dim, qkv.dtype(), ctx)? {
            return Ok(None);
        }
        let meta = self.meta.as_ref().expect("built by cuda_ready");
        let params = self.params(heads.q, heads.kv, p);
        // A decode-only step of few rows: rope, the attention and its split merge in one launch.
        if let Some(out) = crate::attention::cuda::decode::rope_attention(qkv, rope, &self.k[layer], &self.v[layer], meta, params, heads.dim)? {
            return Ok(Some(out.reshape((qkv.dim(0)?, heads.q * heads.dim))?));
        }
        let q = crate::gpu::fused::qkv_rope(qkv, rope.cos, rope.sin, rope.interleaved, &self.k[layer], &self.v[layer], &meta.slots, heads.q, heads.kv, heads.dim)?;
        let out = crate::attention::cuda::paged_attention(&q, &self.k[layer], &self.v[layer], meta, params)?;
        Ok(Some(out.reshape((qkv.dim(0)?, heads.q * heads.dim))?))
    }

    fn attend(&mut self, layer: usize, q: &Tensor, k: &Tensor, v: &Tensor, ctx: &BatchContext, p: &AttnParams) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some(out) = self.attend_cuda(layer, q, k, v, ctx, p)? {
            return Ok(out);
        }
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
            let first_visible = |pos: usize| match p.window {
                Some(w) => (pos + 1).saturating_sub(w),
                None => 0,
            };
            let base = first_visible(row.pos0);
            let idx: Vec<u32> = (base..end).map(|pos| self.row_of(table, pos).map(|r| r as u32)).collect::<Result<_>>()?;
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
}
