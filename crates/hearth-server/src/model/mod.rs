//! The served models: [`Ready`] (a generative model: its [`Engine`] (which compiles output constraints), tokenizer and defaults),
//! [`Embedding`] (an embedding model), the engine itself ([`engine`], in process or isolated in a child process:
//! [`isolate`]) and the model pool of several models ([`pool`]). Nothing here knows HTTP routes or API shapes.

pub mod engine;
pub mod isolate;
pub mod pool;

pub use engine::Engine;

use crate::config::SamplingDefaults;
use crate::error::{ApiError, ApiResult};
use axum::http::StatusCode;
use hearth_engine::embed::EmbedderHandle;
use hearth_engine::tokenizer::Tokenizer;
use std::sync::Arc;

/// Everything a request needs once the model is loaded.
pub struct Ready {
    pub engine: Engine,
    pub tokenizer: Arc<Tokenizer>,
    /// The model's id in requests and responses (`--served-model-name`, else from `--model`).
    pub model_id: String,
    /// The device, in words (for the banner and /stats).
    pub device: String,
    pub defaults: SamplingDefaults,
    /// `enable_thinking` for requests that do not set it (`--reasoning`); None: the template's default.
    pub reasoning: Option<bool>,
    /// Unix time the model became ready (`created` in /v1/models).
    pub created: u64,
    /// The model's images (None for a text model) and the media fetch's policy.
    pub images: crate::chat::images::ImageSupport,
}

impl Ready {
    /// Most tokens (prompt + completion) one request can ever hold.
    pub fn max_request_tokens(&self) -> usize {
        self.engine.info().max_request_tokens
    }

    /// Write every cached KV block to the SSD tier and wait until it is durable; false when there is no SSD tier.
    pub async fn flush_ssd(&self) -> ApiResult<bool> {
        self.engine.flush().await.map_err(|e| {
            if self.engine.is_alive() {
                ApiError::internal(e)
            } else {
                ApiError::from_status(StatusCode::SERVICE_UNAVAILABLE, e)
            }
        })
    }
}

/// The embedding model, when the server has one (`--embedding-model`, or `--model` naming one).
pub struct Embedding {
    pub handle: EmbedderHandle,
    /// Its id in requests and responses.
    pub model_id: String,
    pub created: u64,
}
