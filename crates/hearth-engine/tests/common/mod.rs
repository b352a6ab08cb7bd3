//! Shared helpers for the engine's integration tests: goldens and real models.
#![allow(dead_code)]

use hearth_engine::generate::{load, LoadedModel};
use std::path::PathBuf;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn golden(name: &str) -> serde_json::Value {
    let p = repo_root().join("tests/goldens").join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("golden {} missing ({e}); see tools/oracle/README.md", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("golden {}: {e}", p.display()))
}

pub fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(name)
}

/// Load a real model by alias on the CPU. Fails (never skips) when the model is missing: run scripts/fetch-models.
pub fn real_model(alias: &str) -> LoadedModel {
    load(alias, &candle_core::Device::Cpu, None).unwrap_or_else(|e| panic!("loading {alias}: {e} (run scripts/fetch-models)"))
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap_or_else(|| panic!("expected an id array, got {v}")).iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

pub fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// [[id, logit], ...]
pub fn pairs(v: &serde_json::Value) -> Vec<(usize, f32)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_f64().unwrap() as f32))
        .collect()
}
