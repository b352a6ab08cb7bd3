//! What chat and completions share on the wire: the generation parameters of a request, `usage`, the error body,
//! and the envelope of a response and of a stream chunk.

use super::de::{kind, opt, want, FromJson, TokenIds};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Most stop strings per request (OpenAI allows 4; agents often send more).
pub const MAX_STOPS: usize = 16;

/// The generation parameters of `/v1/chat/completions` and `/v1/completions` (OpenAI's names, plus vLLM's and
/// llama.cpp's common extensions). Ranges and token ids are checked against the model in `chat::params`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct GenerationParams {
    /// Which model answers: with a model pool, one of its models (none: the first); otherwise ignored.
    #[serde(deserialize_with = "opt")]
    pub model: Option<String>,
    #[serde(deserialize_with = "opt")]
    pub temperature: Option<f64>,
    #[serde(deserialize_with = "opt")]
    pub top_p: Option<f64>,
    /// -1 and 0 are off (vLLM spells it -1).
    #[serde(deserialize_with = "opt")]
    pub top_k: Option<i64>,
    #[serde(deserialize_with = "opt")]
    pub min_p: Option<f64>,
    #[serde(deserialize_with = "opt")]
    pub presence_penalty: Option<f64>,
    #[serde(deserialize_with = "opt")]
    pub frequency_penalty: Option<f64>,
    #[serde(deserialize_with = "opt")]
    pub repetition_penalty: Option<f64>,
    #[serde(deserialize_with = "opt")]
    pub xtc_probability: Option<f64>,
    #[serde(deserialize_with = "opt")]
    pub xtc_threshold: Option<f64>,
    #[serde(deserialize_with = "opt")]
    pub seed: Option<i64>,
    #[serde(deserialize_with = "opt")]
    pub logit_bias: Option<LogitBias>,
    #[serde(deserialize_with = "opt")]
    pub max_tokens: Option<i64>,
    #[serde(deserialize_with = "opt")]
    pub n: Option<i64>,
    #[serde(deserialize_with = "opt")]
    pub stream: Option<bool>,
    #[serde(deserialize_with = "opt")]
    pub stream_options: Option<StreamOptions>,
    #[serde(deserialize_with = "opt")]
    pub response_format: Option<ResponseFormat>,
    /// vLLM's constraint object (`json`, `regex`, `choice`, `grammar`, `json_object`) and its older fields.
    #[serde(deserialize_with = "opt")]
    pub structured_outputs: Option<Map<String, Value>>,
    #[serde(deserialize_with = "opt")]
    pub guided_json: Option<JsonValue>,
    #[serde(deserialize_with = "opt")]
    pub guided_regex: Option<String>,
    #[serde(deserialize_with = "opt")]
    pub guided_choice: Option<Vec<Value>>,
    #[serde(deserialize_with = "opt")]
    pub guided_grammar: Option<String>,
    /// llama.cpp's: a GBNF grammar, and a JSON schema.
    #[serde(deserialize_with = "opt")]
    pub grammar: Option<String>,
    #[serde(deserialize_with = "opt")]
    pub json_schema: Option<JsonValue>,
    #[serde(deserialize_with = "opt")]
    pub stop: Option<Stop>,
    #[serde(deserialize_with = "opt")]
    pub stop_token_ids: Option<TokenIds>,
    #[serde(deserialize_with = "opt")]
    pub ignore_eos: Option<bool>,
    #[serde(deserialize_with = "opt")]
    pub skip_special_tokens: Option<bool>,
    /// OpenAI's Predicted Outputs: `{"type": "content", "content": "..." | [{"type": "text", "text": "..."}]}`.
    #[serde(deserialize_with = "opt")]
    pub prediction: Option<Prediction>,
    /// `false`: this request does not speculate.
    #[serde(deserialize_with = "opt")]
    pub speculative: Option<bool>,
}

/// `prediction`: what the answer is expected to repeat (most of it), a draft for speculative decoding: text, or
/// (hearth's) token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prediction {
    Text(String),
    Tokens(TokenIds),
}

impl Prediction {
    pub fn is_empty(&self) -> bool {
        match self {
            Self::Text(t) => t.is_empty(),
            Self::Tokens(ids) => ids.0.is_empty(),
        }
    }
}

impl FromJson for Prediction {
    fn from_json(v: Value) -> Result<Self, String> {
        let Value::Object(m) = v else { return Err(want("an object", &v)) };
        if m.get("type").and_then(Value::as_str) != Some("content") {
            return Err("must be {\"type\": \"content\", \"content\": ...}".into());
        }
        match m.get("content") {
            Some(Value::String(s)) => Ok(Prediction::Text(s.clone())),
            Some(Value::Array(items)) if items.first().is_some_and(Value::is_number) => {
                TokenIds::from_items(items).map(Prediction::Tokens).map_err(|e| format!("`content` {e}"))
            }
            Some(Value::Array(parts)) => parts
                .iter()
                .map(|p| match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => Ok(t),
                    _ => Err("`content` parts must be {\"type\": \"text\", \"text\": \"...\"}".to_string()),
                })
                .collect::<Result<String, _>>()
                .map(Prediction::Text),
            Some(other) => {
                Err(format!("`content` {}", want("a string, a list of text parts or a list of token ids", other)))
            }
            None => Err("needs `content`".into()),
        }
    }
}

/// `stop`: a string or a list of non-empty strings (at most `MAX_STOPS`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stop(pub Vec<String>);

impl FromJson for Stop {
    fn from_json(v: Value) -> Result<Self, String> {
        let list: Vec<String> = match v {
            Value::String(s) => vec![s],
            Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    other => Err(format!("must hold strings, found {}", kind(&other))),
                })
                .collect::<Result<_, _>>()?,
            other => return Err(want("a string or a list of strings", &other)),
        };
        if list.len() > MAX_STOPS {
            return Err(format!("may hold at most {MAX_STOPS} strings, got {}", list.len()));
        }
        if list.iter().any(String::is_empty) {
            return Err("strings must not be empty".into());
        }
        Ok(Stop(list))
    }
}

/// `logit_bias`: `{"token id": bias}` with bias in [-100, 100]; the ids are checked against the vocabulary later.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogitBias(pub Vec<(u32, f64)>);

impl FromJson for LogitBias {
    fn from_json(v: Value) -> Result<Self, String> {
        let Value::Object(m) = v else { return Err(want("an object", &v)) };
        m.iter()
            .map(|(k, v)| {
                let id: u32 = k.trim().parse().map_err(|_| format!("keys must be token ids, got {k:?}"))?;
                match v.as_f64() {
                    Some(b) if (-100.0..=100.0).contains(&b) => Ok((id, b)),
                    Some(b) => Err(format!("value for token {id} must be between -100 and 100, got {b}")),
                    None => Err(format!("value for token {id} {}", want("a number", v))),
                }
            })
            .collect::<Result<_, _>>()
            .map(LogitBias)
    }
}

/// `stream_options`: `{"include_usage": bool}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamOptions {
    pub include_usage: bool,
}

impl FromJson for StreamOptions {
    fn from_json(v: Value) -> Result<Self, String> {
        let Value::Object(m) = v else { return Err(want("an object", &v)) };
        match m.get("include_usage") {
            None | Some(Value::Null) => Ok(Self::default()),
            Some(Value::Bool(b)) => Ok(Self { include_usage: *b }),
            Some(_) => Err("`stream_options.include_usage` must be a boolean".into()),
        }
    }
}

/// `response_format`: `{"type": "text"}`, `{"type": "json_object"}` or
/// `{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ResponseFormat {
    #[default]
    Text,
    JsonObject,
    /// The schema (absent: any JSON object).
    JsonSchema(Option<Value>),
}

impl FromJson for ResponseFormat {
    fn from_json(v: Value) -> Result<Self, String> {
        let Value::Object(m) = v else { return Err(want("an object", &v)) };
        match m.get("type") {
            Some(Value::String(t)) if t == "text" => Ok(Self::Text),
            Some(Value::String(t)) if t == "json_object" => Ok(Self::JsonObject),
            Some(Value::String(t)) if t == "json_schema" => {
                let Some(js) = m.get("json_schema") else {
                    return Err("`response_format.json_schema` is required with type `json_schema`".into());
                };
                let Value::Object(js) = js else {
                    return Err(format!("`response_format.json_schema` {}", want("an object", js)));
                };
                match js.get("schema") {
                    None | Some(Value::Null) => Ok(Self::JsonSchema(None)),
                    Some(s @ (Value::Object(_) | Value::Bool(_))) => Ok(Self::JsonSchema(Some(s.clone()))),
                    Some(s) => Err(format!("`response_format.json_schema.schema` {}", want("an object", s))),
                }
            }
            Some(Value::String(t)) => {
                Err(format!("`response_format.type` must be `text`, `json_object` or `json_schema`, got `{t}`"))
            }
            None => Err("`response_format.type` is required".into()),
            Some(other) => Err(format!("`response_format.type` {}", want("a string", other))),
        }
    }
}

/// A JSON schema as a field: an object or a boolean (or a string holding one, as some clients send it).
#[derive(Debug, Clone, PartialEq)]
pub struct JsonValue(pub Value);

impl FromJson for JsonValue {
    fn from_json(v: Value) -> Result<Self, String> {
        match v {
            Value::Object(_) | Value::Bool(_) => Ok(Self(v)),
            Value::String(s) => match serde_json::from_str::<Value>(&s) {
                Ok(inner @ (Value::Object(_) | Value::Bool(_))) => Ok(Self(inner)),
                _ => Err("must be a JSON schema (an object, or a string holding one)".into()),
            },
            other => Err(want("a JSON schema (an object)", &other)),
        }
    }
}

/// OpenAI's `usage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
    pub completion_tokens_details: CompletionTokensDetails,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

/// Speculation's share of the completion: drafted tokens (from `prediction` or prompt lookup) that verification
/// kept, and that it did not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CompletionTokensDetails {
    pub accepted_prediction_tokens: usize,
    pub rejected_prediction_tokens: usize,
}

impl Usage {
    /// The prompt's tokens (of them `cached` read from the prompt cache) and the completion's.
    pub fn new(prompt_tokens: usize, completion_tokens: usize, cached_tokens: usize) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
            completion_tokens_details: CompletionTokensDetails::default(),
        }
    }
}

/// `{"error": {"message", "type", "param", "code"}}`: every failure, in OpenAI's shape.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorBody<'a> {
    pub error: ErrorObject<'a>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ErrorObject<'a> {
    pub message: &'a str,
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub param: Option<&'a str>,
    pub code: Option<&'a str>,
}

/// What every response and chunk of one request repeats.
#[derive(Debug, Clone)]
pub struct ResponseMeta {
    pub id: String,
    pub created: u64,
    pub model: String,
}

/// A whole (non-streamed) response: `chat.completion` or `text_completion`.
#[derive(Debug, Serialize)]
pub struct Response<'a, C> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: Vec<C>,
    pub usage: Usage,
    /// Always `null`: there is no fingerprint of the serving setup yet.
    pub system_fingerprint: Option<&'a str>,
}

impl<'a, C> Response<'a, C> {
    pub fn new(meta: &'a ResponseMeta, object: &'static str, choices: Vec<C>, usage: Usage) -> Self {
        Self {
            id: &meta.id,
            object,
            created: meta.created,
            model: &meta.model,
            choices,
            usage,
            system_fingerprint: None,
        }
    }
}

/// One streamed chunk. With `stream_options.include_usage`, every chunk carries `"usage": null` and the last one
/// (with no choices) the totals; without it, no chunk has the field.
#[derive(Debug, Serialize)]
pub struct Chunk<'a, C> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: Vec<C>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

impl<'a, C> Chunk<'a, C> {
    /// A chunk with `choices`; `include_usage` adds `"usage": null`.
    pub fn new(meta: &'a ResponseMeta, object: &'static str, choices: Vec<C>, include_usage: bool) -> Self {
        Self {
            id: &meta.id,
            object,
            created: meta.created,
            model: &meta.model,
            choices,
            usage: include_usage.then_some(None),
        }
    }

    /// The last chunk of a stream that asked for usage.
    pub fn usage(meta: &'a ResponseMeta, object: &'static str, usage: Usage) -> Self {
        Self {
            id: &meta.id,
            object,
            created: meta.created,
            model: &meta.model,
            choices: Vec::new(),
            usage: Some(Some(usage)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chunks_carry_usage_only_when_asked() {
        let meta = ResponseMeta { id: "x-1".into(), created: 7, model: "m".into() };
        let plain = serde_json::to_value(Chunk::new(&meta, "o", vec![1], false)).unwrap_or_default();
        assert_eq!(plain, json!({"id": "x-1", "object": "o", "created": 7, "model": "m", "choices": [1]}));
        let asked = serde_json::to_value(Chunk::new(&meta, "o", vec![1], true)).unwrap_or_default();
        assert_eq!(asked["usage"], Value::Null);
        assert!(asked.as_object().is_some_and(|o| o.contains_key("usage")));
        let totals = Usage::new(3, 2, 1);
        let last = serde_json::to_value(Chunk::<u8>::usage(&meta, "o", totals)).unwrap_or_default();
        assert_eq!(last["choices"], json!([]));
        assert_eq!(
            last["usage"],
            json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1},
                "completion_tokens_details": {"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}})
        );
        let whole = serde_json::to_string(&Response::new(&meta, "o", vec![1], totals)).unwrap_or_default();
        assert!(
            whole.starts_with(r#"{"id":"x-1","object":"o","created":7,"model":"m","choices":[1],"usage":{"#),
            "{whole}"
        );
        assert!(whole.ends_with(r#""system_fingerprint":null}"#), "{whole}");
    }
}
