//! OpenAI's Responses API: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`. A request is translated into
//! the chat core's `ChatRequest` ([`request`]; a `previous_response_id` continues the stored conversation) and runs on
//! the one chat path; the answer's parts become output items (`reasoning`, `message`, `function_call`), streamed as
//! the API's events ([`events`]). Stored responses live in `state::store`.

pub mod events;
pub mod request;

use crate::chat;
use crate::error::{ApiError, ApiResult};
use crate::http::body::JsonBody;
use crate::ids::{item_id, unix_now};
use crate::output::answer::{Answer, AnswerShape};
use crate::output::generation::UsageTotals;
use crate::output::tools::{call_id, Call, Format};
use crate::state::store::{ResponseStore, Stored};
use crate::state::AppState;
use crate::wire::responses::{
    Deleted, IncompleteDetails, InputTokensDetails, OutputItem, OutputTokensDetails, ResponseObject, ResponsesRequest,
    Usage,
};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::tokenizer::Tokenizer;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tracing::Instrument;

/// What a response echoes of its request, and where it is stored.
#[derive(Clone)]
pub struct Echo {
    pub id: String,
    pub created_at: u64,
    pub model: String,
    /// The request's fields the response object repeats.
    pub fields: Map<String, Value>,
    /// Where the response goes when `store` is true, and the conversation it ends (without its output).
    pub store: Option<(Arc<ResponseStore>, Vec<Value>)>,
    /// The thought's tokens are counted with this tokenizer.
    pub tok: Arc<Tokenizer>,
}

/// `POST /v1/responses`.
pub async fn create(State(st): State<AppState>, JsonBody(req): JsonBody<ResponsesRequest>) -> ApiResult<Response> {
    let id = item_id("resp");
    let span = tracing::info_span!("responses", id = %id);
    run(st, req, id).instrument(span).await
}

async fn run(st: AppState, req: ResponsesRequest, id: String) -> ApiResult<Response> {
    let previous = match &req.previous_response_id {
        None => Vec::new(),
        Some(Value::String(p)) => st.responses.get(p).map(|s| s.messages).ok_or_else(|| unknown(p))?,
        Some(_) => return Err(ApiError::param("previous_response_id", "`previous_response_id` must be a string")),
    };
    let t = request::translate(&req, previous)?;
    let (ready, _admitted) = st.generator_for(req.model()).await?;
    let sub = chat::submit(&ready, t.chat).await?;
    let shape = sub.shape.clone();
    let echo = Echo {
        id,
        created_at: unix_now(),
        model: ready.model_id.clone(),
        fields: echoed(&req),
        store: t.store.then(|| (st.responses.clone(), t.conversation)),
        tok: ready.tokenizer.clone(),
    };
    if sub.stream {
        return Ok(sub.into_sse(&ready, st.cfg.keepalive, events::ResponseEvents::new(echo, shape)));
    }
    let (c, usage) = sub.answer(&ready).await?;
    let output = output_items(&shape, &c.text, c.finish_reason);
    Ok(Json(finish(&echo, output, c.finish_reason, &usage)).into_response())
}

fn unknown(id: &str) -> ApiError {
    ApiError::not_found(format!(
        "no stored response `{id}`: it is unknown, deleted, expired (--response-store-ttl) or was evicted (--response-store)"
    ))
}

/// `GET /v1/responses/{id}`.
pub async fn get(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    st.responses.get(&id).map(|s| Json(s.response)).ok_or_else(|| unknown(&id))
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Deleted>> {
    if st.responses.delete(&id) {
        Ok(Json(Deleted { id, object: "response", deleted: true }))
    } else {
        Err(unknown(&id))
    }
}

/// The request's fields a response object repeats (as they were sent), with the API's defaults.
fn echoed(req: &ResponsesRequest) -> Map<String, Value> {
    let or = |v: &Option<Value>, default: Value| v.clone().unwrap_or(default);
    let mut m = Map::new();
    m.insert("instructions".into(), or(&req.instructions, Value::Null));
    m.insert("max_output_tokens".into(), or(&req.max_output_tokens, Value::Null));
    m.insert("metadata".into(), req.metadata.clone().map_or(json!({}), Value::Object));
    m.insert("parallel_tool_calls".into(), or(&req.parallel_tool_calls, json!(true)));
    m.insert("previous_response_id".into(), or(&req.previous_response_id, Value::Null));
    m.insert("store".into(), json!(req.store.unwrap_or(true)));
    m.insert("temperature".into(), or(&req.temperature, Value::Null));
    m.insert("tool_choice".into(), or(&req.tool_choice, json!("auto")));
    m.insert("tools".into(), or(&req.tools, json!([])));
    m.insert("top_p".into(), or(&req.top_p, Value::Null));
    m.insert("user".into(), or(&req.user, Value::Null));
    let format = req.text.as_ref().and_then(|t| t.get("format")).cloned().unwrap_or(json!({"type": "text"}));
    m.insert("text".into(), json!({ "format": format }));
    let effort = req.reasoning.as_ref().and_then(|r| r.get("effort")).cloned().unwrap_or(Value::Null);
    m.insert("reasoning".into(), json!({"effort": effort, "summary": null}));
    m.insert("truncation".into(), json!("disabled"));
    m
}

/// The output items of a whole answer.
fn output_items(shape: &AnswerShape, text: &str, reason: &str) -> Vec<OutputItem> {
    let a = Answer::split(shape, text, reason);
    let mut items = Vec::new();
    if let Some(r) = a.reasoning {
        items.push(OutputItem::reasoning(item_id("rs"), Some(r)));
    }
    if let Some(t) = a.content.filter(|t| !t.is_empty()) {
        items.push(OutputItem::message(item_id("msg"), Some(t), "completed"));
    }
    let format = shape.tools.as_ref().map_or(Format::Generic, |t| t.format);
    for c in a.calls {
        items.push(call_item(item_id("fc"), call_id(format), c, "completed"));
    }
    items
}

pub fn call_item(id: String, call_id: String, c: Call, status: &'static str) -> OutputItem {
    OutputItem::FunctionCall { id, call_id, name: c.name, arguments: c.arguments, status }
}

/// The response object: `status` `in_progress` (a stream's start), `completed`, or `incomplete` when the length
/// limit cut it.
pub fn response_object(
    echo: &Echo,
    status: &'static str,
    output: Vec<OutputItem>,
    usage: Option<Usage>,
) -> ResponseObject {
    ResponseObject {
        id: echo.id.clone(),
        object: "response",
        created_at: echo.created_at,
        status,
        error: None,
        incomplete_details: (status == "incomplete").then_some(IncompleteDetails { reason: "max_output_tokens" }),
        model: echo.model.clone(),
        output,
        usage,
        echo: echo.fields.clone(),
    }
}

/// The finished response (stored when asked): its status from the finish reason, its usage.
pub fn finish(echo: &Echo, mut output: Vec<OutputItem>, finish_reason: &str, u: &UsageTotals) -> ResponseObject {
    let status = if finish_reason == "length" { "incomplete" } else { "completed" };
    // The item the length limit cut is incomplete too (a call that completed before the cut is not).
    if let Some(last) = output.last_mut().filter(|_| status == "incomplete") {
        last.cut();
    }
    let assistant = assistant_message(&output);
    // The thought's tokens, counted again from its text.
    let thought = assistant.get("reasoning_content").and_then(Value::as_str).unwrap_or("");
    let reasoning_tokens =
        if thought.is_empty() { 0 } else { echo.tok.encode(thought, false).map(|t| t.len()).unwrap_or(0) };
    let usage = Usage {
        input_tokens: u.prompt_tokens,
        input_tokens_details: InputTokensDetails { cached_tokens: u.cached_tokens },
        output_tokens: u.completion_tokens,
        output_tokens_details: OutputTokensDetails {
            reasoning_tokens: reasoning_tokens.min(u.completion_tokens),
            accepted_prediction_tokens: u.accepted_prediction_tokens,
            rejected_prediction_tokens: u.rejected_prediction_tokens,
        },
        total_tokens: u.prompt_tokens + u.completion_tokens,
    };
    let response = response_object(echo, status, output, Some(usage));
    if let Some((store, conversation)) = &echo.store {
        let mut messages = conversation.clone();
        messages.push(assistant);
        let stored = serde_json::to_value(&response).map(|response| Stored { response, messages });
        if !stored.is_ok_and(|s| store.put(&echo.id, s)) {
            tracing::warn!("the response is larger than --response-store; it was not stored");
        }
    }
    response
}

/// The output items as the assistant's chat message (for a continuation's prompt).
fn assistant_message(items: &[OutputItem]) -> Value {
    let (mut text, mut thought, mut calls) = (String::new(), String::new(), Vec::new());
    for item in items {
        match item {
            OutputItem::Reasoning { content, .. } => content.iter().for_each(|c| thought.push_str(&c.text)),
            OutputItem::Message { content, .. } => content.iter().for_each(|c| text.push_str(&c.text)),
            OutputItem::FunctionCall { call_id, name, arguments, .. } => calls
                .push(json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})),
        }
    }
    let mut m = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    if !thought.is_empty() {
        m["reasoning_content"] = Value::String(thought);
    }
    m
}
