//! The browser guard: the origin policy (`crate::origin`) applied to every request before anything else, the CORS
//! layer's origin rule, and what surrounds the CORS layer ([`edge`]): one `Host` per request, no CORS headers for an
//! origin that may not call, and no framing by other pages.

use crate::error::{ApiError, ErrorShape};
use crate::origin::{host_allowed, host_name, is_json_type, origin_allowed, AllowList};
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
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

/// Around the CORS layer (which answers a preflight itself, before [`guard`] runs): a request with more than one
/// `Host` header is a 400 (the checks read the first, and a proxy may read another); an origin that may not call gets
/// no `Access-Control-*` header at all, preflight or not; and every answer says that no page may frame it
/// (`X-Frame-Options: DENY`, `Content-Security-Policy: frame-ancestors 'none'`): the web chat is not to be
/// clickjacked.
pub async fn edge(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let h = req.headers();
    let mut resp = if h.get_all(header::HOST).iter().nth(1).is_some() {
        let message = "the request has more than one `Host` header; send one";
        ApiError::bad_request(message).with_code("invalid_host").response_in(ErrorShape::of_path(req.uri().path()))
    } else {
        let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
        let origin = h.get(header::ORIGIN).map(|o| o.to_str().ok());
        let refused = origin.is_some_and(|o| o.is_none_or(|o| !origin_allowed(o, &st.cfg.allowed_origins, host)));
        let mut resp = next.run(req).await;
        if refused {
            strip_cors(resp.headers_mut());
        }
        resp
    };
    let h = resp.headers_mut();
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CONTENT_SECURITY_POLICY).or_insert(HeaderValue::from_static("frame-ancestors 'none'"));
    resp
}

/// Remove every `Access-Control-*` header.
fn strip_cors(h: &mut HeaderMap) {
    let names: Vec<_> = h.keys().filter(|k| k.as_str().starts_with("access-control-")).cloned().collect();
    for name in names {
        h.remove(name);
    }
}

fn forbidden(message: String) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, "permission_error", message).with_code("forbidden").into_response()
}
