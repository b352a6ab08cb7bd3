//! The utility routes' bodies (`/health`, `/stats`, `/tokenize`, `/detokenize`, `/apply-template`; llama-server's
//! shapes) and `/v1/models`.

use super::de::{opt, parse, TokenIds};
use crate::error::ApiResult;
use crate::wire::RequestBody;
use hearth_engine::engine::EngineStats;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TokenizeRequest {
    #[serde(deserialize_with = "opt")]
    pub content: Option<String>,
    #[serde(deserialize_with = "opt")]
    pub add_special: Option<bool>,
    #[serde(deserialize_with = "opt")]
    pub with_pieces: Option<bool>,
}

impl RequestBody for TokenizeRequest {
    fn from_body(body: &Value) -> ApiResult<Self> {
        parse(body)
    }
}

#[derive(Debug, Serialize)]
pub struct TokenizeResponse {
    pub tokens: Tokens,
}

/// Plain ids, or `{"id", "piece"}` objects with `with_pieces`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Tokens {
    Ids(Vec<u32>),
    Pieces(Vec<Piece>),
}

#[derive(Debug, Serialize)]
pub struct Piece {
    pub id: u32,
    pub piece: String,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct DetokenizeRequest {
    #[serde(deserialize_with = "opt")]
    pub tokens: Option<TokenIds>,
}

impl RequestBody for DetokenizeRequest {
    fn from_body(body: &Value) -> ApiResult<Self> {
        parse(body)
    }
}

#[derive(Debug, Serialize)]
pub struct DetokenizeResponse {
    pub content: String,
}

#[derive(Debug, Serialize)]
pub struct ApplyTemplateResponse {
    pub prompt: String,
}

/// `/health`: `ok`, `loading` or `error` (with a message).
#[derive(Debug, Serialize)]
pub struct Health {
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<&'static str>,
}

/// `/stats`: the engine's counters plus what the server was started with.
#[derive(Debug, Serialize)]
pub struct Stats {
    #[serde(flatten)]
    pub engine: EngineStats,
    pub model: String,
    pub device: String,
    pub max_batch: usize,
    pub kv_capacity_tokens: usize,
    pub max_positions: usize,
    /// Every runtime lever's effective value (`hearth levers`), by variable name.
    pub levers: serde_json::Map<String, serde_json::Value>,
}

/// `POST /admin/cache/flush`: everything cached is durable on the SSD tier, which now holds this much.
#[derive(Debug, Serialize)]
pub struct CacheFlushResponse {
    pub status: &'static str,
    pub files: usize,
    pub bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelObject>,
}

#[derive(Debug, Serialize)]
pub struct ModelObject {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub max_model_len: usize,
}
