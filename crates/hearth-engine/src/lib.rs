//! hearth-engine: the inference core. Weights, model architectures, attention over a KV view, tokenizer and chat
//! templates, sampling. It knows nothing of HTTP or the command line.

pub mod attention;
pub mod cpu_activation;
pub mod cpu_matmul;
#[cfg(target_arch = "x86_64")]
mod cpu_simd;
pub mod device;
pub mod embed;
pub mod engine;
pub mod error;
pub mod generate;
pub mod gpu;
pub mod kv;
pub mod levers;
pub mod loader;
pub mod malloc;
pub mod models;
pub mod recurrent;
pub mod sampling;
pub mod scheduler;
pub mod sizing;
pub mod speculative;
pub mod tokenizer;
pub mod types;
pub mod vision;
pub mod weights;
pub mod work_pool;

pub use error::{Error, Result};
