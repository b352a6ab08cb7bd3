//! Restores from the cold tier in flight: handed to the mover and not yet resolved (its reads run in the
//! background and may take several steps), in the order their rows asked for them. A row's restores are done
//! once every one of them resolved; a row that went away meanwhile leaves them as orphans whose blocks return to
//! the pool once resolved (the mover may still write them until then).

use super::block_pool::BlockPool;
use super::transfer::{Restore, RestoreReport};
use std::collections::HashMap;

/// The slot of an in-flight restore whose row went away.
const ORPHAN: usize = usize::MAX;

/// Every restore of one row, all resolved.
#[derive(Debug)]
pub struct RowRestores {
    pub slot: usize,
    pub restores: Vec<Restore>,
    /// Blocks whose data could not be read.
    pub failed: Vec<u32>,
}

#[derive(Debug, Default)]
pub struct InflightRestores {
    list: Vec<Restore>,
    /// Resolved restores waiting for the rest of their row's: block -> arrived.
    resolved: HashMap<u32, bool>,
}

impl InflightRestores {
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn clear(&mut self) {
        self.list.clear();
        self.resolved.clear();
    }

    /// Add a step's restores to those in flight and apply what the mover resolved: orphans give their blocks back
    /// to `pool`; returns the rows whose restores have all resolved, in slot order.
    pub fn track(&mut self, planned: Vec<Restore>, report: &RestoreReport, pool: &mut BlockPool) -> Vec<RowRestores> {
        self.list.extend(planned);
        if self.list.is_empty() {
            return Vec::new();
        }
        self.resolved.extend(report.done.iter().map(|&b| (b, true)));
        self.resolved.extend(report.failed.iter().map(|&b| (b, false)));
        let mut i = 0;
        while i < self.list.len() {
            let r = &self.list[i];
            if r.slot == ORPHAN && self.resolved.remove(&r.block).is_some() {
                pool.release(r.block);
                self.list.remove(i);
            } else {
                i += 1;
            }
        }
        let mut slots: Vec<usize> = self.list.iter().map(|r| r.slot).filter(|&s| s != ORPHAN).collect();
        slots.sort_unstable();
        slots.dedup();
        let mut done = Vec::new();
        for slot in slots {
            let all = self.list.iter().filter(|r| r.slot == slot).all(|r| self.resolved.contains_key(&r.block));
            if !all {
                continue;
            }
            let (mine, rest): (Vec<Restore>, Vec<Restore>) =
                std::mem::take(&mut self.list).into_iter().partition(|r| r.slot == slot);
            self.list = rest;
            let failed: Vec<u32> =
                mine.iter().filter(|r| self.resolved.remove(&r.block) == Some(false)).map(|r| r.block).collect();
            done.push(RowRestores { slot, restores: mine, failed });
        }
        done
    }

    /// The row `slot` goes away (finished, cancelled, preempted): its restores in flight become orphans. Returns
    /// their blocks, which leave the row.
    pub fn orphan(&mut self, slot: usize) -> Vec<u32> {
        let mut held = Vec::new();
        for r in self.list.iter_mut().filter(|r| r.slot == slot) {
            r.slot = ORPHAN;
            held.push(r.block);
        }
        held
    }
}
