//! `/v1/chat/completions` on the wire (and `/apply-template`, which takes the conversation part of it).

use super::common::GenerationParams;
use super::de::{opt, parse};
use super::{RequestBody, ShapeError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What the chat template renders. `messages` and `tools` stay JSON: the template reads any field a client puts
/// there (`name`, `tool_call_id`, `reasoning_content`, ...); `chat::template` checks and normalizes them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Conversation {
    #[serde(deserialize_with = "opt")]
    pub messages: Option<Vec<Value>>,
    #[serde(deserialize_with = "opt")]
    pub tools: Option<Vec<Value>>,
    /// `auto`, `none`, `required` or a named function (checked in `tools`).
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<Value>,
    #[serde(deserialize_with = "opt")]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    #[serde(deserialize_with = "opt")]
    pub add_generation_prompt: Option<bool>,
}

impl Conversation {
    /// Set the template argument `enable_thinking` (templates that think read it).
    pub fn enable_thinking(&mut self, on: bool) {
        self.chat_template_kwargs.get_or_insert_with(Map::new).insert("enable_thinking".into(), Value::Bool(on));
    }
}

impl RequestBody for Conversation {
    fn from_body(body: &Value) -> Result<Self, ShapeError> {
        parse(body)
    }
}

/// The chat-only fields.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ChatOptions {
    /// Wins over `max_tokens`.
    #[serde(deserialize_with = "opt")]
    pub max_completion_tokens: Option<i64>,
    #[serde(deserialize_with = "opt")]
    pub logprobs: Option<bool>,
    #[serde(deserialize_with = "opt")]
    pub top_logprobs: Option<i64>,
}

/// A chat request: three views of one JSON object (see `wire`'s module docs for why not `#[serde(flatten)]`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatCompletionRequest {
    pub params: GenerationParams,
    pub options: ChatOptions,
    pub conversation: Conversation,
}

impl RequestBody for ChatCompletionRequest {
    fn from_body(body: &Value) -> Result<Self, ShapeError> {
        Ok(Self { params: parse(body)?, options: parse(body)?, conversation: parse(body)? })
    }
}

/// One choice of a `chat.completion`.
#[derive(Debug, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: &'static str,
}

#[derive(Debug, Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    /// The model's thought (`<think>...</think>`), for templates that think.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// `null` when the answer is only tool calls.
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// A call in `message.tool_calls`.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, Serialize)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments object as a JSON string.
    pub arguments: String,
}

/// A call in `delta.tool_calls`, in OpenAI's shape: the first delta of a call has its `id`, `type` and
/// `function.name` (and the arguments so far, or all of them), later ones only more `function.arguments` text.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

#[derive(Debug, Clone, Serialize)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

impl ToolCallDelta {
    /// The first delta of a call (with whatever of its arguments is known).
    pub fn first(index: usize, call: ToolCall) -> Self {
        let FunctionCall { name, arguments } = call.function;
        Self {
            index,
            id: Some(call.id),
            kind: Some(call.kind),
            function: FunctionDelta { name: Some(name), arguments },
        }
    }

    /// More of a call's arguments.
    pub fn more(index: usize, arguments: String) -> Self {
        Self { index, id: None, kind: None, function: FunctionDelta { name: None, arguments } }
    }
}

/// One choice of a `chat.completion.chunk`.
#[derive(Debug, Serialize)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

/// A streamed message piece: the role first (with empty content), then content, then `{}` with the finish reason.
#[derive(Debug, Default, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// Chat's log-probabilities: one entry per generated token.
#[derive(Debug, Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
    /// Always `null` (no refusals are generated).
    pub refusal: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ChatTokenLogprob {
    /// The token's bytes as UTF-8 (lossy for part of a multi-byte character); `bytes` are exact.
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<ChatTopLogprob>,
}

#[derive(Debug, Serialize)]
pub struct ChatTopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}
