//! Speculative decoding, a per-row property of the one engine path: a decoding row that has a draft puts its
//! drafted tokens into the same packed forward pass as every other row's tokens, gets logits at each of them, and
//! keeps the drafted tokens its own sampling agrees with, plus one more token of its own (the scheduler:
//! `scheduler::postprocess`). The KV written for the rejected positions is never read: the row's computed length
//! goes back, and the next step writes over it.
//!
//! Draft sources ([`RowSpec::draft`]): a request's `prediction` (OpenAI's Predicted Outputs: aligned with the
//! output while the output follows it, found again by prompt lookup after it departs), prompt lookup in the
//! row's own prompt and output ([`ngram`]), and a draft model ([`drafter`]: a second, smaller model with the same
//! tokenizer, asked for the rows whose other sources found no strong match).
//!
//! Verification is exact: a row samples each position as it would without speculation and a drafted token is kept
//! when the sample equals it. For greedy rows that is the longest prefix the model agrees with; for sampled rows,
//! with a draft that is one token (not a distribution), it is the rejection-sampling rule itself — the draft is
//! kept with probability p(draft), and on a rejection the sample is a draw from p without the draft, renormalised
//! (Leviathan et al. with a one-hot draft distribution). So the output follows the model's distribution exactly.

pub mod drafter;
pub mod ngram;

use serde::{Deserialize, Serialize};

/// Which draft sources a server uses (`--speculative`, whose default is `auto`; an engine built without saying
/// does not speculate). A request's `prediction` is a source in every mode but `off`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SpecMode {
    /// No speculation, not even a request's `prediction`.
    #[default]
    Off,
    /// A request's `prediction` only (with the row's own tokens beside it).
    Prediction,
    /// Prompt lookup in every row's own tokens.
    Ngram,
    /// The draft model (`--draft-model`, which this mode needs).
    Draft,
    /// Prompt lookup, and the draft model when one is loaded for the rows where lookup finds no strong match.
    Auto,
}

impl SpecMode {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "prediction" => Ok(Self::Prediction),
            "ngram" => Ok(Self::Ngram),
            "draft" => Ok(Self::Draft),
            "auto" => Ok(Self::Auto),
            _ => Err(format!("`{s}` is not a speculation mode: auto, ngram, draft, prediction or off")),
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Prediction => "prediction",
            Self::Ngram => "ngram",
            Self::Draft => "draft",
            Self::Auto => "auto",
        }
    }

    /// Whether rows look their own tokens up.
    fn lookup(self) -> bool {
        matches!(self, Self::Ngram | Self::Auto)
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
    /// A draft model is loaded (the engine sets it from what it was started with).
    pub draft_model: bool,
}

impl Default for SpecConfig {
    fn default() -> Self {
        Self { mode: SpecMode::default(), max_draft: DEFAULT_DRAFT, max_rows: DEFAULT_ROWS, draft_model: false }
    }
}

impl SpecConfig {
    /// Whether rows ask the draft model.
    pub fn uses_draft_model(&self) -> bool {
        self.draft_model && matches!(self.mode, SpecMode::Draft | SpecMode::Auto)
    }

    /// A configuration the engine can run: `draft` mode needs a draft model.
    pub fn check(&self) -> Result<(), String> {
        if self.mode == SpecMode::Draft && !self.draft_model {
            return Err("--speculative draft needs a draft model (--draft-model)".into());
        }
        Ok(())
    }
}

/// `--spec-tokens`' default: the longest a row's draft grows.
pub const DEFAULT_DRAFT: usize = 16;
/// A row's first draft length (at most `--spec-tokens`), and the shortest it shrinks to.
const START_K: usize = 8;
const MIN_K: usize = 2;
/// A prompt-lookup match at least this long drafts instead of the draft model (in `auto` mode): a long match in
/// the row's own tokens is text being repeated, which lookup drafts for free.
pub const STRONG_MATCH: usize = 5;
/// Speculation's default row limit.
pub const DEFAULT_ROWS: usize = 4;
/// Drafted tokens kept per verifying step (a moving average) below which a row stops drafting for a while: a
/// step that verifies a draft costs more than a plain one (on a CPU at 1.5B, 2-2.5× for 2-9 positions), so a
/// row that keeps less than this gains nothing.
const MIN_GAIN: f32 = 1.0;
/// Steps a row first pauses after its average fell below [`MIN_GAIN`]; each pause in a row doubles it, up to
/// [`MAX_PAUSE`].
const FIRST_PAUSE: u32 = 4;
/// A row's average to start with, and after a pause: one step that keeps nothing pauses it (again).
const START_GAIN: f32 = 1.2 * MIN_GAIN;
const MAX_PAUSE: u32 = 64;

/// A request's part in speculation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecRequest {
    /// `"speculative": false`: this request never speculates.
    pub off: bool,
    /// The tokens of the request's `prediction` (empty: none).
    pub prediction: Vec<u32>,
}

/// A row's draft for one step before the draft model is asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proposal {
    /// From the prediction or prompt lookup (maybe empty).
    pub tokens: Vec<u32>,
    /// Tokens to ask the draft model for instead (0: keep `tokens`).
    pub ask_model: usize,
}

/// One row's speculation: its sources, where its output stands in its prediction, how well its drafts fare, its
/// counts.
#[derive(Debug, Clone)]
pub struct RowSpec {
    prediction: Vec<u32>,
    ngram: bool,
    /// It asks the draft model where its other sources find no strong match.
    model: bool,
    max_k: usize,
    /// This row's draft length now: it grows by 2 after a step that kept all of a full-length draft, and shrinks by
    /// 1 after one that rejected some (between [`MIN_K`] and `max_k`).
    k: usize,
    /// Where the output stands in the prediction (after the last drafted token it kept), and where the draft
    /// being verified starts in it (None: the draft is not the prediction's).
    cursor: usize,
    from: Option<usize>,
    /// Drafted tokens kept per verifying step, a moving average.
    gain: f32,
    /// Steps left without drafts, and the next pause's length.
    paused: u32,
    next_pause: u32,
    /// Drafted tokens verified so far, and how many were kept.
    pub drafted: usize,
    pub accepted: usize,
}

impl RowSpec {
    /// A row's speculation under `cfg` for a request asking `req`; None when it does not speculate at all.
    pub fn new(cfg: &SpecConfig, req: &SpecRequest) -> Option<Self> {
        let ngram = cfg.mode.lookup();
        let model = cfg.uses_draft_model();
        if req.off || cfg.mode == SpecMode::Off || cfg.max_draft == 0 || (!ngram && !model && req.prediction.is_empty())
        {
            return None;
        }
        Some(Self {
            prediction: req.prediction.clone(),
            ngram,
            model,
            max_k: cfg.max_draft,
            k: cfg.max_draft.min(START_K),
            cursor: 0,
            from: None,
            gain: START_GAIN,
            paused: 0,
            next_pause: FIRST_PAUSE,
            drafted: 0,
            accepted: 0,
        })
    }

    /// Up to `room` tokens to verify after `tokens` (the row's prompt and output; `generated` of them output).
    /// From the prediction: its next tokens while the output follows it, else the tokens after where the latest
    /// ones occur in it (nearest its cursor). From the row's own tokens (n-gram mode, or any row with a
    /// prediction: its prompt holds what an edit repeats, its output what the edit changed so far): the tokens
    /// after the latest occurrence of its latest ones. The longer match wins (the prediction on a tie). Nothing
    /// while the row pauses. The draft model is not asked here: see [`RowSpec::proposal`].
    pub fn draft(&mut self, tokens: &[u32], generated: usize, room: usize) -> Vec<u32> {
        self.proposal(tokens, generated, room).map(|p| p.tokens).unwrap_or_default()
    }

    /// What [`RowSpec::draft`] drafts, and whether the draft model should be asked instead (with how many tokens
    /// at most). None: no draft this step (no room, or the row pauses).
    pub fn proposal(&mut self, tokens: &[u32], generated: usize, room: usize) -> Option<Proposal> {
        self.from = None;
        let k = self.k.min(room);
        if k == 0 {
            return None;
        }
        if self.paused > 0 {
            self.paused -= 1;
            return None;
        }
        let mut best: Option<(Vec<u32>, Option<usize>, usize)> = None;
        if !self.prediction.is_empty() {
            let out = &tokens[tokens.len() - generated..];
            best = if self.prediction.starts_with(out) {
                let g = out.len().min(self.prediction.len());
                Some((self.prediction[g..(g + k).min(self.prediction.len())].to_vec(), Some(g), usize::MAX))
            } else {
                ngram::follow(&self.prediction, tokens, self.cursor, k).map(|(d, from, n)| (d, Some(from), n))
            };
        }
        if self.ngram || !self.prediction.is_empty() {
            if let Some((d, n)) = ngram::lookup(tokens, k) {
                if best.as_ref().is_none_or(|b| n > b.2 || b.0.is_empty()) {
                    best = Some((d, None, n));
                }
            }
        }
        let (tokens, from, n) = best.unwrap_or_default();
        self.from = from;
        let ask_model = self.model && (tokens.is_empty() || n < STRONG_MATCH);
        Some(Proposal { tokens, ask_model: if ask_model { k } else { 0 } })
    }

    /// The draft model's draft replaces the proposal's (it is not the prediction's).
    pub fn use_model_draft(&mut self) {
        self.from = None;
    }

    /// Count `drafted` more tokens verified and `kept` more of them kept.
    pub fn count(&mut self, drafted: usize, kept: usize) {
        self.drafted += drafted;
        self.accepted += kept;
    }

    /// A step verified `drafted` tokens and kept `kept`: the cursor moves past them, and a row whose drafts keep
    /// too little on average pauses (4 steps, then 8, ... 64 while it keeps failing).
    pub fn adapt(&mut self, drafted: usize, kept: usize) {
        if drafted == 0 {
            return;
        }
        if let Some(from) = self.from.take() {
            self.cursor = from + kept;
        }
        if kept == drafted && drafted >= self.k {
            self.k = (self.k + 2).min(self.max_k);
        } else if kept < drafted {
            self.k = self.k.saturating_sub(1).max(MIN_K.min(self.max_k));
        }
        self.gain = 0.7 * self.gain + 0.3 * kept as f32;
        if self.gain < MIN_GAIN {
            self.paused = self.next_pause;
            self.next_pause = (self.next_pause * 2).min(MAX_PAUSE);
            self.gain = START_GAIN;
        } else if kept > 0 {
            self.next_pause = FIRST_PAUSE;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(mode: SpecMode, prediction: Vec<u32>) -> Option<RowSpec> {
        RowSpec::new(&SpecConfig { mode, max_draft: 4, ..Default::default() }, &SpecRequest { off: false, prediction })
    }

    #[test]
    fn a_prediction_drafts_in_step_with_the_output_and_finds_it_again() {
        let mut s = spec(SpecMode::Prediction, vec![10, 11, 12, 13, 14, 15, 16]).expect("a prediction speculates");
        // prompt [1, 2], output [10]: the prediction's next tokens.
        assert_eq!(s.draft(&[1, 2, 10], 1, 8), vec![11, 12, 13, 14]);
        assert_eq!(s.draft(&[1, 2, 10], 1, 2), vec![11, 12], "no more than the room");
        s.adapt(2, 2);
        // The output departed (99 for 13) and came back (14): found again after the cursor.
        assert_eq!(s.draft(&[1, 2, 10, 11, 12, 99, 14], 5, 8), vec![15, 16]);
        // Without a prediction and without n-gram mode there is nothing to do.
        assert!(spec(SpecMode::Prediction, vec![]).is_none());
        assert!(spec(SpecMode::Off, vec![1]).is_none());
        let mut own = spec(SpecMode::Ngram, vec![]).expect("n-gram mode");
        assert_eq!(own.draft(&[5, 6, 7, 8, 5, 6, 7], 3, 8), vec![8, 5, 6, 7]);
    }

    #[test]
    fn a_row_whose_drafts_fail_pauses_longer_each_time() {
        let mut s = spec(SpecMode::Ngram, vec![]).unwrap();
        let tokens = [5, 6, 7, 8, 5, 6, 7];
        let drafting = |s: &mut RowSpec| !s.draft(&tokens, 3, 8).is_empty();
        assert!(drafting(&mut s));
        s.adapt(4, 4);
        s.adapt(4, 0);
        assert!(drafting(&mut s), "one bad step after good ones");
        s.adapt(4, 0);
        assert_eq!((0..4).filter(|_| !drafting(&mut s)).count(), 4, "a pause of 4 steps");
        assert!(drafting(&mut s));
        s.adapt(4, 0);
        assert_eq!((0..9).filter(|_| !drafting(&mut s)).count(), 8, "one bad step after a pause: twice as long");
        s.count(4, 3);
        s.count(2, 0);
        assert_eq!((s.drafted, s.accepted), (6, 3));
    }

    #[test]
    fn a_draft_grows_while_it_is_all_kept_and_shrinks_after_a_rejection() {
        let cfg = SpecConfig { mode: SpecMode::Prediction, max_draft: 12, ..Default::default() };
        let mut s = RowSpec::new(&cfg, &SpecRequest { off: false, prediction: (100..200).collect() }).unwrap();
        let len = |s: &mut RowSpec, out: usize| s.draft(&(100..100 + out as u32).collect::<Vec<_>>(), out, 64).len();
        assert_eq!(len(&mut s, 1), START_K, "a row starts at {START_K}");
        s.adapt(8, 8);
        assert_eq!(len(&mut s, 10), 10, "all kept: 2 more");
        s.adapt(10, 10);
        s.adapt(12, 12);
        assert_eq!(len(&mut s, 20), 12, "never past --spec-tokens");
        s.adapt(12, 5);
        assert_eq!(len(&mut s, 30), 11, "a rejection: 1 less");
        assert_eq!(len(&mut s, 30), 11, "no step verified: unchanged");
        assert_eq!(s.draft(&(100..195).collect::<Vec<_>>(), 95, 64).len(), 5, "the prediction's end");
    }
}
