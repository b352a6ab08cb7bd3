//! The prompt cache's ledger of recurrent-state snapshots, for hybrid models (linear-attention layers beside the
//! KV; `crate::recurrent`). A block's KV alone cannot resume such a model: a cached prefix is usable only up to a
//! block whose end has a snapshot of every linear layer's state. The ledger records which block addresses have
//! one (least recently used first out, at most `max`), and turns the KV cache manager's decisions into the
//! runner's orders ([`StateOps`]: restore, fork, release, capture, drop), which ride in each step's plan.
//!
//! Which boundaries are captured is the scheduler's policy: the last block boundary of each prompt (and the one
//! before the prompt's last token, which a repeat of the same prompt resumes from), and while a row decodes the
//! latest boundary it reaches (each replaces the row's previous one), so a finished turn leaves the state at its
//! last full block for the next turn.

use super::prefix::BlockHash;
use super::ssd::SsdStore;
use crate::recurrent::{Capture, Loaded, StateOps};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Default)]
pub struct StateBook {
    /// Snapshot name → its last use (a counter).
    kept: HashMap<BlockHash, u64>,
    max: usize,
    tick: u64,
    pending: StateOps,
    /// Per slot: its latest decode-time snapshot (dropped when it takes the next one).
    rolling: HashMap<usize, BlockHash>,
    /// The SSD tier's snapshot store: snapshots evicted from memory go there, and come back from it.
    cold: Option<Arc<SsdStore>>,
}

impl StateBook {
    pub fn new(max: usize) -> Self {
        Self { max, ..Default::default() }
    }

    /// Spill evicted snapshots to (and find them again in) this SSD store.
    pub fn set_cold(&mut self, tier: Arc<SsdStore>) {
        self.cold = Some(tier);
    }

    /// Whether the snapshot of the state after this block (the block `parent` continues, ending at `pos`) is
    /// kept, in memory or read back now from the SSD tier (then it rides in the next step's loads).
    fn find(&mut self, name: BlockHash, parent: BlockHash, pos: usize) -> bool {
        if self.has(name) {
            return true;
        }
        let Some(tier) = self.cold.as_ref().filter(|t| self.max > 0 && t.contains(name)) else { return false };
        let Some(bytes) = tier.restore(name, parent, &[pos as u32]) else { return false };
        self.kept.insert(name, self.tick);
        self.pending.loads.push(Loaded { name, parent, pos, bytes });
        self.evict_over_max();
        true
    }

    /// Whether a snapshot of the state after this block exists (marking it used).
    fn has(&mut self, name: BlockHash) -> bool {
        self.tick += 1;
        match self.kept.get_mut(&name) {
            Some(t) => {
                *t = self.tick;
                true
            }
            None => false,
        }
    }

    /// Of the cached blocks `names` (continuing block `parent`; the first of them is block `first` of the prompt),
    /// how many a hybrid row can use: up to the deepest whose end has a snapshot (in memory, or read back from the
    /// SSD tier now).
    pub fn usable(&mut self, parent: BlockHash, names: &[BlockHash], first: usize, block_size: usize) -> usize {
        (1..=names.len())
            .rev()
            .find(|&n| {
                let before = if n == 1 { parent } else { names[n - 2] };
                self.find(names[n - 1], before, (first + n) * block_size)
            })
            .unwrap_or(0)
    }

    /// Row `slot` starts from snapshot `name` (one that [`Self::has`] found).
    pub fn restore(&mut self, slot: usize, name: BlockHash) {
        self.pending.restores.retain(|r| r.0 != slot);
        self.pending.restores.push((slot, name));
    }

    /// Choice `to` continues from `from`'s state.
    pub fn fork(&mut self, from: usize, to: usize) {
        self.pending.forks.push((from, to));
    }

    /// Row `slot` left (or starts over): its state goes, with any order about it not yet carried out.
    pub fn release(&mut self, slot: usize) {
        self.pending.restores.retain(|r| r.0 != slot);
        self.pending.forks.retain(|f| f.1 != slot);
        self.pending.captures.retain(|c| c.slot != slot);
        self.pending.release.push(slot);
        self.rolling.remove(&slot);
    }

    /// Keep the row's state at a position this step (`c`); `rolling`: a decode-time capture, which replaces the
    /// row's previous one.
    pub fn capture(&mut self, c: Capture, rolling: bool) {
        if self.max == 0 || self.has(c.name) {
            return;
        }
        self.kept.insert(c.name, self.tick);
        self.pending.captures.push(c);
        if rolling {
            if let Some(old) = self.rolling.insert(c.slot, c.name) {
                self.drop_one(old, false);
            }
        }
        self.evict_over_max();
    }

    /// The least recently used snapshots out of memory (to the SSD tier, where there is one) past `max`; never
    /// one the next step restores or loads.
    fn evict_over_max(&mut self) {
        while self.kept.len() > self.max {
            let p = &self.pending;
            let pinned = |n: &BlockHash| p.restores.iter().any(|r| r.1 == *n) || p.loads.iter().any(|l| l.name == *n);
            let Some((&oldest, _)) = self.kept.iter().filter(|(n, _)| !pinned(n)).min_by_key(|(_, &t)| t) else {
                break;
            };
            self.drop_one(oldest, true);
        }
    }

    /// Drop a snapshot from memory; `spill`: to the SSD tier first, where there is one (a capture not made yet is
    /// only cancelled).
    fn drop_one(&mut self, name: BlockHash, spill: bool) {
        if self.kept.remove(&name).is_none() {
            return;
        }
        let planned = self.pending.captures.len();
        self.pending.captures.retain(|c| c.name != name);
        let captured = planned == self.pending.captures.len();
        if spill && captured && self.cold.as_ref().is_some_and(|t| !t.contains(name)) {
            self.pending.spills.push(name);
        }
        self.pending.loads.retain(|l| l.name != name);
        self.pending.drops.push(name);
    }

    /// A step failed: its captures are not kept (the runner drops any it made), and the snapshots its rows were
    /// to start from are not trusted again.
    pub fn step_failed(&mut self, ops: &StateOps) {
        let names = ops.captures.iter().map(|c| c.name).chain(ops.restores.iter().map(|r| r.1));
        for name in names.collect::<Vec<_>>() {
            if self.kept.remove(&name).is_some() {
                self.pending.drops.push(name);
            }
        }
    }

    /// The orders for the next step.
    pub fn take(&mut self) -> StateOps {
        std::mem::take(&mut self.pending)
    }

    /// Snapshots kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Forget everything in memory (the pool starts afresh; the runner clears its states).
    pub fn clear(&mut self) {
        let (max, cold) = (self.max, self.cold.take());
        *self = Self { cold, ..Self::new(max) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u128) -> BlockHash {
        BlockHash(i)
    }

    fn at(slot: usize, pos: usize, name: u128) -> Capture {
        Capture { slot, pos, name: h(name), parent: h(0) }
    }

    #[test]
    fn least_recently_used_snapshot_goes_first() {
        let mut b = StateBook::new(2);
        b.capture(at(1, 16, 1), false);
        b.capture(at(2, 16, 2), false);
        assert!(b.has(h(1))); // h(2) is now the oldest
        b.capture(at(3, 16, 3), false);
        let ops = b.take();
        assert_eq!(ops.drops, vec![h(2)]);
        // a capture dropped before its step never reaches the runner
        assert_eq!(ops.captures, vec![at(1, 16, 1), at(3, 16, 3)]);
        assert!(b.has(h(1)) && b.has(h(3)) && !b.has(h(2)));
    }

    #[test]
    fn a_rolling_capture_replaces_the_rows_previous_one() {
        let mut b = StateBook::new(8);
        b.capture(at(1, 16, 1), false); // the prompt's: kept
        b.capture(at(1, 32, 2), true);
        b.capture(at(1, 48, 3), true);
        let ops = b.take();
        assert_eq!(ops.drops, vec![h(2)]);
        assert_eq!(ops.captures, vec![at(1, 16, 1), at(1, 48, 3)]);
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn a_released_row_loses_its_pending_orders() {
        let mut b = StateBook::new(8);
        b.restore(4, h(9));
        b.fork(1, 4);
        b.release(4);
        let ops = b.take();
        assert!(ops.restores.is_empty() && ops.forks.is_empty());
        assert_eq!(ops.release, vec![4]);
    }
}
