//! Continuous batching: which rows run each step and with how many tokens. No tensors, no device, no I/O. Each
//! step the engine core asks [`Scheduler::schedule`] for a [`StepPlan`], has the runner execute it, and hands the
//! output back to [`Scheduler::postprocess`] (`postprocess.rs`), which accepts each finished row's token
//! (`accept.rs`), forks choices and retires rows. The scheduler reports what happened to rows as [`Update`]s
//! ([`Scheduler::take_updates`]); the engine core sends them to the requests. Blocks, the prefix cache and the
//! block transfers are the KV cache manager's ([`KvCacheManager`]).
//!
//! `schedule`:
//! 1. drops cancelled rows (their blocks return to the pool at once);
//! 2. admits waiting requests FIFO while the batch has room for all their choices and the pool can hold their
//!    tokens plus one ([`blocks_to_admit`], the same rule the submit-time check uses), each with the cached
//!    prefix the KV cache manager finds for it;
//! 3. plans the step's pieces ([`plan::plan_pieces`]): every decoding row's one token, then prompt pieces cut at
//!    multiples of [`PIECE_ALIGN`] (batch invariance);
//! 4. makes sure each planned row has blocks for its new tokens, preempting the newest row when the pool is
//!    empty (it is recomputed later: never an abort);
//! 5. takes the step's block transfers from the KV cache manager.

mod accept;
#[cfg(test)]
mod cache_tests;
mod outcome;
pub mod plan;
mod postprocess;
pub mod sequence;
mod speculate;
#[cfg(test)]
mod tests;

pub use outcome::{Outcome, Update};
pub use plan::{PlannedRow, StepOutput, StepPlan};
pub use sequence::Sequence;

use crate::attention::PIECE_ALIGN;
use crate::kv::{ColdTier, KvCacheManager, Spill};
use crate::types::{blocks_to_admit, EngineConfig, EngineStats, FinishReason};
use accept::Acceptor;
use plan::PieceBudget;
use std::collections::VecDeque;
use std::sync::Arc;

pub struct Scheduler {
    cfg: EngineConfig,
    kv: KvCacheManager,
    acceptor: Acceptor,
    running: Vec<Sequence>,
    waiting: VecDeque<Sequence>,
    /// What happened to rows since the engine core last took it.
    updates: Vec<Update>,
    stats: EngineStats,
    /// The model's image tokens attend each other both ways: a prompt piece never ends inside an image's run.
    whole_images: bool,
}

impl Scheduler {
    /// A scheduler over the KV blocks of `cfg`; `eos` ends a choice, `max_positions` is the model's context.
    pub fn new(cfg: EngineConfig, eos: Vec<u32>, max_positions: usize) -> Self {
        let kv = KvCacheManager::new(&cfg);
        let mut stats = EngineStats {
            kv_blocks_total: cfg.kv_blocks,
            kv_blocks_free: cfg.kv_blocks,
            kv_block_size: cfg.kv_block_size,
            ..Default::default()
        };
        kv.fill_stats(&mut stats);
        Self {
            cfg,
            kv,
            acceptor: Acceptor::new(eos, max_positions),
            running: Vec::new(),
            waiting: VecDeque::new(),
            updates: Vec::new(),
            stats,
            whole_images: false,
        }
    }

    /// The model's image tokens attend each other both ways (Gemma 3): each image's run is computed in one piece.
    pub fn with_whole_images(mut self, on: bool) -> Self {
        self.whole_images = on;
        self
    }

    /// Look up (and spill to) a cold tier beside the pool.
    pub fn with_cold_tier(mut self, tier: Arc<dyn ColdTier>) -> Self {
        self.kv.set_cold_tier(tier);
        self
    }

    /// Hybrid models: spill recurrent-state snapshots to (and find them in) this SSD store.
    pub fn with_state_tier(mut self, tier: Arc<crate::kv::ssd::SsdStore>) -> Self {
        self.kv.set_state_tier(tier);
        self
    }

    /// Whether idle demotion may have work: the engine wakes up now and then while idle when this is true.
    pub fn wants_idle_ticks(&self) -> bool {
        self.kv.wants_idle_ticks()
    }

    /// The slots of the running rows.
    pub fn running_slots(&self) -> Vec<usize> {
        self.running.iter().map(|s| s.slot).collect()
    }

    /// Whether restores are in flight: the engine keeps stepping (polling the runner) until they resolve.
    pub fn restores_in_flight(&self) -> bool {
        self.kv.restores_in_flight()
    }

    /// Nothing to run and nothing in flight.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty() && !self.kv.restores_in_flight()
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

    /// The scheduler's counters (rows, blocks, tokens, steps, preemptions, prompt cache, grammar masks).
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// The most generated tokens any running row holds.
    pub fn most_generated(&self) -> usize {
        self.running.iter().map(|s| s.generated()).max().unwrap_or(0)
    }

    /// Spills of every cached block not yet in the cold tier (the blocks stay cached): a flush.
    pub fn flush_spills(&self) -> Vec<Spill> {
        self.kv.flush_spills()
    }

    /// What happened to rows since the last call, in order (the buffer keeps its room for the next step).
    pub fn take_updates(&mut self) -> std::vec::Drain<'_, Update> {
        self.updates.drain(..)
    }

    /// The next step. An empty plan means nothing can run now (idle, or waiting for blocks).
    pub fn schedule(&mut self) -> StepPlan {
        self.drop_cancelled();
        self.kv.demote_idle();
        self.admit();
        for s in self.running.iter_mut().filter(|s| s.prompt_scores.is_none()) {
            let ids = sequence::cache_ids(&s.media, &s.tokens);
            self.kv.extend_hit(s.slot, &mut s.kv, &ids, s.prompt_len);
        }
        let pieces = self.plan_pieces();
        let pieces = self.add_drafts(pieces);
        let pieces = self.reserve(pieces);
        let rows = pieces
            .into_iter()
            .filter_map(|(slot, n)| {
                let s = &self.running[self.index_of(slot)?];
                let computed = s.kv.computed;
                // A constrained row needs its logits on the host (its grammar masks them).
                let plain = |q: &Sequence| q.sampler.params().is_plain_greedy() && q.constraint.is_none();
                let greedy = plain(s) && s.siblings.iter().all(plain);
                // A speculating row's grammar masks each position after the one before it: on the host.
                let masked = s.sampler.params().is_plain_greedy()
                    && s.constraint.is_some()
                    && s.siblings.is_empty()
                    && s.draft.is_empty();
                let own = n - s.draft.len();
                self.kv.plan_captures(slot, &s.kv, &sequence::cache_ids(&s.media, &s.tokens), s.prompt_len, own);
                let mut tokens = s.tokens[computed..computed + own].to_vec();
                tokens.extend_from_slice(&s.draft);
                let decoding = computed >= s.prompt_len;
                // A row scoring its prompt wants every prompt position's logits.
                let prompt_logits = s.prompt_scores.is_some() && !decoding;
                Some(PlannedRow {
                    slot,
                    pos0: computed,
                    tokens,
                    blocks: s.kv.blocks.clone(),
                    samples: computed + own >= s.tokens.len(),
                    greedy: greedy && !prompt_logits,
                    masked: masked && !prompt_logits,
                    decoding,
                    logits: if prompt_logits { own } else { 1 + s.draft.len() },
                    scores_prompt: prompt_logits,
                    media: s.media.clone(),
                })
            })
            .collect();
        let transfers = self.kv.take_transfers();
        let states = self.kv.take_state_ops();
        self.refresh_stats();
        StepPlan { rows, transfers, states }
    }

    /// A cancelled row whose client still listens (one choice stopped by the server) gets its usage.
    fn cancelled(&mut self, seq: Sequence) {
        if !seq.tx.is_closed() {
            self.updates.push(Update::finished(&seq, FinishReason::Cancelled));
        }
        self.free(seq);
    }

    /// A row fails with `message`: its request hears why, its blocks go back.
    fn fail(&mut self, seq: Sequence, message: impl Into<String>) {
        self.updates.push(Update::failed(&seq, message));
        self.free(seq);
    }

    /// Let a row go: its blocks return to the pool, its choices not yet forked are cancelled.
    fn free(&mut self, mut seq: Sequence) {
        self.kv.free(seq.slot, &mut seq.kv);
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
        while let Some(mut s) = self.waiting.pop_front() {
            let rows = 1 + s.siblings.len();
            if !self.running.is_empty() && self.running.len() + rows > self.cfg.max_batch {
                self.waiting.push_front(s);
                break;
            }
            let total = blocks_to_admit(s.tokens.len(), s.siblings.len(), self.kv.block_size());
            if self.running.is_empty() && total > self.kv.total_blocks() {
                // Submit-time checks make this unreachable; never let one request stall the queue.
                self.fail(s, "the request can never fit in the KV cache");
                continue;
            }
            // A row that scores its prompt computes all of it: no cached prefix.
            let hit = match s.prompt_scores {
                Some(_) => crate::kv::Hit::miss(),
                None => self.kv.lookup(&sequence::cache_ids(&s.media, &s.tokens), s.kv.skip_cold),
            };
            if hit.room(total) > self.kv.num_free().saturating_sub(promised) {
                self.kv.release_hit(hit);
                self.waiting.push_front(s);
                break; // FIFO: nothing behind it jumps the queue
            }
            promised += hit.later(total);
            self.kv.attach(s.slot, &mut s.kv, hit);
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

    /// Put a row back in the queue in arrival order, holding nothing (it is recomputed from its tokens).
    fn requeue(&mut self, mut s: Sequence) {
        self.kv.reset_row(s.slot, &mut s.kv);
        s.draft.clear();
        // prompt scores not yet sent are scored again as the prompt is recomputed
        if let Some(p) = s.prompt_scores.as_mut() {
            p.logprobs.clear();
            p.top.clear();
        }
        let pos = self.waiting.iter().position(|w| w.arrival > s.arrival).unwrap_or(self.waiting.len());
        self.waiting.insert(pos, s);
    }

    fn plan_pieces(&self) -> Vec<(usize, usize)> {
        let rows: Vec<_> = self
            .running
            .iter()
            .filter(|s| s.kv.restoring.is_none())
            .map(|s| (s.slot, s.arrival, s.kv.computed, s.pending()))
            .collect();
        let budget = PieceBudget {
            step_tokens: self.cfg.step_tokens,
            step_tokens_decoding: self.cfg.step_tokens_decoding,
            max_pieces: self.cfg.max_prefill_rows,
        };
        let mut pieces = plan::plan_pieces(&rows, budget, PIECE_ALIGN);
        if self.whole_images {
            for (slot, n) in pieces.iter_mut() {
                let Some(s) = self.running.iter().find(|s| s.slot == *slot) else { continue };
                let runs = s.media.iter().flat_map(|m| m.images.iter()).map(|i| (i.start, i.start + i.tokens));
                *n = plan::whole_runs(s.kv.computed, *n, runs);
            }
        }
        pieces
    }

    fn index_of(&self, slot: usize) -> Option<usize> {
        self.running.iter().position(|s| s.slot == slot)
    }

    /// Ensure blocks for the planned pieces, preempting as needed; returns the pieces of rows still running.
    fn reserve(&mut self, pieces: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
        for &(slot, n_new) in &pieces {
            while let Some(i) = self.index_of(slot) {
                if self.kv.allocate_for(&mut self.running[i].kv, n_new) {
                    break;
                }
                if self.running.len() == 1 {
                    // Alone and still too big: submit-time checks make this unreachable, but never crash.
                    let s = self.running.remove(i);
                    self.fail(s, "the KV cache cannot hold this request");
                    break;
                }
                // The newest row yields (vLLM's policy), even when it is this one: older rows keep their KV.
                self.preempt_newest();
            }
        }
        pieces.into_iter().filter(|(slot, _)| self.index_of(*slot).is_some()).collect()
    }

    fn refresh_stats(&mut self) {
        self.stats.rows_running = self.running.len();
        self.stats.rows_waiting = self.waiting_rows();
        self.kv.fill_stats(&mut self.stats);
    }
}
