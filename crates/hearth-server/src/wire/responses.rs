//! OpenAI's Responses API on the wire: the request, the response object, its output items, usage and stream events.

use super::de::{opt, parse};
use super::{RequestBody, ShapeError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /v1/responses`. The flags are typed here; the rest stays JSON: the structured fields (`input`, `tools`,
/// `text`, ...) are checked part by part as the request is translated for the chat core
/// (`api::responses::request`), so that an error names the exact place (`input[3].content[0]`), and the fields a
/// response repeats are repeated as they were sent.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ResponsesRequest {
    /// Any value: a string names the model (of a model pool); anything else is ignored.
    pub model: Option<Value>,
    /// A string, or a list of items (messages, `function_call`, `function_call_output`, `reasoning`).
    pub input: Option<Value>,
    pub instructions: Option<Value>,
    pub previous_response_id: Option<Value>,
    /// Not served: `conversation`, `background` and `prompt` are refused when set.
    pub conversation: Option<Value>,
    pub background: Option<Value>,
    pub prompt: Option<Value>,
    pub temperature: Option<Value>,
    pub top_p: Option<Value>,
    pub max_output_tokens: Option<Value>,
    pub parallel_tool_calls: Option<Value>,
    #[serde(deserialize_with = "opt")]
    pub top_logprobs: Option<i64>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    /// Its `format`: text, a JSON object or a JSON schema.
    pub text: Option<Value>,
    /// Its `effort` turns thinking on or off.
    pub reasoning: Option<Value>,
    #[serde(deserialize_with = "opt")]
    pub stream: Option<bool>,
    #[serde(deserialize_with = "opt")]
    pub store: Option<bool>,
    /// hearth's: `false` turns speculative decoding off for this request.
    #[serde(deserialize_with = "opt")]
    pub speculative: Option<bool>,
    #[serde(deserialize_with = "opt")]
    pub metadata: Option<Map<String, Value>>,
    pub user: Option<Value>,
}

impl ResponsesRequest {
    /// The model the request names, if it names one.
    pub fn model(&self) -> Option<&str> {
        self.model.as_ref().and_then(Value::as_str)
    }
}

impl RequestBody for ResponsesRequest {
    fn from_body(body: &Value) -> Result<Self, ShapeError> {
        parse(body)
    }
}

/// An `output_text` content part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputText {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
    pub annotations: Vec<Value>,
    pub logprobs: Vec<Value>,
}

impl OutputText {
    pub fn new(text: String) -> Self {
        Self { kind: "output_text", text, annotations: Vec::new(), logprobs: Vec::new() }
    }
}

/// A `reasoning_text` content part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReasoningText {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
}

/// An output item.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    Reasoning {
        id: String,
        summary: Vec<Value>,
        content: Vec<ReasoningText>,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<&'static str>,
    },
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<OutputText>,
    },
    FunctionCall {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        status: &'static str,
    },
}

impl OutputItem {
    pub fn reasoning(id: String, text: Option<String>) -> Self {
        let content = text.map(|text| vec![ReasoningText { kind: "reasoning_text", text }]).unwrap_or_default();
        OutputItem::Reasoning { id, summary: Vec::new(), content, status: None }
    }

    /// A message with its text (None: just begun, no content part yet).
    pub fn message(id: String, text: Option<String>, status: &'static str) -> Self {
        let content = text.map(|t| vec![OutputText::new(t)]).unwrap_or_default();
        OutputItem::Message { id, status, role: "assistant", content }
    }

    /// Mark the last item of an answer the length limit cut incomplete; a function call whose arguments are a whole
    /// JSON object completed before the cut and stays `completed`.
    pub fn cut(&mut self) {
        match self {
            OutputItem::Reasoning { status, .. } => *status = Some("incomplete"),
            OutputItem::FunctionCall { arguments, .. }
                if serde_json::from_str::<serde_json::Value>(arguments).is_ok_and(|v| v.is_object()) => {}
            OutputItem::Message { status, .. } | OutputItem::FunctionCall { status, .. } => *status = "incomplete",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct InputTokensDetails {
    pub cached_tokens: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: usize,
    /// Drafted tokens speculative decoding kept, and did not keep (as in Chat Completions' usage).
    pub accepted_prediction_tokens: usize,
    pub rejected_prediction_tokens: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub input_tokens: usize,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: usize,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IncompleteDetails {
    pub reason: &'static str,
}

/// The response object (`"object": "response"`); `echo` holds the request's fields it repeats.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResponseObject {
    pub id: String,
    pub object: &'static str,
    pub created_at: u64,
    pub status: &'static str,
    pub error: Option<Value>,
    pub incomplete_details: Option<IncompleteDetails>,
    pub model: String,
    pub output: Vec<OutputItem>,
    pub usage: Option<Usage>,
    #[serde(flatten)]
    pub echo: Map<String, Value>,
}

/// `DELETE /v1/responses/{id}`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Deleted {
    pub id: String,
    pub object: &'static str,
    pub deleted: bool,
}

/// Where an event is: its item's id and output index (content events add their `content_index`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct At {
    pub item_id: String,
    pub output_index: usize,
}

/// A stream event; its `type` is also the SSE event's name.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "response.created")]
    Created { response: ResponseObject },
    #[serde(rename = "response.in_progress")]
    InProgress { response: ResponseObject },
    #[serde(rename = "response.output_item.added")]
    ItemAdded { output_index: usize, item: OutputItem },
    #[serde(rename = "response.content_part.added")]
    PartAdded {
        #[serde(flatten)]
        at: At,
        content_index: usize,
        part: OutputText,
    },
    #[serde(rename = "response.output_text.delta")]
    TextDelta {
        #[serde(flatten)]
        at: At,
        content_index: usize,
        delta: String,
        logprobs: Vec<Value>,
    },
    #[serde(rename = "response.output_text.done")]
    TextDone {
        #[serde(flatten)]
        at: At,
        content_index: usize,
        text: String,
        logprobs: Vec<Value>,
    },
    #[serde(rename = "response.content_part.done")]
    PartDone {
        #[serde(flatten)]
        at: At,
        content_index: usize,
        part: OutputText,
    },
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningDelta {
        #[serde(flatten)]
        at: At,
        content_index: usize,
        delta: String,
    },
    #[serde(rename = "response.reasoning_text.done")]
    ReasoningDone {
        #[serde(flatten)]
        at: At,
        content_index: usize,
        text: String,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgumentsDelta {
        #[serde(flatten)]
        at: At,
        delta: String,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    ArgumentsDone {
        #[serde(flatten)]
        at: At,
        name: String,
        arguments: String,
    },
    #[serde(rename = "response.output_item.done")]
    ItemDone { output_index: usize, item: OutputItem },
    #[serde(rename = "response.completed")]
    Completed { response: ResponseObject },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: ResponseObject },
    #[serde(rename = "error")]
    Error { code: Option<&'static str>, message: String, param: Option<String> },
}

/// An event with its place in the stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sequenced {
    #[serde(flatten)]
    pub event: Event,
    pub sequence_number: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes() {
        let at = At { item_id: "msg_1".into(), output_index: 0 };
        let ev = Sequenced {
            event: Event::TextDelta { at, content_index: 0, delta: "Hi".into(), logprobs: Vec::new() },
            sequence_number: 4,
        };
        assert_eq!(
            serde_json::to_value(ev).unwrap(),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0,
                "delta": "Hi", "logprobs": [], "sequence_number": 4})
        );
        // A call the length limit cut inside its arguments is incomplete; one that completed before the cut is not.
        for (arguments, status) in [("{\"a\": [1", "incomplete"), ("{}", "completed")] {
            let mut call = OutputItem::FunctionCall {
                id: "fc_1".into(),
                call_id: "call_1".into(),
                name: "f".into(),
                arguments: arguments.into(),
                status: "completed",
            };
            call.cut();
            assert_eq!(
                serde_json::to_value(call).unwrap(),
                json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": arguments,
                    "status": status})
            );
        }
    }
}
