//! The scheduling policy without a model: a fake runner keeps a KV of token ids in the planned blocks and
//! "predicts" the next token from every position it can see through the row's block table, so a wrong block
//! table, a missed copy or an overwritten shared block changes the tokens. Requests must produce the same tokens
//! alone and under admission limits, preemption and forking.

use super::*;
use crate::engine::core::EngineCore;
use crate::engine::runner::Runner;
use crate::kv::{BlockHash, ColdTier};
use crate::sampling::SamplingParams;
use crate::types::CacheConfig;
use crate::types::{EngineEvent, EngineRequest, FinishReason, RequestStream};
use crate::Result;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub(super) const VOCAB: usize = 97;
pub(super) const BS: usize = 16;

/// A block in the fake cold tier: its tokens and its fake KV.
pub(super) type FakeBlock = (Vec<u32>, Vec<Option<u32>>);

/// A cold tier in memory: block name -> (its tokens, its fake KV). `broken` names are listed but unreadable.
#[derive(Default)]
pub(super) struct FakeCold {
    pub blocks: Mutex<HashMap<BlockHash, FakeBlock>>,
    pub broken: Mutex<Vec<BlockHash>>,
}

impl ColdTier for FakeCold {
    fn contains(&self, h: BlockHash) -> bool {
        self.blocks.lock().unwrap().contains_key(&h) || self.broken.lock().unwrap().contains(&h)
    }
}

/// The fake model's KV: one token id per (block, offset); `None` never written.
pub(super) struct FakeRunner {
    pub kv: Vec<Vec<Option<u32>>>,
    pub plans: Vec<StepPlan>,
    pub cold: Option<Arc<FakeCold>>,
    /// Blocks restored so far.
    pub restored: usize,
    /// Transfers a restore stays in flight after the one that started it (0: it resolves in that transfer).
    pub restore_delay: usize,
    /// Restores in flight: (restore, transfers left).
    pending: Vec<(crate::kv::Restore, usize)>,
}

impl FakeRunner {
    pub fn new(blocks: usize) -> Self {
        Self {
            kv: vec![vec![None; BS]; blocks],
            plans: Vec::new(),
            cold: None,
            restored: 0,
            restore_delay: 0,
            pending: Vec::new(),
        }
    }
}

impl Runner for FakeRunner {
    fn transfer(&mut self, plan: &StepPlan) -> Result<crate::kv::RestoreReport> {
        let cold = self.cold.clone().unwrap_or_default();
        for s in &plan.transfers.spills {
            let data = self.kv[s.block as usize].clone();
            assert!(data.iter().all(Option::is_some), "spilled a block that was never fully written");
            cold.blocks.lock().unwrap().insert(s.meta.hash, (s.meta.tokens.clone(), data));
        }
        for c in &plan.transfers.copies {
            self.kv[c.dst as usize] = self.kv[c.src as usize].clone();
        }
        self.pending.extend(plan.transfers.restores.iter().map(|r| (r.clone(), self.restore_delay + 1)));
        let mut report = crate::kv::RestoreReport::default();
        for (r, left) in std::mem::take(&mut self.pending) {
            if left > 1 {
                self.pending.push((r, left - 1));
                continue;
            }
            match cold.blocks.lock().unwrap().get(&r.meta.hash) {
                Some((tokens, data)) if *tokens == r.meta.tokens => {
                    self.kv[r.block as usize] = data.clone();
                    self.restored += 1;
                    report.done.push(r.block);
                }
                _ => report.failed.push(r.block),
            }
        }
        Ok(report)
    }

    fn run(&mut self, plan: &StepPlan) -> Result<StepOutput> {
        let mut logits = Vec::new();
        for row in &plan.rows {
            for (i, &t) in row.tokens.iter().enumerate() {
                let p = row.pos0 + i;
                self.kv[row.blocks[p / BS] as usize][p % BS] = Some(t);
            }
            // Next token: a position-weighted sum of every visible token, read back through the block table.
            let end = row.pos0 + row.tokens.len();
            let sum: u64 = (0..end)
                .map(|p| {
                    self.kv[row.blocks[p / BS] as usize][p % BS].expect("a visible position was never written") as u64
                        * (p as u64 + 1)
                })
                .sum();
            let mut l = vec![0f32; VOCAB];
            l[(sum % VOCAB as u64) as usize] = 1.0;
            logits.push(l);
        }
        self.plans.push(plan.clone());
        Ok(StepOutput::Logits(logits))
    }
}

pub(super) fn config(blocks: usize, batch: usize) -> EngineConfig {
    EngineConfig {
        max_batch: batch,
        kv_block_size: BS,
        kv_blocks: blocks,
        step_tokens: 64,
        step_tokens_decoding: 32,
        max_prefill_rows: 0,
        max_queue: 64,
        cache: CacheConfig::default(),
        spec: Default::default(),
    }
}

pub(super) fn core(blocks: usize, batch: usize) -> EngineCore<FakeRunner> {
    EngineCore::new(Scheduler::new(config(blocks, batch), vec![], 4096), FakeRunner::new(blocks))
}

pub(super) fn request(prompt_len: usize, seed: u32, max_tokens: usize, n: usize) -> EngineRequest {
    EngineRequest {
        prompt: (0..prompt_len as u32).map(|i| (i * 7 + seed) % VOCAB as u32).collect(),
        sampling: SamplingParams::default(),
        max_tokens,
        stop_token_ids: vec![],
        ignore_eos: true,
        n,
        constraint: None,
        spec: Default::default(),
        media: None,
    }
}

/// Submit to a core the way the handle does (slots from a counter).
pub(super) fn submit(c: &mut EngineCore<FakeRunner>, next: &mut usize, req: &EngineRequest) -> RequestStream {
    let (seq, stream) = Sequence::for_request(req, None, &Default::default(), || {
        *next += 1;
        *next - 1
    });
    c.enqueue(seq);
    stream
}

pub(super) fn run_to_idle(c: &mut EngineCore<FakeRunner>) {
    for _ in 0..10_000 {
        if c.scheduler().is_idle() {
            return;
        }
        c.step();
    }
    panic!("the engine did not finish");
}

/// Every choice's tokens and finish reason, in choice order.
pub(super) fn drain(s: &mut RequestStream, n: usize) -> Vec<(Vec<u32>, Option<FinishReason>)> {
    let mut out = vec![(Vec::new(), None); n];
    while let Ok(ev) = s.rx.try_recv() {
        match ev {
            EngineEvent::Token { choice, id, .. } => out[choice].0.push(id),
            EngineEvent::Finished { choice, reason, .. } => out[choice].1 = Some(reason),
            EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
            EngineEvent::PromptLogprobs { .. } => {}
        }
    }
    out
}

pub(super) fn solo(req: &EngineRequest) -> Vec<u32> {
    let mut c = core(64, 8);
    let mut next = 0;
    let mut s = submit(&mut c, &mut next, &EngineRequest { n: 1, ..req.clone() });
    run_to_idle(&mut c);
    drain(&mut s, 1).remove(0).0
}

#[test]
fn pieces_end_at_fixed_boundaries_whatever_the_budget() {
    let b = |step_tokens, decoding, pieces| plan::PieceBudget {
        step_tokens,
        step_tokens_decoding: decoding,
        max_pieces: pieces,
    };
    // A 100-token prompt alone: 64 budget -> a 64-token piece (a multiple of 32); 50 -> 32; the rest when it fits.
    assert_eq!(plan::plan_pieces(&[(0, 0, 0, 100)], b(64, 32, 0), 32), vec![(0, 64)]);
    assert_eq!(plan::plan_pieces(&[(0, 0, 0, 100)], b(50, 32, 0), 32), vec![(0, 32)]);
    assert_eq!(plan::plan_pieces(&[(0, 0, 64, 36)], b(64, 32, 0), 32), vec![(0, 36)]);
    // Started mid-way (computed 40): the piece ends at 64 or 96, never at 40 + budget.
    assert_eq!(plan::plan_pieces(&[(0, 0, 40, 100)], b(64, 32, 0), 32), vec![(0, 56)]);
    // Decode rows first and always; prompt pieces capped while rows decode; oldest prompt first.
    let rows = [(5, 3, 0, 200), (1, 0, 10, 1), (7, 1, 0, 90), (2, 2, 20, 1)];
    assert_eq!(plan::plan_pieces(&rows, b(64, 32, 0), 32), vec![(1, 1), (2, 1), (7, 32), (5, 32)]);
    // At most one prompt piece per step.
    assert_eq!(plan::plan_pieces(&rows, b(64, 32, 1), 32), vec![(1, 1), (2, 1), (7, 32)]);
    // A budget too small for an aligned piece plans nothing for that row.
    assert_eq!(plan::plan_pieces(&[(0, 0, 0, 100)], b(20, 32, 0), 32), vec![]);
}

#[test]
fn fifo_admission_under_a_block_budget() {
    // 10 blocks: A needs 6 (80 tokens + 1), B needs 6 and must wait for A although C (1 block) would fit.
    let mut c = core(10, 8);
    let mut next = 0;
    let (a, b, cc) = (request(80, 1, 4, 1), request(90, 2, 4, 1), request(5, 3, 4, 1));
    let mut streams: Vec<_> = [&a, &b, &cc].iter().map(|r| submit(&mut c, &mut next, r)).collect();
    let plan = c.scheduler.schedule();
    assert_eq!(plan.rows.iter().map(|r| r.slot).collect::<Vec<_>>(), vec![0], "only A is admitted");
    assert_eq!(c.scheduler().stats().rows_waiting, 2, "C does not jump the queue");
    c.fail_step(plan, None, "test");
    while streams[0].rx.try_recv().is_ok() {}
    run_to_idle(&mut c);
    let got: Vec<Vec<u32>> = streams.iter_mut().skip(1).map(|s| drain(s, 1).remove(0).0).collect();
    assert_eq!(got, vec![solo(&b), solo(&cc)]);
    assert_eq!(c.scheduler().stats().kv_blocks_used, 0);
}

#[test]
fn the_newest_row_is_preempted_and_recomputed() {
    // 3 rows that each grow to 3 blocks in a pool of 7: someone must yield, and it is the newest.
    let reqs: Vec<_> = (0..3).map(|i| request(20, i, 24, 1)).collect();
    let mut c = core(7, 8);
    let mut next = 0;
    let mut streams: Vec<_> = reqs.iter().map(|r| submit(&mut c, &mut next, r)).collect();
    run_to_idle(&mut c);
    assert!(c.scheduler().stats().preemptions_total > 0, "the pool must have run out");
    // The oldest row never lost its KV: its prompt was computed exactly once.
    let computed_from_zero =
        |slot| c.runner.plans.iter().filter(|p| p.rows.iter().any(|r| r.slot == slot && r.pos0 == 0)).count();
    assert_eq!(computed_from_zero(0), 1);
    assert!(computed_from_zero(2) > 1, "the newest row was recomputed");
    for (s, r) in streams.iter_mut().zip(&reqs) {
        let (tokens, reason) = drain(s, 1).remove(0);
        assert_eq!(reason, Some(FinishReason::Length));
        assert_eq!(tokens, solo(r), "preemption changed a row's tokens");
    }
    assert_eq!(c.scheduler().stats().kv_blocks_used, 0);
}

#[test]
fn choices_fork_sharing_the_prompt_blocks() {
    // A 40-token prompt: 2 full blocks shared by 3 choices, the partial third block copied for choices 1 and 2.
    let req = request(40, 5, 6, 3);
    let mut c = core(32, 8);
    let mut next = 0;
    let mut s = submit(&mut c, &mut next, &req);
    c.step(); // computes the prompt (40 <= 64) and forks
    assert_eq!(c.scheduler().stats().rows_running, 3);
    // 3 prompt blocks of choice 0 + one copied partial block for each other choice.
    assert_eq!(c.scheduler().stats().kv_blocks_used, 3 + 2);
    let plan = c.scheduler.schedule();
    assert_eq!(plan.transfers.copies.len(), 2, "the partial block is copied for each forked choice");
    let shared: Vec<_> = plan.rows.iter().map(|r| r.blocks[..2].to_vec()).collect();
    assert!(shared.windows(2).all(|w| w[0] == w[1]), "the full prompt blocks are shared: {shared:?}");
    let partial: std::collections::HashSet<_> = plan.rows.iter().map(|r| r.blocks[2]).collect();
    assert_eq!(partial.len(), 3, "each choice writes its own partial block");
    let failed = c.runner.transfer(&plan).expect("fake transfer");
    let out = c.runner.run(&plan).expect("fake run");
    c.scheduler.postprocess(plan, &failed, &out);
    run_to_idle(&mut c);
    let want = solo(&req);
    for (tokens, reason) in drain(&mut s, 3) {
        assert_eq!(reason, Some(FinishReason::Length));
        assert_eq!(tokens, want, "greedy choices decode the same tokens as one request alone");
    }
    assert_eq!(c.scheduler().stats().kv_blocks_used, 0, "every reference was released");
}

#[test]
fn cancellation_frees_rows_and_blocks() {
    let mut c = core(32, 8);
    let mut next = 0;
    let keep = submit(&mut c, &mut next, &request(30, 1, 50, 1));
    let mut gone = submit(&mut c, &mut next, &request(30, 2, 50, 2));
    for _ in 0..3 {
        c.step();
    }
    assert_eq!(c.scheduler().stats().rows_running, 3);
    // 2 blocks each for `keep` and choice 0, 1 shared full block + 1 copied partial one for choice 1.
    assert_eq!(c.scheduler().stats().kv_blocks_used, 5);
    gone.cancel_choice(1);
    c.step(); // (the running rows cross into their third block in this step)
    assert_eq!(c.scheduler().stats().rows_running, 2, "one choice cancelled, its sibling goes on");
    assert_eq!(c.scheduler().stats().kv_blocks_used, 5 + 2 - 1, "its partial block is free again");
    let ended = drain(&mut gone, 2);
    assert_eq!(ended[1].1, Some(FinishReason::Cancelled), "a cancelled choice still gets its usage");
    assert_eq!(ended[0].1, None);
    drop(gone);
    c.step();
    assert_eq!(c.scheduler().stats().rows_running, 1);
    drop(keep);
    c.step();
    assert!(c.scheduler().is_idle());
    assert_eq!(c.scheduler().stats().kv_blocks_used, 0);
}

#[test]
fn a_failed_step_fails_its_rows_and_keeps_serving() {
    let mut c = core(32, 8);
    let mut next = 0;
    let mut s = submit(&mut c, &mut next, &request(20, 1, 4, 2));
    let plan = c.scheduler.schedule();
    c.fail_step(plan, None, "boom");
    assert!(matches!(s.rx.try_recv(), Ok(EngineEvent::Error { .. })));
    assert!(c.scheduler().is_idle());
    assert_eq!(c.scheduler().stats().kv_blocks_used, 0);
    let r = request(20, 9, 4, 1);
    let mut s = submit(&mut c, &mut next, &r);
    run_to_idle(&mut c);
    assert_eq!(drain(&mut s, 1).remove(0).0, solo(&r));
}

/// A piece never ends inside a run computed whole (an image whose tokens attend both ways): it stops before the
/// run, or, where the run starts where the piece does, takes all of it.
#[test]
fn pieces_keep_runs_whole() {
    use super::plan::whole_runs;
    let runs = [(30, 46), (60, 64)];
    assert_eq!(whole_runs(0, 32, runs), 30, "cut back to the run's start");
    assert_eq!(whole_runs(30, 8, runs), 16, "a piece from the run's start takes it whole");
    assert_eq!(whole_runs(0, 30, runs), 30, "ending at the run's start is fine");
    assert_eq!(whole_runs(46, 16, runs), 14, "the next run");
    assert_eq!(whole_runs(46, 10, runs), 10, "ending before a run");
    assert_eq!(whole_runs(40, 4, runs), 6, "a hit inside a run: carried to its end");
}
