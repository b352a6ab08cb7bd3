//! A step's block transfers, as plain data: the KV cache manager ([`super::manager`]) plans them, the block mover
//! ([`super::mover`]) makes them before the step's forward pass.

use super::block_pool::CachedBlock;

/// Copy one KV block (every layer's k and v) before the step's forward: the copy-on-write of a shared partial
/// block (a forked choice's prompt, a cached block the prompt parts from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCopy {
    pub src: u32,
    pub dst: u32,
}

/// Hand a cached block's data to the cold tier (read before anything writes the block again this step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spill {
    pub block: u32,
    pub meta: CachedBlock,
    pub kind: SpillKind,
}

/// Why a block is spilled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpillKind {
    /// Evicted for room: dropped rather than waited for if the cold tier's write queue is full.
    Evicted,
    /// Demoted for sitting idle (counted apart from evictions).
    Idle,
    /// A flush: the block stays cached, and the spill waits for room in the write queue.
    Flush,
}

/// Fill a freshly allocated block from the cold tier (the row `slot` waits for it: it is not computed this step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restore {
    pub slot: usize,
    pub block: u32,
    pub meta: CachedBlock,
}

/// Restores the mover resolved in a transfer: planned in that step or an earlier one (reads from the cold tier
/// run in the background and may take several steps).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Blocks whose data arrived.
    pub done: Vec<u32>,
    /// Blocks whose data could not be read (a miss: their rows recompute them).
    pub failed: Vec<u32>,
}

impl RestoreReport {
    /// Every restore of `restores` failed (they never reached the mover).
    pub fn all_failed(restores: &[Restore]) -> Self {
        Self { done: Vec::new(), failed: restores.iter().map(|r| r.block).collect() }
    }
}

/// A step's transfers, made in this order: spills, then copies, then restores (a spilled block may be reused by
/// the other two).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transfers {
    pub copies: Vec<BlockCopy>,
    pub spills: Vec<Spill>,
    pub restores: Vec<Restore>,
}

impl Transfers {
    pub fn is_empty(&self) -> bool {
        self.copies.is_empty() && self.spills.is_empty() && self.restores.is_empty()
    }
}
