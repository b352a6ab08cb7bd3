//! The request-body extractor, the one every route with a body reads it through: `JsonBody<T>` reads the bytes,
//! requires a JSON object and deserializes it into a wire type (a large body on the blocking pool, off the async
//! workers that answer `/health` and write running streams). Every rejection (too large, not JSON, not an object, a
//! field of the wrong shape) is an `ApiError`. Shape errors come before the model is needed, so a malformed request
//! is a 400 even while it loads.

use crate::chat::offload;
use crate::error::ApiError;
use crate::wire::de::parse_object;
use crate::wire::RequestBody;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde_json::Value;

/// A request body that parsed as a JSON object and then as `T`.
pub struct JsonBody<T>(pub T);

/// The message for a body over `--max-body`, whoever noticed (the length limit layer or the body reader).
pub const TOO_LARGE: &str = "the request body is larger than the server's limit (--max-body)";

impl<S: Send + Sync, T: RequestBody + Send + 'static> FromRequest<S> for JsonBody<T> {
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
        let big = bytes.len() > offload::LARGE_BYTES;
        let parse = move || Ok(T::from_body(&Value::Object(parse_object(&bytes)?))?);
        if big {
            return offload::run(parse).await.map(JsonBody);
        }
        parse().map(JsonBody)
    }
}
