//! The protocol-neutral chat core. Chat Completions, Anthropic Messages and Responses each translate their typed
//! body into a [`ChatRequest`]; [`prepare`] checks it against the model and builds the engine request (sampling:
//! [`params`]; the chat template's prompt: [`template`]; the output constraint: [`constraint`]; tools and their
//! grammar: [`tools`]), on the blocking pool ([`offload`]); [`submit`] queues it in the engine. What comes back is
//! `output`'s to split and each API's to shape.

pub mod constraint;
pub mod images;
pub mod offload;
pub mod params;
pub mod request;
pub mod submit;
pub mod template;
pub mod tools;

pub use request::{ChatRequest, FieldNames};
pub use submit::{prepare, submit, Prepared, Submitted};
