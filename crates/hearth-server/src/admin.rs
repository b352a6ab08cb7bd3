//! Operational and llama-server-style utility routes: `/health`, `/stats`, `/tokenize`, `/detokenize`,
//! `/apply-template`. None of them waits for the engine thread.

use crate::body::{token_ids, JsonObject, Params};
use crate::error::{ApiError, ApiResult};
use crate::openai::messages;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// 200 `{"status":"ok"}` when serving, 503 `{"status":"loading"}` while the model loads, 503 `{"status":"error"}`
/// if the engine thread has stopped.
pub async fn health(State(st): State<AppState>) -> Response {
    match st.get() {
        None => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "loading"}))).into_response(),
        Some(r) if !r.engine.is_alive() => {
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "error", "message": "the engine thread has stopped"})))
                .into_response()
        }
        Some(_) => Json(json!({"status": "ok"})).into_response(),
    }
}

/// The engine's counters plus what the server was started with.
pub async fn stats(State(st): State<AppState>) -> ApiResult<Json<Value>> {
    let r = st.ready()?;
    let mut v = serde_json::to_value(r.engine.stats()).map_err(|e| ApiError::internal(format!("serializing stats: {e}")))?;
    if let Some(o) = v.as_object_mut() {
        o.insert("model".into(), json!(r.model_id));
        o.insert("device".into(), json!(r.device));
        o.insert("max_batch".into(), json!(r.engine.info.max_batch));
        o.insert("kv_capacity_tokens".into(), json!(r.engine.info.kv_capacity_tokens));
        o.insert("max_positions".into(), json!(r.engine.info.max_positions));
    }
    Ok(Json(v))
}

/// `{"content": "...", "add_special": false, "with_pieces": false}` -> `{"tokens": [...]}`.
pub async fn tokenize(State(st): State<AppState>, JsonObject(body): JsonObject) -> ApiResult<Json<Value>> {
    let r = st.ready()?;
    let p = Params(&body);
    let content = p.str("content")?.ok_or_else(|| ApiError::param("content", "`content` is required"))?;
    let add_special = p.bool("add_special")?.unwrap_or(false);
    let ids = r.tokenizer.encode(content, add_special).map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")))?;
    let tokens: Value = if p.bool("with_pieces")?.unwrap_or(false) {
        ids.iter().map(|&id| json!({"id": id, "piece": String::from_utf8_lossy(r.tokenizer.token_bytes(id))})).collect()
    } else {
        json!(ids)
    };
    Ok(Json(json!({"tokens": tokens})))
}

/// `{"tokens": [...]}` -> `{"content": "..."}` (special tokens are kept, as llama-server does).
pub async fn detokenize(State(st): State<AppState>, JsonObject(body): JsonObject) -> ApiResult<Json<Value>> {
    let r = st.ready()?;
    let p = Params(&body);
    let list = p.array("tokens")?.ok_or_else(|| ApiError::param("tokens", "`tokens` is required"))?;
    let ids = token_ids("tokens", list, r.tokenizer.vocab_size())?;
    Ok(Json(json!({"content": r.tokenizer.decode(&ids, false)})))
}

/// `{"messages": [...]}` -> `{"prompt": "..."}`: the chat template's rendering with the generation prompt.
pub async fn apply_template(State(st): State<AppState>, JsonObject(body): JsonObject) -> ApiResult<Json<Value>> {
    let r = st.ready()?;
    let prompt = messages::render(&r, Params(&body))?;
    Ok(Json(json!({"prompt": prompt})))
}
