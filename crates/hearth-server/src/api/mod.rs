//! The handlers of each API, peers that import none of each other: [`openai`] (Chat Completions, Completions,
//! Embeddings, Models), [`anthropic`] (Messages), [`responses`] (the Responses API) and [`admin`] (health, stats,
//! metrics, the prompt cache, draining, the text utilities). Each reads its typed body through `http::body`,
//! translates it for the chat core (`chat`) and renders what `output` yields in its own shape.

pub mod admin;
pub mod anthropic;
pub mod openai;
pub mod responses;
