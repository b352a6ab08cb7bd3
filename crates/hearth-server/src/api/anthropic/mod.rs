//! Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`. A request is translated into
//! the chat core's `ChatRequest` ([`request`]) and runs on the one chat path; the answer's parts (thought, text,
//! tool calls) become content blocks, streamed as Anthropic's events ([`events`]). Errors take Anthropic's shape
//! (`error::ErrorShape::Anthropic`; the router's error layer reshapes every error on these paths).

pub mod events;
pub mod request;

use crate::chat::{self, offload, Prepared};
use crate::error::ApiResult;
use crate::http::body::JsonBody;
use crate::ids::item_id;
use crate::output::answer::Answer;
use crate::output::generation::UsageTotals;
use crate::output::tools::{call_id, Call, Format};
use crate::state::AppState;
use crate::wire::anthropic::{Block, Message, MessagesRequest, TokenCount, Usage};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tracing::Instrument;

/// `POST /v1/messages`.
pub async fn messages(State(st): State<AppState>, JsonBody(req): JsonBody<MessagesRequest>) -> ApiResult<Response> {
    let id = item_id("msg");
    let span = tracing::info_span!("messages", id = %id);
    run(st, req, id).instrument(span).await
}

async fn run(st: AppState, req: MessagesRequest, id: String) -> ApiResult<Response> {
    let model = req.model().map(str::to_string);
    let chat = request::translate(req, false)?;
    let (ready, _admitted) = st.generator_for(model.as_deref()).await?;
    let sub = chat::submit(&ready, chat).await?;
    let (shape, model) = (sub.shape.clone(), ready.model_id.clone());
    if sub.stream {
        let fmt = events::MessageEvents::new(id, model, sub.prompt_tokens, shape);
        return Ok(sub.into_sse(&ready, st.cfg.keepalive, fmt));
    }
    let (c, usage) = sub.answer(&ready).await?;
    let answer = Answer::split(&shape, &c.text, c.finish_reason);
    let stop_reason = stop_reason(c.finish_reason, c.stop_sequence.is_some(), !answer.calls.is_empty());
    let format = shape.tools.as_ref().map_or(Format::Generic, |t| t.format);
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
pub async fn count_tokens(State(st): State<AppState>, JsonBody(req): JsonBody<MessagesRequest>) -> ApiResult<Response> {
    let mut chat = request::translate(req, true)?;
    // A length limit the prompt check can pass with; nothing is generated.
    chat.params.max_tokens = Some(1);
    let ready = st.ready()?;
    // Images count as the tokens they become, so they are fetched and sized as for generation.
    let fetched = chat::images::fetch_all(&ready.images, &ready.model_id, &chat.conversation).await?;
    let Prepared { req, .. } = offload::run(move || chat::submit::prepare_with(&ready, chat, fetched)).await?;
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
    call_id(format).replacen("call_", "toolu_", 1)
}

/// `usage`: the prompt's tokens not read from the prompt cache, those read from it, and the answer's.
pub fn usage_of(u: &UsageTotals) -> Usage {
    Usage {
        input_tokens: u.prompt_tokens.saturating_sub(u.cached_tokens),
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: u.cached_tokens,
        output_tokens: u.completion_tokens,
        accepted_prediction_tokens: u.accepted_prediction_tokens,
        rejected_prediction_tokens: u.rejected_prediction_tokens,
    }
}
