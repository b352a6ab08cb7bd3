//! OpenAI-compatible routes: `/v1/chat/completions` ([`chat`]), `/v1/completions` ([`completions`]),
//! `/v1/embeddings` ([`embeddings`]), `/v1/models` ([`models`]). (The Responses API is its own peer: `api::responses`.)

pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod logprobs;
pub mod models;

use crate::output::generation::UsageTotals;
use crate::wire::common::CompletionTokensDetails;
use crate::wire::Usage;

/// OpenAI's `usage` of a request's totals.
impl From<UsageTotals> for Usage {
    fn from(u: UsageTotals) -> Self {
        let mut usage = Usage::new(u.prompt_tokens, u.completion_tokens, u.cached_tokens);
        usage.completion_tokens_details = CompletionTokensDetails {
            accepted_prediction_tokens: u.accepted_prediction_tokens,
            rejected_prediction_tokens: u.rejected_prediction_tokens,
        };
        usage
    }
}
