//! How request fields are deserialized: every field of a request struct is `Option<T>` with
//! `#[serde(deserialize_with = "opt")]`, and `T: FromJson` says what shape it takes and, when the value has another
//! shape, what was wrong in the API's own words. `parse` runs serde over the body and turns the first failing field
//! into a [`ShapeError`] that names it (`param`) and says `` `field` must be a number, got a string ``.
//! [`parse_object`] reads the body's bytes as the JSON object every request body is.

use super::shape::ShapeError;
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde::Deserialize;
use serde_json::{Map, Value};

/// A list parameter's items, or an error naming it.
pub fn list_param<'a>(name: &str, v: &'a Value) -> Result<&'a [Value], ShapeError> {
    match v {
        Value::Array(l) => Ok(l),
        v => Err(ShapeError::field(name, format!("`{name}` must be a list, got {}", kind(v)))),
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

/// Deserialize a JSON object into `T`; the first field that fails is an error naming it.
pub fn parse<T: DeserializeOwned>(body: &Value) -> Result<T, ShapeError> {
    serde_path_to_error::deserialize(body).map_err(|e| {
        let field = e.path().to_string();
        let msg = e.inner().to_string();
        if field == "." {
            ShapeError::body(msg)
        } else {
            complaint(&field, msg)
        }
    })
}

/// One field's value as `T`, worded as [`parse`] words it (`null` is not set): for a value an API's body carries
/// under another name than the one it is checked under.
pub fn field<T: FromJson>(name: &str, v: Value) -> Result<Option<T>, ShapeError> {
    match v {
        Value::Null => Ok(None),
        v => T::from_json(v).map(Some).map_err(|msg| complaint(name, msg)),
    }
}

/// `msg` about `field`, which it continues (`must be a number, got a string`) unless it begins with the field's
/// quoted name itself (a nested field's message).
fn complaint(field: &str, msg: String) -> ShapeError {
    if msg.starts_with(&format!("`{field}")) {
        ShapeError::field(field, msg)
    } else {
        ShapeError::field(field, format!("`{field}` {msg}"))
    }
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
    pub fn check(&self, field: &str, vocab: usize) -> Result<Vec<u32>, ShapeError> {
        self.0
            .iter()
            .map(|&id| match u32::try_from(id) {
                Ok(small) if (small as usize) < vocab => Ok(small),
                _ => Err(ShapeError::field(
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

/// The request body as the JSON object every body is (not JSON, or not an object, is an error).
pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ShapeError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(ShapeError::body(format!("the request body must be a JSON object, got {}", kind(&other)))
            .with_code("invalid_json")),
        // A number too large for a float (`1e999`, which some clients write for infinity): name its field.
        Err(e) if e.to_string().starts_with("number out of range") => match key_at(bytes, e.line(), e.column()) {
            Some(key) => Err(ShapeError::field(&key, format!("`{key}` must be a finite number: {e}"))),
            None => Err(ShapeError::body(format!("the request body has a number that is not finite: {e}"))
                .with_code("invalid_value")),
        },
        Err(e) => Err(ShapeError::body(format!("the request body is not valid JSON: {e}")).with_code("invalid_json")),
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

    fn err(v: Value) -> ShapeError {
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
