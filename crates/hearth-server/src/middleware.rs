//! Cross-cutting layers: API-key check, CORS, and the rewrite that puts every non-JSON error (axum's 405, a
//! bare 413, ...) into OpenAI's error shape.

use crate::error::ApiError;
use crate::state::AppState;
use axum::body::to_bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Routes that never need the API key.
const OPEN_PATHS: &[&str] = &["/health"];

/// With `--api-key`, require `Authorization: Bearer <key>` (or `x-api-key: <key>`) everywhere but `/health`.
pub async fn require_api_key(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = st.cfg.api_key.as_deref() else { return next.run(req).await };
    if OPEN_PATHS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let h = req.headers();
    let bearer = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| {
        let (scheme, token) = v.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    });
    let given = bearer.or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim));
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), key.as_bytes()) => next.run(req).await,
        _ => ApiError::unauthorized().into_response(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Answer CORS preflights and allow any origin (a local server used from browser apps on other ports).
pub async fn cors(req: Request, next: Next) -> Response {
    if req.method() == Method::OPTIONS && req.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, OPTIONS"));
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("authorization, content-type, x-api-key"));
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("86400"));
        return r;
    }
    let mut r = next.run(req).await;
    r.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    r
}

/// Rewrite error responses that are not already JSON into the OpenAI error shape.
pub async fn json_errors(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json =
        resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let allow = resp.headers().get(header::ALLOW).cloned();
    let text = to_bytes(resp.into_body(), 4096).await.map(|b| String::from_utf8_lossy(&b).trim().to_string()).unwrap_or_default();
    let message = match status {
        StatusCode::METHOD_NOT_ALLOWED => format!("{method} is not allowed on {path}"),
        StatusCode::NOT_FOUND => format!("no route for {method} {path}"),
        StatusCode::PAYLOAD_TOO_LARGE => "the request body is larger than the server's limit (--max-body)".to_string(),
        _ if !text.is_empty() => text,
        s => s.canonical_reason().unwrap_or("request failed").to_string(),
    };
    let mut r = ApiError::from_status(status, message).into_response();
    if let Some(a) = allow {
        r.headers_mut().insert(header::ALLOW, a);
    }
    r
}

/// The fallback for unknown routes.
pub async fn not_found(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route for {method} {}", uri.path()))
}
