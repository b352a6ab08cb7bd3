//! Speculative decoding, a per-row property of the one engine path: a decoding row that has a draft puts its
//! drafted tokens into the same packed forward pass as every other row's tokens, gets logits at each of them, and
//! keeps the drafted tokens its own sampling agrees with, plus one more token of its own (the scheduler:
//! `scheduler::postprocess`). The KV written for the rejected positions is never read: the row's computed length
//! goes back, and the next step writes over it.
//!
//! Draft sources ([`RowSpec::draft`]): a request's `prediction` (OpenAI's Predicted Outputs: aligned with the
//! output while the output follows it, found again by prompt lookup after it departs), then prompt lookup in the
//! row's own prompt and output ([`ngram`]).
//!
//! Verification is exact: a row samples each position as it would without speculation and a drafted token is kept
//! when the sample equals it. For greedy rows that is the longest prefix the model agrees with; for sampled rows,
//! with a draft that is one token (not a distribution), it is the rejection-sampling rule itself — the draft is
//! kept with probability p(draft), and on a rejection the sample is a draw from p without the draft, renormalised
//! (Leviathan et al. with a one-hot draft distribution). So the output follows the model's distribution exactly.

pub mod ngram;

use serde::{Deserialize, Serialize};

/// Which draft sources a server uses (`--speculative`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SpecMode {
    /// No speculation, not even a request's `prediction`.
    Off,
    /// A request's `prediction` only.
    #[default]
    Prediction,
    /// Prompt lookup in every row's own tokens, and a request's `prediction`.
    Ngram,
}

impl SpecMode {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "prediction" => Ok(Self::Prediction),
            "ngram" => Ok(Self::Ngram),
            _ => Err(format!("`{s}` is not a speculation mode: off, prediction or ngram")),
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Prediction => "prediction",
            Self::Ngram => "ngram",
        }
    }
}

/// The engine's speculation settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecConfig {
    pub mode: SpecMode,
    /// The most drafted tokens a row verifies in one step (`--spec-tokens`).
    pub max_draft: usize,
    /// Rows decode without speculation while more than this many rows decode (a step of many rows is
    /// compute-bound: drafted positions there cost nearly what they could save).
    pub max_rows: usize,
}

impl Default for SpecConfig {
    fn default() -> Self {
        Self { mode: SpecMode::default(), max_draft: DEFAULT_DRAFT, max_rows: DEFAULT_ROWS }
    }
}

/// `--spec-tokens`' default.
pub const DEFAULT_DRAFT: usize = 8;
/// Speculation's default row limit.
pub const DEFAULT_ROWS: usize = 4;
/// The shortest draft a row falls back to after a rejection.
const MIN_DRAFT: usize = 2;

/// A request's part in speculation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecRequest {
    /// `"speculative": false`: this request never speculates.
    pub off: bool,
    /// The tokens of the request's `prediction` (empty: none).
    pub prediction: Vec<u32>,
}

/// One row's speculation: its sources, its draft length (which follows its acceptance), its counts.
#[derive(Debug, Clone)]
pub struct RowSpec {
    prediction: Vec<u32>,
    ngram: bool,
    /// The draft length for the next step.
    k: usize,
    max_k: usize,
    /// Drafted tokens verified so far, and how many were kept.
    pub drafted: usize,
    pub accepted: usize,
}

impl RowSpec {
    /// A row's speculation under `cfg` for a request asking `req`; None when it does not speculate at all.
    pub fn new(cfg: &SpecConfig, req: &SpecRequest) -> Option<Self> {
        let ngram = cfg.mode == SpecMode::Ngram;
        if req.off || cfg.mode == SpecMode::Off || cfg.max_draft == 0 || (!ngram && req.prediction.is_empty()) {
            return None;
        }
        let k = cfg.max_draft.min(4).max(1);
        Some(Self { prediction: req.prediction.clone(), ngram, k, max_k: cfg.max_draft, drafted: 0, accepted: 0 })
    }

    /// Up to `room` tokens to verify after `tokens` (the row's prompt and output; `generated` of them output).
    pub fn draft(&self, tokens: &[u32], generated: usize, room: usize) -> Vec<u32> {
        let k = self.k.min(room);
        if k == 0 {
            return Vec::new();
        }
        if !self.prediction.is_empty() {
            let out = &tokens[tokens.len() - generated..];
            // While the output follows the prediction, what comes next in it; after a departure, where the latest
            // tokens are found in it again.
            let d = if self.prediction.starts_with(out) {
                let g = out.len().min(self.prediction.len());
                self.prediction[g..(g + k).min(self.prediction.len())].to_vec()
            } else {
                ngram::lookup(&self.prediction, tokens, k, false)
            };
            if !d.is_empty() {
                return d;
            }
        }
        if self.ngram {
            return ngram::lookup(tokens, tokens, k, true);
        }
        Vec::new()
    }

    /// A step verified `drafted` tokens and kept `accepted`: the counts grow, and the draft length with them (all
    /// kept: two more, up to the limit; otherwise one more than were kept, at least [`MIN_DRAFT`]).
    pub fn verified(&mut self, drafted: usize, accepted: usize) {
        self.drafted += drafted;
        self.accepted += accepted;
        self.k = if accepted == drafted { self.k + 2 } else { (accepted + 1).max(MIN_DRAFT) }.min(self.max_k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(mode: SpecMode, prediction: Vec<u32>) -> Option<RowSpec> {
        RowSpec::new(&SpecConfig { mode, max_draft: 8, max_rows: 4 }, &SpecRequest { off: false, prediction })
    }

    #[test]
    fn a_prediction_drafts_in_step_with_the_output_and_finds_it_again() {
        let s = spec(SpecMode::Prediction, vec![10, 11, 12, 13, 14, 15]).expect("a prediction speculates");
        // prompt [1, 2], output [10]: the prediction's next tokens (k starts at 4).
        assert_eq!(s.draft(&[1, 2, 10], 1, 8), vec![11, 12, 13, 14]);
        assert_eq!(s.draft(&[1, 2, 10], 1, 2), vec![11, 12], "no more than the room");
        // The output departed (99) and came back (12, 13): found by lookup.
        assert_eq!(s.draft(&[1, 2, 10, 11, 99, 12, 13], 5, 8), vec![14, 15]);
        // Without a prediction and without n-gram mode there is nothing to do.
        assert!(spec(SpecMode::Prediction, vec![]).is_none());
        assert!(spec(SpecMode::Off, vec![1]).is_none());
        let own = spec(SpecMode::Ngram, vec![]).expect("n-gram mode");
        assert_eq!(own.draft(&[5, 6, 7, 8, 5, 6], 2, 8), vec![7, 8, 5, 6]);
    }

    #[test]
    fn the_draft_length_follows_acceptance() {
        let mut s = spec(SpecMode::Ngram, vec![]).unwrap();
        assert_eq!(s.k, 4);
        s.verified(4, 4);
        assert_eq!(s.k, 6);
        s.verified(6, 6);
        s.verified(8, 8);
        assert_eq!(s.k, 8, "up to the limit");
        s.verified(8, 0);
        assert_eq!(s.k, MIN_DRAFT);
        s.verified(2, 1);
        assert_eq!((s.k, s.drafted, s.accepted), (2, 28, 19));
    }
}
