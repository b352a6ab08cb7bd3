//! The continuous-batching engine on the real model: batch invariance (a request's greedy tokens are the same
//! alone or beside 7 others of different lengths), preemption under a tiny KV pool (everything still finishes),
//! cancellation frees rows and blocks, and `n` choices share the prompt's blocks.

mod common;
use common::*;
use hearth_engine::engine::FinishReason;
use hearth_engine::engine::{start, EngineConfig, EngineEvent, EngineHandle, EngineRequest};
use hearth_engine::sampling::SamplingParams;
use std::time::{Duration, Instant};

const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Shopping list:\n1. Eggs\n2. Milk\n3.",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who every morning",
    "日本の首都は",
    "Q: What is 12 times 12?\nA:",
    "The three primary colors are",
    "In 1969, the first humans landed on the Moon. The mission was called",
];

/// A prompt long enough (~170 tokens) to be cut into several prefill pieces.
fn long_prompt() -> String {
    "The history of the printing press begins in the fifteenth century, when a goldsmith from Mainz combined \
     movable metal type, oil-based ink and a wooden press adapted from wine making. "
        .repeat(4)
}

fn engine(blocks: usize, batch: usize) -> (EngineHandle, hearth_engine::tokenizer::Tokenizer) {
    engine_with(blocks, batch, 0)
}

/// `engine` with at most `max_prefill_rows` prompts prefilled per step (0: no limit).
fn engine_with(
    blocks: usize,
    batch: usize,
    max_prefill_rows: usize,
) -> (EngineHandle, hearth_engine::tokenizer::Tokenizer) {
    let m = real_model("smollm2-135m");
    let eos = m.tokenizer.eos_ids().to_vec();
    let cfg = EngineConfig {
        max_batch: batch,
        kv_block_size: 16,
        kv_blocks: blocks,
        step_tokens: 64,
        step_tokens_decoding: 32,
        max_prefill_rows,
        max_queue: 64,
        cache: Default::default(),
        spec: Default::default(),
    };
    (start(m.model, m.device, cfg, eos).unwrap(), m.tokenizer)
}

fn req(tok: &hearth_engine::tokenizer::Tokenizer, text: &str, max_tokens: usize) -> EngineRequest {
    greedy(tok.encode(text, true).unwrap(), max_tokens)
}

#[test]
fn batch_invariance_and_preemption() {
    let (eng, tok) = engine(256, 8);
    let mut prompts: Vec<String> = PROMPTS.iter().map(|p| p.to_string()).collect();
    prompts[3] = long_prompt();
    let solo: Vec<Vec<u32>> = prompts.iter().map(|p| collect(eng.submit(req(&tok, p, 24)).unwrap()).0).collect();
    let streams: Vec<_> = prompts.iter().map(|p| eng.submit(req(&tok, p, 24)).unwrap()).collect();
    let batched: Vec<Vec<u32>> = streams.into_iter().map(|s| collect(s).0).collect();
    for (i, (a, b)) in solo.iter().zip(&batched).enumerate() {
        assert_eq!(a.len(), 24);
        assert_eq!(a, b, "prompt {i}: batched greedy tokens differ from solo");
    }
    // One prompt prefilled per step (`--prefill-seqs 1`): the same tokens, every request finishes.
    let (one, tok) = engine_with(256, 8, 1);
    let streams: Vec<_> = prompts.iter().map(|p| one.submit(req(&tok, p, 24)).unwrap()).collect();
    for (i, (s, a)) in streams.into_iter().zip(&solo).enumerate() {
        assert_eq!(&collect(s).0, a, "prompt {i}: one prefill per step changed the greedy tokens");
    }

    // A pool far too small for 8 rows at once: rows are preempted and recomputed, never aborted.
    let (small, tok) = engine(12, 8);
    let streams: Vec<_> = PROMPTS.iter().map(|p| small.submit(req(&tok, p, 40)).unwrap()).collect();
    for s in streams {
        let (ids, reason) = collect(s);
        assert_eq!((ids.len(), reason), (40, FinishReason::Length));
    }
    // The stats snapshot is refreshed after the step that sent the last event: wait for it.
    let t0 = Instant::now();
    let st = loop {
        let st = small.stats();
        if st.rows_running == 0 || t0.elapsed() > Duration::from_secs(10) {
            break st;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(st.preemptions_total > 0, "expected preemptions with 12 blocks: {st:?}");
    assert_eq!(st.kv_blocks_used, 0, "all blocks back after the run: {st:?}");
    assert_eq!(st.tokens_generated_total, 8 * 40);
}

#[test]
fn cancellation_frees_rows_and_blocks() {
    let (eng, tok) = engine(256, 8);
    let mut s = eng.submit(req(&tok, PROMPTS[3], 500)).unwrap();
    // Wait for the first token, then hang up.
    assert!(matches!(s.blocking_next(), Some(EngineEvent::Token { .. })));
    drop(s);
    let t0 = Instant::now();
    loop {
        let st = eng.stats();
        if st.rows_running == 0 && st.kv_blocks_used == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "row not freed after cancel: {st:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn n_choices_share_prompt_blocks_and_rejections_are_clear() {
    let (eng, tok) = engine(256, 8);
    let long = "The history of the printing press begins in the fifteenth century, when ".repeat(3);
    let mut r = req(&tok, &long, 8);
    r.n = 3;
    r.sampling = SamplingParams { temperature: 0.8, seed: Some(7), ..Default::default() };
    let prompt_len = r.prompt.len();
    let mut s = eng.submit(r).unwrap();
    let mut finished = vec![];
    while finished.len() < 3 {
        match s.blocking_next().unwrap() {
            EngineEvent::Finished { choice, usage, .. } => finished.push((choice, usage)),
            EngineEvent::Error { message, .. } => panic!("{message}"),
            EngineEvent::PromptLogprobs { .. } => {}
            _ => {}
        }
    }
    finished.sort_by_key(|f| f.0);
    assert_eq!(finished[0].1.cached_tokens, 0);
    for (_, u) in &finished[1..] {
        // Forked off choice 0's computed prompt: they report the prompt-cache reuse of the request (none here),
        // not the sharing within it.
        assert_eq!(u.cached_tokens, 0, "choices 1.. report the request's cache hit");
        assert_eq!(u.prompt_tokens, prompt_len);
    }
    // More choices than batch rows: refused up front rather than stalling the queue.
    let mut wide = req(&tok, "hi", 4);
    wide.n = 9;
    let e = eng.submit(wide).err().unwrap();
    assert!(e.to_string().contains("--batch"), "{e}");
    // prompt + max_tokens larger than the whole pool: refused up front.
    let e = eng.submit(req(&tok, "hi", 256 * 16)).err().unwrap();
    assert!(e.to_string().contains("never fit") || e.to_string().contains("context"), "{e}");
}
