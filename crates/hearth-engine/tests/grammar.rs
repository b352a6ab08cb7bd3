//! Grammar-constrained decoding on the real model (SmolLM2): JSON schemas, regexes, choices and Lark grammars
//! hold for greedy and sampled rows, side by side with free rows in one batch (which answer as they do alone),
//! for every choice of an `n > 1` request; a grammar that cannot finish within `max_tokens` ends with `length`;
//! invalid schemas, regexes and grammars are errors that name the problem, and the engine refuses a request
//! carrying one.

mod common;
use common::*;
use hearth_engine::engine::FinishReason;
use hearth_engine::engine::{start, CacheConfig, EngineConfig, EngineEvent, EngineHandle, EngineRequest, SubmitError};
use hearth_engine::sampling::grammar::{Commit, ConstraintSource, ConstraintSpec, Grammars};
use hearth_engine::sampling::SamplingParams;
use hearth_engine::tokenizer::Tokenizer;
use serde_json::json;
use std::sync::Arc;

fn engine() -> (EngineHandle, Arc<Tokenizer>, Arc<Grammars>) {
    let m = real_model("smollm2-135m");
    let eos = m.tokenizer.eos_ids().to_vec();
    let width = m.model.config().vocab_size;
    let cfg = EngineConfig {
        max_batch: 8,
        kv_block_size: 16,
        kv_blocks: 256,
        step_tokens: 64,
        step_tokens_decoding: 32,
        max_prefill_rows: 0,
        max_queue: 16,
        cache: CacheConfig::default(),
        spec: Default::default(),
    };
    let tok = Arc::new(m.tokenizer);
    let grammars = Arc::new(Grammars::new(tok.clone(), width));
    (start(m.model, m.device, cfg, eos).unwrap().with_grammars(grammars.clone()), tok, grammars)
}

/// A ChatML prompt asking for `what`.
fn chat(tok: &Tokenizer, what: &str) -> Vec<u32> {
    let text = format!("<|im_start|>user\n{what}<|im_end|>\n<|im_start|>assistant\n");
    tok.encode(&text, false).unwrap()
}

fn req(prompt: Vec<u32>, max_tokens: usize, spec: Option<&ConstraintSpec>) -> EngineRequest {
    EngineRequest {
        prompt,
        sampling: SamplingParams::default(),
        max_tokens,
        stop_token_ids: vec![],
        ignore_eos: false,
        n: 1,
        constraint: spec.map(|s| ConstraintSource { spec: s.clone(), after_marker: None }),
        spec: Default::default(),
        media: None,
    }
}

/// Each choice's text and finish reason.
fn run(e: &EngineHandle, tok: &Tokenizer, r: EngineRequest) -> Vec<(String, FinishReason)> {
    let n = r.n;
    let mut s = e.submit(r).unwrap();
    let mut ids = vec![Vec::new(); n];
    let mut done = vec![None; n];
    while done.iter().any(Option::is_none) {
        match s.blocking_next().expect("stream ended early") {
            EngineEvent::Token { choice, id, .. } => ids[choice].push(id),
            EngineEvent::Finished { choice, reason, .. } => done[choice] = Some(reason),
            EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
            EngineEvent::PromptLogprobs { .. } => {}
        }
    }
    ids.iter().zip(done).map(|(i, d)| (tok.decode(i, true), d.unwrap())).collect()
}

fn person_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]}
        },
        "required": ["name", "age", "city"],
        "additionalProperties": false
    })
}

fn check_person(text: &str) {
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    let o = v.as_object().unwrap_or_else(|| panic!("not an object: {text}"));
    assert_eq!(o.keys().collect::<Vec<_>>(), ["name", "age", "city"], "{text}");
    assert!(o["name"].as_str().is_some_and(|n| n.chars().count() <= 24), "{text}");
    assert!(o["age"].as_u64().is_some_and(|a| a <= 150), "{text}");
    assert!(["Paris", "Tokyo", "Lima"].contains(&o["city"].as_str().unwrap_or("")), "{text}");
}

#[test]
fn constrained_rows_follow_their_grammar_beside_free_rows() {
    let (e, tok, _) = engine();
    let person = ConstraintSpec::JsonSchema(person_schema());
    let verdict = ConstraintSpec::Regex("(yes|no), because [a-z ]{3,40}\\.".into());
    let colour = ConstraintSpec::Choice(vec!["red".into(), "green".into(), "dark blue".into()]);
    let lark = ConstraintSpec::Lark("start: \"Answer: \" NUM \" apples\"\nNUM: /[0-9]{1,3}/".into());
    let free_prompt = chat(&tok, "Write one sentence about the sea.");
    let alone = run(&e, &tok, req(free_prompt.clone(), 24, None));

    // All at once: constrained and free rows share every step.
    let jobs = vec![
        req(chat(&tok, "Describe a person as JSON."), 80, Some(&person)),
        req(chat(&tok, "Is the sky green? Answer yes or no and say why."), 40, Some(&verdict)),
        req(chat(&tok, "Pick a colour."), 10, Some(&colour)),
        req(chat(&tok, "How many apples are in the basket?"), 20, Some(&lark)),
        req(free_prompt, 24, None),
    ];
    let streams: Vec<_> = jobs.into_iter().map(|r| e.submit(r).unwrap()).collect();
    let mut out = Vec::new();
    for mut s in streams {
        let mut ids = Vec::new();
        let reason = loop {
            match s.blocking_next().expect("stream ended early") {
                EngineEvent::Token { id, .. } => ids.push(id),
                EngineEvent::Finished { reason, .. } => break reason,
                EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
                EngineEvent::PromptLogprobs { .. } => {}
            }
        };
        out.push((tok.decode(&ids, true), reason));
    }
    check_person(&out[0].0);
    assert_eq!(out[0].1, FinishReason::Stop, "the JSON closed: {:?}", out[0]);
    let v = &out[1].0;
    assert!(v.starts_with("yes, because ") || v.starts_with("no, because "), "{v:?}");
    assert!(
        v.ends_with('.')
            && v.split(", because ")
                .nth(1)
                .unwrap()
                .trim_end_matches('.')
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == ' '),
        "{v:?}"
    );
    assert!(["red", "green", "dark blue"].contains(&out[2].0.as_str()), "{:?}", out[2]);
    assert_eq!(out[2].1, FinishReason::Stop);
    let a = out[3].0.strip_prefix("Answer: ").and_then(|r| r.strip_suffix(" apples"));
    assert!(a.is_some_and(|n| !n.is_empty() && n.len() <= 3 && n.chars().all(|c| c.is_ascii_digit())), "{:?}", out[3]);
    assert_eq!(out[4], alone[0], "a free row answers as it does alone");
    let st = e.stats();
    assert!(st.grammar_masks_total > 10, "masks are counted: {}", st.grammar_masks_total);
    assert!(st.grammar_mask_ms_total > 0.0 && st.grammar_mask_ms_max > 0.0);
    // Quantiles from the quarter-octave histogram: ordered, and within a bucket of the largest.
    let (p50, p99, max) = (st.grammar_mask_ms_p50, st.grammar_mask_ms_p99, st.grammar_mask_ms_max);
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max * 1.2 + 1e-3, "p50 {p50} p99 {p99} max {max}");
}

#[test]
fn sampled_choices_and_short_budgets() {
    let (e, tok, _) = engine();
    // Sampled rows (temperature 1, top-p) of an n = 3 request: every choice follows the schema.
    let mut r = req(chat(&tok, "Describe a person as JSON."), 80, Some(&ConstraintSpec::JsonSchema(person_schema())));
    r.sampling = SamplingParams { temperature: 1.0, top_p: 0.95, seed: Some(7), ..SamplingParams::default() };
    r.n = 3;
    for (text, reason) in run(&e, &tok, r) {
        check_person(&text);
        assert_eq!(reason, FinishReason::Stop);
    }
    // Any JSON object.
    let obj = run(&e, &tok, req(chat(&tok, "Reply in JSON."), 60, Some(&ConstraintSpec::JsonObject)));
    let (text, reason) = &obj[0];
    if *reason == FinishReason::Stop {
        assert!(serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object()), "{text:?}");
    } else {
        assert!(text.starts_with('{'), "{text:?}");
    }
    // llama.cpp's GBNF, converted to Lark (capitalized names, classes, repetitions, escapes).
    let gbnf = ConstraintSpec::Gbnf(
        "root ::= \"Colour: \" Colour \" (\" [0-9]{1,2} \"%)\\n\"\nColour ::= \"red\" | \"blue\" # two\n".into(),
    );
    let (text, reason) = run(&e, &tok, req(chat(&tok, "Name a colour."), 20, Some(&gbnf))).remove(0);
    assert_eq!(reason, FinishReason::Stop);
    let rest = text.strip_prefix("Colour: red (").or_else(|| text.strip_prefix("Colour: blue ("));
    let pct = rest.and_then(|r| r.strip_suffix("%)\n"));
    assert!(pct.is_some_and(|p| (1..=2).contains(&p.len()) && p.chars().all(|c| c.is_ascii_digit())), "{text:?}");
    // A grammar that cannot finish in 5 tokens: `length`, with a prefix of a valid answer.
    let long = ConstraintSpec::Regex("The answer is: [a-z]{40}".into());
    let (text, reason) = run(&e, &tok, req(chat(&tok, "Say something."), 5, Some(&long))).remove(0);
    assert_eq!(reason, FinishReason::Length);
    assert!("The answer is: ".starts_with(&text) || text.starts_with("The answer is: "), "{text:?}");
}

#[test]
fn bad_grammars_are_named_errors() {
    let (e, tok, g) = engine();
    let cases = [
        (ConstraintSpec::JsonSchema(json!({"type": "objekt"})), "objekt"),
        (ConstraintSpec::JsonSchema(json!({"$ref": "#/$defs/nope"})), "nope"),
        (ConstraintSpec::Regex("(abc".into()), "regex"),
        (ConstraintSpec::Lark("start: foo".into()), "foo"),
        (ConstraintSpec::Choice(vec![]), "empty"),
        (ConstraintSpec::Gbnf("root ::= item".into()), "not defined"),
        // A character SmolLM2's tokens cannot spell: caught when compiling, not mid-generation.
        (ConstraintSpec::Regex("\u{9ef82}S".into()), "cannot start"),
    ];
    for (spec, word) in cases {
        let err = g.compile(&spec).err().unwrap_or_else(|| panic!("{spec:?} compiled"));
        assert!(err.to_lowercase().contains(word), "{spec:?}: {err}");
        // Submitted, it is the request's error, and nothing runs.
        match e.submit(req(chat(&tok, "Hello."), 8, Some(&spec))) {
            Err(SubmitError::Constraint(why)) => assert!(why.to_lowercase().contains(word), "{spec:?}: {why}"),
            other => panic!("{spec:?} was not refused: {:?}", other.err()),
        }
    }
}

#[test]
fn masked_argmax_is_argmax_of_the_masked_logits() {
    let (_e, tok, g) = engine();
    // Padded logits rows are never allowed; thousands of tokens are at the start (every lowercase word piece).
    let width = tok.vocab_size() + 7;
    let spec = ConstraintSpec::Regex("[a-z ]{1,40}".into());
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for step in 0..4 {
        let mut c = g.compile(&spec).unwrap();
        let logits: Vec<f32> = (0..width)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed % 10_000) as f32 / 100.0
            })
            .collect();
        let mut masked = logits.clone();
        c.apply(&mut masked).unwrap();
        let want = hearth_engine::sampling::sampler::argmax(&masked) as u32;
        assert_eq!(c.masked_argmax(&logits).unwrap(), Some(want), "step {step}");
        assert!(want < tok.vocab_size() as u32);
        // The same mask as bits (what the CUDA build's argmax takes): set exactly for the allowed tokens.
        let words = c.mask_words().unwrap();
        assert_eq!(words.len(), tok.vocab_size().div_ceil(32));
        for (i, m) in masked.iter().enumerate() {
            let bit = words.get(i / 32).is_some_and(|w| (w >> (i % 32)) & 1 == 1);
            assert_eq!(bit, m.is_finite(), "token {i}");
        }
    }
}

#[test]
fn a_dormant_grammar_applies_after_its_marker() {
    let (_e, tok, g) = engine();
    let mut c = g.compile(&ConstraintSpec::Regex("[0-9]+".into())).unwrap().after_marker("</think>");
    let letter = tok.encode("hello", false).unwrap()[0];
    let digit = tok.encode("7", false).unwrap()[0];
    assert!(c.is_dormant() && c.allows(letter).unwrap() && c.allows(digit).unwrap(), "free while dormant");
    // The thought's tokens, with the marker split over several of them, are not checked by the grammar.
    for id in tok.encode("Let me think about it.</think>", false).unwrap() {
        assert!(c.is_dormant(), "active before the marker ended");
        c.commit(id).unwrap();
    }
    assert!(!c.is_dormant(), "the marker ends the dormancy");
    assert!(!c.allows(letter).unwrap() && c.allows(digit).unwrap(), "the grammar applies after the marker");
}

#[test]
fn a_model_may_think_before_its_constraint() {
    let (_e, tok, g) = engine();
    let spec = ConstraintSpec::AfterOptionalThought(Box::new(ConstraintSpec::JsonSchema(serde_json::json!({
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false
    }))));
    // Every token of `text` is allowed in turn (greedy tokens of SmolLM2's vocabulary); the last commit completes.
    let walk = |text: &str| -> Result<Commit, String> {
        let mut c = g.compile(&spec)?;
        let mut last = Commit::Continue;
        for id in tok.encode(text, false).map_err(|e| e.to_string())? {
            if !c.allows(id)? {
                return Err(format!("{:?} not allowed in {text:?}", tok.decode(&[id], false)));
            }
            last = c.commit(id)?;
        }
        Ok(last)
    };
    let eos = tok.eos_ids()[0];
    for text in
        ["<think>\nHmm, {not json} and </thin.\n</think>\n\n{\"a\": 1}", "{\"a\": 2}", "<think></think>{\"a\":3}"]
    {
        walk(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let mut c = g.compile(&spec).unwrap();
        for id in tok.encode(text, false).unwrap() {
            c.commit(id).unwrap();
        }
        assert!(c.allows(eos).unwrap(), "complete after {text:?}");
    }
    // Neither a thought nor the JSON: refused from the first token; after a thought, the schema holds.
    assert!(walk("Hello").is_err());
    assert!(walk("<think>ok</think>\n[1]").is_err());
    assert!(walk("<think>ok</think>{\"b\": 1}").is_err());
}
