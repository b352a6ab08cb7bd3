//! Prompt log-probabilities (`SamplingParams::prompt_logprobs`) on the real model (SmolLM2): each prompt token's
//! score is what the model gives it after the tokens before it — the same top alternatives and values a request
//! for that prefix samples from — over several prompt pieces, again after the prompt was cached, and once per
//! request whatever its number of choices.

mod common;
use common::greedy;
use hearth_engine::engine::{start, CacheConfig, EngineConfig, EngineEvent, EngineHandle, EngineRequest};
use hearth_engine::sampling::{SamplingParams, TopLogprob};

fn engine() -> (EngineHandle, Vec<u32>) {
    let m = hearth_engine::loader::load("smollm2-135m", &candle_core::Device::Cpu, None)
        .unwrap_or_else(|e| panic!("loading smollm2-135m: {e} (run scripts/fetch-models)"));
    let eos = m.tokenizer.eos_ids().to_vec();
    let text = "The history of the printing press begins in the fifteenth century, when a goldsmith from Mainz \
                combined movable metal type, oil-based ink and a wooden press adapted from wine making. "
        .repeat(3);
    let prompt = m.tokenizer.encode(&text, true).unwrap();
    let cfg = EngineConfig {
        max_batch: 4,
        kv_block_size: 16,
        kv_blocks: 128,
        // prompts of ~100 tokens take several pieces
        step_tokens: 40,
        step_tokens_decoding: 32,
        max_prefill_rows: 0,
        max_queue: 16,
        cache: CacheConfig { namespace: m.fingerprint, max_blocks: 128, ..Default::default() },
        spec: Default::default(),
    };
    (start(m.model, m.device, cfg, eos).unwrap(), prompt)
}

/// Every event of a request: (prompt scores events, each token's top alternatives, cached prompt tokens).
type Scores = (Vec<(Vec<f32>, Vec<Vec<TopLogprob>>)>, Vec<Vec<TopLogprob>>, usize);

fn run(e: &EngineHandle, prompt: &[u32], prompt_logprobs: Option<usize>, n: usize) -> Scores {
    let sampling = SamplingParams { logprobs: Some(3), prompt_logprobs, ..SamplingParams::default() };
    let mut s = e.submit(EngineRequest { sampling, n, ..greedy(prompt.to_vec(), 1) }).unwrap();
    let (mut scores, mut tops, mut finished, mut cached) = (Vec::new(), Vec::new(), 0, 0);
    while finished < n {
        match s.blocking_next().expect("stream ended without Finished") {
            EngineEvent::PromptLogprobs { logprobs, top } => {
                assert!(tops.is_empty(), "prompt scores come before the first token");
                scores.push((logprobs, top));
            }
            EngineEvent::Token { top, .. } => tops.push(top),
            EngineEvent::Finished { usage, .. } => {
                finished += 1;
                cached = usage.cached_tokens;
            }
            EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
        }
    }
    (scores, tops, cached)
}

#[test]
fn prompt_tokens_score_what_the_model_gives_them_after_their_prefix() {
    let (e, prompt) = engine();
    assert!(prompt.len() > 90, "{} tokens", prompt.len());
    let (scores, _, cached) = run(&e, &prompt, Some(3), 1);
    assert_eq!((scores.len(), cached), (1, 0), "one scores event, nothing cached");
    let (logprobs, top) = &scores[0];
    assert_eq!((logprobs.len(), top.len()), (prompt.len() - 1, prompt.len() - 1));
    assert!(top.iter().all(|t| t.len() == 3));
    // A prefix ending at position i samples from the distribution that scores token i + 1 — in each piece (40
    // tokens), at piece edges and at the end.
    for i in [0, 7, 38, 39, 40, 41, 79, 80, prompt.len() - 2] {
        let (_, tops, _) = run(&e, &prompt[..=i], None, 1);
        let want = &tops[0];
        let got = &top[i];
        assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), want.iter().map(|t| t.id).collect::<Vec<_>>());
        for (g, w) in got.iter().zip(want) {
            assert!((g.logprob - w.logprob).abs() < 1e-4, "position {i}: {} vs {}", g.logprob, w.logprob);
        }
        if let Some(w) = want.iter().find(|t| t.id == prompt[i + 1]) {
            assert!((logprobs[i] - w.logprob).abs() < 1e-4, "position {i}: the prompt token's own score");
        }
        assert!(logprobs[i] <= 0.0, "position {i}: a log-probability");
    }
    // Natural text: most of its tokens are among the model's likely ones.
    let mean = logprobs.iter().sum::<f32>() / logprobs.len() as f32;
    assert!(mean > -4.0, "mean prompt logprob {mean}");

    // The same prompt again is cached (a plain request hits), but a scoring request computes it in full: the
    // same scores, to the bit.
    let (_, _, hit) = run(&e, &prompt, None, 1);
    assert!(hit > 0, "a plain request hits the prompt cache");
    let (again, _, cached) = run(&e, &prompt, Some(3), 1);
    assert_eq!(cached, 0, "a scoring request computes its whole prompt");
    assert_eq!(
        again[0].0.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        logprobs.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    // Two choices: one scores event for the request.
    let (two, tops, _) = run(&e, &prompt, Some(0), 2);
    assert_eq!((two.len(), tops.len()), (1, 2));
    assert!(two[0].1.iter().all(Vec::is_empty), "no alternatives asked for");
    // A one-token prompt has nothing to score.
    let (one, _, _) = run(&e, &prompt[..1], Some(2), 1);
    assert_eq!((one.len(), one[0].0.len()), (1, 0));
}
