//! What happened to rows, as the scheduler reports it: it sends nothing itself; the engine core turns each
//! [`Update`] into an `EngineEvent` on the row's request stream.

use super::sequence::Sequence;
use crate::sampling::Sampled;
use crate::types::{EngineErrorKind, EngineEvent, FinishReason, Usage};
use tokio::sync::mpsc::UnboundedSender;

/// What happened to one choice of a request.
#[derive(Debug)]
pub enum Outcome {
    /// It generated a token.
    Token { choice: usize, sampled: Sampled },
    /// Its request's prompt log-probabilities (one per prompt token after the first).
    PromptLogprobs { logprobs: Vec<f32>, top: Vec<Vec<crate::sampling::TopLogprob>> },
    /// It ended.
    Finished { choice: usize, reason: FinishReason, usage: Usage },
    /// The request failed (`kind`: whose fault, which decides what the client is told).
    Failed { kind: EngineErrorKind, message: String },
}

/// An outcome and the stream of the request it belongs to.
#[derive(Debug)]
pub struct Update {
    pub to: UnboundedSender<EngineEvent>,
    pub outcome: Outcome,
}

impl Update {
    pub fn token(s: &Sequence, sampled: Sampled) -> Self {
        Self { to: s.tx.clone(), outcome: Outcome::Token { choice: s.choice, sampled } }
    }

    /// The request's prompt log-probabilities.
    pub fn prompt_logprobs(s: &Sequence, p: super::sequence::PromptScores) -> Self {
        Self { to: s.tx.clone(), outcome: Outcome::PromptLogprobs { logprobs: p.logprobs, top: p.top } }
    }

    /// The row ended for `reason`, with its usage so far.
    pub fn finished(s: &Sequence, reason: FinishReason) -> Self {
        Self { to: s.tx.clone(), outcome: Outcome::Finished { choice: s.choice, reason, usage: s.usage() } }
    }

    /// The engine's own failure of the row's request.
    pub fn failed(s: &Sequence, message: impl Into<String>) -> Self {
        Self { to: s.tx.clone(), outcome: Outcome::Failed { kind: EngineErrorKind::Internal, message: message.into() } }
    }

    /// The row's grammar cannot go on (`why`): the request's constraint is the cause.
    pub fn grammar_failed(s: &Sequence, why: impl std::fmt::Display) -> Self {
        let message = EngineErrorKind::grammar_message(why);
        Self { to: s.tx.clone(), outcome: Outcome::Failed { kind: EngineErrorKind::GrammarFailed, message } }
    }
}
