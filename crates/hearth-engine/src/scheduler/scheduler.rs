//! The step loop's brain. Each `step()`:
//! 1. drops cancelled rows (their blocks return to the pool at once);
//! 2. admits waiting rows FIFO while the batch has room and the pool can hold their tokens plus one;
//! 3. plans the step: every decoding row's one token first, then prefill chunks within `step_tokens`;
//! 4. makes sure each planned row has blocks for its new tokens, preempting the newest row when the pool is
//!    empty (it is recomputed later: never an abort);
//! 5. runs one packed forward over all rows, samples the rows that reached their end, and emits events.

use super::Sequence;
use crate::attention::BatchContext;
use crate::engine::api::{EngineConfig, EngineEvent, EngineStats};
use crate::generate::FinishReason;
use crate::kv::{BlockPool, PagedKv};
use crate::models::Model;
use crate::Result;
use candle_core::{Device, Tensor};
use std::collections::VecDeque;

pub struct Scheduler {
    model: Box<dyn Model>,
    device: Device,
    kv: PagedKv,
    pool: BlockPool,
    cfg: EngineConfig,
    eos: Vec<u32>,
    max_positions: usize,
    pub running: Vec<Sequence>,
    pub waiting: VecDeque<Sequence>,
    pub stats: EngineStats,
}

struct Planned {
    idx: usize,
    n_new: usize,
}

impl Scheduler {
    pub fn new(model: Box<dyn Model>, device: Device, cfg: EngineConfig, eos: Vec<u32>) -> Result<Self> {
        let c = model.config();
        let dtype = if device.is_cpu() { candle_core::DType::F32 } else { candle_core::DType::BF16 };
        let kv = PagedKv::new(c.num_layers, cfg.kv_blocks, cfg.kv_block_size, c.num_kv_heads, c.head_dim, dtype, &device)?;
        let pool = BlockPool::new(cfg.kv_blocks, cfg.kv_block_size);
        let max_positions = model.max_positions();
        let stats = EngineStats { kv_blocks_total: cfg.kv_blocks, kv_blocks_free: cfg.kv_blocks, kv_block_size: cfg.kv_block_size, ..Default::default() };
        Ok(Self { model, device, kv, pool, cfg, eos, max_positions, running: Vec::new(), waiting: VecDeque::new(), stats })
    }

    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    pub fn enqueue(&mut self, seq: Sequence) {
        self.stats.rows_submitted_total += 1;
        self.waiting.push_back(seq);
    }

    /// A cancelled row whose client still listens (one choice stopped by the server) gets its usage.
    fn cancelled(&mut self, seq: Sequence) {
        if !seq.tx.is_closed() {
            seq.finish(FinishReason::Cancelled);
        }
        self.free(seq);
    }

    fn free(&mut self, mut seq: Sequence) {
        self.pool.release_all(&mut seq.blocks);
        self.kv.remove(seq.slot);
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
        let (keep, gone): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.waiting).into_iter().partition(|s| !s.is_cancelled());
        self.waiting = keep;
        for s in gone {
            self.cancelled(s);
        }
    }

    /// Blocks of a parent's prompt a sibling can share: its full blocks, once the parent computed them.
    fn shareable_prefix(&self, parent: usize, prompt_len: usize) -> Option<Vec<u32>> {
        let p = self.running.iter().find(|s| s.slot == parent)?;
        if p.computed < prompt_len {
            return None;
        }
        let full = prompt_len / self.pool.block_size();
        Some(p.blocks[..full.min(p.blocks.len())].to_vec())
    }

    fn parent_pending(&self, s: &Sequence) -> bool {
        match s.parent {
            Some(p) => self.running.iter().chain(self.waiting.iter()).any(|x| x.slot == p && x.computed < s.prompt_len),
            None => false,
        }
    }

    fn admit(&mut self) {
        let mut i = 0;
        while self.running.len() < self.cfg.max_batch && i < self.waiting.len() {
            if self.parent_pending(&self.waiting[i]) {
                i += 1; // a sibling waits for its parent's prefill; others behind it may go
                continue;
            }
            let s = &self.waiting[i];
            let shared = s.parent.and_then(|p| self.shareable_prefix(p, s.prompt_len)).unwrap_or_default();
            let need = self.pool.blocks_for(s.tokens.len() + 1).saturating_sub(shared.len());
            if need > self.pool.num_free() {
                break; // FIFO: nothing behind it jumps the queue for blocks
            }
            let mut s = self.waiting.remove(i).expect("index checked");
            for &b in &shared {
                self.pool.retain(b);
            }
            if s.computed == 0 && !shared.is_empty() {
                s.computed = shared.len() * self.pool.block_size();
                s.cached = s.computed;
                s.blocks = shared;
            }
            s.parent = None;
            self.running.push(s);
        }
    }

    /// Preempt the newest running row other than `keep`; false when there is none.
    fn preempt_newest(&mut self, keep: usize) -> bool {
        let victim = self
            .running
            .iter()
            .enumerate()
            .filter(|(_, s)| s.slot != keep)
            .max_by_key(|(_, s)| s.arrival)
            .map(|(i, _)| i);
        let Some(i) = victim else { return false };
        let mut s = self.running.remove(i);
        self.pool.release_all(&mut s.blocks);
        self.kv.remove(s.slot);
        s.computed = 0;
        self.stats.preemptions_total += 1;
        // Back to the waiting queue in arrival order.
        let pos = self.waiting.iter().position(|w| w.arrival > s.arrival).unwrap_or(self.waiting.len());
        self.waiting.insert(pos, s);
        true
    }

    fn plan(&mut self) -> Vec<Planned> {
        let mut budget = self.cfg.step_tokens.max(1);
        let mut order: Vec<usize> = (0..self.running.len()).collect();
        // Decoding rows (one pending token) first, so a long prompt never stalls running streams.
        order.sort_by_key(|&i| (self.running[i].pending() > 1, self.running[i].arrival));
        let mut plan = Vec::new();
        for i in order {
            if budget == 0 {
                break;
            }
            let n_new = self.running[i].pending().min(budget);
            if n_new == 0 {
                continue;
            }
            budget -= n_new;
            plan.push(Planned { idx: i, n_new });
        }
        plan
    }

    /// Ensure blocks for the plan, preempting as needed. Returns the plan restricted to rows still running.
    fn reserve(&mut self, plan: Vec<Planned>) -> Vec<(usize, usize)> {
        // Work by slot: preemption shifts indices.
        let mut want: Vec<(usize, usize)> = plan.iter().map(|p| (self.running[p.idx].slot, p.n_new)).collect();
        let mut k = 0;
        while k < want.len() {
            let (slot, n_new) = want[k];
            let Some(i) = self.running.iter().position(|s| s.slot == slot) else {
                want.remove(k);
                continue;
            };
            let needed = self.pool.blocks_for(self.running[i].computed + n_new);
            let mut ok = true;
            while self.running.iter().find(|s| s.slot == slot).is_some_and(|s| s.blocks.len() < needed) {
                match self.pool.allocate() {
                    Some(b) => {
                        let s = self.running.iter_mut().find(|s| s.slot == slot).expect("present");
                        s.blocks.push(b);
                    }
                    None => {
                        if !self.preempt_newest(slot) {
                            ok = false;
                            break;
                        }
                    }
                }
            }
            if !ok {
                // Alone and still too big: cannot happen for admitted requests (checked at submit), but never crash.
                let i = self.running.iter().position(|s| s.slot == slot).expect("present");
                let s = self.running.remove(i);
                s.emit(EngineEvent::Error { message: "the KV cache cannot hold this request".into() });
                self.free(s);
                want.remove(k);
                continue;
            }
            k += 1;
        }
        want.retain(|(slot, _)| self.running.iter().any(|s| s.slot == *slot));
        want
    }

    /// Run one step. Returns whether any work was done.
    pub fn step(&mut self) -> Result<bool> {
        self.drop_cancelled();
        self.admit();
        let plan = self.plan();
        let rows = self.reserve(plan);
        self.refresh_stats();
        if rows.is_empty() {
            return Ok(false);
        }
        // Build the packed batch.
        let mut tokens = Vec::new();
        let mut spans = Vec::with_capacity(rows.len());
        for &(slot, n_new) in &rows {
            let s = self.running.iter().find(|s| s.slot == slot).expect("reserved");
            tokens.extend_from_slice(&s.tokens[s.computed..s.computed + n_new]);
            spans.push((slot, s.computed, n_new));
            self.kv.set_table(slot, &s.blocks);
        }
        let ctx = BatchContext::new(&spans, false, &self.device)?;
        let input = Tensor::new(tokens.as_slice(), &self.device)?;
        let logits = match self.model.forward(&input, &ctx, &mut self.kv) {
            Ok(l) => l.to_vec2::<f32>()?,
            Err(e) => {
                // Fail the rows of this batch, keep serving.
                for &(slot, _) in &rows {
                    if let Some(i) = self.running.iter().position(|s| s.slot == slot) {
                        let s = self.running.remove(i);
                        s.emit(EngineEvent::Error { message: format!("model forward failed: {e}") });
                        self.free(s);
                    }
                }
                return Ok(true);
            }
        };
        self.stats.steps_total += 1;
        let mut finished = Vec::new();
        for (r, &(slot, n_new)) in rows.iter().enumerate() {
            let i = self.running.iter().position(|s| s.slot == slot).expect("present");
            let s = &mut self.running[i];
            let before = s.computed;
            s.computed += n_new;
            let prompt_part = s.computed.min(s.prompt_len) - before.min(s.prompt_len);
            self.stats.prompt_tokens_processed_total += prompt_part as u64;
            if s.pending() > 0 {
                continue; // mid-prefill
            }
            let out = s.sampler.sample(&logits[r], &s.tokens);
            let stop = s.stop_ids.contains(&out.id) || (!s.ignore_eos && self.eos.contains(&out.id));
            if stop {
                s.finish(FinishReason::Stop);
                finished.push(slot);
                continue;
            }
            s.tokens.push(out.id);
            self.stats.tokens_generated_total += 1;
            s.emit(EngineEvent::Token { choice: s.choice, id: out.id, logprob: out.logprob, top: out.top });
            if s.generated() >= s.max_tokens || s.tokens.len() >= self.max_positions {
                s.finish(FinishReason::Length);
                finished.push(slot);
            }
        }
        for slot in finished {
            if let Some(i) = self.running.iter().position(|s| s.slot == slot) {
                let s = self.running.remove(i);
                self.free(s);
            }
        }
        self.refresh_stats();
        Ok(true)
    }

    /// Fail everything (the engine is going down or hit an unrecoverable error).
    pub fn fail_all(&mut self, message: &str) {
        for s in self.running.drain(..).chain(self.waiting.drain(..)).collect::<Vec<_>>() {
            s.emit(EngineEvent::Error { message: message.to_string() });
            let mut s = s;
            self.pool.release_all(&mut s.blocks);
            self.kv.remove(s.slot);
        }
        self.refresh_stats();
    }

    fn refresh_stats(&mut self) {
        self.stats.rows_running = self.running.len();
        self.stats.rows_waiting = self.waiting.len();
        self.stats.kv_blocks_used = self.pool.num_used();
        self.stats.kv_blocks_free = self.pool.num_free();
    }

    pub fn max_positions(&self) -> usize {
        self.max_positions
    }
}
