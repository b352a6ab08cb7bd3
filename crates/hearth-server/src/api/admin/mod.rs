//! Operational and llama-server-style utility routes: `/v1` (the index of endpoints), `/health`, `/stats`,
//! `/engine` ([`status`]), `/metrics` ([`metrics`]), the prompt cache ([`cache`]), draining ([`drain`]), `/tokenize`,
//! `/detokenize` and `/apply-template` ([`tokens`]). None of them waits for the engine thread.

pub mod cache;
pub mod drain;
pub mod metrics;
pub mod status;
pub mod tokens;

use axum::Json;

/// Every endpoint: method, path, what it does (`GET /v1`).
pub const ENDPOINTS: &[(&str, &str, &str)] = &[
    ("POST", "/v1/chat/completions", "OpenAI Chat Completions, streamed or not"),
    ("POST", "/v1/completions", "OpenAI Completions, streamed or not"),
    ("POST", "/v1/messages", "Anthropic Messages, streamed or not"),
    ("POST", "/v1/messages/count_tokens", "Anthropic: a Messages request's prompt length"),
    ("POST", "/v1/embeddings", "OpenAI Embeddings (with an embedding model)"),
    ("POST", "/v1/responses", "OpenAI Responses, streamed or not"),
    ("GET", "/v1/responses/{id}", "a stored response"),
    ("DELETE", "/v1/responses/{id}", "delete a stored response"),
    ("GET", "/v1/models", "the served model"),
    ("GET", "/v1/models/{id}", "the served model by id"),
    ("GET", "/v1", "this index"),
    ("GET", "/metrics", "Prometheus metrics"),
    ("GET", "/health", "liveness and readiness"),
    ("GET", "/stats", "engine counters (JSON)"),
    ("GET", "/engine", "where the engine runs (in process or an isolated child), its restarts"),
    ("POST", "/admin/cache/flush", "write the prompt cache to the SSD tier"),
    ("POST", "/admin/drain", "stop admitting generation, finish what runs, flush the cache"),
    ("POST", "/admin/undrain", "admit generation requests again"),
    ("POST", "/tokenize", "text to token ids"),
    ("POST", "/detokenize", "token ids to text"),
    ("POST", "/apply-template", "messages to the chat template's prompt"),
];

/// `GET /v1`: `{"object": "list", "data": [{"method", "path", "description"}]}`.
pub async fn index() -> Json<serde_json::Value> {
    let data: Vec<_> = ENDPOINTS
        .iter()
        .map(|(method, path, what)| serde_json::json!({"method": method, "path": path, "description": what}))
        .collect();
    Json(serde_json::json!({"object": "list", "data": data}))
}
