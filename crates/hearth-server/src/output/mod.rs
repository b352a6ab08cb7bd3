//! What a submitted request yields, in no API's shape: [`generation`] drives the engine's streams through each
//! choice's text pipeline ([`text`]: detokenizing, stop strings) into events; [`answer`] splits a choice's text into
//! its thought ([`reasoning`]), its text and its tool calls ([`tools`]), or a harmony answer's channels ([`harmony`]); [`sse`] streams events as server-sent
//! events in whatever shape an API's `ChunkFormat` gives them; [`metrics`] counts what passes.

pub mod answer;
pub mod generation;
pub mod harmony;
pub mod metrics;
pub mod reasoning;
pub mod sse;
pub mod text;
pub mod tools;
