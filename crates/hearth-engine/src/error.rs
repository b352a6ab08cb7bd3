//! The engine's error type. Messages say what was wrong and what to do about it.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--model` could not be resolved to something loadable.
    #[error("{0}")]
    ModelNotFound(String),
    /// The model exists but uses something hearth does not support (architecture, tensor type, tokenizer).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The model (or the KV cache asked for) does not fit in the device's memory.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// A model file is malformed or inconsistent.
    #[error("invalid model file: {0}")]
    InvalidModel(String),
    /// A chat template failed to compile or render.
    #[error("chat template: {0}")]
    Template(String),
    /// Tokenizer construction or encode/decode failure.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Invalid request parameters (sampling, lengths).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }
}
