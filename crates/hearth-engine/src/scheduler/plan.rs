//! What one step computes, as plain data: the scheduler builds a [`StepPlan`], the runner executes it and hands a
//! [`StepOutput`] back. No tensors, no device. Also how a step's prompt tokens are cut into pieces
//! ([`plan_pieces`]).

use crate::kv::Transfers;

/// One row (sequence) of a step: its new tokens, where they go, and whether its output is sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRow {
    /// The sequence's id (also its KV slot).
    pub slot: usize,
    /// Position of the first new token (= tokens whose KV is already written).
    pub pos0: usize,
    /// The tokens this step computes for the row.
    pub tokens: Vec<u32>,
    /// The row's block table: position p lives in block `blocks[p / block_size]`.
    pub blocks: Vec<u32>,
    /// The step reaches the row's last token: its logits are sampled (a mid-prompt piece ignores them).
    pub samples: bool,
    /// The row (and any choice that forks off it this step) samples plain greedy: a device may pick the token.
    pub greedy: bool,
    /// The row samples greedily under a grammar (and has no other choices): a device may pick the best token its
    /// mask allows.
    pub masked: bool,
    /// The row's prompt was already computed before this step (it decodes one token, and its draft if any).
    pub decoding: bool,
    /// The trailing positions whose logits the step returns: 1, 1 + the drafted tokens a speculating row
    /// verifies (its last `logits - 1` tokens are the draft), or every token of a prompt piece of a row that
    /// scores its prompt.
    pub logits: usize,
    /// A prompt piece of a row that scores its prompt: its logits go to the host (not `greedy`, not `masked`).
    pub scores_prompt: bool,
    /// Images in the row's prompt (their embeddings replace the placeholder tokens this step computes).
    pub media: Option<std::sync::Arc<crate::vision::RequestMedia>>,
}

/// A step: block transfers and recurrent-state orders first (planned by the KV cache manager), then the rows,
/// packed in this order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepPlan {
    pub rows: Vec<PlannedRow>,
    pub transfers: Transfers,
    /// Hybrid models: what happens to the rows' recurrent states (empty for a model of attention only).
    pub states: crate::recurrent::StateOps,
}

impl StepPlan {
    /// Nothing to run (no rows, no transfers, no state orders).
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.transfers.is_empty() && self.states.is_empty()
    }

    /// Tokens packed into the step.
    pub fn num_tokens(&self) -> usize {
        self.rows.iter().map(|r| r.tokens.len()).sum()
    }

    /// Every row decodes one token (no prompt piece).
    pub fn decode_only(&self) -> bool {
        self.rows.iter().all(|r| r.decoding && r.tokens.len() == 1)
    }

    /// Every row whose output is sampled samples plain greedy (so the device may choose the tokens).
    pub fn greedy_only(&self) -> bool {
        self.rows.iter().all(|r| (!r.samples || r.greedy) && !r.scores_prompt)
    }

    /// Every row whose output is sampled picks greedily, plainly or under a grammar's mask.
    pub fn greedy_or_masked(&self) -> bool {
        self.rows.iter().all(|r| (!r.samples || r.greedy || r.masked) && !r.scores_prompt)
    }

    /// (slot, pos0, new tokens) per row, in packing order.
    pub fn spans(&self) -> Vec<(usize, usize, usize)> {
        self.rows.iter().map(|r| (r.slot, r.pos0, r.tokens.len())).collect()
    }

    /// Output rows (logits, or tokens picked on a device) the step returns: one per row, more for speculating rows.
    pub fn num_outputs(&self) -> usize {
        self.rows.iter().map(|r| r.logits).sum()
    }

    /// Each row's entry in a per-output list (`per_row`: one per planned row), repeated over its outputs.
    pub fn per_output<T: Clone>(&self, per_row: Vec<T>) -> Vec<T> {
        if self.num_outputs() == self.rows.len() {
            return per_row;
        }
        self.rows.iter().zip(per_row).flat_map(|(r, v)| std::iter::repeat_n(v, r.logits)).collect()
    }
}

/// A step's output on the host, one entry per output position (in plan order: one per row, `logits` of them for
/// a speculating row).
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutput {
    /// Each row's logits over the vocabulary.
    Logits(Vec<Vec<f32>>),
    /// Each row's token, chosen on the device (a greedy-only step).
    Ids(Vec<u32>),
}

impl StepOutput {
    pub fn len(&self) -> usize {
        match self {
            StepOutput::Logits(l) => l.len(),
            StepOutput::Ids(i) => i.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Output `r` (an index over output positions, not rows).
    pub(crate) fn row(&self, r: usize) -> Option<Pick<'_>> {
        match self {
            StepOutput::Logits(l) => l.get(r).map(|l| Pick::Logits(l)),
            StepOutput::Ids(ids) => ids.get(r).map(|&i| Pick::Id(i)),
        }
    }
}

/// What a row's sampler reads: its logits, or the token the device already chose.
#[derive(Clone, Copy)]
pub(crate) enum Pick<'a> {
    Logits(&'a [f32]),
    Id(u32),
}

/// Budgets of one step's prompt pieces.
#[derive(Debug, Clone, Copy)]
pub struct PieceBudget {
    /// Prompt tokens of all pieces together.
    pub step_tokens: usize,
    /// Most tokens of one piece while rows decode.
    pub step_tokens_decoding: usize,
    /// Most pieces (0 = no limit).
    pub max_pieces: usize,
}

/// The size of each row's piece this step, for rows given as (slot, arrival, computed, pending) — pending = tokens
/// still to compute before the row's next sample (1 for a decoding row). Decoding rows come first and always get
/// their one token; then prompt pieces oldest first within the budget. While rows decode one piece is capped at
/// `step_tokens_decoding`, so a long prompt advances in small pieces (the running streams' inter-token latency)
/// while short prompts still start together. A piece takes the rest of its prompt when that fits; otherwise it ends
/// at the last multiple of `align` the limit reaches, so piece boundaries (and, with attention run in sub-blocks
/// aligned the same way, every row's arithmetic) never depend on the budget or the batch.
pub fn plan_pieces(rows: &[(usize, u64, usize, usize)], b: PieceBudget, align: usize) -> Vec<(usize, usize)> {
    let mut order: Vec<&(usize, u64, usize, usize)> = rows.iter().collect();
    order.sort_by_key(|&&(_, arrival, _, pending)| (pending > 1, arrival));
    let decoding = order.iter().any(|r| r.3 == 1);
    let cap = if decoding { b.step_tokens_decoding.max(1) } else { usize::MAX };
    let mut budget = b.step_tokens.max(1);
    let mut pieces_left = if b.max_pieces == 0 { usize::MAX } else { b.max_pieces };
    let mut plan = Vec::new();
    for &&(slot, _, computed, pending) in &order {
        if pending > 1 && pieces_left == 0 {
            continue;
        }
        let limit = cap.min(budget);
        let piece = match pending {
            0 => continue,
            1 => 1, // decode rows always fit: the budget only limits prefill
            p if p <= limit => p,
            _ => ((computed + limit) / align * align).saturating_sub(computed),
        };
        if piece == 0 {
            continue; // no aligned piece fits in what is left of the budget
        }
        if pending > 1 {
            budget -= piece; // <= limit <= budget by construction
            pieces_left -= 1;
        }
        plan.push((slot, piece));
    }
    plan
}

/// A piece of `n` tokens from `computed` that ends inside none of `runs` ((first, end) positions): one that would
/// is cut back to the run's start, or, where the run starts at or before `computed`, carried to its end (past the
/// step's budget: a run is computed whole).
pub fn whole_runs(computed: usize, n: usize, runs: impl IntoIterator<Item = (usize, usize)>) -> usize {
    let end = computed + n;
    for (a, b) in runs {
        if a < end && end < b {
            return if a > computed { a - computed } else { b - computed };
        }
    }
    n
}
