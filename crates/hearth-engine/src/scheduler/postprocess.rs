//! Taking a step back: advance each row by the tokens it computed (registering its completed blocks), accept the
//! token of every row that reached its end ([`super::accept`]), fork a request's other choices off its computed
//! prompt, and retire finished rows; finish the rows whose restores resolved; or fail a step's rows. Forked
//! choices share the full prompt blocks (with a copy of the partial one made before the next step) and sample
//! their first token from the same output.

use super::accept::note_mask;
use super::outcome::Update;
use super::plan::{StepOutput, StepPlan};
use super::{Scheduler, Sequence};
use crate::kv::{ForkError, RestoreReport, RowRestores, Transfers};
use crate::sampling::grammar::Constraint;

impl Scheduler {
    /// Take a step's output back (`restored`: the restores the runner resolved): advance each row, register its
    /// completed blocks, accept the rows that reached their end, fork choices, retire finished rows.
    pub fn postprocess(&mut self, plan: StepPlan, restored: &RestoreReport, out: &StepOutput) {
        self.transfers_done(plan.transfers, restored);
        if plan.rows.is_empty() {
            self.refresh_stats();
            return;
        }
        let expected: usize = plan.rows.iter().map(|r| r.logits).sum();
        if out.len() != expected {
            let message = format!("the step returned {} outputs for {expected} expected", out.len());
            for row in &plan.rows {
                if let Some(i) = self.index_of(row.slot) {
                    let s = self.running.remove(i);
                    self.fail(s, message.clone());
                }
            }
            self.refresh_stats();
            return;
        }
        self.stats.steps_total += 1;
        let mut next = 0;
        for row in &plan.rows {
            // This row's outputs: its last position's, or one per drafted position and the one before them.
            let r = next;
            next += row.logits;
            let Some(i) = self.index_of(row.slot) else { continue };
            let mut s = self.running.remove(i);
            let (prompt, before) = (s.prompt_len, s.kv.computed);
            if row.scores_prompt {
                if let Err(why) = score_prompt(&mut s, row, out, r) {
                    self.fail(s, why);
                    continue;
                }
            }
            // A speculating row's drafted tokens count once verification keeps them.
            s.kv.computed += row.tokens.len() - s.draft.len();
            self.stats.prompt_tokens_processed_total += (s.kv.computed.min(prompt) - before.min(prompt)) as u64;
            self.kv.register_computed(&mut s.kv, &super::sequence::cache_ids(&s.media, &s.tokens));
            if s.pending() > 0 {
                self.running.insert(i, s); // mid-prefill
                continue;
            }
            if !s.draft.is_empty() {
                if self.verify(&mut s, out, r) {
                    self.retire(s);
                } else {
                    self.running.insert(i.min(self.running.len()), s);
                }
                continue;
            }
            if let Some(p) = s.prompt_scores.take() {
                self.updates.push(Update::prompt_logprobs(&s, p));
            }
            // its sample is at its last output (a row scoring its prompt has one per prompt position)
            let Some(pick) = out.row(r + row.logits - 1) else {
                self.fail(s, "the step returned no output for a row");
                continue;
            };
            // The prompt is computed: fork the other choices first, from the same output.
            for sib in std::mem::take(&mut s.siblings) {
                if let Some(mut sib) = self.fork(&s, sib) {
                    if self.acceptor.accept(&mut sib, &pick, &mut self.updates, &mut self.stats) {
                        self.retire(sib);
                    } else {
                        self.running.push(sib);
                    }
                }
            }
            if self.acceptor.accept(&mut s, &pick, &mut self.updates, &mut self.stats) {
                self.retire(s);
            } else {
                self.running.insert(i.min(self.running.len()), s);
            }
        }
        self.refresh_stats();
    }

    /// A step failed: fail its rows (with `message`), keep serving the others. `restored`: what its transfer
    /// resolved, or None when the transfer failed (its restores never started: they are misses).
    pub fn fail_step(&mut self, plan: StepPlan, restored: Option<&RestoreReport>, message: &str) {
        let report = match restored {
            Some(r) => r.clone(),
            None => RestoreReport::all_failed(&plan.transfers.restores),
        };
        self.transfers_done(plan.transfers, &report);
        self.kv.state_step_failed(&plan.states);
        for row in &plan.rows {
            if let Some(i) = self.index_of(row.slot) {
                let s = self.running.remove(i);
                self.fail(s, message);
            }
        }
        self.refresh_stats();
    }

    /// Fail every row a panic mid-step may have touched: the running rows, and waiting ones that hold blocks or
    /// computed KV (preempted, restoring). Waiting rows that never started keep their place: the pool is rebuilt
    /// under them and they run as if nothing happened.
    pub fn fail_all(&mut self, message: &str) {
        let (untouched, touched): (Vec<Sequence>, Vec<Sequence>) = self.waiting.drain(..).partition(|s| {
            s.kv.blocks.is_empty() && s.kv.restoring.is_none() && s.kv.computed == 0 && s.siblings.is_empty()
        });
        let all: Vec<Sequence> = self.running.drain(..).chain(touched).collect();
        for mut s in all {
            for sib in std::mem::take(&mut s.siblings) {
                self.updates.push(Update::failed(&sib, message));
            }
            self.updates.push(Update::failed(&s, message));
        }
        // A panic mid-step may have dropped a row it held outside the lists: nothing holds blocks now, so start
        // the pool afresh rather than leak them.
        self.kv.reset();
        for mut s in untouched {
            s.kv.cached = 0;
            s.kv.hashes.clear();
            self.waiting.push_back(s);
        }
        self.refresh_stats();
    }

    /// Restores resolved outside a step (a flush's transfers).
    pub fn restores_resolved(&mut self, report: &RestoreReport) {
        let done = self.kv.restores_resolved(report);
        self.finish_restores(done);
    }

    /// A step's transfers were made (`report`: the restores resolved): the rows whose restores all resolved
    /// continue after them, or go back to the queue to compute what did not arrive.
    fn transfers_done(&mut self, transfers: Transfers, report: &RestoreReport) {
        let done = self.kv.transfers_done(transfers, report);
        self.finish_restores(done);
    }

    fn finish_restores(&mut self, done: Vec<RowRestores>) {
        for d in done {
            let Some(i) = self.index_of(d.slot) else { continue };
            if !self.kv.finish_restores(&mut self.running[i].kv, &d) {
                let s = self.running.remove(i);
                self.requeue(s);
            }
        }
    }

    /// A finished row leaves its last, partial block in the prefix cache, then goes.
    fn retire(&mut self, s: Sequence) {
        self.kv.keep_partial(&s.kv, &s.tokens);
        self.free(s);
    }

    /// Fork a choice off `parent`, whose prompt KV is complete. None when it cannot run now: it failed, or went
    /// back to the queue to compute on its own when the pool is out of blocks.
    fn fork(&mut self, parent: &Sequence, mut sib: Sequence) -> Option<Sequence> {
        match self.kv.fork(&parent.kv, &mut sib.kv, sib.prompt_len) {
            Ok(()) => {
                self.kv.fork_state(parent.slot, sib.slot);
                Some(sib)
            }
            Err(ForkError::NoRoom) => {
                self.waiting.push_front(sib);
                None
            }
            Err(ForkError::NoPromptKv) => {
                let message = format!("choice {} cannot fork: its prompt has no KV blocks", sib.choice);
                self.updates.push(Update::failed(&sib, message));
                None
            }
        }
    }

    /// The grammars of the plan's constrained rows that sample this step, borrowed in place so their masks can be
    /// computed while the forward pass runs.
    pub fn grammars(&mut self, plan: &StepPlan) -> Vec<(usize, &mut Constraint)> {
        self.running
            .iter_mut()
            .filter(|s| plan.rows.iter().any(|r| r.samples && r.slot == s.slot))
            .filter_map(|s| s.constraint.as_mut().map(|c| (s.slot, c)))
            .collect()
    }

    /// Count the grammar masks computed beside a forward pass (`ms`: each one's time; 0: it was ready).
    pub fn note_masks(&mut self, ms: &[f64]) {
        for &t in ms.iter().filter(|t| **t > 0.0) {
            note_mask(&mut self.stats, t);
        }
    }
}

/// Score a prompt piece's tokens: output `r + j` is the distribution after position `pos0 + j`, so it scores the
/// prompt token at `pos0 + j + 1` (the last output of the final piece is the first sample, scoring nothing).
fn score_prompt(s: &mut Sequence, row: &super::plan::PlannedRow, out: &StepOutput, r: usize) -> Result<(), String> {
    let Some(scores) = s.prompt_scores.as_mut() else { return Ok(()) };
    let StepOutput::Logits(logits) = out else { return Err("the step returned no logits to score the prompt".into()) };
    for j in 0..row.logits {
        let target = row.pos0 + j + 1;
        if target >= s.prompt_len {
            break;
        }
        let l = logits.get(r + j).ok_or("the step returned too few outputs to score the prompt")?;
        let (lp, top) = crate::sampling::sampler::scored(l, s.tokens[target], scores.top_k);
        scores.logprobs.push(lp);
        scores.top.push(top);
    }
    Ok(())
}
