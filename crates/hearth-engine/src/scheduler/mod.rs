//! Continuous batching as pure policy over the block pool: no tensors, no device. Each step the engine core asks
//! [`Scheduler::schedule`] for a [`StepPlan`], has the runner execute it, and hands the output back to
//! [`Scheduler::postprocess`], which samples, emits events and retires rows.
//!
//! `schedule`:
//! 1. drops cancelled rows (their blocks return to the pool at once);
//! 2. admits waiting requests FIFO while the batch has room for all their choices and the pool can hold their
//!    tokens plus one ([`blocks_to_admit`], the same rule the submit-time check uses);
//! 3. plans the step's pieces ([`plan::plan_pieces`]): every decoding row's one token, then prompt pieces cut at
//!    multiples of [`PIECE_ALIGN`] (batch invariance);
//! 4. makes sure each planned row has blocks for its new tokens, preempting the newest row when the pool is
//!    empty (it is recomputed later: never an abort).
//!
//! `postprocess` samples the rows that reached their end; when a request's prompt is complete, its other choices
//! fork off it (sharing the full prompt blocks, with a copy of the partial one made before the next step) and
//! sample their first token from the same logits.

mod cache;
#[cfg(test)]
mod cache_tests;
pub mod plan;
pub mod sequence;
#[cfg(test)]
mod tests;

pub use plan::{BlockCopy, PlannedRow, Restore, RestoreReport, Spill, SpillKind, StepOutput, StepPlan};
pub use sequence::Sequence;

use crate::attention::PIECE_ALIGN;
use crate::kv::{BlockHash, BlockPool, ColdTier};
use crate::sampling::grammar::{Commit, Constraint, NONE_ALLOWED};
use crate::types::{blocks_to_admit, EngineConfig, EngineEvent, EngineStats, FinishReason};
use plan::{Pick, PieceBudget};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

pub struct Scheduler {
    pool: BlockPool,
    cfg: EngineConfig,
    eos: Vec<u32>,
    max_positions: usize,
    running: Vec<Sequence>,
    waiting: VecDeque<Sequence>,
    /// Copies of forked choices' partial blocks, made before the next step's forward; each holds a reference on
    /// its source block until the step that makes it is done.
    copies: Vec<BlockCopy>,
    /// Evicted cached blocks to hand to the cold tier, and cold blocks to read back, in the next step.
    spills: Vec<Spill>,
    restores: Vec<Restore>,
    /// Restores handed to the runner and not yet resolved (cold reads run in the background), in the order their
    /// rows asked for them; a row that went away while they were in flight leaves them as orphans (slot
    /// [`cache::ORPHAN`]) whose blocks return to the pool once resolved.
    inflight: Vec<Restore>,
    /// Resolved in-flight restores waiting for the rest of their row's: block -> arrived.
    resolved: HashMap<u32, bool>,
    /// The root of every block address (the cache namespace).
    root: BlockHash,
    cold: Option<Arc<dyn ColdTier>>,
    demote_idle: Option<Duration>,
    stats: EngineStats,
}

impl Scheduler {
    pub fn new(cfg: EngineConfig, eos: Vec<u32>, max_positions: usize) -> Self {
        let pool = BlockPool::with_cache(cfg.kv_blocks, cfg.kv_block_size, cfg.cache.max_blocks);
        let mut stats = EngineStats {
            kv_blocks_total: cfg.kv_blocks,
            kv_blocks_free: cfg.kv_blocks,
            kv_block_size: cfg.kv_block_size,
            ..Default::default()
        };
        stats.prompt_cache.enabled = pool.caching();
        Self {
            pool,
            root: BlockHash::root(&cfg.cache.namespace.to_le_bytes()),
            demote_idle: cfg.cache.ssd.as_ref().and_then(|s| s.demote_idle),
            cfg,
            eos,
            max_positions,
            running: Vec::new(),
            waiting: VecDeque::new(),
            copies: Vec::new(),
            spills: Vec::new(),
            restores: Vec::new(),
            inflight: Vec::new(),
            resolved: HashMap::new(),
            cold: None,
            stats,
        }
    }

    /// Look up (and spill to) a cold tier beside the pool.
    pub fn with_cold_tier(mut self, tier: Arc<dyn ColdTier>) -> Self {
        self.cold = Some(tier);
        self
    }

    /// Whether idle demotion may have work: the engine wakes up now and then while idle when this is true.
    pub fn wants_idle_ticks(&self) -> bool {
        self.cold.is_some() && self.demote_idle.is_some() && self.pool.num_parked() > 0
    }

    /// Nothing to run and nothing in flight.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty() && self.inflight.is_empty()
    }

    pub fn enqueue(&mut self, seq: Sequence) {
        self.stats.rows_submitted_total += 1 + seq.siblings.len() as u64;
        self.waiting.push_back(seq);
        self.refresh_stats();
    }

    /// Rows waiting, counting choices not yet forked.
    pub fn waiting_rows(&self) -> usize {
        self.waiting.iter().map(|s| 1 + s.siblings.len()).sum()
    }

    /// The scheduler's counters (rows, blocks, tokens, steps, preemptions).
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// The next step. An empty plan means nothing can run now (idle, or waiting for blocks).
    pub fn schedule(&mut self) -> StepPlan {
        self.drop_cancelled();
        self.demote_idle();
        self.admit();
        self.late_lookup();
        let pieces = self.plan_pieces();
        let pieces = self.reserve(pieces);
        self.collect_spills();
        let rows = pieces
            .into_iter()
            .filter_map(|(slot, n)| {
                let s = &self.running[self.index_of(slot)?];
                let samples = s.computed + n >= s.tokens.len();
                // A constrained row needs its logits on the host (its grammar masks them).
                let plain = |q: &Sequence| q.sampler.params().is_plain_greedy() && q.constraint.is_none();
                let greedy = plain(s) && s.siblings.iter().all(plain);
                let masked = s.sampler.params().is_plain_greedy() && s.constraint.is_some() && s.siblings.is_empty();
                Some(PlannedRow {
                    slot,
                    pos0: s.computed,
                    tokens: s.tokens[s.computed..s.computed + n].to_vec(),
                    blocks: s.blocks.clone(),
                    samples,
                    greedy,
                    masked,
                    decoding: s.computed >= s.prompt_len,
                })
            })
            .collect();
        self.refresh_stats();
        StepPlan {
            rows,
            copies: std::mem::take(&mut self.copies),
            spills: std::mem::take(&mut self.spills),
            restores: std::mem::take(&mut self.restores),
        }
    }

    /// Take a step's output back (`restored`: the restores the runner resolved): advance each row, register its
    /// completed blocks, sample the rows that reached their end, fork choices, emit events, retire finished rows.
    pub fn postprocess(&mut self, mut plan: StepPlan, restored: &RestoreReport, out: &StepOutput) {
        self.release_copy_sources(&plan.copies);
        self.track_restores(std::mem::take(&mut plan.restores), restored);
        if plan.rows.is_empty() {
            self.refresh_stats();
            return;
        }
        self.stats.steps_total += 1;
        for (r, row) in plan.rows.iter().enumerate() {
            let Some(i) = self.index_of(row.slot) else { continue };
            let mut s = self.running.remove(i);
            let before = s.computed;
            s.computed += row.tokens.len();
            self.stats.prompt_tokens_processed_total +=
                (s.computed.min(s.prompt_len) - before.min(s.prompt_len)) as u64;
            self.register_computed(&mut s);
            if s.pending() > 0 {
                self.running.insert(i, s); // mid-prefill
                continue;
            }
            let Some(pick) = out.row(r) else {
                s.emit(EngineEvent::internal(format!(
                    "the step returned {} outputs for {} rows",
                    out.len(),
                    plan.rows.len()
                )));
                self.free(s);
                continue;
            };
            // The prompt is computed: fork the other choices first, from the same output.
            for sib in std::mem::take(&mut s.siblings) {
                if let Some(mut sib) = self.fork((&s.blocks, &s.hashes, s.cached), sib) {
                    if self.accept(&mut sib, &pick) {
                        self.keep_partial(&sib);
                        self.free(sib);
                    } else {
                        self.running.push(sib);
                    }
                }
            }
            if self.accept(&mut s, &pick) {
                self.keep_partial(&s);
                self.free(s);
            } else {
                self.running.insert(i.min(self.running.len()), s);
            }
        }
        self.refresh_stats();
    }

    /// A step failed: fail its rows (with `message`), keep serving the others. `restored`: what its transfer
    /// resolved, or None when the transfer failed (its restores never started: they are misses).
    pub fn fail_step(&mut self, mut plan: StepPlan, restored: Option<&RestoreReport>, message: &str) {
        self.release_copy_sources(&plan.copies);
        let restores = std::mem::take(&mut plan.restores);
        let report = match restored {
            Some(r) => r.clone(),
            None => RestoreReport::all_failed(&restores),
        };
        self.track_restores(restores, &report);
        for row in &plan.rows {
            if let Some(i) = self.index_of(row.slot) {
                let s = self.running.remove(i);
                s.emit(EngineEvent::internal(message));
                self.free(s);
            }
        }
        self.refresh_stats();
    }

    /// The most generated tokens any running row holds.
    pub fn most_generated(&self) -> usize {
        self.running.iter().map(|s| s.generated()).max().unwrap_or(0)
    }

    /// Fail every row a panic mid-step may have touched: the running rows, and waiting ones that hold blocks or
    /// computed KV (preempted, restoring). Waiting rows that never started keep their place: the pool is rebuilt
    /// under them and they run as if nothing happened.
    pub fn fail_all(&mut self, message: &str) {
        let (untouched, touched): (Vec<Sequence>, Vec<Sequence>) = self
            .waiting
            .drain(..)
            .partition(|s| s.blocks.is_empty() && s.restoring.is_none() && s.computed == 0 && s.siblings.is_empty());
        let all: Vec<Sequence> = self.running.drain(..).chain(touched).collect();
        for mut s in all {
            for sib in std::mem::take(&mut s.siblings) {
                sib.emit(EngineEvent::internal(message));
            }
            s.emit(EngineEvent::internal(message));
        }
        // A panic mid-step may have dropped a row it held outside the lists: nothing holds blocks now, so start
        // the pool afresh rather than leak them.
        self.pool = BlockPool::with_cache(self.cfg.kv_blocks, self.cfg.kv_block_size, self.cfg.cache.max_blocks);
        self.copies.clear();
        self.spills.clear();
        self.restores.clear();
        self.inflight.clear();
        self.resolved.clear();
        for mut s in untouched {
            s.cached = 0;
            s.hashes.clear();
            self.waiting.push_back(s);
        }
        self.refresh_stats();
    }

    /// A cancelled row whose client still listens (one choice stopped by the server) gets its usage.
    fn cancelled(&mut self, seq: Sequence) {
        if !seq.tx.is_closed() {
            seq.finish(FinishReason::Cancelled);
        }
        self.free(seq);
    }

    /// Return a row's blocks to the pool (dropping a copy or restore still planned into one of them).
    fn release_blocks(&mut self, seq: &mut Sequence) {
        let dropped: Vec<BlockCopy> = self.copies.iter().filter(|c| seq.blocks.contains(&c.dst)).copied().collect();
        self.copies.retain(|c| !seq.blocks.contains(&c.dst));
        self.restores.retain(|r| r.slot != seq.slot);
        self.orphan_restores(seq);
        self.release_copy_sources(&dropped);
        self.pool.release_all(&mut seq.blocks);
    }

    fn release_copy_sources(&mut self, copies: &[BlockCopy]) {
        for c in copies {
            self.pool.release(c.src);
        }
    }

    fn free(&mut self, mut seq: Sequence) {
        self.release_blocks(&mut seq);
        for s in std::mem::take(&mut seq.siblings) {
            self.cancelled(s);
        }
    }

    fn drop_cancelled(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].is_cancelled() {
                let s = self.running.remove(i);
                self.cancelled(s);
            } else {
                i += 1;
            }
        }
        let (keep, gone): (VecDeque<_>, VecDeque<_>) =
            std::mem::take(&mut self.waiting).into_iter().partition(|s| !s.is_cancelled());
        self.waiting = keep;
        for s in gone {
            self.cancelled(s);
        }
    }

    fn admit(&mut self) {
        // Admission allocates lazily (in `reserve`): count what this round promises so it never over-commits.
        let mut promised = 0usize;
        while let Some(s) = self.waiting.pop_front() {
            let rows = 1 + s.siblings.len();
            if !self.running.is_empty() && self.running.len() + rows > self.cfg.max_batch {
                self.waiting.push_front(s);
                break;
            }
            let total = blocks_to_admit(s.tokens.len(), s.siblings.len(), self.pool.block_size());
            if self.running.is_empty() && total > self.pool.total() {
                // Submit-time checks make this unreachable; never let one request stall the queue.
                s.emit(EngineEvent::internal("the request can never fit in the KV cache"));
                self.free(s);
                continue;
            }
            // Cached blocks it can share need no room; blocks restored from the cold tier do.
            let hit = self.lookup_prefix(&s);
            // A partial block's source is held until its copy is made (its copy is one of the row's blocks).
            let partial = usize::from(hit.partial.is_some());
            let need = total - hit.ram.len() + partial;
            if need > self.pool.num_free().saturating_sub(promised) {
                self.detach(hit);
                self.waiting.push_front(s);
                break; // FIFO: nothing behind it jumps the queue
            }
            promised += need - hit.cold.len() - 2 * partial;
            let mut s = s;
            self.attach(&mut s, hit);
            self.running.push(s);
        }
    }

    /// Preempt the newest running row (possibly the one asking for blocks); false when nothing runs.
    fn preempt_newest(&mut self) -> bool {
        let victim = self.running.iter().enumerate().max_by_key(|(_, s)| s.arrival).map(|(i, _)| i);
        let Some(i) = victim else { return false };
        let s = self.running.remove(i);
        self.stats.preemptions_total += 1;
        // Its full blocks stay cached: when it comes back it finds them unless they were needed meanwhile.
        self.requeue(s);
        true
    }

    fn plan_pieces(&self) -> Vec<(usize, usize)> {
        let rows: Vec<_> = self
            .running
            .iter()
            .filter(|s| s.restoring.is_none())
            .map(|s| (s.slot, s.arrival, s.computed, s.pending()))
            .collect();
        let budget = PieceBudget {
            step_tokens: self.cfg.step_tokens,
            step_tokens_decoding: self.cfg.step_tokens_decoding,
            max_pieces: self.cfg.max_prefill_rows,
        };
        plan::plan_pieces(&rows, budget, PIECE_ALIGN)
    }

    fn index_of(&self, slot: usize) -> Option<usize> {
        self.running.iter().position(|s| s.slot == slot)
    }

    /// Ensure blocks for the planned pieces, preempting as needed; returns the pieces of rows still running.
    fn reserve(&mut self, pieces: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
        for &(slot, n_new) in &pieces {
            while let Some(i) = self.index_of(slot) {
                let needed = self.pool.blocks_for(self.running[i].computed + n_new);
                if self.running[i].blocks.len() >= needed {
                    break;
                }
                if let Some(b) = self.pool.allocate() {
                    self.running[i].blocks.push(b);
                } else if self.running.len() == 1 {
                    // Alone and still too big: submit-time checks make this unreachable, but never crash.
                    let s = self.running.remove(i);
                    s.emit(EngineEvent::internal("the KV cache cannot hold this request"));
                    self.free(s);
                    break;
                } else {
                    // The newest row yields (vLLM's policy), even when it is this one: older rows keep their KV.
                    self.preempt_newest();
                }
            }
        }
        pieces.into_iter().filter(|(slot, _)| self.index_of(*slot).is_some()).collect()
    }

    /// Sample the next token of `s` from its step output; returns true when the row is finished.
    fn accept(&mut self, s: &mut Sequence, pick: &Pick<'_>) -> bool {
        let out = match (*pick, s.constraint.as_mut()) {
            (Pick::Logits(logits), Some(c)) => {
                // The grammar's mask (computed during the forward pass, or now), then the sampler: plain greedy
                // takes the best allowed token straight from the logits; anything else samples masked logits.
                let fresh = c.prepare();
                if let Ok(ms) = fresh {
                    if ms > 0.0 {
                        self.note_mask(ms);
                    }
                }
                let picked = fresh.and_then(|_| {
                    if s.sampler.params().is_plain_greedy() {
                        let id = c.masked_argmax(logits)?.ok_or("it allows no token")?;
                        Ok(s.sampler.chosen(id))
                    } else {
                        let mut masked = logits.to_vec();
                        c.apply(&mut masked)?;
                        Ok(s.sampler.sample(&masked, &s.tokens))
                    }
                });
                match picked {
                    Ok(out) => out,
                    Err(e) => {
                        s.emit(EngineEvent::grammar_failed(e));
                        return true;
                    }
                }
            }
            (Pick::Logits(logits), None) => s.sampler.sample(logits, &s.tokens),
            // The device found no token the grammar allows: the mask's own error says why.
            (Pick::Id(NONE_ALLOWED), Some(c)) => {
                let why = c.prepare().err().unwrap_or_else(|| "it allows no token".into());
                s.emit(EngineEvent::grammar_failed(why));
                return true;
            }
            (Pick::Id(id), _) => s.sampler.chosen(id),
        };
        // With a grammar, EOS is only allowed where the grammar accepts: it always ends the row.
        let eos = self.eos.contains(&out.id) && (!s.ignore_eos || s.constraint.is_some());
        if s.stop_ids.contains(&out.id) || eos {
            s.finish(FinishReason::Stop);
            return true;
        }
        s.tokens.push(out.id);
        self.stats.tokens_generated_total += 1;
        s.emit(EngineEvent::Token { choice: s.choice, id: out.id, logprob: out.logprob, top: out.top });
        if let Some(c) = s.constraint.as_mut() {
            match c.commit(out.id) {
                Ok(Commit::Continue) => {}
                Ok(Commit::Complete) => {
                    s.finish(FinishReason::Stop);
                    return true;
                }
                Err(e) => {
                    s.emit(EngineEvent::grammar_failed(e));
                    return true;
                }
            }
        }
        if s.generated() >= s.max_tokens || s.tokens.len() >= self.max_positions {
            s.finish(FinishReason::Length);
            return true;
        }
        false
    }

    /// Fork a choice off `parent_blocks` (whose prompt KV is complete): share the full prompt blocks, copy the
    /// partial one before the next step. Returns None (and re-queues the choice to compute on its own) when the
    /// pool is out of blocks.
    fn fork(&mut self, parent: (&[u32], &[BlockHash], usize), mut sib: Sequence) -> Option<Sequence> {
        let (parent_blocks, parent_hashes, parent_cached) = parent;
        let bs = self.pool.block_size();
        let full = sib.prompt_len / bs;
        let partial = !sib.prompt_len.is_multiple_of(bs);
        if parent_blocks.len() < full + partial as usize {
            sib.emit(EngineEvent::internal(format!("choice {} cannot fork: its prompt has no KV blocks", sib.choice)));
            return None;
        }
        let mut blocks: Vec<u32> = parent_blocks[..full].to_vec();
        if partial {
            let src = parent_blocks[full];
            let Some(dst) = self.pool.allocate() else {
                self.waiting.push_front(sib);
                return None;
            };
            // The source stays allocated until the copy is made, even if the parent finishes now.
            self.pool.retain(src);
            self.copies.push(BlockCopy { src, dst });
            blocks.push(dst);
        }
        for &b in &parent_blocks[..full] {
            self.pool.retain(b);
        }
        sib.blocks = blocks;
        sib.hashes = parent_hashes.iter().take(full).copied().collect();
        sib.computed = sib.prompt_len;
        // Its prompt was computed (or reused) once, by choice 0: report the same reuse.
        sib.cached = parent_cached;
        Some(sib)
    }

    /// Count one grammar mask that took `ms`.
    pub(crate) fn note_mask(&mut self, ms: f64) {
        let st = &mut self.stats;
        st.grammar_masks_total += 1;
        st.grammar_mask_ms_total += ms;
        st.grammar_mask_ms_max = st.grammar_mask_ms_max.max(ms);
        // Quarter-octave buckets of microseconds, from 1 µs to ~30 s.
        let bucket = ((ms * 1e3).max(1.0).log2() * 4.0).ceil().clamp(0.0, 99.0) as usize;
        if st.grammar_mask_hist.len() <= bucket {
            st.grammar_mask_hist.resize(bucket + 1, 0);
        }
        st.grammar_mask_hist[bucket] += 1;
    }

    /// The grammars of the plan's constrained rows that sample this step, taken out so their masks can be
    /// computed while the forward pass runs; [`Self::return_constraints`] puts them back.
    pub fn take_constraints(&mut self, plan: &StepPlan) -> Vec<(usize, Constraint)> {
        let mut out = Vec::new();
        for row in plan.rows.iter().filter(|r| r.samples) {
            if let Some(i) = self.index_of(row.slot) {
                if let Some(c) = self.running[i].constraint.take() {
                    out.push((row.slot, c));
                }
            }
        }
        out
    }

    /// Put taken grammars back (with their masks), counting the masks computed (`ms`: each one's time).
    pub fn return_constraints(&mut self, taken: Vec<(usize, Constraint)>, ms: &[f64]) {
        for &t in ms.iter().filter(|t| **t > 0.0) {
            self.note_mask(t);
        }
        for (slot, c) in taken {
            if let Some(i) = self.index_of(slot) {
                self.running[i].constraint = Some(c);
            }
        }
    }

    fn refresh_stats(&mut self) {
        self.stats.rows_running = self.running.len();
        self.stats.rows_waiting = self.waiting_rows();
        self.stats.kv_blocks_used = self.pool.num_used();
        self.stats.kv_blocks_free = self.pool.num_free();
        self.stats.prompt_cache.blocks = self.pool.num_cached();
        self.stats.prompt_cache.parked_blocks = self.pool.num_parked();
        self.stats.prompt_cache.evictions = self.pool.evictions();
    }
}
