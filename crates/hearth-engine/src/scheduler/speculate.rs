//! Speculation in the scheduler: which decoding rows verify a draft this step ([`Scheduler::add_drafts`]) and how
//! much of it a row keeps ([`Scheduler::verify`]); the drafts themselves come from `crate::speculative`.

use super::plan::StepOutput;
use super::{Scheduler, Sequence};
use crate::speculative::SpecMode;

impl Scheduler {
    /// Give the step's decoding rows their drafts: a decoding row's piece `(slot, 1)` becomes `(slot, 1 + k)` for
    /// a draft of k tokens (kept in the row until the step comes back). No draft while more rows decode than
    /// speculation's row limit, past `max_tokens` or the context, beyond what the row's grammar takes, or beyond
    /// the blocks that are free once every planned piece has its own (a draft never preempts a row).
    pub(super) fn add_drafts(&mut self, pieces: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
        for s in &mut self.running {
            s.draft.clear();
        }
        let spec = self.cfg.spec;
        if spec.mode == SpecMode::Off || self.running.iter().all(|s| s.spec.is_none()) {
            return pieces;
        }
        let decoding = |s: &Sequence| s.kv.computed >= s.prompt_len && s.pending() == 1 && s.siblings.is_empty();
        let rows: Vec<Option<usize>> = pieces.iter().map(|&(slot, _)| self.index_of(slot)).collect();
        let n_decoding = rows.iter().flatten().filter(|&&i| decoding(&self.running[i])).count();
        if n_decoding > spec.max_rows {
            return pieces;
        }
        let bs = self.kv.block_size();
        let blocks_for = |tokens: usize| tokens.div_ceil(bs);
        let wanted: usize = pieces
            .iter()
            .zip(&rows)
            .filter_map(|(&(_, n), i)| i.map(|i| &self.running[i].kv).map(|kv| (kv, n)))
            .map(|(kv, n)| blocks_for(kv.computed + n).saturating_sub(kv.blocks.len()))
            .sum();
        let mut free = self.kv.num_free().saturating_sub(wanted);
        let max_positions = self.acceptor.max_positions();
        pieces
            .into_iter()
            .zip(rows)
            .map(|((slot, n), i)| {
                let Some(s) = i.map(|i| &mut self.running[i]).filter(|s| n == 1 && decoding(s)) else {
                    return (slot, n);
                };
                let generated = s.generated();
                let room =
                    s.max_tokens.saturating_sub(generated + 1).min(max_positions.saturating_sub(s.tokens.len() + 1));
                let Some(row_spec) = s.spec.as_mut() else { return (slot, n) };
                let mut draft = row_spec.draft(&s.tokens, generated, room);
                if let Some(c) = s.constraint.as_mut() {
                    draft.truncate(c.valid_prefix(&draft));
                }
                // The blocks the row holds or gets for its own token, and as many more as are free.
                let held = s.kv.blocks.len().max(blocks_for(s.kv.computed + 1));
                let fits = (held + free) * bs - s.kv.computed - 1;
                draft.truncate(fits);
                free -= blocks_for(s.kv.computed + 1 + draft.len()).saturating_sub(held);
                let k = draft.len();
                s.draft = draft;
                (slot, 1 + k)
            })
            .collect()
    }

    /// A speculating row's step came back (its outputs start at `first`): sample each position in order as the
    /// row would without speculation; a sample equal to the drafted token keeps that token (its KV, written this
    /// step, counts) and goes on to the next position; the first sample that differs, or the last position's, is
    /// the row's own next token. Returns whether the row finished.
    pub(super) fn verify(&mut self, s: &mut Sequence, out: &StepOutput, first: usize) -> bool {
        let draft = std::mem::take(&mut s.draft);
        // Counted as they are decided, so a row that finishes in this step reports them in its usage.
        let count = |s: &mut Sequence, drafted: usize, kept: usize| {
            if let Some(spec) = s.spec.as_mut() {
                spec.count(drafted, kept);
            }
        };
        count(s, draft.len(), 0);
        let mut kept = 0;
        let mut finished = false;
        for i in 0..=draft.len() {
            let Some(pick) = out.row(first + i) else { break };
            let before = s.tokens.len();
            if i > 0 {
                count(s, 0, 1);
            }
            if self.acceptor.accept(s, &pick, &mut self.updates, &mut self.stats) {
                finished = true;
                break;
            }
            if i == draft.len() || s.tokens.get(before) != Some(&draft[i]) {
                break;
            }
            kept += 1;
            s.kv.computed += 1;
        }
        if let Some(spec) = s.spec.as_mut() {
            spec.adapt(draft.len(), kept);
        }
        self.stats.spec_drafted_total += draft.len() as u64;
        self.stats.spec_accepted_total += kept as u64;
        self.kv.register_computed(&mut s.kv, &s.tokens);
        finished
    }
}
