//! The engine core: one step is `plan = scheduler.schedule(); runner.transfer(&plan); out = runner.run(&plan);
//! scheduler.postprocess(plan, out)`, then the scheduler's updates go out as `EngineEvent`s on the requests'
//! streams; and the thread loop that feeds it submitted requests. Nothing here knows tensors or policy.

use super::runner::Runner;
use crate::kv::Transfers;
use crate::scheduler::{Outcome, Scheduler, Sequence, StepOutput, StepPlan, Update};
use crate::types::{EngineEvent, EngineStats};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

pub(crate) enum Command {
    Submit(Box<Sequence>),
    /// Write every cached block to the cold tier; the reply is a receiver that fires once they are durable (None:
    /// there is no cold tier).
    Flush(mpsc::Sender<Option<mpsc::Receiver<()>>>),
}

/// `HEARTH_FAULT_PANIC_AT_TOKEN`: whether this step is the one to panic (once per process, when a running row first
/// holds that many generated tokens): how the tests stand in for a kernel or model bug.
/// Off (the default), it costs one read of the lever per step.
fn injected_fault_due(scheduler: &Scheduler) -> bool {
    static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let at = crate::levers::get().fault_panic_at_token;
    at > 0 && scheduler.most_generated() >= at && !FIRED.swap(true, Ordering::Relaxed)
}

/// Blocks a flush reads out of the pool at once.
const FLUSH_CHUNK: usize = 64;

/// How often an idle engine with parked blocks wakes up to demote idle ones to the cold tier.
const IDLE_TICK: Duration = Duration::from_secs(1);

pub struct EngineCore<R: Runner> {
    pub(crate) scheduler: Scheduler,
    pub(crate) runner: R,
    sample_ms: f64,
    /// Rows received from submitters, and how many of them this thread has taken off the shared queue count (rows
    /// that left the waiting queue: admitted, cancelled or failed).
    received_rows: usize,
    left_rows: usize,
}

/// The grammars of a step's sampled rows (borrowed from their rows) after their masks were computed, and each
/// one's milliseconds.
type Prepared<'a> = (Vec<(usize, &'a mut crate::sampling::grammar::Constraint)>, Vec<f64>);

/// Send each update to its request as an `EngineEvent` (a closed stream means the client went away; the next step
/// drops the row).
fn emit(updates: impl Iterator<Item = Update>) {
    for Update { to, outcome } in updates {
        let ev = match outcome {
            Outcome::Token { choice, sampled } => {
                EngineEvent::Token { choice, id: sampled.id, logprob: sampled.logprob, top: sampled.top }
            }
            Outcome::PromptLogprobs { logprobs, top } => EngineEvent::PromptLogprobs { logprobs, top },
            Outcome::Finished { choice, reason, usage } => EngineEvent::Finished { choice, reason, usage },
            Outcome::Failed { kind, message } => EngineEvent::Error { kind, message },
        };
        let _ = to.send(ev);
    }
}

impl<R: Runner> EngineCore<R> {
    pub fn new(scheduler: Scheduler, runner: R) -> Self {
        Self { scheduler, runner, sample_ms: 0.0, received_rows: 0, left_rows: 0 }
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub fn enqueue(&mut self, seq: Sequence) {
        self.scheduler.enqueue(seq);
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Submit(seq) => {
                self.received_rows += 1 + seq.siblings.len();
                self.enqueue(*seq);
            }
            Command::Flush(reply) => {
                let _ = reply.send(self.flush());
            }
        }
    }

    /// Spill every cached block not yet in the cold tier (they stay cached) and return the tier's flush marker.
    pub fn flush(&mut self) -> Option<mpsc::Receiver<()>> {
        // A chunk at a time: the blocks' host copies stay bounded however large the cache.
        let spills = self.scheduler.flush_spills();
        for chunk in spills.chunks(FLUSH_CHUNK) {
            let transfers = Transfers { spills: chunk.to_vec(), ..Default::default() };
            match self.runner.transfer(&StepPlan { transfers, ..Default::default() }) {
                // Restores in flight may resolve in any transfer.
                Ok(report) => self.scheduler.restores_resolved(&report),
                Err(e) => {
                    tracing::warn!("flushing the prompt cache: {e}");
                    break;
                }
            }
        }
        self.runner.flush()
    }

    /// Run one step. Returns whether any work was done (false: nothing can run until something changes).
    pub fn step(&mut self) -> bool {
        self.draft();
        let plan = self.scheduler.schedule();
        emit(self.scheduler.take_updates());
        // Restores in flight: a transfer with no rows polls for them (the runner waits a little for one).
        if plan.is_empty() && !self.scheduler.restores_in_flight() {
            self.runner.idle();
            return false;
        }
        let restored = match self.runner.transfer(&plan) {
            Ok(r) => r,
            Err(e) => {
                self.fail_step(plan, None, &format!("moving KV blocks failed: {e}"));
                return true;
            }
        };
        let out = if plan.rows.is_empty() { Ok(StepOutput::Logits(Vec::new())) } else { self.run_with_masks(&plan) };
        if injected_fault_due(&self.scheduler) {
            panic!("injected fault (HEARTH_FAULT_PANIC_AT_TOKEN)");
        }
        match out {
            Ok(out) => {
                let t = Instant::now();
                self.scheduler.postprocess(plan, &restored, &out);
                emit(self.scheduler.take_updates());
                self.sample_ms += t.elapsed().as_secs_f64() * 1e3;
            }
            // Fail the rows of this step, keep serving.
            Err(e) => self.fail_step(plan, Some(&restored), &format!("model forward failed: {e}")),
        }
        // No rows left: the engine blocks for the next request, so the next step does not follow this one.
        if self.scheduler.stats().rows_running == 0 {
            self.runner.idle();
        }
        true
    }

    /// The rows' drafts for the coming step: their own sources', and the draft model's for the rows that ask it.
    /// A failed draft pass costs only speculation (the rows decode without the model's drafts).
    fn draft(&mut self) {
        let asks = self.scheduler.prepare_drafts();
        if asks.is_empty() {
            return;
        }
        match self.runner.draft(&asks, &self.scheduler.running_slots()) {
            Ok(drafts) => self.scheduler.use_model_drafts(&asks, drafts),
            Err(e) => tracing::warn!("the draft model failed (this step decodes without its drafts): {e}"),
        }
    }

    /// Fail a step's rows (`restored`: what its transfer resolved, None when it failed) and tell their requests.
    pub(crate) fn fail_step(&mut self, plan: StepPlan, restored: Option<&crate::kv::RestoreReport>, message: &str) {
        self.scheduler.fail_step(plan, restored, message);
        emit(self.scheduler.take_updates());
    }

    /// Run the plan's forward pass while another thread computes the grammar masks of its constrained rows that
    /// sample this step (a mask depends only on the tokens committed so far); the grammars stay in their rows,
    /// borrowed for the step. When every sampled row picks greedily, the masks go to the runner, which may pick the
    /// tokens on its device.
    fn run_with_masks(&mut self, plan: &StepPlan) -> crate::Result<StepOutput> {
        let grammars = self.scheduler.grammars(plan);
        if grammars.is_empty() {
            return self.runner.run(plan);
        }
        let runner = &mut self.runner;
        let (out, ms) = std::thread::scope(|sc| {
            let worker = sc.spawn(move || {
                use rayon::prelude::*;
                let mut grammars = grammars;
                // Rows in parallel; an error here reappears when the row samples (and fails that row). A panic in
                // the grammar library loses only the timings.
                let ms = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    grammars.par_iter_mut().map(|(_, c)| c.prepare().unwrap_or(0.0)).collect::<Vec<f64>>()
                }))
                .unwrap_or_default();
                (grammars, ms)
            });
            let mut worker = Some(worker);
            let mut done: Option<Prepared<'_>> = None;
            let out = if plan.greedy_or_masked() {
                let mut masks = || {
                    let Some((mut grammars, ms)) = worker.take().and_then(|w| w.join().ok()) else {
                        return Vec::new();
                    };
                    // A mask that failed allows nothing: the row reports the grammar's error when it samples.
                    let words = plan
                        .rows
                        .iter()
                        .map(|r| {
                            let c = grammars.iter_mut().find(|(slot, _)| *slot == r.slot).map(|(_, c)| c)?;
                            Some(c.mask_words().unwrap_or_default())
                        })
                        .collect();
                    done = Some((grammars, ms));
                    words
                };
                runner.run_masked(plan, &mut masks)
            } else {
                runner.run(plan)
            };
            let back = done.or_else(|| worker.take().and_then(|w| w.join().ok()));
            (out, back.map(|(_, ms)| ms))
        });
        // The worker died outside the grammar library's calls: its masks may be missing or half made, and a device
        // may have picked tokens without them. The step's rows cannot go on (never unconstrained in silence).
        let Some(ms) = ms else {
            return Err(crate::Error::Unsupported("the grammar masks of this step were lost".into()));
        };
        self.scheduler.note_masks(&ms);
        out
    }

    /// Take the rows that left the waiting queue off the shared count (and put preempted rows that came back on
    /// it). Submitters add their rows before sending, so the count never misses a request in the channel.
    fn account_queue(&mut self, queued: &AtomicUsize) {
        let left = self.received_rows.saturating_sub(self.scheduler.waiting_rows());
        if left > self.left_rows {
            queued.fetch_sub(left - self.left_rows, Ordering::AcqRel);
        } else if left < self.left_rows {
            queued.fetch_add(self.left_rows - left, Ordering::AcqRel);
        }
        self.left_rows = left;
    }

    /// Fail everything in flight (after a panic inside a step). What happened before the panic goes out first.
    pub fn fail_all(&mut self, message: &str) {
        self.scheduler.fail_all(message);
        emit(self.scheduler.take_updates());
        self.runner.reset();
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = self.scheduler.stats().clone();
        self.runner.add_stats(&mut s);
        s.step_sample_ms_total = self.sample_ms;
        s.grammar_quantiles();
        s
    }

    /// The engine thread: take submitted requests, step while there is work, block when idle. A panic inside a
    /// step fails the requests in flight and the loop goes on.
    pub(crate) fn run_loop(&mut self, rx: mpsc::Receiver<Command>, stats: &Mutex<EngineStats>, queued: &AtomicUsize) {
        loop {
            // Block only when there is nothing to do (waking now and then while idle demotion may have work).
            let first = if !self.scheduler.is_idle() {
                None
            } else if self.scheduler.wants_idle_ticks() {
                match rx.recv_timeout(IDLE_TICK) {
                    Ok(c) => Some(c),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            } else {
                match rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                }
            };
            for c in first.into_iter().chain(rx.try_iter()) {
                self.command(c);
            }
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.step())) {
                Ok(true) => {}
                // Work is queued but nothing could run this step: wait for a submit instead of spinning.
                Ok(false) => {
                    if !self.scheduler.is_idle() {
                        if let Ok(c) = rx.recv_timeout(Duration::from_millis(5)) {
                            self.command(c);
                        }
                    }
                }
                Err(_) => self.fail_all("engine step panicked; the requests it was running were failed"),
            }
            // Stats first: whoever sees the queue count drop also sees the rows that left it running.
            if let Ok(mut s) = stats.lock() {
                *s = self.stats();
            }
            self.account_queue(queued);
        }
    }
}
