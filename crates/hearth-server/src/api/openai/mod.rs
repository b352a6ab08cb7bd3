//! OpenAI-compatible routes: `/v1/chat/completions`, `/v1/completions`, `/v1/models`.

pub mod chat;
pub mod completions;
pub mod constraint;
pub mod logprobs;
pub mod messages;
pub mod models;
pub mod params;
