//! The step loop's brain. Each `step()`:
//! 1. drops cancelled rows (their blocks return to the pool at once);
//! 2. admits waiting requests FIFO while the batch has room for all their choices and the pool can hold their
//!    tokens plus one;
//! 3. plans the step: every decoding row's one token first, then prefill pieces within the step's prompt-token
//!    budget (one prompt's piece capped smaller while rows decode). Pieces end at multiples of PIECE_ALIGN (or at the prompt's end), and
//!    attention runs in sub-blocks aligned the same way, so a row's arithmetic never depends on its batch-mates
//!    or the budget (batch invariance);
//! 4. makes sure each planned row has blocks for its new tokens, preempting the newest row when the pool is
//!    empty (it is recomputed later: never an abort);
//! 5. runs one packed forward over all rows, samples the rows that reached their end (forking the other
//!    choices of a request off its first), and emits events.

use super::Sequence;
use crate::attention::{BatchContext, PIECE_ALIGN};
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
    #[cfg(feature = "cuda")]
    profile: Option<crate::gpu::profile::ProfileWindow>,
    #[cfg(feature = "cuda")]
    timer: Option<crate::gpu::profile::StepTimer>,
}

impl Scheduler {
    pub fn new(model: Box<dyn Model>, device: Device, cfg: EngineConfig, eos: Vec<u32>) -> Result<Self> {
        let c = model.config();
        let dtype = model.dtype();
        let kv = PagedKv::new(c.num_layers, cfg.kv_blocks, cfg.kv_block_size, c.num_kv_heads, c.head_dim, dtype, &device)?;
        let pool = BlockPool::new(cfg.kv_blocks, cfg.kv_block_size);
        let max_positions = model.max_positions();
        #[cfg(feature = "cuda")]
        let timer = crate::gpu::profile::StepTimer::from_env(&device);
        let stats = EngineStats { kv_blocks_total: cfg.kv_blocks, kv_blocks_free: cfg.kv_blocks, kv_block_size: cfg.kv_block_size, ..Default::default() };
        Ok(Self {
            model,
            device,
            kv,
            pool,
            cfg,
            eos,
            max_positions,
            running: Vec::new(),
            waiting: VecDeque::new(),
            stats,
            #[cfg(feature = "cuda")]
            profile: crate::gpu::profile::ProfileWindow::from_env(),
            #[cfg(feature = "cuda")]
            timer,
        })
    }

    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    pub fn enqueue(&mut self, seq: Sequence) {
        self.stats.rows_submitted_total += 1 + seq.siblings.len() as u64;
        self.waiting.push_back(seq);
    }

    /// Rows waiting, counting choices not yet forked.
    pub fn waiting_rows(&self) -> usize {
        self.waiting.iter().map(|s| 1 + s.siblings.len()).sum()
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
        let (keep, gone): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.waiting).into_iter().partition(|s| !s.is_cancelled());
        self.waiting = keep;
        for s in gone {
            self.cancelled(s);
        }
    }

    /// Blocks a waiting request needs to start: its tokens plus one to decode, and per forked choice a copied
    /// partial block and one more.
    pub fn blocks_to_admit(&self, s: &Sequence) -> usize {
        self.pool.blocks_for(s.tokens.len() + 1) + 2 * s.siblings.len()
    }

    fn admit(&mut self) {
        // Admission allocates lazily (in `reserve`): count what this round promises so it never over-commits.
        let mut free = self.pool.num_free();
        while let Some(s) = self.waiting.front() {
            let rows = 1 + s.siblings.len();
            if !self.running.is_empty() && self.running.len() + rows > self.cfg.max_batch {
                break;
            }
            let need = self.blocks_to_admit(s);
            if need > free {
                if self.running.is_empty() && need > self.pool.total() {
                    // Submit-time checks make this unreachable; never let one request stall the queue.
                    let s = self.waiting.pop_front().expect("front checked");
                    s.emit(EngineEvent::Error { message: "the request can never fit in the KV cache".into() });
                    self.free(s);
                    continue;
                }
                break; // FIFO: nothing behind it jumps the queue
            }
            free -= need;
            let s = self.waiting.pop_front().expect("front checked");
            self.running.push(s);
        }
    }

    /// Preempt the newest running row (possibly the one asking for blocks); false when nothing runs.
    fn preempt_newest(&mut self) -> bool {
        let victim = self.running.iter().enumerate().max_by_key(|(_, s)| s.arrival).map(|(i, _)| i);
        let Some(i) = victim else { return false };
        let mut s = self.running.remove(i);
        self.pool.release_all(&mut s.blocks);
        self.kv.remove(s.slot);
        s.computed = 0;
        s.cached = 0;
        self.stats.preemptions_total += 1;
        let pos = self.waiting.iter().position(|w| w.arrival > s.arrival).unwrap_or(self.waiting.len());
        self.waiting.insert(pos, s);
        true
    }

    /// (slot, new tokens) for this step: decode rows first, then prefill pieces (oldest first) within the step's
    /// prompt-token budget `step_tokens`. While rows decode, one prompt's piece is also capped at
    /// `step_tokens_decoding`, so a long prompt advances in small pieces (the running streams' inter-token latency)
    /// while short prompts still start together (at most `max_prefill_rows` prompts per step). A piece takes the rest of its prompt when that fits; otherwise it
    /// ends at the last multiple of PIECE_ALIGN the limit reaches, so piece boundaries (and, with the aligned
    /// attention sub-blocks, every row's arithmetic) do not depend on the budget or the batch.
    fn plan(&self) -> Vec<(usize, usize)> {
        let mut order: Vec<&Sequence> = self.running.iter().collect();
        order.sort_by_key(|s| (s.pending() > 1, s.arrival));
        let decoding = order.iter().any(|s| s.pending() == 1);
        let cap = if decoding { self.cfg.step_tokens_decoding.max(1) } else { usize::MAX };
        let mut budget = self.cfg.step_tokens.max(1);
        let mut prefills_left = if self.cfg.max_prefill_rows == 0 { usize::MAX } else { self.cfg.max_prefill_rows };
        let mut plan = Vec::new();
        for s in order {
            if s.pending() > 1 && prefills_left == 0 {
                continue;
            }
            let limit = cap.min(budget);
            let piece = match s.pending() {
                0 => continue,
                1 => 1, // decode rows always fit: the budget only limits prefill
                p if p <= limit => p,
                _ => ((s.computed + limit) / PIECE_ALIGN * PIECE_ALIGN).saturating_sub(s.computed),
            };
            if piece == 0 {
                continue; // no aligned piece fits in what is left of the budget
            }
            if s.pending() > 1 {
                budget -= piece; // <= limit <= budget by construction
                prefills_left -= 1;
            }
            plan.push((s.slot, piece));
        }
        plan
    }

    fn index_of(&self, slot: usize) -> Option<usize> {
        self.running.iter().position(|s| s.slot == slot)
    }

    /// Ensure blocks for the plan, preempting as needed; returns the plan restricted to rows still running.
    fn reserve(&mut self, plan: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
        for &(slot, n_new) in &plan {
            loop {
                let Some(i) = self.index_of(slot) else { break };
                let needed = self.pool.blocks_for(self.running[i].computed + n_new);
                if self.running[i].blocks.len() >= needed {
                    break;
                }
                if let Some(b) = self.pool.allocate() {
                    self.running[i].blocks.push(b);
                } else if self.running.len() == 1 {
                    // Alone and still too big: submit-time checks make this unreachable, but never crash.
                    let s = self.running.remove(i);
                    s.emit(EngineEvent::Error { message: "the KV cache cannot hold this request".into() });
                    self.free(s);
                    break;
                } else {
                    // The newest row yields (vLLM's policy), even when it is this one: older rows keep their KV.
                    self.preempt_newest();
                }
            }
        }
        plan.into_iter().filter(|(slot, _)| self.index_of(*slot).is_some()).collect()
    }

    /// Sample the next token of `s` from its step output; returns true when the row is finished.
    fn accept(&mut self, s: &mut Sequence, out: Pick<'_>) -> bool {
        let out = match out {
            Pick::Logits(logits) => s.sampler.sample(logits, &s.tokens),
            Pick::Id(id) => s.sampler.chosen(id),
        };
        if s.stop_ids.contains(&out.id) || (!s.ignore_eos && self.eos.contains(&out.id)) {
            s.finish(FinishReason::Stop);
            return true;
        }
        s.tokens.push(out.id);
        self.stats.tokens_generated_total += 1;
        s.emit(EngineEvent::Token { choice: s.choice, id: out.id, logprob: out.logprob, top: out.top });
        if s.generated() >= s.max_tokens || s.tokens.len() >= self.max_positions {
            s.finish(FinishReason::Length);
            return true;
        }
        false
    }

    /// Fork a sibling off `parent` (whose prompt KV is complete): share the full prompt blocks, copy the partial
    /// one. Returns None (and re-queues the sibling to compute on its own) when the pool is out of blocks.
    fn fork(&mut self, parent_blocks: &[u32], mut sib: Sequence) -> Option<Sequence> {
        let bs = self.pool.block_size();
        let full = sib.prompt_len / bs;
        let mut blocks: Vec<u32> = parent_blocks[..full].to_vec();
        if sib.prompt_len % bs != 0 {
            let Some(b) = self.pool.allocate() else {
                self.waiting.push_front(sib);
                return None;
            };
            if let Err(e) = self.kv.copy_block(parent_blocks[full], b) {
                self.pool.release(b);
                sib.emit(EngineEvent::Error { message: format!("forking choice {}: {e}", sib.choice) });
                return None;
            }
            blocks.push(b);
        }
        for &b in &parent_blocks[..full] {
            self.pool.retain(b);
        }
        sib.blocks = blocks;
        sib.computed = sib.prompt_len;
        sib.cached = sib.prompt_len;
        Some(sib)
    }

    /// Run one step. Returns whether any work was done.
    pub fn step(&mut self) -> Result<bool> {
        self.drop_cancelled();
        self.admit();
        let plan = self.plan();
        let rows = self.reserve(plan);
        self.refresh_stats();
        if rows.is_empty() {
            #[cfg(feature = "cuda")]
            if let Some(t) = self.timer.as_mut() {
                t.idle();
            }
            return Ok(false);
        }
        #[cfg(feature = "cuda")]
        if self.profile.is_some() {
            let decoding = |slot| self.index_of(slot).is_some_and(|i| self.running[i].computed >= self.running[i].prompt_len);
            let decode_only = rows.iter().all(|&(slot, n)| n == 1 && decoding(slot));
            let tokens = rows.iter().map(|r| r.1).sum();
            if let Some(p) = self.profile.as_mut() {
                p.before(&self.device, rows.len(), tokens, decode_only);
            }
        }
        let t_issue = std::time::Instant::now();
        #[cfg(feature = "cuda")]
        if let Some(t) = self.timer.as_mut() {
            t.start();
        }
        let mut tokens = Vec::new();
        let mut spans = Vec::with_capacity(rows.len());
        for &(slot, n_new) in &rows {
            let s = &self.running[self.index_of(slot).expect("reserved")];
            tokens.extend_from_slice(&s.tokens[s.computed..s.computed + n_new]);
            spans.push((slot, s.computed, n_new));
            self.kv.set_table(slot, &s.blocks);
        }
        let ctx = BatchContext::new(&spans, false, &self.device)?;
        let input = Tensor::new(tokens.as_slice(), &self.device)?;
        let mut t_wait = t_issue;
        let on_device = self.greedy_on_device(&rows);
        #[cfg(feature = "cuda")]
        let timer = &mut self.timer;
        let out = match self.model.forward(&input, &ctx, &mut self.kv).and_then(|l| {
            t_wait = std::time::Instant::now();
            #[cfg(feature = "cuda")]
            if let Some(t) = timer.as_mut() {
                t.end();
            }
            step_output(&l, on_device)
        }) {
            Ok(l) => l,
            Err(e) => {
                // Fail the rows of this batch, keep serving.
                for &(slot, _) in &rows {
                    if let Some(i) = self.index_of(slot) {
                        let s = self.running.remove(i);
                        s.emit(EngineEvent::Error { message: format!("model forward failed: {e}") });
                        self.free(s);
                    }
                }
                return Ok(true);
            }
        };
        self.stats.steps_total += 1;
        let t_sample = std::time::Instant::now();
        self.stats.step_issue_ms_total += (t_wait - t_issue).as_secs_f64() * 1e3;
        self.stats.step_wait_ms_total += (t_sample - t_wait).as_secs_f64() * 1e3;
        #[cfg(feature = "cuda")]
        if let Some((busy, gap)) = self.timer.as_mut().and_then(|t| t.collect()) {
            self.stats.step_device_ms_total += busy;
            if let Some(g) = gap {
                self.stats.step_gap_ms_total += g;
                self.stats.step_gaps_total += 1;
            }
        }
        for (r, &(slot, n_new)) in rows.iter().enumerate() {
            let Some(i) = self.index_of(slot) else { continue };
            let mut s = self.running.remove(i);
            let before = s.computed;
            s.computed += n_new;
            self.stats.prompt_tokens_processed_total += (s.computed.min(s.prompt_len) - before.min(s.prompt_len)) as u64;
            if s.pending() > 0 {
                self.running.insert(i, s); // mid-prefill
                continue;
            }
            // The prompt is computed: fork the other choices first, from the same logits.
            for sib in std::mem::take(&mut s.siblings) {
                if let Some(mut sib) = self.fork(&s.blocks, sib) {
                    if self.accept(&mut sib, out.row(r)) {
                        self.free(sib);
                    } else {
                        self.running.push(sib);
                    }
                }
            }
            if self.accept(&mut s, out.row(r)) {
                self.free(s);
            } else {
                self.running.insert(i.min(self.running.len()), s);
            }
        }
        self.stats.step_sample_ms_total += t_sample.elapsed().as_secs_f64() * 1e3;
        #[cfg(feature = "cuda")]
        if let Some(p) = self.profile.as_mut() {
            p.after(&self.device);
        }
        // No rows left: the engine blocks for the next request, so the next step does not follow this one.
        #[cfg(feature = "cuda")]
        if let Some(t) = self.timer.as_mut().filter(|_| self.running.is_empty()) {
            t.idle();
        }
        self.refresh_stats();
        Ok(true)
    }

    /// Whether this step's tokens can be chosen on the device: a CUDA device (`HEARTH_GPU_ARGMAX` on) and every
    /// row that samples this step, siblings included, plain greedy. Rows still mid-prompt after this step ignore
    /// their output, so they do not count.
    #[allow(unused_variables)]
    fn greedy_on_device(&self, rows: &[(usize, usize)]) -> bool {
        #[cfg(feature = "cuda")]
        if self.device.is_cuda() && crate::gpu::argmax::enabled() {
            return rows.iter().all(|&(slot, n_new)| {
                self.index_of(slot).is_some_and(|i| {
                    let s = &self.running[i];
                    let samples = s.computed + n_new >= s.tokens.len(); // as step(): pending() == 0 after it
                    !samples || (s.sampler.params().is_plain_greedy() && s.siblings.iter().all(|b| b.sampler.params().is_plain_greedy()))
                })
            });
        }
        false
    }

    /// Fail everything (an unrecoverable error).
    pub fn fail_all(&mut self, message: &str) {
        let all: Vec<Sequence> = self.running.drain(..).chain(self.waiting.drain(..)).collect();
        for mut s in all {
            for sib in std::mem::take(&mut s.siblings) {
                sib.emit(EngineEvent::Error { message: message.to_string() });
            }
            s.emit(EngineEvent::Error { message: message.to_string() });
            self.free(s);
        }
        // A panic mid-step may have dropped a row it held outside the lists: nothing holds blocks now, so start
        // the pool afresh rather than leak them.
        self.pool = BlockPool::new(self.cfg.kv_blocks, self.cfg.kv_block_size);
        self.kv.clear_tables();
        self.refresh_stats();
    }

    fn refresh_stats(&mut self) {
        self.stats.rows_running = self.running.len();
        self.stats.rows_waiting = self.waiting_rows();
        self.stats.kv_blocks_used = self.pool.num_used();
        self.stats.kv_blocks_free = self.pool.num_free();
    }
}

/// What a row's sampler reads: its logits, or the token the device already chose.
enum Pick<'a> {
    Logits(&'a [f32]),
    Id(u32),
}

/// A step's output on the host: every row's logits, or (greedy on the device) every row's token.
enum StepOutput {
    Logits(Vec<Vec<f32>>),
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    Ids(Vec<u32>),
}

impl StepOutput {
    fn row(&self, r: usize) -> Pick<'_> {
        match self {
            StepOutput::Logits(l) => Pick::Logits(&l[r]),
            StepOutput::Ids(ids) => Pick::Id(ids[r]),
        }
    }
}

/// Copy a step's logits (R, V) to the host, or only their argmax per row when `on_device`.
#[allow(unused_variables)]
fn step_output(logits: &Tensor, on_device: bool) -> Result<StepOutput> {
    #[cfg(feature = "cuda")]
    if on_device {
        return Ok(StepOutput::Ids(crate::gpu::argmax::argmax_rows(logits)?));
    }
    Ok(StepOutput::Logits(logits.to_vec2::<f32>()?))
}
