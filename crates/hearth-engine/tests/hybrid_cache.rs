//! A hybrid model (Qwen3.5: gated-DeltaNet layers with per-sequence recurrent state beside the KV) in the engine:
//! a second turn resumes from the state snapshot the first left at its last full block, and answers as a cold run
//! does; a request's choices fork the state; preempted rows resume from their snapshots; with no room for
//! snapshots nothing is reused and the answers stay the same.

mod common;
use common::*;
use hearth_engine::engine::{start, EngineConfig, EngineEvent, EngineHandle, EngineRequest, RequestStream};
use hearth_engine::loader::load;
use hearth_engine::sampling::SamplingParams;
use hearth_engine::speculative::{SpecConfig, SpecMode, SpecRequest};
use hearth_engine::types::{CacheConfig, SsdSettings};
use std::path::Path;
use std::time::{Duration, Instant};

/// Logprobs of the same tokens computed with different matmul row counts (candle's f32 GEMM rounds differently).
const LOGPROB_TOL: f32 = 1e-4;

fn engine(blocks: usize, batch: usize, cache_blocks: usize, state_bytes: u64) -> EngineHandle {
    engine_ssd(blocks, batch, cache_blocks, state_bytes, None)
}

/// `engine` with the SSD tier in `ssd`.
fn engine_ssd(blocks: usize, batch: usize, cache_blocks: usize, state_bytes: u64, ssd: Option<&Path>) -> EngineHandle {
    let ssd =
        ssd.map(|dir| SsdSettings { dir: dir.to_path_buf(), max_bytes: 1 << 30, verify: true, demote_idle: None });
    engine_with(blocks, batch, CacheConfig { max_blocks: cache_blocks, state_bytes, ssd, ..Default::default() }, None)
}

/// The tiny Qwen3.5 in an engine with this prompt cache and speculation.
fn engine_with(blocks: usize, batch: usize, cache: CacheConfig, spec: Option<SpecConfig>) -> EngineHandle {
    let m = load(fixture("tiny-qwen3_5").to_str().unwrap(), &candle_core::Device::Cpu, None).unwrap();
    let cfg = EngineConfig {
        cache: CacheConfig { namespace: m.fingerprint, ..cache },
        spec: spec.unwrap_or_default(),
        ..test_config(blocks, batch)
    };
    start(m.model, m.device, cfg, vec![]).unwrap()
}

fn req(prompt: &[u32], max_tokens: usize) -> EngineRequest {
    EngineRequest {
        sampling: SamplingParams { logprobs: Some(0), ..SamplingParams::default() },
        ..greedy(prompt.to_vec(), max_tokens)
    }
}

/// One choice's tokens and their logprobs.
type Choice = (Vec<u32>, Vec<f32>);

/// Each choice's tokens and logprobs, and the cached prompt tokens of the request.
fn finish(mut s: RequestStream, n: usize) -> (Vec<Choice>, usize) {
    let mut out = vec![(Vec::new(), Vec::new()); n];
    let (mut done, mut cached) = (0, 0);
    while done < n {
        match s.blocking_next().expect("stream ended early") {
            EngineEvent::Token { choice, id, logprob, .. } => {
                out[choice].0.push(id);
                out[choice].1.push(logprob.unwrap_or(f32::NAN));
            }
            EngineEvent::Finished { usage, .. } => {
                cached = usage.cached_tokens;
                done += 1;
            }
            EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
            EngineEvent::PromptLogprobs { .. } => {}
        }
    }
    (out, cached)
}

fn same(what: &str, a: &Choice, b: &Choice) {
    assert_eq!(a.0, b.0, "{what}: tokens differ");
    for (j, (x, y)) in a.1.iter().zip(&b.1).enumerate() {
        assert!((x - y).abs() <= LOGPROB_TOL, "{what}: token {j} logprob {x} vs {y}");
    }
}

fn prompt() -> Vec<u32> {
    let g = golden("tiny_qwen3_5.json");
    ids(&g["cases"][2]["input_ids"]) // 24 tokens
}

fn wait_idle(e: &EngineHandle) -> hearth_engine::types::EngineStats {
    let t0 = Instant::now();
    loop {
        let st = e.stats();
        if st.rows_running == 0 || t0.elapsed() > Duration::from_secs(10) {
            return st;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn second_turn_resumes_from_the_first_turns_state() {
    let p1 = prompt();
    let warm = engine(64, 4, 64, 64 << 20);
    let (t1, _) = finish(warm.submit(req(&p1, 20)).unwrap(), 1);
    // turn 2: turn 1's prompt and answer, then more text (a next user message)
    let mut p2 = p1.clone();
    p2.extend(&t1[0].0);
    p2.extend(&p1[3..12]);
    let (hit, cached) = finish(warm.submit(req(&p2, 12)).unwrap(), 1);
    // turn 1 computed 24 + 19 tokens: its last full block ends at 32, where its decode left a snapshot
    assert_eq!(cached, 32, "turn 2 resumes at turn 1's last full block");
    let cold = engine(64, 4, 0, 0);
    let (want, cached_cold) = finish(cold.submit(req(&p2, 12)).unwrap(), 1);
    assert_eq!(cached_cold, 0);
    same("turn 2 from the snapshot vs cold", &hit[0], &want[0]);
    let st = wait_idle(&warm);
    assert!(st.prompt_cache.state_snapshots >= 2, "snapshots kept: {:?}", st.prompt_cache);
}

#[test]
fn a_prefix_shared_inside_prompts_is_kept_where_they_part() {
    // three prompts share their first 40 tokens (the history) and differ after it (the new message)
    let p = prompt();
    let history: Vec<u32> = p.iter().chain(&p[..16]).copied().collect();
    let ask = |i: usize| -> Vec<u32> { history.iter().chain(&p[i..i + 9]).copied().collect() };
    let warm = engine(64, 4, 64, 64 << 20);
    let cold = engine(64, 4, 0, 0);
    let (_, c0) = finish(warm.submit(req(&ask(0), 6)).unwrap(), 1);
    // the second finds the history's KV (to 32) without a state snapshot there: it computes it and keeps one
    let (_, c1) = finish(warm.submit(req(&ask(1), 6)).unwrap(), 1);
    let (third, c2) = finish(warm.submit(req(&ask(2), 6)).unwrap(), 1);
    assert_eq!((c0, c1, c2), (0, 0, 32), "cached prompt tokens of the three requests");
    let (want, _) = finish(cold.submit(req(&ask(2), 6)).unwrap(), 1);
    same("resumed where the prompts part vs cold", &third[0], &want[0]);
}

#[test]
fn choices_fork_the_state_and_preempted_rows_resume() {
    let p = prompt();
    let e = engine(64, 8, 64, 64 << 20);
    let (solo, _) = finish(e.submit(req(&p, 30)).unwrap(), 1);
    // three greedy choices of one request: forked off the computed prompt, each continues as the solo run
    let (choices, _) = finish(e.submit(EngineRequest { n: 3, ..req(&p, 30) }).unwrap(), 3);
    for (i, c) in choices.iter().enumerate() {
        same(&format!("choice {i}"), c, &solo[0]);
    }
    // six rows of 24 + 40 tokens in a pool of 12 blocks (each needs 4): rows are preempted, come back, and resume
    let small = engine(12, 8, 12, 64 << 20);
    let prompts: Vec<Vec<u32>> = (0..6).map(|i| p[i..].iter().chain(&p[..i]).copied().collect()).collect();
    let alone: Vec<_> = prompts.iter().map(|q| finish(e.submit(req(q, 40)).unwrap(), 1).0.remove(0)).collect();
    let streams: Vec<_> = prompts.iter().map(|q| small.submit(req(q, 40)).unwrap()).collect();
    for (i, (s, a)) in streams.into_iter().zip(&alone).enumerate() {
        same(&format!("preempted row {i}"), &finish(s, 1).0[0], a);
    }
    let st = wait_idle(&small);
    assert!(st.preemptions_total > 0, "expected preemptions with 12 blocks: {st:?}");
    assert_eq!(st.kv_blocks_used, 0);
}

/// One tiny model snapshot's bytes in memory (3 linear layers, 4 heads of 16 × 16, the convolution's 3 × 128 inputs).
const SNAPSHOT: u64 = 3 * 4 * (4 * 16 * 16 + 3 * 128);

#[test]
fn snapshots_go_to_the_ssd_and_come_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let p1 = prompt();
    let (t1, p2) = {
        // room for one snapshot in memory: the prompt's, spilled to the SSD when the decode's replaces it
        let e = engine_ssd(64, 4, 64, SNAPSHOT, Some(dir.path()));
        let (t1, _) = finish(e.submit(req(&p1, 20)).unwrap(), 1);
        let mut p2 = p1.clone();
        p2.extend(&t1[0].0);
        p2.extend(&p1[3..12]);
        e.flush_cache().unwrap().expect("an SSD tier is configured").recv().unwrap();
        (t1, p2)
    };
    // restart: the KV blocks and the state at turn 1's last full block come back from the SSD
    let e = engine_ssd(64, 4, 64, SNAPSHOT, Some(dir.path()));
    let (hit, cached) = finish(e.submit(req(&p2, 12)).unwrap(), 1);
    assert_eq!(cached, 32, "turn 2 resumes from the SSD at turn 1's last full block");
    let cold = engine(64, 4, 0, 0);
    let (want, _) = finish(cold.submit(req(&p2, 12)).unwrap(), 1);
    same("turn 2 from the SSD vs cold", &hit[0], &want[0]);
    // and the prompt's own snapshot (evicted from memory to the SSD during turn 1) serves a repeat of it
    let (again, cached) = finish(e.submit(req(&p1, 20)).unwrap(), 1);
    assert_eq!(cached, 16);
    same("turn 1 again from the SSD", &again[0], &t1[0]);
}

#[test]
fn speculation_takes_rejected_drafts_back_out_of_the_state() {
    let p = prompt();
    let (want, _) = finish(engine(64, 4, 64, 64 << 20).submit(req(&p, 40)).unwrap(), 1);
    // a prediction right but for two tokens: drafts are kept up to each wrong one, the rest taken back
    let mut prediction = want[0].0.clone();
    for i in [7, 20] {
        prediction[i] = (prediction[i] + 1) % 512;
    }
    let spec = SpecConfig { mode: SpecMode::Prediction, max_draft: 6, max_rows: 8, ..Default::default() };
    let e = engine_with(64, 4, CacheConfig { max_blocks: 64, state_bytes: 64 << 20, ..Default::default() }, Some(spec));
    let mut s = e.submit(EngineRequest { spec: SpecRequest { off: false, prediction }, ..req(&p, 40) }).unwrap();
    let (mut got, mut lps, mut usage) = (Vec::new(), Vec::new(), None);
    while usage.is_none() {
        match s.blocking_next().expect("stream ended early") {
            EngineEvent::Token { id, logprob, .. } => {
                got.push(id);
                lps.push(logprob.unwrap_or(f32::NAN));
            }
            EngineEvent::Finished { usage: u, .. } => usage = Some(u),
            EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
            EngineEvent::PromptLogprobs { .. } => {}
        }
    }
    same("speculating vs not", &(got, lps), &want[0]);
    let u = usage.unwrap();
    assert!(u.accepted_prediction_tokens >= 20, "accepted: {u:?}");
    assert!(u.rejected_prediction_tokens > 0, "rejected: {u:?}");
}

#[test]
fn without_room_for_snapshots_nothing_is_reused() {
    let p = prompt();
    let e = engine(64, 4, 64, 0);
    let (first, _) = finish(e.submit(req(&p, 10)).unwrap(), 1);
    let (again, cached) = finish(e.submit(req(&p, 10)).unwrap(), 1);
    assert_eq!(cached, 0, "no snapshot, no reuse");
    same("repeat without snapshots", &again[0], &first[0]);
}

#[test]
fn the_running_rows_state_is_sized_and_admitted() {
    use hearth_engine::sizing::{admit_recurrent, recurrent_bytes};
    let m = load(fixture("tiny-qwen3_5").to_str().unwrap(), &candle_core::Device::Cpu, None).unwrap();
    // per row: 3 linear layers of the convolution's 3 × 128 inputs and 4 heads of a 16 × 16 state plus a 16-token
    // chunk of 16-dim keys and corrections and its decays, in f32
    let per_row = 3 * 4 * (3 * 128 + 4 * (16 * 16 + 16 * 16 + 16 * 16 + 16));
    assert_eq!(recurrent_bytes(m.model.as_ref(), 2, 16), 2 * per_row);
    assert_eq!(admit_recurrent(m.model.as_ref(), 2, 16, 0), Ok(Some(2 * per_row)));
    let e = admit_recurrent(m.model.as_ref(), 2, 16, u64::MAX / 2).unwrap_err();
    assert!(e.contains("lower --batch or --prompt-cache-state"), "{e}");
    let dense = load(fixture("tiny-qwen3").to_str().unwrap(), &candle_core::Device::Cpu, None).unwrap();
    assert_eq!(admit_recurrent(dense.model.as_ref(), 64, 16, u64::MAX / 2), Ok(None));
}

#[test]
fn a_choice_forks_off_a_parent_that_finishes_at_once() {
    // two sampled choices; choice 0 stops at its first token (a stop id), in the step that forks choice 1 off it
    let p = prompt();
    let e = engine(64, 4, 64, 64 << 20);
    let sampled = |seed: u64, stop: Vec<u32>| EngineRequest {
        n: 2,
        stop_token_ids: stop,
        sampling: SamplingParams { temperature: 1.0, seed: Some(seed), logprobs: Some(0), ..SamplingParams::default() },
        ..greedy(p.clone(), 12)
    };
    let seed = (1..40)
        .find(|&seed| {
            let (c, _) = finish(e.submit(sampled(seed, vec![])).unwrap(), 2);
            c[0].0[0] != c[1].0[0] && !c[1].0.contains(&c[0].0[0])
        })
        .expect("two seeded choices that start differently");
    let (free, _) = finish(e.submit(sampled(seed, vec![])).unwrap(), 2);
    let (stopped, _) = finish(e.submit(sampled(seed, vec![free[0].0[0]])).unwrap(), 2);
    assert!(stopped[0].0.is_empty(), "choice 0 stops at its first token: {:?}", stopped[0].0);
    same("choice 1 beside a parent that finished", &stopped[1], &free[1]);
}
