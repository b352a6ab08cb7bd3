//! The engine core: one step is `plan = scheduler.schedule(); out = runner.run(&plan); scheduler.postprocess(plan,
//! out)`, and the thread loop that feeds it submitted requests. Nothing here knows tensors or policy.

use super::runner::Runner;
use crate::scheduler::{Scheduler, Sequence};
use crate::types::EngineStats;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

pub(crate) enum Command {
    Submit(Sequence),
}

pub struct EngineCore<R: Runner> {
    pub(crate) scheduler: Scheduler,
    pub(crate) runner: R,
    sample_ms: f64,
}

impl<R: Runner> EngineCore<R> {
    pub fn new(scheduler: Scheduler, runner: R) -> Self {
        Self { scheduler, runner, sample_ms: 0.0 }
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub fn enqueue(&mut self, seq: Sequence) {
        self.scheduler.enqueue(seq);
    }

    /// Run one step. Returns whether any work was done (false: nothing can run until something changes).
    pub fn step(&mut self) -> bool {
        let plan = self.scheduler.schedule();
        if plan.is_empty() {
            self.runner.idle();
            return false;
        }
        match self.runner.run(&plan) {
            Ok(out) => {
                let t = Instant::now();
                self.scheduler.postprocess(plan, &out);
                self.sample_ms += t.elapsed().as_secs_f64() * 1e3;
            }
            // Fail the rows of this step, keep serving.
            Err(e) => self.scheduler.fail_step(plan, &format!("model forward failed: {e}")),
        }
        // No rows left: the engine blocks for the next request, so the next step does not follow this one.
        if self.scheduler.stats().rows_running == 0 {
            self.runner.idle();
        }
        true
    }

    /// Fail everything in flight (after a panic inside a step).
    pub fn fail_all(&mut self, message: &str) {
        self.scheduler.fail_all(message);
        self.runner.reset();
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = self.scheduler.stats().clone();
        self.runner.add_stats(&mut s);
        s.step_sample_ms_total = self.sample_ms;
        s
    }

    /// The engine thread: take submitted requests, step while there is work, block when idle. A panic inside a
    /// step fails the requests in flight and the loop goes on.
    pub(crate) fn run_loop(&mut self, rx: mpsc::Receiver<Command>, stats: &Mutex<EngineStats>, queued: &AtomicUsize) {
        loop {
            // Block only when there is nothing to do.
            let first = if self.scheduler.is_idle() {
                match rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                }
            } else {
                None
            };
            for Command::Submit(seq) in first.into_iter().chain(rx.try_iter()) {
                self.enqueue(seq);
            }
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.step())) {
                Ok(true) => {}
                // Work is queued but nothing could run this step: wait for a submit instead of spinning.
                Ok(false) => {
                    if let Ok(Command::Submit(seq)) = rx.recv_timeout(Duration::from_millis(5)) {
                        self.enqueue(seq);
                    }
                }
                Err(_) => self.fail_all("engine step panicked; the requests in flight were failed"),
            }
            queued.store(self.scheduler.waiting_rows(), Ordering::Relaxed);
            if let Ok(mut s) = stats.lock() {
                *s = self.stats();
            }
        }
    }
}
