//! Shared helpers for the engine's integration tests: goldens and real models.
#![allow(dead_code)]

use hearth_engine::loader::{load, LoadedModel};
use std::path::PathBuf;

/// The checkout the tests were built in, or `HEARTH_REPO_ROOT` (a test binary carried to another machine).
pub fn repo_root() -> PathBuf {
    match std::env::var_os("HEARTH_REPO_ROOT") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."),
    }
}

pub fn golden(name: &str) -> serde_json::Value {
    let p = repo_root().join("tests/goldens").join(name);
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("golden {} missing ({e}); see tools/oracle/README.md", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("golden {}: {e}", p.display()))
}

pub fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(name)
}

/// Load a real model by alias on the CPU. Fails (never skips) when the model is missing: run scripts/fetch-models.
pub fn real_model(alias: &str) -> LoadedModel {
    load(alias, &candle_core::Device::Cpu, None)
        .unwrap_or_else(|e| panic!("loading {alias}: {e} (run scripts/fetch-models)"))
}

/// Collect (tokens, finish reason) of choice 0 of an engine request.
pub fn collect(mut s: hearth_engine::engine::RequestStream) -> (Vec<u32>, hearth_engine::engine::FinishReason) {
    use hearth_engine::engine::EngineEvent;
    let mut ids = Vec::new();
    loop {
        match s.blocking_next().expect("stream ended without Finished") {
            EngineEvent::Token { id, .. } => ids.push(id),
            EngineEvent::Finished { reason, .. } => return (ids, reason),
            EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
            EngineEvent::PromptLogprobs { .. } => {}
        }
    }
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected an id array, got {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

pub fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// [[id, logit], ...]
pub fn pairs(v: &serde_json::Value) -> Vec<(usize, f32)> {
    v.as_array().unwrap().iter().map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_f64().unwrap() as f32)).collect()
}

/// Logit gap (top-1 minus top-2, in the reference) below which a greedy disagreement is a tie, not a bug.
pub const GAP_MARGIN: f32 = 0.5;
pub struct Tol {
    pub max_abs: f32,
    pub rel_rms: f32,
}

/// (max-abs, relative RMS) of `ours` against a reference's sampled and top logits.
pub fn logit_diff(ours: &[f32], reference: &serde_json::Value) -> (f32, f32) {
    let mut pts = pairs(&reference["sample"]);
    pts.extend(pairs(&reference["top"]));
    let (mut max_abs, mut se, mut ss) = (0f32, 0f64, 0f64);
    for &(id, want) in &pts {
        let d = (ours[id] - want).abs();
        max_abs = max_abs.max(d);
        se += (d as f64).powi(2);
        ss += (want as f64).powi(2);
    }
    (max_abs, (se / ss.max(1e-12)).sqrt() as f32)
}

pub fn compare_logits(name: &str, ours: &[f32], reference: &serde_json::Value, tol: &Tol) -> (f32, f32) {
    let (max_abs, rel_rms) = logit_diff(ours, reference);
    eprintln!(
        "{name}: max_abs {max_abs:.4} rel_rms {rel_rms:.5} over {} ids",
        pairs(&reference["sample"]).len() + pairs(&reference["top"]).len()
    );
    assert!(max_abs <= tol.max_abs, "{name}: max-abs logit diff {max_abs} > {}", tol.max_abs);
    assert!(rel_rms <= tol.rel_rms, "{name}: relative RMS {rel_rms} > {}", tol.rel_rms);
    // The reference's top-1 must be our top-1 when its margin is clear.
    let top = pairs(&reference["top"]);
    if top.len() > 1 && top[0].1 - top[1].1 > GAP_MARGIN {
        let ours_top = hearth_engine::sampling::sampler::argmax(ours);
        assert_eq!(ours_top, top[0].0, "{name}: top-1 differs");
    }
    (max_abs, rel_rms)
}

pub fn greedy_matches(name: &str, ours: &[u32], reference: &serde_json::Value, margin: f32) {
    let want = ids(&reference["greedy"]);
    let gaps = floats(&reference["gaps"]);
    for (i, (&o, &w)) in ours.iter().zip(&want).enumerate() {
        if o != w {
            assert!(
                gaps[i] < margin,
                "{name}: greedy token {i} is {o}, reference {w}, with a clear reference gap {}",
                gaps[i]
            );
            eprintln!("{name}: diverged at step {i} on a near-tie (gap {:.3})", gaps[i]);
            return;
        }
    }
}

/// An engine configuration for tests: `blocks` KV blocks of 16 tokens, `batch` rows, steps of 64 prompt tokens (32
/// of one prompt while rows decode), no prompt cache, no speculation.
pub fn test_config(blocks: usize, batch: usize) -> hearth_engine::engine::EngineConfig {
    hearth_engine::engine::EngineConfig {
        max_batch: batch,
        kv_block_size: 16,
        kv_blocks: blocks,
        step_tokens: 64,
        step_tokens_decoding: 32,
        max_prefill_rows: 0,
        max_queue: 64,
        cache: Default::default(),
        spec: Default::default(),
    }
}

/// A greedy request for `prompt` that ignores EOS (it runs to `max_tokens`).
pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> hearth_engine::engine::EngineRequest {
    hearth_engine::engine::EngineRequest {
        prompt,
        sampling: Default::default(),
        max_tokens,
        stop_token_ids: vec![],
        ignore_eos: true,
        n: 1,
        constraint: None,
        spec: Default::default(),
        media: None,
    }
}

/// The vision oracles' test images (tools/oracle/vision_goldens.py `pattern`): a multiplicative hash of (x, y, channel), or wrapping ramps.
pub fn image_pattern(kind: &str, w: usize, h: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(w * h * 3);
    for y in 0..h as u64 {
        for x in 0..w as u64 {
            for c in 0..3u64 {
                let v = if kind == "noise" {
                    (((x * 73856093) ^ (y * 19349663) ^ (c * 83492791)) & 0xFFFF_FFFF) >> 8 & 255
                } else {
                    (x * 255 / (w as u64 - 1).max(1) + c * 40 + y * 3) % 256
                };
                out.push(v as u8);
            }
        }
    }
    out
}
