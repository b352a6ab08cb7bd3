//! The CUDA paged backend: per layer one kernel writes the step's new k/v rows into their blocks and one attends
//! every packed token through the block tables, reading the blocks in place; with the fused q|k|v projection the
//! rotary embedding is applied on the way in (and decode-only steps of few rows take the one-launch cluster
//! kernel). The step's metadata (slot mapping, token rows, padded block tables) is uploaded once, at layer 0.

use crate::attention::{AttnParams, BatchContext, Heads, RopeTables};
use crate::kv::{KvEncoding, PagedKv};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};

pub struct CudaPaged {
    /// This step's device metadata (rebuilt at layer 0).
    meta: Option<super::StepMeta>,
    /// Decode-only steps of at most this many tokens take the cluster decode kernel (`HEARTH_CUDA_DECODE_CLUSTER`).
    decode_cluster: usize,
    /// An encoded cache's encoding (None: a float cache in the model's dtype).
    encoded: Option<KvEncoding>,
}

impl CudaPaged {
    /// The backend for a model with these heads on `device` keeping its KV in `encoding`, or None when the kernels
    /// do not serve it (not a CUDA device, `HEARTH_CUDA_PAGED_ATTN=0`, an unsupported head size or dtype, or an
    /// encoding without CUDA kernels: [`super::encoded`]).
    pub fn choose(
        device: &Device,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        encoding: KvEncoding,
    ) -> Option<Self> {
        let encoded = encoding.is_quantized().then_some(encoding);
        // An encoded cache's shape check: the model's dtype is only known at the first step (bf16 or f16 there).
        let dtype = if encoded.is_some() { DType::BF16 } else { encoding.storage_dtype() };
        let on = device.is_cuda()
            && crate::levers::get().cuda_paged_attn
            && encoded.is_none_or(super::encoded::serves)
            && super::supports(heads, kv_heads, head_dim, dtype);
        on.then(|| Self { meta: None, decode_cluster: crate::levers::get().cuda_decode_cluster, encoded })
    }

    /// The encoded cache's kernels for a model computing in `dtype` (None: a float cache).
    fn module(&self, dtype: DType) -> Result<Option<&'static super::encoded::Module>> {
        let Some(enc) = self.encoded else { return Ok(None) };
        match super::encoded::module(enc, dtype) {
            Some(m) => Ok(Some(m)),
            None => Err(Error::Unsupported(format!(
                "the CUDA kernels read a {} KV cache for models computing in bf16 or f16, not {dtype:?}",
                enc.name()
            ))),
        }
    }

    /// Decode-only steps of at most `max_tokens` tokens take the cluster decode kernel from now on (0: none;
    /// `usize::MAX`: every one): the GPU tests compare it with the split path on the same store.
    pub fn set_decode_cluster(&mut self, max_tokens: usize) {
        self.decode_cluster = max_tokens;
    }

    /// The step's slot mapping, token rows and padded block tables, uploaded once for all layers.
    fn build_meta(
        kv: &PagedKv,
        ctx: &BatchContext,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        dtype: DType,
        encoded: bool,
    ) -> Result<super::StepMeta> {
        let dev = kv.layer(0)?.0.device();
        let mut slots = Vec::with_capacity(ctx.num_tokens());
        let mut tok_row = Vec::with_capacity(ctx.num_tokens());
        let mut tabs: Vec<&[u32]> = Vec::with_capacity(ctx.rows.len());
        for (r, row) in ctx.rows.iter().enumerate() {
            let table = kv.table(row.slot)?;
            for pos in row.pos0..row.pos0 + row.len {
                slots.push(kv.row_of(table, pos)? as u32);
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
        Ok(super::StepMeta {
            slots: Tensor::from_vec(slots, n, dev)?,
            tok_row: Tensor::from_vec(tok_row, n, dev)?,
            tok_pos: ctx.positions.to_device(dev)?,
            tables: Tensor::from_vec(flat, (tabs.len(), max_blocks), dev)?,
            max_blocks,
            max_keys,
            decode_only: ctx.rows.iter().all(|r| r.len == 1),
            tc: super::prefill::plan(ctx, heads, kv_heads, head_dim, dtype, dev)?,
            identity: encoded.then(|| Tensor::arange(0u32, n as u32, dev)).transpose()?,
        })
    }

    /// A decode step's metadata from the fixed buffers it was handed (no upload: a CUDA graph captures this step).
    fn fixed_meta(f: &crate::attention::FixedMeta, ctx: &BatchContext) -> super::StepMeta {
        super::StepMeta {
            slots: f.slots.clone(),
            tok_row: f.tok_row.clone(),
            tok_pos: ctx.positions.clone(),
            tables: f.tables.clone(),
            max_blocks: f.max_blocks,
            max_keys: f.max_keys,
            decode_only: true,
            tc: None,
            identity: None,
        }
    }

    /// Whether the cache is kept in the model's float dtype (an encoded one takes no fixed metadata).
    pub fn float_cache(&self) -> bool {
        self.encoded.is_none()
    }

    /// This step's metadata, built at layer 0 (or when missing).
    fn meta(
        &mut self,
        kv: &PagedKv,
        layer: usize,
        heads: Heads,
        dtype: DType,
        ctx: &BatchContext,
    ) -> Result<&super::StepMeta> {
        if layer == 0 || self.meta.is_none() {
            let encoded = self.encoded.is_some();
            self.meta = Some(match &ctx.fixed {
                Some(f) if !encoded => Self::fixed_meta(f, ctx),
                _ => Self::build_meta(kv, ctx, heads.q, heads.kv, heads.dim, dtype, encoded)?,
            });
        }
        self.meta.as_ref().ok_or_else(|| Error::InvalidRequest("no step metadata".into()))
    }

    fn params(&self, kv: &PagedKv, heads: Heads, p: &AttnParams) -> super::Params {
        super::Params {
            heads: heads.q,
            kv_heads: heads.kv,
            block_size: kv.block_size(),
            window: p.window.unwrap_or(0),
            scale: p.scale as f32,
            softcap: p.softcap.unwrap_or(0.0) as f32,
            decode_cluster: self.decode_cluster,
        }
    }

    /// Rotate, store and attend from the fused q|k|v projection (T, (H + 2 KvH) * D). Returns (T, H*D).
    #[allow(clippy::too_many_arguments)]
    pub fn attend_qkv(
        &mut self,
        kv: &PagedKv,
        layer: usize,
        qkv: &Tensor,
        rope: &RopeTables,
        heads: Heads,
        ctx: &BatchContext,
        p: &AttnParams,
    ) -> Result<Tensor> {
        let params = self.params(kv, heads, p);
        let enc = self.module(qkv.dtype())?;
        let meta = self.meta(kv, layer, heads, qkv.dtype(), ctx)?;
        let (kc, vc) = kv.layer(layer)?;
        let t = qkv.dim(0)?;
        // A decode-only step of few rows: rope, the attention and its split merge in one launch.
        if let Some(out) = super::decode::rope_attention(qkv, rope, kc, vc, meta, params, heads.dim, enc)? {
            return Ok(out.reshape((t, heads.q * heads.dim))?);
        }
        // An encoded cache: the rotated k and the v rows go to a scratch pair in token order, then are encoded.
        let scratch = match (enc, &meta.identity) {
            (Some(m), Some(ident)) => {
                let zeros = || Tensor::zeros((t, heads.kv, heads.dim), qkv.dtype(), qkv.device());
                Some((m, zeros()?, zeros()?, ident))
            }
            _ => None,
        };
        let (kw, vw, slots) = match &scratch {
            Some((_, ks, vs, ident)) => (ks, vs, *ident),
            None => (kc, vc, &meta.slots),
        };
        let q = crate::gpu::fused::qkv_rope(
            qkv,
            rope.cos,
            rope.sin,
            rope.interleaved,
            kw,
            vw,
            slots,
            heads.q,
            heads.kv,
            heads.dim,
        )?;
        if let Some((m, ks, vs, _)) = &scratch {
            super::encoded::encode_kv(m, kc, vc, ks, vs, &meta.slots)?;
        }
        let out = super::paged_attention(&q, kc, vc, meta, params, enc)?;
        Ok(out.reshape((t, heads.q * heads.dim))?)
    }

    /// Store this step's k/v and attend: `q` (T, H, D), `k`/`v` (T, KvH, D). Returns (T, H*D).
    #[allow(clippy::too_many_arguments)]
    pub fn attend(
        &mut self,
        kv: &PagedKv,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        ctx: &BatchContext,
        p: &AttnParams,
    ) -> Result<Tensor> {
        let (t, h, d) = q.dims3()?;
        let heads = Heads { q: h, kv: k.dim(1)?, dim: d };
        let params = self.params(kv, heads, p);
        let enc = self.module(q.dtype())?;
        let meta = self.meta(kv, layer, heads, q.dtype(), ctx)?;
        let (kc, vc) = kv.layer(layer)?;
        match enc {
            Some(m) => super::encoded::encode_kv(m, kc, vc, k, v, &meta.slots)?,
            None => {
                super::write_kv(kc, k, &meta.slots)?;
                super::write_kv(vc, v, &meta.slots)?;
            }
        }
        let out = super::paged_attention(q, kc, vc, meta, params, enc)?;
        Ok(out.reshape((t, h * d))?)
    }
}
