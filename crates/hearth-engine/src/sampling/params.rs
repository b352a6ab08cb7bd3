//! Sampling parameters of one request, validated.

use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1 = off.
    pub top_p: f32,
    /// 0 = off.
    pub min_p: f32,
    /// 1 = off. HF/llama.cpp style: positive logits divided, negative multiplied.
    pub repetition_penalty: f32,
    /// OpenAI style: subtracted once from every token already present.
    pub presence_penalty: f32,
    /// OpenAI style: subtracted per occurrence.
    pub frequency_penalty: f32,
    /// How many of the most recent context tokens the penalties look at; `None` = the whole context.
    pub penalty_last_n: Option<usize>,
    /// Added to the logits of these ids before anything else.
    pub logit_bias: Vec<(u32, f32)>,
    /// XTC ("exclude top choices"): probability of applying it at a step, 0 = off.
    pub xtc_probability: f32,
    /// XTC: tokens at or above this probability are candidates for exclusion.
    pub xtc_threshold: f32,
    pub seed: Option<u64>,
    /// Return log-probabilities with this many top alternatives (0 = only the chosen token's).
    pub logprobs: Option<usize>,
    /// Return every prompt token's log-probability (after the first) with this many top alternatives: the prompt
    /// is computed in full (no prompt-cache hit) with logits at every position.
    #[serde(default)]
    pub prompt_logprobs: Option<usize>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: Some(64),
            logit_bias: Vec::new(),
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            seed: None,
            logprobs: None,
            prompt_logprobs: None,
        }
    }
}

/// The most top alternatives a request may ask for (OpenAI allows 20).
pub const MAX_TOP_LOGPROBS: usize = 20;

impl SamplingParams {
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Greedy with nothing that needs the logits on the host (no bias, penalties or logprobs): the token is the
    /// raw logits' argmax, which a GPU step can compute on the device.
    pub fn is_plain_greedy(&self) -> bool {
        self.is_greedy()
            && self.logit_bias.is_empty()
            && self.repetition_penalty == 1.0
            && self.presence_penalty == 0.0
            && self.frequency_penalty == 0.0
            && self.logprobs.is_none()
    }

    /// Check ranges; `vocab` bounds the logit_bias ids.
    pub fn validate(&self, vocab: usize) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidRequest(m));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad(format!("temperature must be >= 0, got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad(format!("repetition_penalty must be > 0, got {}", self.repetition_penalty));
        }
        for (name, v) in [("presence_penalty", self.presence_penalty), ("frequency_penalty", self.frequency_penalty)] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(format!("{name} must be in [-2, 2], got {v}"));
            }
        }
        if !(0.0..=1.0).contains(&self.xtc_probability) || !(0.0..=1.0).contains(&self.xtc_threshold) {
            return bad("xtc_probability and xtc_threshold must be in [0, 1]".into());
        }
        for &(id, b) in &self.logit_bias {
            if id as usize >= vocab {
                return bad(format!("logit_bias token id {id} is outside the vocabulary (size {vocab})"));
            }
            if !(-100.0..=100.0).contains(&b) {
                return bad(format!("logit_bias value for token {id} must be in [-100, 100], got {b}"));
            }
        }
        if self.logprobs.is_some_and(|n| n > MAX_TOP_LOGPROBS) {
            return bad(format!("top_logprobs must be at most {MAX_TOP_LOGPROBS}"));
        }
        if self.prompt_logprobs.is_some_and(|n| n > MAX_TOP_LOGPROBS) {
            return bad(format!("prompt logprobs may list at most {MAX_TOP_LOGPROBS} alternatives"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_rejects_out_of_range() {
        let ok = SamplingParams::default();
        assert!(ok.validate(10).is_ok());
        for p in [
            SamplingParams { temperature: -1.0, ..ok.clone() },
            SamplingParams { top_p: 0.0, ..ok.clone() },
            SamplingParams { min_p: 1.5, ..ok.clone() },
            SamplingParams { repetition_penalty: 0.0, ..ok.clone() },
            SamplingParams { presence_penalty: 3.0, ..ok.clone() },
            SamplingParams { logit_bias: vec![(10, 1.0)], ..ok.clone() },
            SamplingParams { logit_bias: vec![(1, 101.0)], ..ok.clone() },
            SamplingParams { logprobs: Some(21), ..ok.clone() },
            SamplingParams { temperature: f32::NAN, ..ok.clone() },
        ] {
            assert!(p.validate(10).is_err(), "{p:?}");
        }
    }
}
