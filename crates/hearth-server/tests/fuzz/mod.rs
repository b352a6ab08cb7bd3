//! The request fuzzer's parts: a seeded generator, a ready router over a fake model, random and valid bodies,
//! mutations, and the checks every answer must pass. `fuzz_requests.rs` runs them.

#![allow(dead_code)]

pub mod cases;
pub mod check;
pub mod rng;
pub mod server;
pub mod values;
