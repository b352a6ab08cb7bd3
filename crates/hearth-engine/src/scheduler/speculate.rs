//! Speculation in the scheduler: each decoding row's draft before a step ([`Scheduler::prepare_drafts`], with the
//! draft model's through [`Scheduler::use_model_drafts`]), which of them the step verifies
//! ([`Scheduler::add_drafts`]) and how much of it a row keeps ([`Scheduler::verify`]); the drafts themselves come
//! from `crate::speculative`.

use super::plan::StepOutput;
use super::{Scheduler, Sequence};
use crate::speculative::drafter::DraftAsk;
use crate::speculative::SpecMode;

/// A row that decodes one token a step (its prompt computed, its choices forked).
fn decoding(s: &Sequence) -> bool {
    s.kv.computed >= s.prompt_len && s.pending() == 1 && s.siblings.is_empty()
}

impl Scheduler {
    /// Before a step: each decoding row that speculates takes its draft from its prediction or prompt lookup
    /// (`RowSpec::proposal`); returned are the rows that ask the draft model instead, whose drafts the engine
    /// core hands to [`Scheduler::use_model_drafts`]. No drafts while more rows decode than speculation's row
    /// limit, nor past `max_tokens` or the context.
    pub fn prepare_drafts(&mut self) -> Vec<DraftAsk> {
        for s in &mut self.running {
            s.draft.clear();
        }
        let spec = self.cfg.spec;
        if spec.mode == SpecMode::Off || self.running.iter().all(|s| s.spec.is_none()) {
            return Vec::new();
        }
        if self.running.iter().filter(|s| decoding(s)).count() > spec.max_rows {
            return Vec::new();
        }
        let max_positions = self.acceptor.max_positions();
        let mut asks = Vec::new();
        for s in self.running.iter_mut().filter(|s| decoding(s)) {
            let generated = s.generated();
            let room = s.max_tokens.saturating_sub(generated + 1).min(max_positions.saturating_sub(s.tokens.len() + 1));
            let Some(row_spec) = s.spec.as_mut() else { continue };
            let Some(p) = row_spec.proposal(&s.tokens, generated, room) else { continue };
            s.draft = p.tokens;
            if p.ask_model > 0 {
                asks.push(DraftAsk { slot: s.slot, tokens: s.tokens.clone(), k: p.ask_model });
            }
        }
        asks
    }

    /// The draft model's drafts for `asks` (in order): a row's non-empty one replaces its proposal.
    pub fn use_model_drafts(&mut self, asks: &[DraftAsk], drafts: Vec<Vec<u32>>) {
        for (ask, draft) in asks.iter().zip(drafts) {
            let Some(s) = self.running.iter_mut().find(|s| s.slot == ask.slot) else { continue };
            if draft.is_empty() || !decoding(s) {
                continue;
            }
            if let Some(spec) = s.spec.as_mut() {
                spec.use_model_draft();
            }
            s.draft = draft;
        }
    }

    /// Give the step's decoding rows their drafts: a decoding row's piece `(slot, 1)` becomes `(slot, 1 + k)` for
    /// a draft of k tokens (kept in the row until the step comes back). A draft is cut to what the row's grammar
    /// takes and to the blocks that are free once every planned piece has its own (a draft never preempts a
    /// row); a row without a one-token piece this step drafts nothing.
    pub(super) fn add_drafts(&mut self, pieces: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
        let one_token = |slot: usize| pieces.iter().any(|&(s, n)| s == slot && n == 1);
        for s in &mut self.running {
            if !one_token(s.slot) || !decoding(s) {
                s.draft.clear();
            }
        }
        if self.running.iter().all(|s| s.draft.is_empty()) {
            return pieces;
        }
        let bs = self.kv.block_size();
        let blocks_for = |tokens: usize| tokens.div_ceil(bs);
        let wanted: usize = pieces
            .iter()
            .filter_map(|&(slot, n)| self.index_of(slot).map(|i| (&self.running[i].kv, n)))
            .map(|(kv, n)| blocks_for(kv.computed + n).saturating_sub(kv.blocks.len()))
            .sum();
        let mut free = self.kv.num_free().saturating_sub(wanted);
        pieces
            .into_iter()
            .map(|(slot, n)| {
                let Some(s) = self.index_of(slot).map(|i| &mut self.running[i]).filter(|s| !s.draft.is_empty()) else {
                    return (slot, n);
                };
                let mut draft = std::mem::take(&mut s.draft);
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
        self.kv.register_computed(&mut s.kv, &super::sequence::cache_ids(&s.media, &s.tokens));
        finished
    }
}
