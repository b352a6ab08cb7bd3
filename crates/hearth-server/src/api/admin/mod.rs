//! Operational and llama-server-style utility routes: `/v1` (the index of endpoints), `/health`, `/stats`,
//! `/tokenize`, `/detokenize`, `/apply-template`. None of them waits for the engine thread.

use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::openai::messages;
use crate::state::{AppState, Ready};
use crate::wire::admin::{
    ApplyTemplateResponse, CacheFlushResponse, DetokenizeRequest, DetokenizeResponse, EngineReport, Health, Piece,
    PoolEntry, Stats, TokenizeRequest, TokenizeResponse, Tokens,
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
    ("GET", "/engine", "where the engine runs (in process or an isolated child), its restarts"),
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
/// `{"status":"degraded"}` while an isolated engine's process restarts, 503 `{"status":"draining"}` after
/// `POST /admin/drain`, 503 `{"status":"error"}` if the engine thread has stopped.
pub async fn health(State(st): State<AppState>) -> Response {
    if !st.is_loaded() {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(Health { status: "loading", message: None })).into_response();
    }
    if let Some(s) = st.get().and_then(|r| r.engine.status()) {
        if s.state != crate::isolate::EngineState::Up {
            let why = format!("the engine process is restarting (restarts so far: {})", s.restarts);
            let body = Health { status: "degraded", message: Some(why.into()) };
            return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
        }
    }
    if st.drain.is_draining() {
        let body =
            Health { status: "draining", message: Some("draining: POST /admin/undrain admits requests again".into()) };
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    let engine_down = st.get().is_some_and(|r| !r.engine.is_alive());
    let embedder_down = st.get_embedding().is_some_and(|e| !e.handle.is_alive());
    if engine_down || embedder_down {
        let what = if engine_down { "the engine thread has stopped" } else { "the embedding worker has stopped" };
        let body = Health { status: "error", message: Some(what.into()) };
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    Json(Health { status: "ok", message: None }).into_response()
}

/// `GET /engine`: whether the engine is isolated, its process, state and restarts.
pub async fn engine(State(st): State<AppState>) -> ApiResult<Json<EngineReport>> {
    let r = st.ready()?;
    let mut report = match r.engine.status() {
        Some(s) => {
            let state = match s.state {
                crate::isolate::EngineState::Starting => "starting",
                crate::isolate::EngineState::Up => "up",
                crate::isolate::EngineState::Restarting => "restarting",
                crate::isolate::EngineState::Retired => "retired",
            };
            EngineReport {
                isolated: true,
                pid: s.pid,
                restarts: s.restarts,
                state,
                last_exit: s.last_exit,
                last_restart_ms: s.last_restart_ms,
                restart_ms_p50: s.restart_ms_p50,
                restart_ms_p95: s.restart_ms_p95,
                pool: vec![PoolEntry { model: r.model_id.clone(), loaded: s.pid.is_some(), state, pid: s.pid }],
            }
        }
        None => {
            let state = if r.engine.is_alive() { "up" } else { "stopped" };
            let pid = Some(std::process::id());
            EngineReport {
                isolated: false,
                pid,
                restarts: 0,
                state,
                last_exit: None,
                last_restart_ms: None,
                restart_ms_p50: None,
                restart_ms_p95: None,
                pool: vec![PoolEntry { model: r.model_id.clone(), loaded: true, state, pid }],
            }
        }
    };
    if let Some(p) = st.pool() {
        // The engine above is the most recently used one; the pool lists every model.
        report.pool = p
            .states()
            .into_iter()
            .map(|s| {
                let status = s.ready.as_ref().and_then(|r| r.engine.status());
                PoolEntry {
                    model: s.model,
                    loaded: s.ready.is_some(),
                    state: if s.ready.is_some() { "up" } else { "not_loaded" },
                    pid: status.and_then(|st| st.pid),
                }
            })
            .collect();
    }
    Ok(Json(report))
}

/// The engine's counters plus what the server was started with.
pub async fn stats(State(st): State<AppState>) -> ApiResult<Json<Stats>> {
    let r = st.ready()?;
    let info = r.engine.info();
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

/// Write every cached KV block to the SSD tier and wait until it is durable; false when there is no SSD tier.
pub async fn flush_ssd(r: &Ready) -> ApiResult<bool> {
    r.engine.flush().await.map_err(|e| {
        if r.engine.is_alive() {
            ApiError::internal(e)
        } else {
            ApiError::from_status(StatusCode::SERVICE_UNAVAILABLE, e)
        }
    })
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
