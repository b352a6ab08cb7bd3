//! [`ChatRequest`]: a chat request in no API's shape.

use crate::wire::chat::Conversation;
use crate::wire::GenerationParams;

/// A chat request in no API's shape: what every chat API translates its typed body into, and all the chat core
/// reads. The messages and tools stay JSON objects in the shape chat templates read (OpenAI's messages and function
/// tools), because a template reads whatever fields a message has; `template` checks the parts the server relies on.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// What the chat template renders: the messages, the tools and `tool_choice`, the template's arguments.
    pub conversation: Conversation,
    /// Sampling, the length limit, stop strings, the output constraint, `n`, streaming.
    pub params: GenerationParams,
    /// The field the length limit (`params.max_tokens`) came as, which its errors name (Chat Completions'
    /// `max_completion_tokens` or `max_tokens`).
    pub max_tokens_field: &'static str,
    /// Return each generated token's log-probability...
    pub logprobs: bool,
    /// ... with this many alternatives (0 to 20; above 0 only with `logprobs`).
    pub top_logprobs: Option<i64>,
}

impl ChatRequest {
    /// A request of this conversation and these parameters, without log-probabilities.
    pub fn new(conversation: Conversation, params: GenerationParams) -> Self {
        Self { conversation, params, max_tokens_field: "max_tokens", logprobs: false, top_logprobs: None }
    }
}
