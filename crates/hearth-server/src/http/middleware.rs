//! Cross-cutting layers. tower-http does the generic HTTP work: request ids (`x-request-id`, made when absent and
//! echoed back), one tracing span per request carrying that id, CORS, and the body-size limit (gzip is
//! `super::compress`'s). Two small layers stay hand-written because no library does what the API promises:
//!
//! - `require_api_key`: OpenAI clients send `Authorization: Bearer`, Anthropic-style ones `x-api-key`; `/health`
//!   stays open for probes, decided by the route that serves the request; a refusal is a 401 in the API's error
//!   shape. (tower-http's bearer check does none of the three.)
//! - `json_errors`: errors made below the handlers (axum's 405, tower-http's 413) are plain text; the API answers
//!   every failure in OpenAI's JSON error shape, and on Anthropic's paths (`/v1/messages...`) in Anthropic's.
//!
//! The request's log lines (`RequestSpan`, `failure_level`) are made here too.

use super::body::TOO_LARGE;
use super::conns::Guarded;
use super::guard::cors_origin;
use crate::error::{ApiError, ErrorShape};
use crate::origin::AllowList;
use crate::state::AppState;
use axum::body::{to_bytes, Body, HttpBody};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderName, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::trace::MakeSpan;

/// Routes (as the router spells them) that never need the API key.
const OPEN_ROUTES: &[&str] = &["/health"];

/// The header that carries a request's id.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// With `--api-key`, require `Authorization: Bearer <key>` (or `x-api-key: <key>`) everywhere but `/health` and
/// the web chat's own files (the app asks for the key when the API answers 401). What is open follows from the
/// route that serves the request (this layer runs after routing): a route is open when it is one of
/// [`OPEN_ROUTES`], the fallback when it serves a file of the web chat. A request's headers (`Accept: text/html`)
/// never open a route.
pub async fn require_api_key(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = st.cfg.api_key.as_deref() else { return next.run(req).await };
    let open = match req.extensions().get::<MatchedPath>() {
        Some(route) => OPEN_ROUTES.contains(&route.as_str()),
        None => super::ui::serves(&st, req.method(), req.uri().path(), req.headers()),
    };
    if open {
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

/// The server's own origin, loopback origins and `--allowed-origins` may call (`guard::cors_origin`);
/// preflights need no API key.
pub fn cors(allowed: AllowList) -> CorsLayer {
    let origin = if allowed.any { AllowOrigin::any() } else { cors_origin(allowed) };
    CorsLayer::new()
        .allow_origin(origin)
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            HeaderName::from_static("x-api-key"),
            HeaderName::from_static("anthropic-version"),
            HeaderName::from_static("anthropic-beta"),
        ])
        .expose_headers([REQUEST_ID])
        .max_age(Duration::from_secs(86400))
}

/// The span of one request: method, path and request id, so every log line of the request carries them.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestSpan;

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, req: &axum::http::Request<B>) -> tracing::Span {
        let id = req.headers().get(&REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("");
        tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
    }
}

/// Rewrite error responses that are not already JSON into the OpenAI error shape (Anthropic's on its paths).
pub async fn json_errors(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let anthropic = ErrorShape::of_path(&path) == ErrorShape::Anthropic;
    if is_json && !anthropic {
        return resp;
    }
    let allow = resp.headers().get(header::ALLOW).cloned();
    let text = to_bytes(resp.into_body(), 1 << 16)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    if is_json {
        // An OpenAI-shaped error from a handler, on an Anthropic path.
        let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let message = body.pointer("/error/message").and_then(|m| m.as_str()).unwrap_or("request failed");
        return ApiError::from_status(status, message).response_in(ErrorShape::Anthropic);
    }
    let message = match status {
        StatusCode::METHOD_NOT_ALLOWED => format!("{method} is not allowed on {path}"),
        StatusCode::NOT_FOUND => ApiError::no_route(&method, &path).message,
        StatusCode::PAYLOAD_TOO_LARGE => TOO_LARGE.to_string(),
        _ if !text.is_empty() => text,
        s => s.canonical_reason().unwrap_or("request failed").to_string(),
    };
    let mut r = if anthropic {
        ApiError::from_status(status, message).response_in(ErrorShape::Anthropic)
    } else {
        ApiError::from_status(status, message).into_response()
    };
    if let Some(a) = allow {
        r.headers_mut().insert(header::ALLOW, a);
    }
    r
}

/// After a request whose body or answer holds this many bytes, the heap's free memory goes back to the system.
const RELEASE_AFTER_BYTES: usize = 1 << 20;

/// Read the whole request body within `--timeout` (`cfg.timeout`) and hand it on buffered: a client that sends
/// its body too slowly gets a 408 instead of holding the request open, and one over `--max-body` (a chunked body,
/// whose length was not announced) a 413. Once a request whose body or answer is large is over (its answer written
/// or dropped), the memory it freed goes back to the system ([`ReleaseMemory`]).
pub async fn read_body(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match tokio::time::timeout(st.cfg.timeout, to_bytes(body, usize::MAX)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
                || e.to_string().contains("length limit");
            return if too_large {
                ApiError::from_status(StatusCode::PAYLOAD_TOO_LARGE, TOO_LARGE).into_response()
            } else {
                ApiError::bad_request(format!("could not read the request body: {e}")).into_response()
            };
        }
        Err(_) => {
            let message =
                format!("the request body did not arrive within {} s (--timeout)", st.cfg.timeout.as_secs_f64());
            return ApiError::new(StatusCode::REQUEST_TIMEOUT, "invalid_request_error", message)
                .with_code("request_timeout")
                .into_response();
        }
    };
    let large_in = bytes.len() >= RELEASE_AFTER_BYTES;
    let resp = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    let large_out = resp.body().size_hint().exact().is_some_and(|n| n >= RELEASE_AFTER_BYTES as u64);
    if large_in || large_out {
        return resp.map(|inner| Body::new(Guarded { inner, guard: ReleaseMemory }));
    }
    resp
}

/// Dropped with a large request's answer: hands the heap's free memory back to the system (glibc's `malloc_trim`,
/// `hearth_engine::malloc::release_free`), which glibc would otherwise keep (`HEARTH_MALLOC_KEEP` raises its trim
/// threshold to 1 GiB). On the blocking pool, one release at a time; a request that ends meanwhile gets another.
struct ReleaseMemory;

static RELEASE_PENDING: AtomicBool = AtomicBool::new(false);
static RELEASE_RUNNING: AtomicBool = AtomicBool::new(false);

impl Drop for ReleaseMemory {
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        RELEASE_PENDING.store(true, Ordering::Release);
        if RELEASE_RUNNING.swap(true, Ordering::AcqRel) {
            return;
        }
        rt.spawn_blocking(|| loop {
            while RELEASE_PENDING.swap(false, Ordering::AcqRel) {
                hearth_engine::malloc::release_free();
            }
            RELEASE_RUNNING.store(false, Ordering::Release);
            // A request that ended after the last release but saw this one running: release for it too.
            if !RELEASE_PENDING.load(Ordering::Acquire) || RELEASE_RUNNING.swap(true, Ordering::AcqRel) {
                break;
            }
        });
    }
}

/// Whether a response the trace layer counts as failed (a 5xx, or a body that failed) is a fault, logged as an
/// ERROR. A 503 is not: it is a state the server is in (loading, draining, an engine restarting), which `/health`
/// reports and load balancers poll for; the response's own log line says its status.
pub fn is_fault(failure: &ServerErrorsFailureClass) -> bool {
    !matches!(failure, ServerErrorsFailureClass::StatusCode(StatusCode::SERVICE_UNAVAILABLE))
}

/// The trace layer's log line of a failed response, when it [`is_fault`].
pub fn log_failure(failure: ServerErrorsFailureClass, latency: Duration, _span: &tracing::Span) {
    if is_fault(&failure) {
        tracing::error!(classification = %failure, latency = %format!("{} ms", latency.as_millis()), "response failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_503_is_no_fault_and_other_failures_are() {
        let status = |s| is_fault(&ServerErrorsFailureClass::StatusCode(s));
        assert!(!status(StatusCode::SERVICE_UNAVAILABLE));
        assert!(status(StatusCode::INTERNAL_SERVER_ERROR) && status(StatusCode::BAD_GATEWAY));
        assert!(is_fault(&ServerErrorsFailureClass::Error("the body failed".into())));
    }
}
