//! Sentence embeddings: an encoder model (`models::bert`, or a causal decoder through [`decoder`]), the pooling
//! and normalization its sentence-transformers directory declares, and a worker thread that batches concurrent
//! requests.
//!
//! ```no_run
//! # async fn f() -> hearth_engine::Result<()> {
//! use hearth_engine::embed::{self, Embedder, EmbedderOptions};
//! let e = Embedder::load("all-minilm-l6-v2", &candle_core::Device::Cpu, &EmbedderOptions::default())?;
//! let handle = embed::start(e)?; // Clone + Send + Sync: one per server, cloned into handlers
//! let ids = handle.tokenize("hello world").map_err(|e| hearth_engine::Error::InvalidRequest(e.to_string()))?;
//! let _vectors = handle.embed(vec![ids]).await;
//! # Ok(()) }
//! ```

pub mod batch;
pub mod decoder;
pub mod embedder;
pub mod pooling;
pub mod worker;

pub use batch::BatchLimits;
pub use embedder::{Embedder, EmbedderInfo, EmbedderOptions};
pub use pooling::Pooling;
pub use worker::{start, EmbedError, EmbedderHandle, EmbeddingReply};
