//! `GET /metrics`: the registry of `output::metrics` with the engine's gauges, in Prometheus' text format.

use crate::output::metrics::global;
use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

/// `GET /metrics`.
pub async fn handler(State(st): State<AppState>) -> Response {
    let stats = st.get().map(|r| r.engine.stats());
    let body = global().render(stats.as_ref());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}
