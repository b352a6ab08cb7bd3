//! `/v1/embeddings` on the wire.

use super::completions::{prompt_list, Prompt};
use super::de::{opt, parse, FromJson};
use super::{RequestBody, ShapeError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most inputs in one request (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// `input`: a string, a list of strings, token ids, or a list of token-id lists.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs(pub Vec<Prompt>);

impl FromJson for Inputs {
    fn from_json(v: Value) -> Result<Self, String> {
        prompt_list(v, MAX_INPUTS, "inputs").map(Inputs)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct EmbeddingsRequest {
    #[serde(deserialize_with = "opt")]
    pub input: Option<Inputs>,
    /// `float` (default) or `base64` (little-endian f32 bytes).
    #[serde(deserialize_with = "opt")]
    pub encoding_format: Option<String>,
    #[serde(deserialize_with = "opt")]
    pub dimensions: Option<i64>,
}

impl RequestBody for EmbeddingsRequest {
    fn from_body(body: &Value) -> Result<Self, ShapeError> {
        parse(body)
    }
}

/// One vector: numbers, or a base64 string of its little-endian f32 bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Embedding {
    pub object: &'static str,
    pub index: usize,
    pub embedding: Vector,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EmbeddingsUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbeddingsResponse {
    pub object: &'static str,
    pub data: Vec<Embedding>,
    pub model: String,
    pub usage: EmbeddingsUsage,
}
