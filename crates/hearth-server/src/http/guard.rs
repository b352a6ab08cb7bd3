//! The browser guard: the origin policy (`crate::origin`) applied to every request before anything else, and the
//! CORS layer's origin rule.

use crate::error::ApiError;
use crate::origin::{host_allowed, host_name, is_json_type, origin_allowed, AllowList};
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The CORS layer's origin rule.
pub fn cors_origin(allowed: AllowList) -> tower_http::cors::AllowOrigin {
    tower_http::cors::AllowOrigin::predicate(move |origin: &HeaderValue, parts: &Parts| {
        let host = parts.headers.get(header::HOST).and_then(|h| h.to_str().ok());
        origin.to_str().is_ok_and(|o| origin_allowed(o, &allowed, host))
    })
}

/// The browser-facing checks, before anything else: the `Host` name (without an API key), the `Origin` of a
/// browser request, and a JSON `Content-Type` on a body.
pub async fn guard(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let h = req.headers();
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
    if st.cfg.api_key.is_none() {
        if let Some(host) = host.filter(|h| !host_allowed(h, &st.cfg.host, &st.cfg.allowed_hosts)) {
            let message = format!(
                "this server does not answer requests for the host `{host}` (a DNS-rebinding guard): start it with --allowed-hosts {} or with --api-key",
                host_name(host)
            );
            return forbidden(message);
        }
    }
    if let Some(origin) = h.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        if !origin_allowed(origin, &st.cfg.allowed_origins, host) {
            let message = format!(
                "requests from the web origin `{origin}` are not allowed: start the server with --allowed-origins {origin} (or `*`)"
            );
            return forbidden(message);
        }
    }
    let has_body = req.method() == Method::POST
        && h.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).is_none_or(|l| l.trim() != "0");
    if has_body && !is_json_type(h.get(header::CONTENT_TYPE)) {
        let given = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("?");
        let message = format!(
            "the request body must be JSON, sent with `Content-Type: application/json` (got `{given}`; with curl: -H 'Content-Type: application/json')"
        );
        return ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "invalid_request_error", message)
            .with_code("unsupported_media_type")
            .into_response();
    }
    next.run(req).await
}

fn forbidden(message: String) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, "permission_error", message).with_code("forbidden").into_response()
}
