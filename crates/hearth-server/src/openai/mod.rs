//! OpenAI-compatible routes: `/v1/chat/completions`, `/v1/completions`, `/v1/models`.

pub mod chat;
pub mod completions;
pub mod logprobs;
pub mod messages;
pub mod models;
pub mod params;

use crate::generation::UsageTotals;
use serde_json::{json, Value};

/// OpenAI's `usage` object.
pub fn usage_json(u: UsageTotals) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

/// What every response and chunk of one request repeats.
#[derive(Debug, Clone)]
pub struct ResponseMeta {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl ResponseMeta {
    /// `{"id", "object", "created", "model", "choices"}` (+ `"usage": null` on stream chunks when usage is asked).
    pub fn envelope(&self, object: &str, choices: Value, usage: Option<Value>) -> Value {
        let mut v = json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": choices});
        if let Some(u) = usage {
            v["usage"] = u;
        }
        v
    }
}
