//! The request-body extractor: `JsonBody<T>` reads the bytes, requires a JSON object and deserializes it into a wire
//! type. Every rejection (too large, not JSON, not an object, a field of the wrong shape) is an OpenAI-shaped
//! error. Shape errors come before the model is needed, so a malformed request is a 400 even while it loads.

use crate::error::{ApiError, ApiResult};
use crate::wire::de::kind;
use crate::wire::RequestBody;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde_json::{Map, Value};

/// A request body that parsed as a JSON object and then as `T`.
pub struct JsonBody<T>(pub T);

/// The message for a body over `--max-body`, whoever noticed (the length limit layer or the body reader).
pub const TOO_LARGE: &str = "the request body is larger than the server's limit (--max-body)";

impl<S: Send + Sync, T: RequestBody> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            let status = r.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::from_status(status, TOO_LARGE)
            } else {
                ApiError::from_status(status, format!("could not read the request body: {}", r.body_text()))
            }
        })?;
        let object = Value::Object(parse_object(&bytes)?);
        T::from_body(&object).map(JsonBody)
    }
}

pub fn parse_object(bytes: &[u8]) -> ApiResult<Map<String, Value>> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => {
            Err(ApiError::bad_request(format!("the request body must be a JSON object, got {}", kind(&other)))
                .with_code("invalid_json"))
        }
        Err(e) => {
            Err(ApiError::bad_request(format!("the request body is not valid JSON: {e}")).with_code("invalid_json"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_must_be_an_object() {
        assert!(parse_object(b"{\"a\":1}").is_ok());
        assert!(parse_object(b"[1]").is_err_and(|e| e.message.contains("JSON object")));
        assert!(parse_object(b"{nope").is_err_and(|e| e.message.contains("not valid JSON")));
    }
}
