//! Anthropic's Messages API on the wire: the request, the message it is answered with, its content blocks, usage,
//! stream events and the error body.

use super::de::{opt, parse};
use super::{RequestBody, ShapeError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /v1/messages` and `POST /v1/messages/count_tokens`. The sampling fields are typed here; the structured ones
/// (`system`, `messages`, `tools`, ...) stay JSON and are checked part by part as the request is translated for
/// the chat core (`api::anthropic::request`), so that an error names the exact place
/// (`messages[2].content[0].input`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct MessagesRequest {
    /// Any value: a string names the model (of a model pool); anything else is ignored.
    pub model: Option<Value>,
    /// A string or a list of text blocks.
    pub system: Option<Value>,
    pub messages: Option<Value>,
    /// A positive integer; required, but by `count_tokens`.
    pub max_tokens: Option<Value>,
    #[serde(deserialize_with = "opt")]
    pub temperature: Option<f64>,
    #[serde(deserialize_with = "opt")]
    pub top_p: Option<f64>,
    #[serde(deserialize_with = "opt")]
    pub top_k: Option<i64>,
    pub stop_sequences: Option<Value>,
    #[serde(deserialize_with = "opt")]
    pub metadata: Option<Map<String, Value>>,
    pub tool_choice: Option<Value>,
    pub tools: Option<Value>,
    /// `{"type": "enabled", "budget_tokens": n}`, `adaptive`, `between_tools` or `disabled`.
    pub thinking: Option<Value>,
    /// Its `format`: a JSON schema the answer follows.
    pub output_config: Option<Value>,
    #[serde(deserialize_with = "opt")]
    pub stream: Option<bool>,
    /// hearth's: `false` turns speculative decoding off for this request.
    #[serde(deserialize_with = "opt")]
    pub speculative: Option<bool>,
}

impl MessagesRequest {
    /// The model the request names, if it names one.
    pub fn model(&self) -> Option<&str> {
        self.model.as_ref().and_then(Value::as_str)
    }
}

impl RequestBody for MessagesRequest {
    fn from_body(body: &Value) -> Result<Self, ShapeError> {
        parse(body)
    }
}

/// A content block of an answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// The answer's thought; `signature` is always empty (hearth signs nothing).
    Thinking {
        thinking: String,
        signature: String,
    },
    Text {
        text: String,
    },
    /// A call; `input` is its arguments object (empty in a stream's `content_block_start`).
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct Usage {
    /// Prompt tokens not read from the prompt cache.
    pub input_tokens: usize,
    pub cache_creation_input_tokens: usize,
    pub cache_read_input_tokens: usize,
    pub output_tokens: usize,
    /// hearth's: drafted tokens speculative decoding kept, and did not keep.
    pub accepted_prediction_tokens: usize,
    pub rejected_prediction_tokens: usize,
}

/// The answer (`"type": "message"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    pub model: String,
    pub content: Vec<Block>,
    pub stop_reason: Option<&'static str>,
    pub stop_sequence: Option<String>,
    pub usage: Usage,
}

/// `delta` of a `content_block_delta` event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    TextDelta { text: String },
    ThinkingDelta { thinking: String },
    InputJsonDelta { partial_json: String },
}

/// `delta` of the `message_delta` event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageDelta {
    pub stop_reason: &'static str,
    pub stop_sequence: Option<String>,
}

/// A stream event; its `type` is also the SSE event's name.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    MessageStart { message: Message },
    ContentBlockStart { index: usize, content_block: Block },
    Ping,
    ContentBlockDelta { index: usize, delta: BlockDelta },
    ContentBlockStop { index: usize },
    MessageDelta { delta: MessageDelta, usage: Usage },
    MessageStop,
    Error { error: ErrorObject },
}

/// `/v1/messages/count_tokens`' answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TokenCount {
    pub input_tokens: usize,
}

/// `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: ErrorObject,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorObject {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes() {
        let ev = Event::ContentBlockDelta { index: 2, delta: BlockDelta::InputJsonDelta { partial_json: "{".into() } };
        assert_eq!(
            serde_json::to_value(ev).unwrap(),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{"}})
        );
        let b = Block::ToolUse { id: "toolu_1".into(), name: "f".into(), input: json!({}) };
        assert_eq!(
            serde_json::to_value(b).unwrap(),
            json!({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}})
        );
        assert_eq!(serde_json::to_value(Event::Ping).unwrap(), json!({"type": "ping"}));
    }
}
