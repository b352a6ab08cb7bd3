//! Speculative decoding on the real model, CPU: greedy output with speculation is bit-identical to without it —
//! drafts from prompt lookup, from a prediction that is the answer itself (all kept), from a prediction of
//! unrelated tokens (none kept), alone and batched, under a grammar — and the usage counts what was drafted.

mod common;
use common::*;
use hearth_engine::engine::{start, EngineConfig, EngineEvent, EngineHandle, EngineRequest, FinishReason, Usage};
use hearth_engine::sampling::grammar::{ConstraintSource, ConstraintSpec, Grammars};
use hearth_engine::speculative::{SpecConfig, SpecMode, SpecRequest};
use hearth_engine::tokenizer::Tokenizer;
use std::sync::Arc;

/// Code whose lines repeat: prompt lookup finds most of what the model writes next.
const CODE: &str = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    \
                    return a * b\n\n\ndef div(a, b):\n    return a / b\n\n\n";

fn engine(mode: SpecMode, max_draft: usize) -> (EngineHandle, Arc<Tokenizer>) {
    let m = real_model("smollm2-135m");
    let eos = m.tokenizer.eos_ids().to_vec();
    let width = m.model.config().vocab_size;
    let cfg =
        EngineConfig { spec: SpecConfig { mode, max_draft, max_rows: 8, ..Default::default() }, ..test_config(256, 8) };
    let tok = Arc::new(m.tokenizer);
    let grammars = Arc::new(Grammars::new(tok.clone(), width));
    (start(m.model, m.device, cfg, eos).unwrap().with_grammars(grammars), tok)
}

fn req(tok: &Tokenizer, text: &str, max_tokens: usize, prediction: Vec<u32>) -> EngineRequest {
    let r = greedy(tok.encode(text, true).unwrap(), max_tokens);
    EngineRequest { spec: SpecRequest { off: false, prediction }, ..r }
}

/// Tokens, finish reason and usage of choice 0.
fn run(eng: &EngineHandle, r: EngineRequest) -> (Vec<u32>, FinishReason, Usage) {
    let mut s = eng.submit(r).unwrap();
    let mut ids = Vec::new();
    loop {
        match s.blocking_next().expect("stream ended without Finished") {
            EngineEvent::Token { id, .. } => ids.push(id),
            EngineEvent::Finished { reason, usage, .. } => return (ids, reason, usage),
            EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
            EngineEvent::PromptLogprobs { .. } => {}
        }
    }
}

#[test]
fn greedy_output_is_the_same_with_every_draft_source() {
    let (off, tok) = engine(SpecMode::Off, 8);
    let (spec, _) = engine(SpecMode::Ngram, 8);
    let prompts = [CODE.to_string(), format!("{CODE}def pow(a, b):\n"), "The capital of France is".to_string()];
    for p in &prompts {
        let (want, reason, u) = run(&off, req(&tok, p, 48, vec![]));
        assert_eq!((want.len(), reason, u.accepted_prediction_tokens), (48, FinishReason::Length, 0));
        // Prompt lookup.
        let (got, reason, u) = run(&spec, req(&tok, p, 48, vec![]));
        assert_eq!((&got, reason), (&want, FinishReason::Length), "{p:?}: n-gram drafts changed the output");
        assert_eq!(u.completion_tokens, 48);
        if p.starts_with(CODE) {
            assert!(u.accepted_prediction_tokens > 0, "{p:?}: nothing drafted was kept: {u:?}");
        }
        // The answer itself as the prediction: nearly every token drafted is kept.
        let (got, _, u) = run(&spec, req(&tok, p, 48, want.clone()));
        assert_eq!(got, want, "{p:?}: a perfect prediction changed the output");
        assert!(u.accepted_prediction_tokens >= 40 && u.rejected_prediction_tokens <= 8, "{p:?}: {u:?}");
        // A prediction of tokens unrelated to the answer (and speculation off for the request: no counts).
        let junk: Vec<u32> = (0..64).map(|i| 1000 + 37 * i).collect();
        let (got, _, _) = run(&off, req(&tok, p, 48, junk.clone()));
        assert_eq!(got, want);
        let (got, _, _) = run(&spec, req(&tok, p, 48, junk));
        assert_eq!(got, want, "{p:?}: a wrong prediction changed the output");
        let mut r = req(&tok, p, 48, want.clone());
        r.spec.off = true;
        let (got, _, u2) = run(&spec, r);
        assert_eq!((got, u2.accepted_prediction_tokens, u2.rejected_prediction_tokens), (want.clone(), 0, 0));
    }
}

#[test]
fn batched_speculating_rows_keep_their_tokens() {
    let (off, tok) = engine(SpecMode::Off, 8);
    let (spec, _) = engine(SpecMode::Ngram, 6);
    let prompts: Vec<String> =
        (0..5).map(|i| format!("{}{}", CODE.repeat(1 + i % 2), ["def neg(a):\n", "x = 1\n", ""][i % 3])).collect();
    let want: Vec<Vec<u32>> = prompts.iter().map(|p| run(&off, req(&tok, p, 40, vec![])).0).collect();
    // Together (5 rows decode with drafts of different lengths; one has its answer as a prediction), and with
    // max_tokens cutting a draft short.
    let streams: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| spec.submit(req(&tok, p, 40, if i == 1 { want[1].clone() } else { vec![] })).unwrap())
        .collect();
    for (i, s) in streams.into_iter().enumerate() {
        assert_eq!(collect(s).0, want[i], "row {i}");
    }
    let (short, reason, _) = run(&spec, req(&tok, &prompts[0], 7, want[0].clone()));
    assert_eq!((short.as_slice(), reason), (&want[0][..7], FinishReason::Length));
}

#[test]
fn a_grammar_cuts_the_draft_where_it_forbids_a_token() {
    let (off, tok) = engine(SpecMode::Off, 8);
    let (spec, _) = engine(SpecMode::Ngram, 8);
    let schema = serde_json::json!({"type": "object", "properties": {"name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "tags"]});
    let constrained = |prediction: Vec<u32>| {
        let mut r = req(&tok, "A JSON object describing a cat: ", 40, prediction);
        r.ignore_eos = false;
        r.constraint = Some(ConstraintSource { spec: ConstraintSpec::JsonSchema(schema.clone()), after_marker: None });
        r
    };
    let (want, _, _) = run(&off, constrained(vec![]));
    assert!(!want.is_empty());
    // A prediction that is the answer, and one that departs from it into tokens the grammar forbids.
    let (got, _, u) = run(&spec, constrained(want.clone()));
    assert_eq!(got, want);
    assert!(u.accepted_prediction_tokens > 0, "{u:?}");
    let mut bad = want[..want.len() / 2].to_vec();
    bad.extend(tok.encode("}}}} not json at all", false).unwrap());
    let (got, _, _) = run(&spec, constrained(bad));
    assert_eq!(got, want);
}
