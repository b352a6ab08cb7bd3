//! The draft model on the real model, CPU. SmolLM2 drafting for itself: its drafts are the greedy continuation,
//! the draft KV follows a row through kept and rejected drafts, a full pool costs drafts and never an error, and
//! an engine speculating with it gives exactly the output it gives without speculation (greedy and seeded
//! sampling, alone and batched) while keeping nearly every drafted token. A draft model with another tokenizer is
//! refused.

mod common;
use common::*;
use hearth_engine::engine::{start, start_with_draft, EngineEvent, EngineHandle, EngineRequest, FinishReason, Usage};
use hearth_engine::loader::{check_same_vocabulary, load_text_side};
use hearth_engine::speculative::drafter::{DraftAsk, Drafter};
use hearth_engine::speculative::{SpecConfig, SpecMode, SpecRequest};
use hearth_engine::tokenizer::Tokenizer;

const PROMPTS: [&str; 3] = ["The capital of France is", "def fib(n):\n", "Once upon a time, in a small village,"];

fn drafter(blocks: usize) -> (Drafter, Tokenizer) {
    let m = real_model("smollm2-135m");
    let vocab = m.model.config().vocab_size;
    (Drafter::new(m.model, m.device, blocks, 16, vocab).unwrap(), m.tokenizer)
}

/// The greedy continuation of `prompt` by an engine without speculation.
fn greedy_run(eng: &EngineHandle, prompt: Vec<u32>, n: usize) -> Vec<u32> {
    collect(eng.submit(greedy(prompt, n)).unwrap()).0
}

fn plain_engine() -> (EngineHandle, Tokenizer) {
    let m = real_model("smollm2-135m");
    let eos = m.tokenizer.eos_ids().to_vec();
    (start(m.model, m.device, test_config(256, 8), eos).unwrap(), m.tokenizer)
}

#[test]
fn drafts_follow_the_row_through_kept_and_rejected_tokens() {
    let (eng, tok) = plain_engine();
    let (mut d, _) = drafter(64);
    let prompt = tok.encode(PROMPTS[0], true).unwrap();
    let want = greedy_run(&eng, prompt.clone(), 16);
    let ask = |tokens: Vec<u32>, k| DraftAsk { slot: 7, tokens, k };
    // A new row: its prompt is caught up, then the draft is the greedy continuation (cut where the model is unsure).
    let first = d.draft(&[ask(prompt.clone(), 6)], &[7]).unwrap().remove(0);
    assert!(!first.is_empty() && first.len() <= 6, "{first:?}");
    assert_eq!(first, want[..first.len()], "a same-model draft is the greedy continuation");
    // The target kept two drafted tokens and chose its own third: the next draft continues from there.
    let mut tokens = prompt.clone();
    tokens.extend_from_slice(&want[..3]);
    let next = d.draft(&[ask(tokens.clone(), 6)], &[7]).unwrap().remove(0);
    assert!(!next.is_empty());
    assert_eq!(next, want[3..3 + next.len()]);
    // A rejected branch: the row went another way (a token the draft never saw); its drafted KV is written over.
    let mut other = prompt.clone();
    other.push(tok.encode(" Berlin", false).unwrap()[0]);
    let branch = d.draft(&[ask(other.clone(), 4)], &[7]).unwrap().remove(0);
    let (mut fresh, _) = drafter(64);
    assert_eq!(branch, fresh.draft(&[ask(other, 4)], &[7]).unwrap().remove(0), "as if drafted from scratch");
}

#[test]
fn a_full_draft_pool_costs_drafts_not_errors() {
    let (mut d, tok) = drafter(4);
    let long = |i: u32| tok.encode(&format!("{} {i}", PROMPTS[2].repeat(3)), true).unwrap();
    let (a, b) = (long(1), long(2));
    assert!(a.len() > 16 && a.len() + 4 <= 64, "{} tokens", a.len());
    let draft = |d: &mut Drafter, slot, tokens: &Vec<u32>, alive: &[usize]| {
        d.draft(&[DraftAsk { slot, tokens: tokens.clone(), k: 4 }], alive).unwrap().remove(0)
    };
    assert!(!draft(&mut d, 1, &a, &[1]).is_empty());
    // Row 2 needs the blocks row 1 holds: row 1 (not asking) gives them up.
    assert!(!draft(&mut d, 2, &b, &[1, 2]).is_empty());
    // Both at once cannot fit: the one that does not gets no draft.
    let both = d
        .draft(&[DraftAsk { slot: 1, tokens: a.clone(), k: 4 }, DraftAsk { slot: 2, tokens: b.clone(), k: 4 }], &[1, 2])
        .unwrap();
    assert_eq!(both.iter().filter(|d| d.is_empty()).count(), 1, "{both:?}");
    // A row longer than the whole pool gets none; a row beyond the model's context gets none.
    let huge: Vec<u32> = a.iter().cycle().take(80).copied().collect();
    assert!(draft(&mut d, 3, &huge, &[3]).is_empty());
    let beyond: Vec<u32> = a.iter().cycle().take(10_000).copied().collect();
    assert!(draft(&mut d, 4, &beyond, &[4]).is_empty());
}

fn spec_engine(mode: SpecMode) -> EngineHandle {
    let m = real_model("smollm2-135m");
    let draft = real_model("smollm2-135m").model;
    let eos = m.tokenizer.eos_ids().to_vec();
    let cfg = hearth_engine::engine::EngineConfig {
        spec: SpecConfig { mode, max_draft: 6, max_rows: 8, ..Default::default() },
        ..test_config(256, 8)
    };
    start_with_draft(m.model, Some(draft), m.device, cfg, eos).unwrap()
}

fn request(tok: &Tokenizer, text: &str, seed: Option<u64>) -> EngineRequest {
    let mut r = greedy(tok.encode(text, true).unwrap(), 40);
    if let Some(seed) = seed {
        r.sampling.temperature = 0.8;
        r.sampling.top_p = 0.95;
        r.sampling.seed = Some(seed);
    }
    r.spec = SpecRequest::default();
    r
}

fn finish(eng: &EngineHandle, r: EngineRequest) -> (Vec<u32>, Usage) {
    let mut s = eng.submit(r).unwrap();
    let mut ids = Vec::new();
    loop {
        match s.blocking_next().expect("stream ended without Finished") {
            EngineEvent::Token { id, .. } => ids.push(id),
            EngineEvent::Finished { reason, usage, .. } => {
                assert_eq!(reason, FinishReason::Length);
                return (ids, usage);
            }
            EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
            EngineEvent::PromptLogprobs { .. } => {}
        }
    }
}

#[test]
fn speculating_with_a_draft_model_changes_nothing_but_the_counts() {
    let (off, tok) = plain_engine();
    for seed in [None, Some(11)] {
        let eng = spec_engine(SpecMode::Draft);
        let want: Vec<Vec<u32>> = PROMPTS.iter().map(|p| finish(&off, request(&tok, p, seed)).0).collect();
        // One at a time, then all at once (their drafts made in the same passes).
        for (p, want) in PROMPTS.iter().zip(&want) {
            let (got, u) = finish(&eng, request(&tok, p, seed));
            assert_eq!(&got, want, "{p:?} (seed {seed:?}): the draft model changed the output");
            assert!(u.accepted_prediction_tokens > 0, "{p:?}: {u:?}");
            if seed.is_none() {
                // Drafting for itself, greedy: the drafts are what the model then picks.
                assert!(u.accepted_prediction_tokens >= 4 * u.rejected_prediction_tokens, "{p:?}: {u:?}");
            }
        }
        let streams: Vec<_> = PROMPTS.iter().map(|p| eng.submit(request(&tok, p, seed)).unwrap()).collect();
        for (s, want) in streams.into_iter().zip(&want) {
            assert_eq!(&collect(s).0, want, "batched (seed {seed:?})");
        }
    }
    // Off for a request: no drafts, no counts.
    let eng = spec_engine(SpecMode::Auto);
    let mut r = request(&tok, PROMPTS[1], None);
    r.spec.off = true;
    let (_, u) = finish(&eng, r);
    assert_eq!((u.accepted_prediction_tokens, u.rejected_prediction_tokens), (0, 0));
}

#[test]
fn draft_mode_needs_a_draft_model_and_the_same_tokenizer() {
    let m = real_model("smollm2-135m");
    let eos = m.tokenizer.eos_ids().to_vec();
    let cfg = hearth_engine::engine::EngineConfig {
        spec: SpecConfig { mode: SpecMode::Draft, ..Default::default() },
        ..test_config(64, 2)
    };
    let err = start(m.model, m.device, cfg, eos).err().expect("draft mode without a draft model");
    assert!(err.to_string().contains("--draft-model"), "{err}");
    let gemma = load_text_side("gemma3-270m", None).unwrap().tokenizer;
    let err = check_same_vocabulary(&m.tokenizer, &gemma).unwrap_err().to_string();
    assert!(err.contains("tokenizer differs"), "{err}");
    check_same_vocabulary(&m.tokenizer, &m.tokenizer).unwrap();
}
