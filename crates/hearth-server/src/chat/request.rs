//! [`ChatRequest`]: a chat request in no API's shape, and [`FieldNames`]: how the API it came from spells the fields
//! the chat core checks.

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
    /// The names the request's API gives the fields the core checks, which its errors use.
    pub fields: FieldNames,
    /// Return each generated token's log-probability...
    pub logprobs: bool,
    /// ... with this many alternatives (0 to 20; above 0 only with `logprobs`).
    pub top_logprobs: Option<i64>,
}

impl ChatRequest {
    /// A request of this conversation and these parameters, whose API names the core's fields `fields`, without
    /// log-probabilities.
    pub fn new(conversation: Conversation, params: GenerationParams, fields: FieldNames) -> Self {
        Self { conversation, params, fields, logprobs: false, top_logprobs: None }
    }
}

/// How one API spells the fields the chat core checks after the API's translation, so that every error names the
/// field as the client sent it (`param` and message alike). The core's own names are Chat Completions'
/// ([`FieldNames::CHAT`]); each other API declares its table beside its translation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldNames {
    /// The length limit (`params.max_tokens`).
    pub max_tokens: &'static str,
    /// The output format (`params.response_format`).
    pub response_format: &'static str,
    /// The conversation (`conversation.messages`), whose text's length is bounded.
    pub messages: &'static str,
    /// Where a tool's parameter schema sits under `tools[i]`.
    pub tool_schema: &'static str,
}

impl FieldNames {
    /// Chat Completions' names, which are the core's.
    pub const CHAT: FieldNames = FieldNames {
        max_tokens: "max_tokens",
        response_format: "response_format",
        messages: "messages",
        tool_schema: "function.parameters",
    };

    /// The parameter schema of the tool at `i`: `tools[i].function.parameters` in Chat Completions.
    pub fn tool_schema_at(&self, i: usize) -> String {
        format!("tools[{i}].{}", self.tool_schema)
    }
}
