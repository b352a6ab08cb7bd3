//! How request fields are deserialized: every field of a request struct is `Option<T>` with
//! `#[serde(deserialize_with = "opt")]`, and `T: FromJson` says what shape it takes and, when the value has another
//! shape, what was wrong in the API's own words. `parse` runs serde over the body and turns the first failing field
//! into a 400 that names it (`param`) and says `` `field` must be a number, got a string ``.

use crate::error::{ApiError, ApiResult};
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::Deserialize;
use serde_json::{Map, Value};

/// A list parameter's items, or a 400 naming it.
pub fn list_param<'a>(name: &str, v: &'a Value) -> crate::error::ApiResult<&'a [Value]> {
    match v {
        Value::Array(l) => Ok(l),
        v => Err(crate::error::ApiError::param(name, format!("`{name}` must be a list, got {}", kind(v)))),
    }
}

/// How messages name a JSON value's type.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `must be {what}, got {kind of v}`: the usual complaint, relative to the field.
pub fn want(what: &str, got: &Value) -> String {
    format!("must be {what}, got {}", kind(got))
}

/// A field type and its JSON shape.
pub trait FromJson: Sized {
    /// Convert `v` (never `null`), or say what was wrong. The text continues the field's quoted name
    /// (`must be a number, got a string`), unless it starts with that name itself (a nested field's message).
    fn from_json(v: Value) -> Result<Self, String>;
}

/// `deserialize_with` for every request field: absent and `null` are `None` (clients send both for "not set").
pub fn opt<'de, D: Deserializer<'de>, T: FromJson>(d: D) -> Result<Option<T>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None => Ok(None),
        Some(v) => T::from_json(v).map(Some).map_err(D::Error::custom),
    }
}

/// Deserialize a JSON object into `T`; the first field that fails is a 400 naming it.
pub fn parse<T: DeserializeOwned>(body: &Value) -> ApiResult<T> {
    serde_path_to_error::deserialize(body).map_err(|e| {
        let field = e.path().to_string();
        let msg = e.inner().to_string();
        if field == "." {
            ApiError::bad_request(msg)
        } else if msg.starts_with(&format!("`{field}")) {
            ApiError::param(&field, msg)
        } else {
            ApiError::param(&field, format!("`{field}` {msg}"))
        }
    })
}

impl FromJson for f64 {
    fn from_json(v: Value) -> Result<Self, String> {
        v.as_f64().filter(|x| x.is_finite()).ok_or_else(|| want("a number", &v))
    }
}

/// An integer; a float without a fraction (`5.0`) is one too, and one beyond `i64` is clamped.
impl FromJson for i64 {
    fn from_json(v: Value) -> Result<Self, String> {
        if let Some(i) = v.as_i64() {
            return Ok(i);
        }
        if let Some(u) = v.as_u64() {
            return Ok(u.min(i64::MAX as u64) as i64);
        }
        match v.as_f64() {
            Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(x as i64),
            _ => Err(want("an integer", &v)),
        }
    }
}

impl FromJson for bool {
    fn from_json(v: Value) -> Result<Self, String> {
        v.as_bool().ok_or_else(|| want("a boolean", &v))
    }
}

impl FromJson for String {
    fn from_json(v: Value) -> Result<Self, String> {
        match v {
            Value::String(s) => Ok(s),
            other => Err(want("a string", &other)),
        }
    }
}

impl FromJson for Map<String, Value> {
    fn from_json(v: Value) -> Result<Self, String> {
        match v {
            Value::Object(m) => Ok(m),
            other => Err(want("an object", &other)),
        }
    }
}

impl FromJson for Vec<Value> {
    fn from_json(v: Value) -> Result<Self, String> {
        match v {
            Value::Array(a) => Ok(a),
            other => Err(want("an array", &other)),
        }
    }
}

/// A list of token ids (non-negative integers); whether they are in the vocabulary is checked against the model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenIds(pub Vec<u64>);

impl TokenIds {
    /// The elements of `items` as token ids (`found a string` otherwise).
    pub fn from_items(items: &[Value]) -> Result<Self, String> {
        items
            .iter()
            .map(|v| v.as_u64().ok_or_else(|| format!("must hold non-negative integer token ids, found {}", kind(v))))
            .collect::<Result<_, _>>()
            .map(TokenIds)
    }

    /// The ids as `u32`, each below `vocab`; `field` names them in the error.
    pub fn check(&self, field: &str, vocab: usize) -> ApiResult<Vec<u32>> {
        self.0
            .iter()
            .map(|&id| match u32::try_from(id) {
                Ok(small) if (small as usize) < vocab => Ok(small),
                _ => Err(ApiError::param(
                    field,
                    format!("token id {id} in `{field}` is outside the vocabulary (size {vocab})"),
                )),
            })
            .collect()
    }
}

impl FromJson for TokenIds {
    fn from_json(v: Value) -> Result<Self, String> {
        match &v {
            Value::Array(items) => Self::from_items(items),
            other => Err(want("an array", other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Sample {
        #[serde(deserialize_with = "opt")]
        t: Option<f64>,
        #[serde(deserialize_with = "opt")]
        n: Option<i64>,
        #[serde(deserialize_with = "opt")]
        b: Option<bool>,
        #[serde(deserialize_with = "opt")]
        ids: Option<TokenIds>,
    }

    fn err(v: Value) -> ApiError {
        parse::<Sample>(&v).expect_err("should fail")
    }

    #[test]
    fn wrong_types_name_the_field() {
        let e = err(json!({"t": "hot"}));
        assert_eq!(e.param.as_deref(), Some("t"));
        assert_eq!(e.message, "`t` must be a number, got a string");
        assert_eq!(err(json!({"n": 1.5})).message, "`n` must be an integer, got a number");
        assert_eq!(err(json!({"b": 1})).message, "`b` must be a boolean, got a number");
        assert_eq!(
            err(json!({"ids": [1, -2]})).message,
            "`ids` must hold non-negative integer token ids, found a number"
        );
        assert_eq!(err(json!({"ids": {}})).message, "`ids` must be an array, got an object");
    }

    #[test]
    fn null_absent_and_unknown_fields() {
        let s: Sample = parse(&json!({"t": null, "n": 2.0, "zzz": [1], "ids": [1, 2, 99]})).expect("parses");
        assert_eq!((s.t, s.n, s.b), (None, Some(2), None));
        assert_eq!(s.n, Some(2));
        let ids = s.ids.unwrap_or_default();
        assert!(ids.check("ids", 50).unwrap_err().message.contains("99"));
        assert_eq!(ids.check("ids", 100).ok(), Some(vec![1, 2, 99]));
        let big: Sample = parse(&json!({"n": 18446744073709551615u64})).expect("parses");
        assert_eq!(big.n, Some(i64::MAX));
    }
}
