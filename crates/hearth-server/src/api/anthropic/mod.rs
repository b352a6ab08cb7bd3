//! Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`. A request is translated into
//! the Chat Completions request it means ([`request`]) and runs on the one chat path; the answer's parts (thought,
//! text, tool calls) become content blocks, streamed as Anthropic's events ([`events`]). Errors take Anthropic's shape
//! ([`error_body`]; the router's error layer rewrites every error on these paths).

pub mod events;
pub mod request;

use crate::answer::Answer;
use crate::body::parse_object;
use crate::error::{ApiError, ApiResult};
use crate::generation::UsageTotals;
use crate::openai::chat::{prepare, submit_translated, Prepared};
use crate::state::{new_id, AppState};
use crate::tools::{Call, Format};
use crate::wire::anthropic::{Block, ErrorBody, ErrorObject, Event, Message, TokenCount, Usage};
use crate::wire::chat::ChatCompletionRequest;
use crate::wire::RequestBody;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tracing::Instrument;

/// The paths whose errors take Anthropic's shape.
pub const PATH: &str = "/v1/messages";

/// `POST /v1/messages`.
pub async fn messages(State(st): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let id = new_id("msg").replacen("msg-", "msg_", 1);
    let span = tracing::info_span!("messages", id = %id);
    run(st, body, id).instrument(span).await
}

async fn run(st: AppState, body: Bytes, id: String) -> ApiResult<Response> {
    let body = parse_object(&body)?;
    let t = request::translate(&body, false)?;
    let (ready, _admitted) = st.generator_for(body.get("model").and_then(serde_json::Value::as_str)).await?;
    let sub = submit_translated(&ready, t.chat, t.stream).await?;
    let (shape, model) = (sub.shape, ready.model_id.clone());
    if t.stream {
        let fmt = events::MessageEvents::new(id, model, sub.prompt_tokens, shape);
        return Ok(sub.stream(&ready, st.cfg.keepalive, fmt));
    }
    let (c, usage) = sub.answer(&ready).await?;
    let answer = Answer::split(shape, &c.text);
    let stop_reason = stop_reason(c.finish_reason, c.stop_sequence.is_some(), !answer.calls.is_empty());
    let format = shape.tools.unwrap_or(Format::Generic);
    let mut content = Vec::new();
    if let Some(thinking) = answer.reasoning {
        content.push(Block::Thinking { thinking, signature: String::new() });
    }
    if let Some(text) = answer.content.filter(|t| !t.is_empty()) {
        content.push(Block::Text { text });
    }
    content.extend(answer.calls.into_iter().map(|call| tool_use(call, format)));
    let message = Message {
        id,
        kind: "message",
        role: "assistant",
        model,
        content,
        stop_reason: Some(stop_reason),
        stop_sequence: c.stop_sequence,
        usage: usage_of(&usage),
    };
    Ok(Json(message).into_response())
}

/// `POST /v1/messages/count_tokens`: the prompt's length as the model would see it (tools and system included).
pub async fn count_tokens(State(st): State<AppState>, body: Bytes) -> ApiResult<Response> {
    let mut t = request::translate(&parse_object(&body)?, true)?;
    // A length limit the prompt check can pass with; nothing is generated.
    t.chat["max_tokens"] = json!(1);
    let chat = ChatCompletionRequest::from_body(&t.chat)?;
    let ready = st.ready()?;
    let Prepared { req, .. } = crate::offload::run(move || prepare(&ready, chat)).await?;
    Ok(Json(TokenCount { input_tokens: req.prompt.len() }).into_response())
}

/// Anthropic's `stop_reason`.
pub fn stop_reason(finish: &str, stop_sequence: bool, called: bool) -> &'static str {
    match finish {
        "length" => "max_tokens",
        _ if stop_sequence => "stop_sequence",
        _ if called => "tool_use",
        _ => "end_turn",
    }
}

/// A `tool_use` block of a parsed call (its arguments JSON text as the `input` object).
pub fn tool_use(call: Call, format: Format) -> Block {
    let input: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
    Block::ToolUse { id: tool_use_id(format), name: call.name, input }
}

/// A new tool-use id: `toolu_` and 24 hex digits (Mistral templates: 9 letters and digits, as they require).
pub fn tool_use_id(format: Format) -> String {
    crate::tools::call_id(format).replacen("call_", "toolu_", 1)
}

/// `usage`: the prompt's tokens not read from the prompt cache, those read from it, and the answer's.
pub fn usage_of(u: &UsageTotals) -> Usage {
    Usage {
        input_tokens: u.prompt_tokens.saturating_sub(u.cached_tokens),
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: u.cached_tokens,
        output_tokens: u.completion_tokens,
    }
}

/// Anthropic's error `type` for a status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// An error in Anthropic's shape: `{"type": "error", "error": {"type": ..., "message": ...}}`.
pub fn error_body(status: StatusCode, message: &str) -> ErrorBody {
    ErrorBody { kind: "error", error: error_object(status, message) }
}

fn error_object(status: StatusCode, message: &str) -> ErrorObject {
    ErrorObject { kind: error_type(status), message: message.to_string() }
}

/// The stream's error event.
pub fn error_event(e: &ApiError) -> Event {
    Event::Error { error: error_object(e.status, &e.message) }
}
