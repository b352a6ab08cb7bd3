//! Operational and llama-server-style utility routes: `/v1` (the index of endpoints), `/health`, `/stats`,
//! `/tokenize`, `/detokenize`, `/apply-template`. None of them waits for the engine thread.

use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::openai::messages;
use crate::state::{AppState, Ready};
use crate::wire::admin::{
    ApplyTemplateResponse, CacheFlushResponse, DetokenizeRequest, DetokenizeResponse, Health, Piece, Stats,
    TokenizeRequest, TokenizeResponse, Tokens,
};
use crate::wire::chat::Conversation;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// Every endpoint: method, path, what it does (`GET /v1`).
pub const ENDPOINTS: &[(&str, &str, &str)] = &[
    ("POST", "/v1/chat/completions", "OpenAI Chat Completions, streamed or not"),
    ("POST", "/v1/completions", "OpenAI Completions, streamed or not"),
    ("POST", "/v1/messages", "Anthropic Messages, streamed or not"),
    ("POST", "/v1/messages/count_tokens", "Anthropic: a Messages request's prompt length"),
    ("POST", "/v1/embeddings", "OpenAI Embeddings (with an embedding model)"),
    ("POST", "/v1/responses", "OpenAI Responses, streamed or not"),
    ("GET", "/v1/responses/{id}", "a stored response"),
    ("DELETE", "/v1/responses/{id}", "delete a stored response"),
    ("GET", "/v1/models", "the served model"),
    ("GET", "/v1/models/{id}", "the served model by id"),
    ("GET", "/v1", "this index"),
    ("GET", "/metrics", "Prometheus metrics"),
    ("GET", "/health", "liveness and readiness"),
    ("GET", "/stats", "engine counters (JSON)"),
    ("POST", "/admin/cache/flush", "write the prompt cache to the SSD tier"),
    ("POST", "/admin/drain", "stop admitting generation, finish what runs, flush the cache"),
    ("POST", "/admin/undrain", "admit generation requests again"),
    ("POST", "/tokenize", "text to token ids"),
    ("POST", "/detokenize", "token ids to text"),
    ("POST", "/apply-template", "messages to the chat template's prompt"),
];

/// `GET /v1`: `{"object": "list", "data": [{"method", "path", "description"}]}`.
pub async fn index() -> Json<serde_json::Value> {
    let data: Vec<_> = ENDPOINTS
        .iter()
        .map(|(method, path, what)| serde_json::json!({"method": method, "path": path, "description": what}))
        .collect();
    Json(serde_json::json!({"object": "list", "data": data}))
}

/// 200 `{"status":"ok"}` when serving, 503 `{"status":"loading"}` while the model loads, 503
/// `{"status":"draining"}` after `POST /admin/drain`, 503 `{"status":"error"}` if the engine thread has stopped.
pub async fn health(State(st): State<AppState>) -> Response {
    if !st.is_loaded() {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(Health { status: "loading", message: None })).into_response();
    }
    if st.drain.is_draining() {
        let body = Health { status: "draining", message: Some("draining: POST /admin/undrain admits requests again") };
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    let engine_down = st.get().is_some_and(|r| !r.engine.is_alive());
    let embedder_down = st.get_embedding().is_some_and(|e| !e.handle.is_alive());
    if engine_down || embedder_down {
        let what = if engine_down { "the engine thread has stopped" } else { "the embedding worker has stopped" };
        let body = Health { status: "error", message: Some(what) };
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    Json(Health { status: "ok", message: None }).into_response()
}

/// The engine's counters plus what the server was started with.
pub async fn stats(State(st): State<AppState>) -> ApiResult<Json<Stats>> {
    let r = st.ready()?;
    let info = &r.engine.info;
    Ok(Json(Stats {
        engine: r.engine.stats(),
        model: r.model_id.clone(),
        device: r.device.clone(),
        max_batch: info.max_batch,
        kv_capacity_tokens: info.kv_capacity_tokens,
        max_positions: info.max_positions,
        levers: hearth_engine::levers::get()
            .effective()
            .into_iter()
            .map(|(name, value)| (name.to_string(), serde_json::Value::String(value)))
            .collect(),
    }))
}

/// Most time a flush may take before the request gives up (the writes go on).
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Write every cached KV block to the SSD tier and wait until it is durable; false when there is no SSD tier.
pub async fn flush_ssd(r: &Ready) -> ApiResult<bool> {
    let engine = r.engine.clone();
    tokio::task::spawn_blocking(move || match engine.flush_cache() {
        Ok(Some(rx)) => rx.recv_timeout(FLUSH_TIMEOUT).map(|_| true).map_err(|e| match e {
            std::sync::mpsc::RecvTimeoutError::Timeout => {
                ApiError::internal("the SSD tier did not finish writing in time; the writes go on")
            }
            std::sync::mpsc::RecvTimeoutError::Disconnected => ApiError::internal("the SSD writer stopped"),
        }),
        Ok(None) => Ok(false),
        Err(e) => Err(ApiError::from_status(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    })
    .await
    .map_err(|e| ApiError::internal(format!("flush task failed: {e}")))?
}

/// `POST /admin/cache/flush`: write every cached KV block to the SSD tier; 200 once all of it is durable.
pub async fn cache_flush(State(st): State<AppState>) -> ApiResult<Json<CacheFlushResponse>> {
    let r = st.ready()?;
    if !flush_ssd(&r).await? {
        return Err(ApiError::bad_request("there is no SSD tier to flush to: start the server with --ssd-cache DIR"));
    }
    let ssd = r.engine.stats().ssd_cache.unwrap_or_default();
    Ok(Json(CacheFlushResponse { status: "flushed", files: ssd.files, bytes: ssd.bytes }))
}

/// `{"content": "...", "add_special": false, "with_pieces": false}` -> `{"tokens": [...]}`.
pub async fn tokenize(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<TokenizeRequest>,
) -> ApiResult<Json<TokenizeResponse>> {
    let r = st.ready()?;
    let content = req.content.ok_or_else(|| ApiError::param("content", "`content` is required"))?;
    let tok = r.tokenizer.clone();
    let add_special = req.add_special.unwrap_or(false);
    let ids = crate::offload::run(move || {
        tok.encode(&content, add_special).map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")))
    })
    .await?;
    let tokens = if req.with_pieces.unwrap_or(false) {
        let piece = |id: u32| String::from_utf8_lossy(r.tokenizer.token_bytes(id)).into_owned();
        Tokens::Pieces(ids.into_iter().map(|id| Piece { id, piece: piece(id) }).collect())
    } else {
        Tokens::Ids(ids)
    };
    Ok(Json(TokenizeResponse { tokens }))
}

/// `{"tokens": [...]}` -> `{"content": "..."}` (special tokens are kept, as llama-server does).
pub async fn detokenize(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<DetokenizeRequest>,
) -> ApiResult<Json<DetokenizeResponse>> {
    let r = st.ready()?;
    let list = req.tokens.ok_or_else(|| ApiError::param("tokens", "`tokens` is required"))?;
    let ids = list.check("tokens", r.tokenizer.vocab_size())?;
    Ok(Json(DetokenizeResponse { content: r.tokenizer.decode(&ids, false) }))
}

/// `{"messages": [...]}` -> `{"prompt": "..."}`: the chat template's rendering with the generation prompt (and the
/// tools, as a chat request would render them).
pub async fn apply_template(
    State(st): State<AppState>,
    JsonBody(conversation): JsonBody<Conversation>,
) -> ApiResult<Json<ApplyTemplateResponse>> {
    let r = st.ready()?;
    // The same prompt a chat request with these tools would get.
    let template = r.tokenizer.chat_template.as_ref().map(|t| t.source.as_str()).unwrap_or("");
    let tools = crate::tools::Tools::resolve(&conversation, template)?;
    let prompt = crate::offload::run(move || messages::render(&r, &conversation, tools.as_ref())).await?;
    Ok(Json(ApplyTemplateResponse { prompt }))
}
