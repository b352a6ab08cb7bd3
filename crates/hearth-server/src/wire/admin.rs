//! The utility routes' bodies (`/health`, `/stats`, `/tokenize`, `/detokenize`, `/apply-template`; llama-server's
//! shapes), the admin routes' (`/engine`, `/admin/...`) and `/v1/models`.

use super::de::{opt, parse, TokenIds};
use super::{RequestBody, ShapeError};
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
    fn from_body(body: &Value) -> Result<Self, ShapeError> {
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
    fn from_body(body: &Value) -> Result<Self, ShapeError> {
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

/// `/health`: `ok`, `loading`, `degraded` (an isolated engine is restarting) or `error` (with a message).
#[derive(Debug, Serialize)]
pub struct Health {
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<std::borrow::Cow<'static, str>>,
}

/// `GET /engine`: where the engine runs and how it fares.
#[derive(Debug, Serialize)]
pub struct EngineReport {
    /// Whether the engine runs in a child process (`--isolate`).
    pub isolated: bool,
    /// The engine process: the child's while one is up, this process's without isolation.
    pub pid: Option<u32>,
    pub restarts: u64,
    /// `starting`, `up` or `restarting` (`up` or `stopped` without isolation).
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<String>,
    /// Milliseconds from a crash to the new child's readiness: the last restart's, and the median and 95th
    /// percentile of all of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_restart_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_ms_p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_ms_p95: Option<f64>,
    /// The engines of this server and their models (one: model pools are not built yet).
    pub pool: Vec<PoolEntry>,
}

#[derive(Debug, Serialize)]
pub struct PoolEntry {
    pub model: String,
    pub loaded: bool,
    pub state: &'static str,
    pub pid: Option<u32>,
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
    /// The KV cache's bytes, and how it keeps its rows (`--kv-cache-dtype`).
    pub kv_capacity_bytes: u64,
    pub kv_cache_dtype: String,
    pub max_positions: usize,
    /// Every runtime lever's effective value (`hearth levers`), by variable name.
    pub levers: serde_json::Map<String, serde_json::Value>,
}

/// `POST /admin/drain`: every admitted request has finished and the prompt cache is written.
#[derive(Debug, Serialize)]
pub struct DrainResponse {
    pub drained: bool,
    /// Sequences (choices) running or queued when the drain began; all have finished.
    pub rows_finished: usize,
    /// How long the drain waited for them.
    pub waited_ms: u64,
    /// Whether the prompt cache was written to the SSD tier (false: there is none).
    pub ssd_flushed: bool,
    /// The SSD tier after the flush.
    pub ssd_files: usize,
    pub ssd_bytes: u64,
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
    /// What the model reads: `["text"]`, or `["text", "image"]` for a vision-language model.
    pub input_modalities: Vec<&'static str>,
    /// With a model pool: whether the model's engine is resident now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loaded: Option<bool>,
}
