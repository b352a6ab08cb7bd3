//! Typed serde structs for every body the server reads or writes: requests, responses, stream chunks, errors.
//! Field names are OpenAI's (or llama-server's for the utility routes); the handlers never assemble JSON by hand.
//!
//! Requests are lenient the way OpenAI's clients need: unknown fields are ignored and `null` means "not set". When
//! a field has the wrong shape the answer is a 400 whose `param` names it and whose message says what it should
//! be, in the API's words (`` `temperature` must be a number, got a string ``), not serde's (`invalid type: string
//! "hot", expected f64`). How that is done, and why:
//!
//! - Every request field is `Option<T>` deserialized through `de::opt`, which takes the JSON value and hands it to
//!   `T: de::FromJson`; that says what shape `T` takes and words the complaint relative to the field. Union types
//!   (`stop`: string or list; `prompt`: four shapes) are `FromJson` too: serde's untagged enums would answer
//!   "data did not match any variant".
//! - `de::parse` runs serde through `serde_path_to_error`, which knows which field failed, and prefixes its name.
//!   (Axum's own `Json` extractor uses the same crate.)
//! - Range and vocabulary checks need the loaded model or name a limit, so they run after deserialization, in
//!   `chat::params` and the handlers.
//! - Chat and completions share `GenerationParams`. Each request type is several structs read from the same JSON
//!   object rather than one struct with `#[serde(flatten)]`: flatten buffers the fields and deserializes them
//!   outside `serde_path_to_error`'s view, so the failing field's name would be lost.
//! - `messages` and `tools` stay JSON values: chat templates read whatever fields a client puts in a message, so
//!   `chat::template` checks the parts the server relies on and passes the rest through.
//!
//! This layer imports nothing of the server's runtime: its failures are [`ShapeError`]s, which `error::ApiError`
//! turns into the API's error.

pub mod admin;
pub mod anthropic;
pub mod chat;
pub mod common;
pub mod completions;
pub mod de;
pub mod embeddings;
pub mod responses;
pub mod shape;

pub use common::{Chunk, ErrorBody, ErrorObject, GenerationParams, Response, ResponseMeta, Usage};
pub use shape::ShapeError;

use serde_json::Value;

/// A request body type, built from the request's JSON object (`http::body::JsonBody` extracts it).
pub trait RequestBody: Sized {
    fn from_body(body: &Value) -> Result<Self, ShapeError>;
}
