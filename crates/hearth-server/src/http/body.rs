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

/// Bodies larger than this are parsed on the blocking pool (`offload`).
const OFFLOAD_BYTES: usize = 256 << 10;

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
        let big = bytes.len() > OFFLOAD_BYTES;
        let parse = move || T::from_body(&Value::Object(parse_object(&bytes)?));
        if big {
            return crate::offload::run(parse).await.map(JsonBody);
        }
        parse().map(JsonBody)
    }
}

pub fn parse_object(bytes: &[u8]) -> ApiResult<Map<String, Value>> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => {
            Err(ApiError::bad_request(format!("the request body must be a JSON object, got {}", kind(&other)))
                .with_code("invalid_json"))
        }
        // A number too large for a float (`1e999`, which some clients write for infinity): name its field.
        Err(e) if e.to_string().starts_with("number out of range") => match key_at(bytes, e.line(), e.column()) {
            Some(key) => Err(ApiError::param(&key, format!("`{key}` must be a finite number: {e}"))),
            None => Err(ApiError::bad_request(format!("the request body has a number that is not finite: {e}"))
                .with_code("invalid_value")),
        },
        Err(e) => {
            Err(ApiError::bad_request(format!("the request body is not valid JSON: {e}")).with_code("invalid_json"))
        }
    }
}

/// The object key whose value is at (1-based) `line` and `column` of `bytes`: `"key": <value here>`.
fn key_at(bytes: &[u8], line: usize, column: usize) -> Option<String> {
    let start: usize = bytes.split(|&b| b == b'\n').take(line.saturating_sub(1)).map(|l| l.len() + 1).sum();
    let at = (start + column).min(bytes.len());
    let before = &bytes[..at];
    // Back over the number, then whitespace, the colon, whitespace, to the key's closing quote.
    let mut i = before.iter().rposition(|b| !(b.is_ascii_digit() || b"+-.eE".contains(b)))?;
    let skip_ws = |mut i: usize| {
        while i > 0 && before[i].is_ascii_whitespace() {
            i -= 1;
        }
        i
    };
    i = skip_ws(i);
    if before[i] != b':' {
        return None;
    }
    i = skip_ws(i.checked_sub(1)?);
    if before[i] != b'"' {
        return None;
    }
    let open = before[..i].iter().rposition(|&b| b == b'"')?;
    String::from_utf8(before[open + 1..i].to_vec()).ok()
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

    #[test]
    fn an_infinite_number_names_its_field() {
        let e = parse_object(b"{\"model\": \"x\",\n  \"temperature\": 1e999, \"top_p\": 1}").err();
        assert_eq!(e.and_then(|e| e.param), Some("temperature".to_string()));
        let e = parse_object(b"{\"top_p\":-2e400}").err();
        assert_eq!(e.and_then(|e| e.param), Some("top_p".to_string()));
        assert!(parse_object(b"[1e999]").is_err_and(|e| e.param.is_none() && e.message.contains("finite")));
    }
}
