//! The server's one error type, [`ApiError`], and its one mapping to HTTP: a status, `Retry-After` where a retry
//! helps, and a body in the shape of the API that was called. That is OpenAI's by default,
//! `{"error": {"message": "...", "type": "...", "param": null | "name", "code": null | "..."}}`, and Anthropic's on
//! its paths, `{"type": "error", "error": {"type": "...", "message": "..."}}` ([`ErrorShape`]).

use crate::wire::anthropic;
use crate::wire::{ErrorBody, ErrorObject, ShapeError};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use hearth_engine::engine::{EngineErrorKind, SubmitError};

/// Which API's error shape a response takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorShape {
    /// OpenAI's (Chat Completions, Completions, Responses, and every route that is not Anthropic's).
    OpenAi,
    /// Anthropic's (the Messages API).
    Anthropic,
}

impl ErrorShape {
    /// The shape of the errors on `path`: Anthropic's on the Messages API's paths (`/v1/messages...`).
    pub fn of_path(path: &str) -> Self {
        if path.starts_with("/v1/messages") {
            ErrorShape::Anthropic
        } else {
            ErrorShape::OpenAi
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, `not_found_error`, ...
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), kind, param: None, code: None }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// 400 without a parameter.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the offending parameter.
    pub fn param(name: &str, message: impl Into<String>) -> Self {
        Self { param: Some(name.to_string()), ..Self::bad_request(message).with_code("invalid_value") }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found_error", message).with_code("not_found")
    }

    /// The 404 of a path no route serves.
    pub fn no_route(method: &Method, path: &str) -> Self {
        Self::not_found(format!("no route for {method} {path}"))
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "missing or incorrect API key: send `Authorization: Bearer <key>` with the key the server was started with (--api-key)",
        )
        .with_code("invalid_api_key")
    }

    pub fn loading() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable_error",
            "the model is still loading; retry in a moment (GET /health says when it is ready)",
        )
        .with_code("model_loading")
    }

    pub fn draining() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable_error",
            "the server is draining and admits no new generation requests; retry later or on another server",
        )
        .with_code("draining")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// An error the engine reported for a request, by its kind: a constraint that this model's tokens cannot
    /// continue is the request's fault (400 `constraint_unsatisfiable`); an isolated engine's process that died
    /// under it is a 502 `engine_unavailable`; anything else is the server's.
    pub fn engine(kind: EngineErrorKind, message: impl Into<String>) -> Self {
        match kind {
            EngineErrorKind::GrammarFailed => Self::bad_request(message).with_code("constraint_unsatisfiable"),
            EngineErrorKind::Unavailable => {
                Self::new(StatusCode::BAD_GATEWAY, "engine_unavailable", message).with_code("engine_unavailable")
            }
            EngineErrorKind::Internal => Self::internal(message),
        }
    }

    /// A request ended by the shutdown's grace period running out (503 `server_shutting_down`).
    pub fn shutting_down() -> Self {
        Self::from_status(StatusCode::SERVICE_UNAVAILABLE, crate::shutdown::SHUTTING_DOWN)
            .with_code("server_shutting_down")
    }

    /// A generic error for a bare status (axum rejections, 405, ...).
    pub fn from_status(status: StatusCode, message: impl Into<String>) -> Self {
        let (kind, code) = match status {
            StatusCode::UNAUTHORIZED => ("authentication_error", Some("invalid_api_key")),
            StatusCode::NOT_FOUND => ("not_found_error", Some("not_found")),
            StatusCode::PAYLOAD_TOO_LARGE => ("invalid_request_error", Some("body_too_large")),
            StatusCode::METHOD_NOT_ALLOWED => ("invalid_request_error", Some("method_not_allowed")),
            StatusCode::TOO_MANY_REQUESTS => ("rate_limit_error", Some("server_busy")),
            StatusCode::SERVICE_UNAVAILABLE => ("unavailable_error", None),
            s if s.is_server_error() => ("server_error", None),
            _ => ("invalid_request_error", None),
        };
        Self { status, message: message.into(), kind, param: None, code }
    }

    /// The body in OpenAI's shape.
    pub fn body(&self) -> ErrorBody<'_> {
        ErrorBody {
            error: ErrorObject {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code,
            },
        }
    }

    /// The error object in Anthropic's shape (its `type` follows from the status).
    pub fn anthropic(&self) -> anthropic::ErrorObject {
        anthropic::ErrorObject { kind: anthropic_type(self.status), message: self.message.clone() }
    }

    /// The response in `shape`, with `Retry-After` on a 429 or 503 (not logged: see `IntoResponse`).
    pub fn response_in(self, shape: ErrorShape) -> Response {
        let mut r = match shape {
            ErrorShape::OpenAi => (self.status, axum::Json(self.body())).into_response(),
            ErrorShape::Anthropic => {
                let body = anthropic::ErrorBody { kind: "error", error: self.anthropic() };
                (self.status, axum::Json(body)).into_response()
            }
        };
        if let Some(v) = retry_after(self.status) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        r
    }
}

/// Anthropic's error `type` for a status.
fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// A body or field of the wrong shape: a 400 that names the field.
impl From<ShapeError> for ApiError {
    fn from(e: ShapeError) -> Self {
        ApiError { param: e.param, code: e.code, ..ApiError::bad_request(e.message) }
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        let msg = e.to_string();
        match e {
            SubmitError::QueueFull { .. } => ApiError::from_status(StatusCode::TOO_MANY_REQUESTS, msg),
            SubmitError::NeverQueues { .. } => ApiError::param("n", msg),
            // The choices together are what does not fit: name `n`.
            SubmitError::ChoicesNeverFit(_) => ApiError::param("n", msg).with_code("context_length_exceeded"),
            SubmitError::TooLong(_) => ApiError::bad_request(msg).with_code("context_length_exceeded"),
            SubmitError::Invalid(_) => ApiError::bad_request(msg).with_code("invalid_value"),
            // A request that states where its constraint came from names that field instead (`GenParams`).
            SubmitError::Constraint(_) => ApiError::bad_request(msg).with_code("invalid_value"),
            SubmitError::Unavailable => {
                ApiError::from_status(StatusCode::SERVICE_UNAVAILABLE, msg).with_code("engine_stopped")
            }
        }
    }
}

/// Seconds a client should wait before retrying a 429 (the queue moves within seconds) and a 503 (loading,
/// draining, shutting down).
const RETRY_AFTER_BUSY: &str = "1";
const RETRY_AFTER_UNAVAILABLE: &str = "5";

/// The `Retry-After` a response of this status carries, if any.
fn retry_after(status: StatusCode) -> Option<HeaderValue> {
    match status {
        StatusCode::TOO_MANY_REQUESTS => Some(HeaderValue::from_static(RETRY_AFTER_BUSY)),
        StatusCode::SERVICE_UNAVAILABLE => Some(HeaderValue::from_static(RETRY_AFTER_UNAVAILABLE)),
        _ => None,
    }
}

/// A handler's error, logged (a server error as a warning) and answered in OpenAI's shape; the error layer
/// (`http::middleware::json_errors`) reshapes it on Anthropic's paths.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = self.status.as_u16(), "{}", self.message);
        } else {
            tracing::debug!(status = self.status.as_u16(), "{}", self.message);
        }
        self.response_in(ErrorShape::OpenAi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_statuses() {
        let e = ApiError::param("temperature", "temperature must be >= 0");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let b = serde_json::to_value(e.body()).unwrap_or_default();
        assert_eq!(b["error"]["param"], "temperature");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert_eq!(b["error"]["code"], "invalid_value");
        assert_eq!(b["error"]["message"], "temperature must be >= 0");
        let busy = ApiError::from(SubmitError::QueueFull { waiting: 1, rows: 1, limit: 1 });
        assert_eq!(busy.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(busy.into_response().headers().get("retry-after").map(|v| v.as_bytes()), Some(&b"1"[..]));
        let never = ApiError::from(SubmitError::NeverQueues { rows: 9, limit: 8 });
        assert_eq!((never.status, never.param.as_deref()), (StatusCode::BAD_REQUEST, Some("n")));
        assert_eq!(ApiError::from(SubmitError::TooLong("x".into())).code, Some("context_length_exceeded"));
        let kv = ApiError::from(SubmitError::ChoicesNeverFit("n = 3 choices of prompt + max_tokens ...".into()));
        assert_eq!((kv.param.as_deref(), kv.code), (Some("n"), Some("context_length_exceeded")));
        assert_eq!(ApiError::from(SubmitError::Unavailable).status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(ApiError::from_status(StatusCode::PAYLOAD_TOO_LARGE, "big").code, Some("body_too_large"));
    }

    #[test]
    fn shape_errors_are_400s_naming_the_field() {
        let e = ApiError::from(ShapeError::field("top_p", "`top_p` must be a number, got a string"));
        assert_eq!(
            (e.status, e.param.as_deref(), e.code),
            (StatusCode::BAD_REQUEST, Some("top_p"), Some("invalid_value"))
        );
        let e = ApiError::from(ShapeError::body("not JSON").with_code("invalid_json"));
        assert_eq!((e.param, e.code, e.kind), (None, Some("invalid_json"), "invalid_request_error"));
    }

    #[test]
    fn anthropic_shape() {
        let e = ApiError::loading();
        assert_eq!(e.anthropic().kind, "overloaded_error");
        let r = e.response_in(ErrorShape::Anthropic);
        assert_eq!(r.headers().get("retry-after").map(|v| v.as_bytes()), Some(&b"5"[..]));
        assert_eq!(ApiError::bad_request("x").anthropic().kind, "invalid_request_error");
    }
}
