//! `/v1/completions` on the wire.

use super::common::GenerationParams;
use super::de::{kind, opt, parse, want, FromJson, TokenIds};
use super::{RequestBody, ShapeError};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most prompts in one request.
pub const MAX_PROMPTS: usize = 64;

/// The completions-only fields.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct CompletionOptions {
    #[serde(deserialize_with = "opt")]
    pub prompt: Option<Prompts>,
    /// How many alternatives to report per token (0..=20).
    #[serde(deserialize_with = "opt")]
    pub logprobs: Option<i64>,
    #[serde(deserialize_with = "opt")]
    pub echo: Option<bool>,
    #[serde(deserialize_with = "opt")]
    pub suffix: Option<String>,
    #[serde(deserialize_with = "opt")]
    pub best_of: Option<i64>,
    /// vLLM's: each choice also lists its tokens' ids (`token_ids`).
    #[serde(deserialize_with = "opt")]
    pub return_token_ids: Option<bool>,
}

/// A completions request: two views of one JSON object (see `wire`'s module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompletionRequest {
    pub params: GenerationParams,
    pub options: CompletionOptions,
}

impl RequestBody for CompletionRequest {
    fn from_body(body: &Value) -> Result<Self, ShapeError> {
        Ok(Self { params: parse(body)?, options: parse(body)? })
    }
}

/// One prompt: text (tokenized by the server) or token ids (checked against the vocabulary later).
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(String),
    Tokens(TokenIds),
}

/// `prompt`: a string, a list of strings, a list of token ids, or a list of lists of token ids (at most
/// `MAX_PROMPTS`, none empty).
#[derive(Debug, Clone, PartialEq)]
pub struct Prompts(pub Vec<Prompt>);

impl FromJson for Prompts {
    fn from_json(v: Value) -> Result<Self, String> {
        prompt_list(v, MAX_PROMPTS, "prompts").map(Prompts)
    }
}

/// A string, a list of strings, a list of token ids, or a list of lists of token ids, as at most `max` texts or
/// token lists (none empty); `noun` names them in the complaint.
pub fn prompt_list(v: Value, max: usize, noun: &str) -> Result<Vec<Prompt>, String> {
    let prompts = match v {
        Value::String(s) => vec![Prompt::Text(s)],
        Value::Array(items) => match items.first() {
            None => return Err("must not be an empty list".into()),
            Some(Value::String(_)) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(Prompt::Text(s)),
                    other => Err(format!("mixes strings with {}", kind(&other))),
                })
                .collect::<Result<_, _>>()?,
            Some(Value::Number(_)) => vec![Prompt::Tokens(TokenIds::from_items(&items)?)],
            Some(Value::Array(_)) => items
                .iter()
                .map(|v| match v {
                    Value::Array(a) if a.is_empty() => Err("holds an empty token list".to_string()),
                    Value::Array(a) => TokenIds::from_items(a).map(Prompt::Tokens),
                    other => Err(format!("mixes token lists with {}", kind(other))),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(format!("list items must be strings, token ids or token lists, got {}", kind(other)))
            }
        },
        other => return Err(want("a string, a list of strings, or token ids", &other)),
    };
    if prompts.len() > max {
        return Err(format!("may hold at most {max} {noun}, got {}", prompts.len()));
    }
    Ok(prompts)
}

/// One choice of a `text_completion` (whole or streamed).
#[derive(Debug, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
    /// The generated tokens' ids (with `return_token_ids`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
}

/// Completions' log-probabilities: parallel lists, one entry per token (an echoed prompt's tokens first: the
/// first of them has no log-probability, `null`).
#[derive(Debug, Default, Serialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Option<TopLogprobs>>,
    /// Character offset in the choice's `text` where each token's text was released.
    pub text_offset: Vec<usize>,
}

impl CompletionLogprobs {
    /// `self`'s entries followed by `more`'s.
    pub fn append(&mut self, more: CompletionLogprobs) {
        self.tokens.extend(more.tokens);
        self.token_logprobs.extend(more.token_logprobs);
        self.top_logprobs.extend(more.top_logprobs);
        self.text_offset.extend(more.text_offset);
    }
}

/// `{"token": logprob, ...}` in rank order; a token text seen twice keeps its first (higher) value.
#[derive(Debug, Default)]
pub struct TopLogprobs(pub Vec<(String, f32)>);

impl TopLogprobs {
    pub fn push(&mut self, token: String, logprob: f32) {
        if !self.0.iter().any(|(t, _)| *t == token) {
            self.0.push((token, logprob));
        }
    }
}

impl Serialize for TopLogprobs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (token, logprob) in &self.0 {
            m.serialize_entry(token, logprob)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_logprobs_keep_rank_order_and_first_value() {
        let mut top = TopLogprobs::default();
        top.push("b".into(), -0.5);
        top.push("a".into(), -1.0);
        top.push("b".into(), -2.0);
        assert_eq!(serde_json::to_string(&top).unwrap_or_default(), r#"{"b":-0.5,"a":-1.0}"#);
    }
}
