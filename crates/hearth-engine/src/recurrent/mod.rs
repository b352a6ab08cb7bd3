//! Per-sequence recurrent state of linear-attention layers (Qwen3.5's gated DeltaNet), held beside the KV cache
//! by the KV store that the model is handed ([`crate::attention::KvStore::recurrent`]).
//!
//! A sequence's state is one [`LayerState`] per linear-attention layer. States advance only through
//! [`delta::run_row`], whose arithmetic depends on each token's absolute position alone, so the state at a chunk
//! boundary is bit-identical however the tokens before it were batched or cut into pieces. That is what lets the
//! prompt cache keep **snapshots**: the state at a block boundary (the block size is a multiple of the chunk),
//! stored under the content address of the block that ends there. A later request that shares that prefix starts
//! from the snapshot, and computes exactly what a cold run computes.
//!
//! The scheduler decides (`StateOps` in each step's plan): which rows restore a snapshot before the step, which
//! states fork to a new choice, which slots are released, which snapshots to capture at which positions during the
//! step, and which to drop. The store applies those and keeps no policy.

pub mod delta;

use crate::kv::prefix::BlockHash;
use crate::weights::config::LinearAttnConfig;
use crate::{Error, Result};
use delta::{DeltaWeights, LayerState, RowInputs};
use std::collections::HashMap;
use std::sync::Arc;

/// The chunk of the chunk-aligned delta rule: 16 positions, or the largest power of two that divides a smaller
/// block size (snapshots are taken at block boundaries, which must be chunk boundaries).
pub fn chunk_for_block(block_size: usize) -> usize {
    let mut c = 16;
    while c > 1 && !block_size.is_multiple_of(c) {
        c /= 2;
    }
    c
}

/// Bytes of one snapshot of a model's linear-attention layers (of a model with `kv_layers` attention layers
/// among `cfg.layers`) in an engine of `block_size`-token blocks.
pub fn snapshot_bytes(cfg: &LinearAttnConfig, kv_layers: usize, block_size: usize) -> usize {
    let linear = cfg.layers.len().saturating_sub(kv_layers);
    linear * LayerState::new(cfg, chunk_for_block(block_size)).compact().bytes()
}

/// A snapshot: every linear-attention layer's state at one chunk boundary.
pub type Snapshot = Arc<Vec<LayerState>>;

/// The scheduler's orders for the recurrent states of one step, applied before its forward pass (captures during
/// it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateOps {
    /// Slots whose rows left: their states are dropped.
    pub release: Vec<usize>,
    /// (from, to): a new choice continues from its parent's state.
    pub forks: Vec<(usize, usize)>,
    /// (slot, snapshot): the row starts from a cached prefix's state.
    pub restores: Vec<(usize, BlockHash)>,
    /// Snapshots no longer kept.
    pub drops: Vec<BlockHash>,
    /// (slot, position, name): keep the row's state when it reaches `position` in this step.
    pub captures: Vec<(usize, usize, BlockHash)>,
}

impl StateOps {
    pub fn is_empty(&self) -> bool {
        self.release.is_empty()
            && self.forks.is_empty()
            && self.restores.is_empty()
            && self.drops.is_empty()
            && self.captures.is_empty()
    }
}

/// A capture in progress: filled layer by layer as the forward pass reaches its position.
struct Capture {
    slot: usize,
    pos: usize,
    name: BlockHash,
    layers: Vec<Option<LayerState>>,
}

/// Every sequence's recurrent state and the snapshots kept for the prompt cache.
pub struct RecurrentStates {
    chunk: usize,
    /// Per slot, per linear-attention layer (in layer order).
    slots: HashMap<usize, Vec<Option<LayerState>>>,
    snapshots: HashMap<BlockHash, Snapshot>,
    captures: Vec<Capture>,
    /// The number of linear-attention layers (known from the first layer that runs).
    layers: usize,
}

impl RecurrentStates {
    pub fn new(chunk: usize) -> Self {
        Self { chunk: chunk.max(1), slots: HashMap::new(), snapshots: HashMap::new(), captures: Vec::new(), layers: 0 }
    }

    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Apply a step's orders: releases, forks, restores and drops at once; captures as the step runs.
    pub fn apply(&mut self, ops: &StateOps) -> Result<()> {
        for s in &ops.release {
            self.slots.remove(s);
        }
        for &(from, to) in &ops.forks {
            let st = self.slots.get(&from).cloned().ok_or_else(|| {
                Error::InvalidRequest(format!("fork of slot {from}'s recurrent state: the slot holds none"))
            })?;
            self.slots.insert(to, st);
        }
        for (slot, name) in &ops.restores {
            let snap = self.snapshots.get(name).ok_or_else(|| {
                Error::InvalidRequest(format!("restore of slot {slot}: no recurrent-state snapshot {}", name.hex()))
            })?;
            self.slots.insert(*slot, snap.iter().cloned().map(Some).collect());
        }
        for name in &ops.drops {
            self.snapshots.remove(name);
        }
        self.captures = ops
            .captures
            .iter()
            .filter(|c| c.1.is_multiple_of(self.chunk))
            .map(|&(slot, pos, name)| Capture { slot, pos, name, layers: Vec::new() })
            .collect();
        Ok(())
    }

    /// The step's forward pass is done: complete captures become snapshots.
    pub fn end_step(&mut self) {
        for c in self.captures.drain(..) {
            if c.layers.len() == self.layers && c.layers.iter().all(Option::is_some) {
                self.snapshots
                    .insert(c.name, Arc::new(c.layers.into_iter().flatten().map(LayerState::compact).collect()));
            }
        }
    }

    /// Keep the state `slot` holds now (at a chunk boundary) as a snapshot named `name`: what a step's capture
    /// does, for callers outside the engine (tests, `hearth generate`).
    pub fn snapshot_now(&mut self, slot: usize, name: BlockHash) -> Result<()> {
        let st = self.slots.get(&slot).ok_or_else(|| Error::InvalidRequest(format!("slot {slot} holds no state")))?;
        let layers: Option<Vec<LayerState>> = st.iter().cloned().collect();
        match layers {
            Some(l) if l.iter().all(|s| s.pos.is_multiple_of(self.chunk)) => {
                self.snapshots.insert(name, Arc::new(l.into_iter().map(LayerState::compact).collect()));
                Ok(())
            }
            _ => Err(Error::InvalidRequest(format!("slot {slot} is not at a chunk boundary in every layer"))),
        }
    }

    pub fn has_snapshot(&self, name: BlockHash) -> bool {
        self.snapshots.contains_key(&name)
    }

    /// Sequences holding state, snapshots kept, and the bytes of both.
    pub fn usage(&self) -> (usize, usize, usize) {
        let live: usize = self.slots.values().flatten().flatten().map(LayerState::bytes).sum();
        let snaps: usize = self.snapshots.values().flat_map(|s| s.iter()).map(LayerState::bytes).sum();
        (self.slots.len(), self.snapshots.len(), live + snaps)
    }

    /// Forget everything (the engine restarts its pool).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.snapshots.clear();
        self.captures.clear();
    }

    /// Run linear-attention layer `ordinal` (of `layers`) over one row: `slot`'s state must be at `pos0` (a row
    /// at 0 starts afresh). Writes len × v_heads × value_dim outputs into `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn run_row(
        &mut self,
        ordinal: usize,
        layers: usize,
        cfg: &LinearAttnConfig,
        w: &DeltaWeights,
        slot: usize,
        pos0: usize,
        x: &RowInputs,
        out: &mut [f32],
    ) -> Result<()> {
        self.layers = layers;
        let chunk = self.chunk;
        let seq = self.slots.entry(slot).or_insert_with(|| vec![None; layers]);
        if seq.len() != layers || ordinal >= layers {
            return Err(Error::InvalidRequest(format!(
                "linear-attention layer {ordinal} of {layers}: state has {}",
                seq.len()
            )));
        }
        let st = match &mut seq[ordinal] {
            Some(st) if st.pos == pos0 => st,
            st if pos0 == 0 => st.insert(LayerState::new(cfg, chunk)),
            st => {
                return Err(Error::InvalidRequest(format!(
                    "slot {slot}: the row starts at position {pos0} but its layer-{ordinal} recurrent state is at {}",
                    st.as_ref().map_or("none".to_string(), |s| s.pos.to_string())
                )))
            }
        };
        let mut wanted: Vec<usize> = self.captures.iter().filter(|c| c.slot == slot).map(|c| c.pos).collect();
        wanted.sort_unstable();
        wanted.dedup();
        for snap in delta::run_row(cfg, w, chunk, st, x, out, &wanted) {
            for c in self.captures.iter_mut().filter(|c| c.slot == slot && c.pos == snap.pos) {
                if c.layers.len() < layers {
                    c.layers.resize(layers, None);
                }
                c.layers[ordinal] = Some(snap.clone());
            }
        }
        Ok(())
    }
}
