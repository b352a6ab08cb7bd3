//! Sampling: request parameters, logit processors (bias, penalties), and the per-row sampler (greedy,
//! temperature, top-k, top-p, min-p, XTC) with a seeded RNG and log-probabilities.

pub mod gbnf;
pub mod grammar;
pub mod lark;
pub mod params;
pub mod processors;
pub mod rng;
pub mod sampler;

pub use params::SamplingParams;
pub use sampler::{Sampled, Sampler, TopLogprob};
