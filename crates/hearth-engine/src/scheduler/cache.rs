//! The prefix cache's side of scheduling: attaching a waiting row to the cached blocks of its prompt (RAM/VRAM
//! first, then the cold tier), registering blocks as rows compute them, and turning evictions into spills.
//!
//! Hits end at block boundaries and keep batch invariance: the rest of the prompt is computed in pieces whose
//! attention sub-blocks the portable backend pads back to the `PIECE_ALIGN` grid (`attention::paged::gather`), so
//! every token's arithmetic is the one of a cold run (the cached KV was itself made by that arithmetic). At least
//! one prompt token is always computed: its logits are the first sample.

use super::plan::{BlockCopy, Restore, RestoreReport, Spill, SpillKind};
use super::{Scheduler, Sequence};
use crate::kv::prefix::chain;
use crate::kv::{BlockHash, CachedBlock};
use std::time::Instant;

/// The slot of an in-flight restore whose row went away.
pub(super) const ORPHAN: usize = usize::MAX;

/// What a waiting row found in the cache.
pub(super) struct Attach {
    /// Blocks of the pool referenced for the row (RAM hits), in order.
    pub ram: Vec<u32>,
    /// Names of the blocks after them to restore from the cold tier.
    pub cold: Vec<CachedBlock>,
    pub hashes: Vec<BlockHash>,
    /// A partial block after the RAM hits (referenced) and how many of its first tokens the row shares: the row
    /// gets a copy of it.
    pub partial: Option<(u32, usize)>,
}

impl Attach {
    pub fn blocks(&self) -> usize {
        self.ram.len() + self.cold.len()
    }

    /// Hit tokens.
    pub fn tokens(&self, block_size: usize) -> usize {
        self.blocks() * block_size + self.partial.map_or(0, |(_, n)| n)
    }
}

impl Scheduler {
    /// Look up the longest cached prefix of a waiting row's tokens (taking references on RAM hits).
    pub(super) fn lookup_prefix(&mut self, s: &Sequence) -> Attach {
        let none = Attach { ram: Vec::new(), cold: Vec::new(), hashes: Vec::new(), partial: None };
        if !self.pool.caching() || s.tokens.len() < 2 {
            return none;
        }
        let bs = self.pool.block_size();
        let limit = (s.tokens.len() - 1) / bs * bs;
        let hashes = chain(self.root, &s.tokens[..limit], bs);
        let ram = self.pool.lookup(&hashes);
        let mut cold = Vec::new();
        if let Some(tier) = self.cold.as_ref().filter(|_| !s.skip_cold) {
            for (i, &h) in hashes.iter().enumerate().skip(ram.len()) {
                if !tier.contains(h) {
                    break;
                }
                let parent = if i == 0 { self.root } else { hashes[i - 1] };
                cold.push(CachedBlock { hash: h, parent, tokens: s.tokens[i * bs..(i + 1) * bs].to_vec() });
            }
        }
        // Where the RAM hits end (and nothing follows from the cold tier), a cached block after them may start
        // with more of the prompt (a finished row's partial block, or a full block the prompt parts from): its
        // shared tokens are copied, up to the last prompt token, which is always computed.
        let partial = if cold.is_empty() {
            let parent = ram.len().checked_sub(1).map_or(self.root, |i| hashes[i]);
            self.pool.lookup_partial(parent, &s.tokens[ram.len() * bs..s.tokens.len() - 1])
        } else {
            None
        };
        Attach { hashes: hashes[..ram.len() + cold.len()].to_vec(), ram, cold, partial }
    }

    /// Give back what `lookup_prefix` took (the row could not be admitted).
    pub(super) fn detach(&mut self, a: Attach) {
        for b in a.ram.into_iter().chain(a.partial.map(|(b, _)| b)) {
            self.pool.release(b);
        }
    }

    /// Attach an admitted row to its hit: RAM blocks are its first blocks; cold ones get fresh blocks and are
    /// restored before the row computes anything.
    pub(super) fn attach(&mut self, s: &mut Sequence, a: Attach) {
        let bs = self.pool.block_size();
        let hit = a.tokens(bs);
        if hit == 0 {
            self.stats.prompt_cache.misses += 1;
            return;
        }
        self.stats.prompt_cache.hits += 1;
        self.attach_blocks(s, a);
        self.stats.prompt_cache.hit_tokens += s.computed as u64;
    }

    /// Rows that have computed nothing of their own yet look again every step and extend their hit: a row
    /// admitted beside another with the same prefix (eight agents on one system prompt) picks up the blocks the
    /// first one computes, as it computes them, instead of computing them too.
    pub(super) fn late_lookup(&mut self) {
        if !self.pool.caching() {
            return;
        }
        let bs = self.pool.block_size();
        for i in 0..self.running.len() {
            let s = &self.running[i];
            let idle = s.restoring.is_none() && s.computed == s.cached && s.computed < s.prompt_len;
            if !idle || s.blocks.len() * bs != s.computed || s.hashes.len() != s.blocks.len() {
                continue;
            }
            let limit = (s.tokens.len() - 1) / bs * bs;
            if s.computed >= limit {
                continue;
            }
            let parent = s.hashes.last().copied().unwrap_or(self.root);
            let more = chain(parent, &s.tokens[s.computed..limit], bs);
            let got = self.pool.lookup(&more);
            if got.is_empty() {
                continue;
            }
            let s = &mut self.running[i];
            if s.computed == 0 {
                self.stats.prompt_cache.misses = self.stats.prompt_cache.misses.saturating_sub(1);
                self.stats.prompt_cache.hits += 1;
            }
            self.stats.prompt_cache.hit_tokens += (got.len() * bs) as u64;
            s.hashes.extend_from_slice(&more[..got.len()]);
            s.blocks.extend(got);
            s.computed = s.blocks.len() * bs;
            s.cached = s.computed;
        }
    }

    fn attach_blocks(&mut self, s: &mut Sequence, a: Attach) {
        let bs = self.pool.block_size();
        let hit = a.blocks() * bs;
        s.computed = a.ram.len() * bs;
        s.cached = s.computed;
        s.blocks = a.ram;
        s.hashes = a.hashes;
        s.hashes.truncate(s.blocks.len());
        if let Some((src, n)) = a.partial {
            // Copy-on-write: the row writes after the shared tokens, so it gets its own copy of the block (made
            // before the next step's forward; the source stays referenced until then).
            match self.pool.allocate() {
                Some(dst) => {
                    self.copies.push(BlockCopy { src, dst });
                    s.blocks.push(dst);
                    s.computed += n;
                    s.cached = s.computed;
                }
                None => self.pool.release(src),
            }
        }
        if a.cold.is_empty() {
            return;
        }
        for meta in a.cold {
            // Admission counted these blocks as available.
            let Some(block) = self.pool.allocate() else { break };
            s.blocks.push(block);
            self.restores.push(Restore { slot: s.slot, block, meta });
        }
        s.restoring = Some(hit);
    }

    /// Whether restores are in flight: the engine keeps stepping (polling the runner) until they resolve.
    pub fn restores_in_flight(&self) -> bool {
        !self.inflight.is_empty()
    }

    /// Restores resolved outside a step (a flush's transfers).
    pub fn restores_resolved(&mut self, report: &RestoreReport) {
        self.track_restores(Vec::new(), report);
    }

    /// Add a step's restores to those in flight and apply what the runner resolved: orphans give their blocks
    /// back; a row whose restores have all resolved finishes them ([`Self::finish_restores`]).
    pub(super) fn track_restores(&mut self, planned: Vec<Restore>, report: &RestoreReport) {
        self.inflight.extend(planned);
        if self.inflight.is_empty() {
            return;
        }
        self.resolved.extend(report.done.iter().map(|&b| (b, true)));
        self.resolved.extend(report.failed.iter().map(|&b| (b, false)));
        let mut i = 0;
        while i < self.inflight.len() {
            let r = &self.inflight[i];
            if r.slot == ORPHAN && self.resolved.remove(&r.block).is_some() {
                self.pool.release(r.block);
                self.inflight.remove(i);
            } else {
                i += 1;
            }
        }
        let mut slots: Vec<usize> = self.inflight.iter().map(|r| r.slot).filter(|&s| s != ORPHAN).collect();
        slots.sort_unstable();
        slots.dedup();
        for slot in slots {
            let all = self.inflight.iter().filter(|r| r.slot == slot).all(|r| self.resolved.contains_key(&r.block));
            if !all {
                continue;
            }
            let (mine, rest): (Vec<Restore>, Vec<Restore>) =
                std::mem::take(&mut self.inflight).into_iter().partition(|r| r.slot == slot);
            self.inflight = rest;
            let failed: Vec<u32> =
                mine.iter().filter(|r| self.resolved.remove(&r.block) == Some(false)).map(|r| r.block).collect();
            self.finish_restores(&mine, &failed);
        }
    }

    /// A row goes away (finished, cancelled, preempted) with restores in flight: the runner may still write
    /// those blocks, so they leave the row and return to the pool only once resolved.
    pub(super) fn orphan_restores(&mut self, seq: &mut Sequence) {
        let mut held = Vec::new();
        for r in self.inflight.iter_mut().filter(|r| r.slot == seq.slot) {
            r.slot = ORPHAN;
            held.push(r.block);
        }
        if !held.is_empty() {
            seq.blocks.retain(|b| !held.contains(b));
            seq.restoring = None;
        }
    }

    /// A row's restores have all resolved (`failed`: blocks whose data could not be read). A row whose restores
    /// all succeeded continues after them; otherwise it keeps what did arrive (registered, so its next lookup
    /// finds it) and goes back to the queue to compute the rest.
    pub(super) fn finish_restores(&mut self, restores: &[Restore], failed: &[u32]) {
        let mut slots: Vec<usize> = restores.iter().map(|r| r.slot).collect();
        slots.dedup();
        for slot in slots {
            let Some(i) = self.index_of(slot) else { continue };
            let mut s = self.running.remove(i);
            let Some(target) = s.restoring.take() else {
                self.running.insert(i, s);
                continue;
            };
            let bs = self.pool.block_size();
            let ok = s.blocks.iter().take(target / bs).take_while(|b| !failed.contains(b)).count();
            for (j, r) in restores.iter().filter(|r| r.slot == slot).enumerate() {
                let idx = s.hashes.len() + j;
                if idx < ok && s.blocks.get(idx) == Some(&r.block) {
                    self.pool.register(r.block, r.meta.clone());
                }
            }
            if ok * bs >= target {
                let restored = target - s.computed;
                self.stats.prompt_cache.restored_tokens += restored as u64;
                s.hashes.extend(restores.iter().filter(|r| r.slot == slot).map(|r| r.meta.hash));
                s.computed = target;
                s.cached = target;
                self.running.insert(i, s);
            } else {
                s.skip_cold = true;
                self.requeue(s);
            }
        }
    }

    /// A row that finished leaves its last, partial block in the cache (registered by the tokens whose KV it
    /// holds), for a next turn that continues its tokens.
    pub(super) fn keep_partial(&mut self, s: &Sequence) {
        let bs = self.pool.block_size();
        let (full, n) = (s.computed / bs, s.computed % bs);
        if !self.pool.caching() || n == 0 || s.hashes.len() != full || s.blocks.len() <= full || s.restoring.is_some() {
            return;
        }
        let parent = s.hashes.last().copied().unwrap_or(self.root);
        let tokens = s.tokens[full * bs..s.computed].to_vec();
        self.pool.register_partial(s.blocks[full], CachedBlock { hash: parent.partial(&tokens), parent, tokens });
    }

    /// Register the row's newly completed full blocks under their addresses.
    pub(super) fn register_computed(&mut self, s: &mut Sequence) {
        if !self.pool.caching() {
            return;
        }
        let bs = self.pool.block_size();
        let full = (s.computed / bs).min(s.blocks.len());
        while s.hashes.len() < full {
            let i = s.hashes.len();
            let parent = s.hashes.last().copied().unwrap_or(self.root);
            let tokens = s.tokens[i * bs..(i + 1) * bs].to_vec();
            let hash = parent.child(&tokens);
            self.pool.register(s.blocks[i], CachedBlock { hash, parent, tokens });
            s.hashes.push(hash);
        }
    }

    /// Spill idle parked blocks to the cold tier (`--ssd-demote-idle`).
    pub(super) fn demote_idle(&mut self) {
        if let (Some(_), Some(idle)) = (&self.cold, self.demote_idle) {
            self.pool.evict_idle(idle, Instant::now());
        }
    }

    /// Turn the pool's evictions into spills for this step (read before the blocks are written again).
    pub(super) fn collect_spills(&mut self) {
        let evicted = self.pool.take_evicted();
        let Some(tier) = &self.cold else { return };
        for e in evicted {
            if !tier.contains(e.meta.hash) {
                let kind = if e.idle { SpillKind::Idle } else { SpillKind::Evicted };
                self.spills.push(Spill { block: e.block, meta: e.meta, kind });
            }
        }
    }

    /// Spills of every cached block not yet in the cold tier (the blocks stay cached): a flush.
    pub fn flush_spills(&mut self) -> Vec<Spill> {
        let Some(tier) = &self.cold else { return Vec::new() };
        let mut out: Vec<Spill> = self
            .pool
            .cached()
            .filter(|(_, m)| !tier.contains(m.hash))
            .map(|(block, meta)| Spill { block, meta: meta.clone(), kind: SpillKind::Flush })
            .collect();
        out.sort_by_key(|s| s.block);
        out
    }

    /// Put a row back in the queue in arrival order, holding nothing (it is recomputed from its tokens).
    pub(super) fn requeue(&mut self, mut s: Sequence) {
        self.release_blocks(&mut s);
        s.computed = 0;
        s.cached = 0;
        s.hashes.clear();
        s.restoring = None;
        let pos = self.waiting.iter().position(|w| w.arrival > s.arrival).unwrap_or(self.waiting.len());
        self.waiting.insert(pos, s);
    }
}
