//! A simple KV store: one growing contiguous buffer per (slot, layer). Used by `hearth generate` and the tests;
//! the serving engine uses the paged block pool instead.

use super::{portable, AttnParams, BatchContext, KvStore};
use crate::{Error, Result};
use candle_core::Tensor;
use candle_nn::kv_cache::KvCache;
use std::collections::HashMap;

pub struct ContiguousKv {
    num_layers: usize,
    /// Initial per-sequence capacity in tokens; buffers grow beyond it as needed.
    capacity: usize,
    slots: HashMap<usize, Vec<KvCache>>,
    /// Linear-attention layers' state (chunk 16).
    recurrent: crate::recurrent::RecurrentStates,
}

impl ContiguousKv {
    pub fn new(num_layers: usize, capacity: usize) -> Self {
        Self {
            num_layers,
            capacity: capacity.max(16),
            slots: HashMap::new(),
            recurrent: crate::recurrent::RecurrentStates::new(16),
        }
    }
}

impl KvStore for ContiguousKv {
    fn recurrent(&mut self) -> Option<&mut crate::recurrent::RecurrentStates> {
        Some(&mut self.recurrent)
    }

    fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        ctx: &BatchContext,
        p: &AttnParams,
    ) -> Result<Tensor> {
        let mut outs = Vec::with_capacity(ctx.rows.len());
        for row in &ctx.rows {
            let (layers, cap) = (self.num_layers, self.capacity);
            let caches =
                self.slots.entry(row.slot).or_insert_with(|| (0..layers).map(|_| KvCache::new(1, cap)).collect());
            let cache =
                caches.get_mut(layer).ok_or_else(|| Error::InvalidRequest(format!("layer {layer} out of range")))?;
            if cache.current_seq_len() != row.pos0 {
                return Err(Error::InvalidRequest(format!(
                    "slot {} holds {} tokens but the row starts at position {}",
                    row.slot,
                    cache.current_seq_len(),
                    row.pos0
                )));
            }
            // (len, KvH, D) -> (KvH, len, D), appended along the token dim.
            let kr = k.narrow(0, row.start, row.len)?.transpose(0, 1)?.contiguous()?;
            let vr = v.narrow(0, row.start, row.len)?.transpose(0, 1)?.contiguous()?;
            let (k_all, v_all) = cache.append(&kr, &vr)?;
            let qr = q.narrow(0, row.start, row.len)?;
            outs.push(portable::attend_row(&qr, &k_all, &v_all, (row.pos0, 0), &ctx.both_ways(row.slot), p)?);
        }
        Ok(Tensor::cat(&outs, 0)?)
    }
}
