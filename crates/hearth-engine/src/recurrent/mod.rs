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
#[cfg(test)]
mod delta_tests;

use crate::kv::prefix::BlockHash;
use crate::kv::ssd::SsdStore;
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

/// Bytes of one snapshot of a model's linear-attention layers in an engine of `block_size`-token blocks.
pub fn snapshot_bytes(cfg: &LinearAttnConfig, block_size: usize) -> usize {
    cfg.linear_layers() * LayerState::new(cfg, chunk_for_block(block_size)).compact().bytes()
}

/// A snapshot: every linear-attention layer's state at one chunk boundary.
pub type Snapshot = Arc<Vec<LayerState>>;

/// Keep row `slot`'s state when it reaches `pos` in this step, as snapshot `name` (the address of the block that
/// ends there; `parent`: the block before it, which the SSD tier's file records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capture {
    pub slot: usize,
    pub pos: usize,
    pub name: BlockHash,
    pub parent: BlockHash,
}

/// A snapshot read back from the SSD tier: its bytes (as [`RecurrentStates`] writes them) and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    pub name: BlockHash,
    pub parent: BlockHash,
    pub pos: usize,
    pub bytes: Vec<u8>,
}

/// The scheduler's orders for the recurrent states of one step, applied before its forward pass (captures during
/// it): loads, forks, releases, restores, spills, drops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateOps {
    /// Snapshots read from the SSD tier, kept in memory again.
    pub loads: Vec<Loaded>,
    /// (from, to): a new choice continues from its parent's state.
    pub forks: Vec<(usize, usize)>,
    /// Slots whose rows left: their states are dropped.
    pub release: Vec<usize>,
    /// (slot, snapshot): the row starts from a cached prefix's state.
    pub restores: Vec<(usize, BlockHash)>,
    /// Snapshots written to the SSD tier (before they are dropped from memory).
    pub spills: Vec<BlockHash>,
    /// Snapshots no longer kept in memory.
    pub drops: Vec<BlockHash>,
    pub captures: Vec<Capture>,
}

impl StateOps {
    pub fn is_empty(&self) -> bool {
        self.loads.is_empty()
            && self.release.is_empty()
            && self.forks.is_empty()
            && self.restores.is_empty()
            && self.spills.is_empty()
            && self.drops.is_empty()
            && self.captures.is_empty()
    }
}

/// A capture in progress: filled layer by layer as the forward pass reaches its position.
struct Filling {
    at: Capture,
    layers: Vec<Option<LayerState>>,
}

/// A snapshot in memory, with the block before the one it ends (for the SSD tier's file).
struct Kept {
    snap: Snapshot,
    parent: BlockHash,
}

/// Every sequence's recurrent state and the snapshots kept for the prompt cache.
pub struct RecurrentStates {
    chunk: usize,
    /// Per slot, per linear-attention layer (in layer order).
    slots: HashMap<usize, Vec<Option<LayerState>>>,
    snapshots: HashMap<BlockHash, Kept>,
    captures: Vec<Filling>,
    /// The number of linear-attention layers (known from the first layer that runs, or [`Self::set_model`]).
    layers: usize,
    /// The model's linear-attention shape, and the SSD tier snapshots are written to and read from.
    model: Option<(LinearAttnConfig, Option<Arc<SsdStore>>)>,
}

impl RecurrentStates {
    pub fn new(chunk: usize) -> Self {
        Self {
            chunk: chunk.max(1),
            slots: HashMap::new(),
            snapshots: HashMap::new(),
            captures: Vec::new(),
            layers: 0,
            model: None,
        }
    }

    /// The model's linear-attention layers and the SSD tier their snapshots go to (the engine's runner).
    pub fn set_model(&mut self, cfg: &LinearAttnConfig, cold: Option<Arc<SsdStore>>) {
        self.layers = cfg.linear_layers();
        self.model = Some((cfg.clone(), cold));
    }

    /// The SSD tier's block shape for snapshots of this model: one "token" (the position), one "head" of each
    /// layer's floats rounded up to even, per linear-attention layer.
    pub fn tier_layout(cfg: &LinearAttnConfig) -> crate::kv::ssd::BlockLayout {
        let floats = LayerState::snapshot_floats(cfg).div_ceil(2) * 2;
        crate::kv::ssd::BlockLayout {
            layers: cfg.linear_layers(),
            kv_heads: 1,
            head_dim: floats / 2,
            block_size: 1,
            dtype: "f32".into(),
            dtype_size: 4,
        }
    }

    /// A snapshot as the SSD tier stores it: each layer's [`LayerState::write_snapshot`], padded to even floats.
    fn encode(cfg: &LinearAttnConfig, snap: &[LayerState]) -> Vec<u8> {
        let floats = LayerState::snapshot_floats(cfg);
        let mut out = Vec::with_capacity(snap.len() * 4 * (floats + 1));
        for l in snap {
            l.write_snapshot(&mut out);
            if floats % 2 == 1 {
                out.extend_from_slice(&0f32.to_le_bytes());
            }
        }
        out
    }

    fn decode(cfg: &LinearAttnConfig, pos: usize, bytes: &[u8]) -> Option<Vec<LayerState>> {
        let exact = 4 * LayerState::snapshot_floats(cfg);
        let per = exact.div_ceil(8) * 8;
        if bytes.len() != per * cfg.linear_layers() {
            return None;
        }
        bytes.chunks_exact(per).map(|b| LayerState::read_snapshot(cfg, pos, &b[..exact])).collect()
    }

    /// Apply a step's orders: loads, forks, releases, restores, spills and drops at once (forks before releases: a
    /// choice forks off a parent that may finish in the same step); captures as the step runs. Every order is
    /// carried out that can be, so the ledger and the states stay in step; the first that could not is the error.
    pub fn apply(&mut self, ops: &StateOps) -> Result<()> {
        let mut first: Option<Error> = None;
        let mut fail = |e: Error| {
            first.get_or_insert(e);
        };
        for l in &ops.loads {
            match self.model.as_ref().and_then(|(cfg, _)| Self::decode(cfg, l.pos, &l.bytes)) {
                Some(snap) => {
                    self.snapshots.insert(l.name, Kept { snap: Arc::new(snap), parent: l.parent });
                }
                None => fail(Error::InvalidRequest(format!(
                    "recurrent-state snapshot {} has the wrong shape",
                    l.name.hex()
                ))),
            }
        }
        for &(from, to) in &ops.forks {
            match self.slots.get(&from).cloned() {
                Some(st) => {
                    self.slots.insert(to, st);
                }
                None => fail(Error::InvalidRequest(format!("fork of slot {from}'s recurrent state: it holds none"))),
            }
        }
        for s in &ops.release {
            self.slots.remove(s);
        }
        for (slot, name) in &ops.restores {
            match self.snapshots.get(name) {
                Some(snap) => {
                    self.slots.insert(*slot, snap.snap.iter().cloned().map(Some).collect());
                }
                None => {
                    self.slots.remove(slot);
                    fail(Error::InvalidRequest(format!(
                        "restore of slot {slot}: no recurrent-state snapshot {}",
                        name.hex()
                    )))
                }
            }
        }
        for name in &ops.spills {
            self.spill(*name, false);
        }
        for name in &ops.drops {
            self.snapshots.remove(name);
        }
        self.captures = ops
            .captures
            .iter()
            .filter(|c| c.pos.is_multiple_of(self.chunk))
            .map(|&at| Filling { at, layers: Vec::new() })
            .collect();
        first.map_or(Ok(()), Err)
    }

    /// Hand snapshot `name` to the SSD tier (`wait`: for room in its write queue, as a flush does).
    fn spill(&self, name: BlockHash, wait: bool) {
        let (Some(kept), Some((cfg, Some(tier)))) = (self.snapshots.get(&name), self.model.as_ref()) else { return };
        let pos = kept.snap.first().map_or(0, |l| l.pos);
        let rec = crate::kv::ssd::BlockRecord {
            hash: name,
            parent: kept.parent,
            tokens: vec![pos as u32],
            data: Self::encode(cfg, &kept.snap),
        };
        if wait {
            tier.spill_waiting(rec)
        } else {
            tier.spill(rec, false)
        }
    }

    /// Write every snapshot in memory to the SSD tier; the tier's marker fires once they are durable (None: no
    /// tier).
    pub fn flush(&self) -> Option<std::sync::mpsc::Receiver<()>> {
        let (_, Some(tier)) = self.model.as_ref()? else { return None };
        for name in self.snapshots.keys() {
            if !tier.contains(*name) {
                self.spill(*name, true);
            }
        }
        Some(tier.flush())
    }

    /// The step's forward pass is done: complete captures become snapshots.
    pub fn end_step(&mut self) {
        for c in self.captures.drain(..) {
            if c.layers.len() == self.layers && c.layers.iter().all(Option::is_some) {
                let snap = Arc::new(c.layers.into_iter().flatten().map(LayerState::compact).collect());
                self.snapshots.insert(c.at.name, Kept { snap, parent: c.at.parent });
            }
        }
    }

    /// Forget everything (the engine restarts its pool).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.snapshots.clear();
        self.captures.clear();
    }

    /// Run linear-attention layer `ordinal` (of the model's `cfg.linear_layers()`) over one row: `slot`'s state must be at `pos0` (a row
    /// at 0 starts afresh). Writes len × v_heads × value_dim outputs into `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn run_row(
        &mut self,
        ordinal: usize,
        cfg: &LinearAttnConfig,
        w: &DeltaWeights,
        slot: usize,
        pos0: usize,
        x: &RowInputs,
        out: &mut [f32],
        speculative: bool,
    ) -> Result<()> {
        let layers = cfg.linear_layers();
        self.layers = layers;
        let chunk = self.chunk;
        let seq = self.slots.entry(slot).or_insert_with(|| vec![None; layers]);
        if seq.len() != layers || ordinal >= layers {
            return Err(Error::InvalidRequest(format!(
                "linear-attention layer {ordinal} of {layers}: state has {}",
                seq.len()
            )));
        }
        // after a verification that rejected drafted tokens, the row continues from the last one it kept
        if let Some(st) = seq[ordinal].as_mut().filter(|st| st.pos > pos0 && pos0 > 0) {
            st.rollback(cfg, pos0);
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
        let mut wanted: Vec<usize> = self.captures.iter().filter(|c| c.at.slot == slot).map(|c| c.at.pos).collect();
        wanted.sort_unstable();
        wanted.dedup();
        for snap in delta::run_row(cfg, w, chunk, st, x, out, &wanted, speculative) {
            for c in self.captures.iter_mut().filter(|c| c.at.slot == slot && c.at.pos == snap.pos) {
                if c.layers.len() < layers {
                    c.layers.resize(layers, None);
                }
                c.layers[ordinal] = Some(snap.clone());
            }
        }
        Ok(())
    }
}
