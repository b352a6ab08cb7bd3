//! `/health`, `/engine` and `/stats`: whether the server serves, where its engine runs, and its counters.

use crate::error::ApiResult;
use crate::model::isolate::EngineState;
use crate::state::AppState;
use crate::wire::admin::{EngineReport, Health, PoolEntry, Stats};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// 200 `{"status":"ok"}` when serving, 503 `{"status":"loading"}` while the model loads, 503
/// `{"status":"degraded"}` while an isolated engine's process restarts, 503 `{"status":"draining"}` after
/// `POST /admin/drain`, 503 `{"status":"error"}` if the engine thread has stopped.
pub async fn health(State(st): State<AppState>) -> Response {
    if !st.is_loaded() {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(Health { status: "loading", message: None })).into_response();
    }
    if let Some(s) = st.get().and_then(|r| r.engine.status()) {
        if s.state != EngineState::Up {
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
                EngineState::Starting => "starting",
                EngineState::Up => "up",
                EngineState::Restarting => "restarting",
                EngineState::Retired => "retired",
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
        kv_capacity_bytes: info.kv_capacity_bytes,
        kv_cache_dtype: info.kv_cache_dtype.clone(),
        max_positions: info.max_positions,
        levers: hearth_engine::levers::get()
            .effective()
            .into_iter()
            .map(|(name, value)| (name.to_string(), serde_json::Value::String(value)))
            .collect(),
    }))
}
