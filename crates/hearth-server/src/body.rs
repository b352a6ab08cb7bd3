//! Request bodies: a JSON-object extractor whose every rejection (too large, not JSON, not an object) is an
//! OpenAI-shaped error, and `Params`, typed access to its fields that names the parameter when a type is wrong.
//! Unknown fields are ignored and `null` counts as absent, as OpenAI's clients send both.

use crate::error::{ApiError, ApiResult};
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde_json::{Map, Value};

/// A request body that parsed as a JSON object.
pub struct JsonObject(pub Map<String, Value>);

impl<S: Send + Sync> FromRequest<S> for JsonObject {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            let status = r.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::from_status(status, "the request body is larger than the server's limit (--max-body)")
            } else {
                ApiError::from_status(status, format!("could not read the request body: {}", r.body_text()))
            }
        })?;
        parse_object(&bytes).map(JsonObject)
    }
}

pub fn parse_object(bytes: &[u8]) -> ApiResult<Map<String, Value>> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(ApiError::bad_request(format!("the request body must be a JSON object, got {}", type_name(&other)))
            .with_code("invalid_json")),
        Err(e) => Err(ApiError::bad_request(format!("the request body is not valid JSON: {e}")).with_code("invalid_json")),
    }
}

pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Typed, parameter-naming access to a JSON object's fields.
#[derive(Clone, Copy)]
pub struct Params<'a>(pub &'a Map<String, Value>);

impl<'a> Params<'a> {
    /// The field, with `null` treated as absent.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    fn wrong(name: &str, want: &str, got: &Value) -> ApiError {
        ApiError::param(name, format!("`{name}` must be {want}, got {}", type_name(got)))
    }

    pub fn f64(&self, name: &str) -> ApiResult<Option<f64>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.as_f64().filter(|x| x.is_finite()).map(Some).ok_or_else(|| Self::wrong(name, "a number", v)),
        }
    }

    /// A number within `[lo, hi]`.
    pub fn f32_in(&self, name: &str, lo: f64, hi: f64) -> ApiResult<Option<f32>> {
        match self.f64(name)? {
            None => Ok(None),
            Some(x) if (lo..=hi).contains(&x) => Ok(Some(x as f32)),
            Some(x) if hi == f64::MAX => Err(ApiError::param(name, format!("`{name}` must be at least {lo}, got {x}"))),
            Some(x) => Err(ApiError::param(name, format!("`{name}` must be between {lo} and {hi}, got {x}"))),
        }
    }

    /// An integer (a float with no fraction, like `5.0`, is accepted).
    pub fn i64(&self, name: &str) -> ApiResult<Option<i64>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => {
                if let Some(i) = v.as_i64() {
                    return Ok(Some(i));
                }
                if let Some(u) = v.as_u64() {
                    return Ok(Some(u.min(i64::MAX as u64) as i64));
                }
                match v.as_f64() {
                    Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(Some(x as i64)),
                    _ => Err(Self::wrong(name, "an integer", v)),
                }
            }
        }
    }

    /// An integer within `[lo, hi]`.
    pub fn int_in(&self, name: &str, lo: i64, hi: i64) -> ApiResult<Option<i64>> {
        match self.i64(name)? {
            None => Ok(None),
            Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
            Some(x) if hi == i64::MAX => Err(ApiError::param(name, format!("`{name}` must be at least {lo}, got {x}"))),
            Some(x) => Err(ApiError::param(name, format!("`{name}` must be between {lo} and {hi}, got {x}"))),
        }
    }

    pub fn bool(&self, name: &str) -> ApiResult<Option<bool>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| Self::wrong(name, "a boolean", v)),
        }
    }

    pub fn str(&self, name: &str) -> ApiResult<Option<&'a str>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| Self::wrong(name, "a string", v)),
        }
    }

    pub fn object(&self, name: &str) -> ApiResult<Option<&'a Map<String, Value>>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.as_object().map(Some).ok_or_else(|| Self::wrong(name, "an object", v)),
        }
    }

    pub fn array(&self, name: &str) -> ApiResult<Option<&'a Vec<Value>>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.as_array().map(Some).ok_or_else(|| Self::wrong(name, "an array", v)),
        }
    }

    /// An array of token ids (non-negative integers below `vocab`).
    pub fn token_ids(&self, name: &str, vocab: usize) -> ApiResult<Option<Vec<u32>>> {
        let Some(arr) = self.array(name)? else { return Ok(None) };
        token_ids(name, arr, vocab).map(Some)
    }
}

/// Parse an array of token ids, each below `vocab`.
pub fn token_ids(name: &str, arr: &[Value], vocab: usize) -> ApiResult<Vec<u32>> {
    arr.iter()
        .map(|v| match v.as_u64() {
            Some(id) if (id as usize) < vocab => Ok(id as u32),
            Some(id) => Err(ApiError::param(name, format!("token id {id} in `{name}` is outside the vocabulary (size {vocab})"))),
            None => {
                Err(ApiError::param(name, format!("`{name}` must hold non-negative integer token ids, found {}", type_name(v))))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn typed_access_names_the_param() {
        let m = obj(json!({"t": "hot", "n": 2.0, "x": null, "b": 1, "k": -1, "ids": [1, 2, 99]}));
        let p = Params(&m);
        let e = p.f64("t").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("t"));
        assert!(e.message.contains("must be a number, got a string"), "{}", e.message);
        assert_eq!(p.i64("n").unwrap(), Some(2));
        assert_eq!(p.f64("x").unwrap(), None);
        assert_eq!(p.f64("missing").unwrap(), None);
        assert!(p.bool("b").is_err());
        assert!(p.int_in("k", 0, 10).unwrap_err().message.contains("between 0 and 10"));
        assert!(p.token_ids("ids", 50).unwrap_err().message.contains("99"));
        assert_eq!(p.token_ids("ids", 100).unwrap(), Some(vec![1, 2, 99]));
    }

    #[test]
    fn body_must_be_an_object() {
        assert!(parse_object(b"{\"a\":1}").is_ok());
        assert!(parse_object(b"[1]").unwrap_err().message.contains("JSON object"));
        assert!(parse_object(b"{nope").unwrap_err().message.contains("not valid JSON"));
    }
}
