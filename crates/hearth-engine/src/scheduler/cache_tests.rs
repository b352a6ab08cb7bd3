//! The prompt cache under the fake runner: hits share blocks and give the tokens of a cold run, turn N+1 hits on
//! turn N's prompt and reply, the cap and pool pressure evict least recently used blocks, and a cold tier
//! restores spilled blocks after a "restart" (or recomputes them when a restore fails).

use super::tests::*;
use super::*;
use crate::engine::core::EngineCore;
use crate::kv::BlockHash;
use crate::types::{EngineEvent, EngineRequest};
use std::sync::Arc;

fn cached_core(blocks: usize, max_cached: usize, cold: Option<Arc<FakeCold>>) -> EngineCore<FakeRunner> {
    let mut cfg = config(blocks, 8);
    cfg.cache.max_blocks = max_cached;
    cfg.cache.namespace = 7;
    let mut s = Scheduler::new(cfg, vec![], 4096);
    let mut r = FakeRunner::new(blocks);
    if let Some(c) = cold {
        s = s.with_cold_tier(c.clone());
        r.cold = Some(c);
    }
    EngineCore::new(s, r)
}

/// Run one request to the end on `c`: its tokens and cached prompt tokens.
fn run_one(c: &mut EngineCore<FakeRunner>, next: &mut usize, req: &EngineRequest) -> (Vec<u32>, usize) {
    let mut s = submit(c, next, req);
    run_to_idle(c);
    let mut cached = None;
    let mut tokens = Vec::new();
    while let Ok(ev) = s.rx.try_recv() {
        match ev {
            EngineEvent::Token { id, .. } => tokens.push(id),
            EngineEvent::Finished { usage, .. } => cached = Some(usage.cached_tokens),
            EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
            EngineEvent::PromptLogprobs { .. } => {}
        }
    }
    (tokens, cached.expect("the request finished"))
}

/// The first position each slot computed (its hit).
fn first_pos0(c: &EngineCore<FakeRunner>, slot: usize) -> Option<usize> {
    c.runner.plans.iter().flat_map(|p| &p.rows).find(|r| r.slot == slot).map(|r| r.pos0)
}

#[test]
fn a_shared_prefix_is_computed_once_and_answers_like_a_cold_run() {
    let mut c = cached_core(64, 64, None);
    let mut next = 0;
    let a = request(100, 3, 5, 1);
    let (got, cached) = run_one(&mut c, &mut next, &a);
    assert_eq!((got, cached), (solo(&a), 0));
    // Same first 80 tokens, another tail: the hit is the 5 full blocks they fill (80 tokens).
    let mut b = request(120, 3, 5, 1);
    b.prompt[80..].iter_mut().for_each(|t| *t = (*t + 1) % VOCAB as u32);
    let (got, cached) = run_one(&mut c, &mut next, &b);
    assert_eq!((got, cached), (solo(&b), 80));
    assert_eq!(first_pos0(&c, 1), Some(80), "the cached prefix was not recomputed");
    // The identical prompt: all but the last token, which is always computed (6 full blocks and 3 tokens of a
    // copy of the first run's partial block).
    let (got, cached) = run_one(&mut c, &mut next, &a);
    assert_eq!((got, cached), (solo(&a), 99));
    let st = c.scheduler().stats();
    assert_eq!((st.prompt_cache.hits, st.prompt_cache.misses, st.prompt_cache.hit_tokens), (2, 1, 179));
    assert_eq!(st.kv_blocks_used, 0, "cached blocks are parked, not held");
    assert!(st.prompt_cache.parked_blocks > 0);
}

#[test]
fn turn_two_hits_on_turn_ones_prompt_and_reply() {
    let mut c = cached_core(64, 64, None);
    let mut next = 0;
    let t1 = request(50, 1, 40, 1);
    let (reply, _) = run_one(&mut c, &mut next, &t1);
    // Turn 2 = turn 1's prompt + its reply + a new message.
    let mut t2 = t1.clone();
    t2.prompt.extend(&reply);
    t2.prompt.extend([5, 6, 7, 8, 9, 10]);
    let (got, cached) = run_one(&mut c, &mut next, &t2);
    assert_eq!(got, solo(&t2));
    // 50 + 40 - 1 = 89 tokens had KV written: 5 full blocks (80 tokens) and 9 tokens of the partial sixth,
    // which the new row copies before it computes the rest.
    assert_eq!(cached, 89);
}

#[test]
fn a_partial_block_is_copied_up_to_where_the_prompts_part() {
    let mut c = cached_core(64, 64, None);
    let mut next = 0;
    // 45 tokens of KV: 2 full blocks and 13 tokens of a third, left in the cache when the row finishes.
    let a = request(45, 3, 1, 1);
    run_one(&mut c, &mut next, &a);
    // Shares the first 40 tokens: the 2 blocks, then 8 tokens copied from the partial block.
    let mut b = request(50, 3, 4, 1);
    b.prompt[..45].copy_from_slice(&a.prompt);
    b.prompt[40..].iter_mut().for_each(|t| *t = (*t + 1) % VOCAB as u32);
    let (got, cached) = run_one(&mut c, &mut next, &b);
    assert_eq!((got, cached), (solo(&b), 40));
    assert_eq!(first_pos0(&c, 1), Some(40));
    // A prompt that parts inside the first block copies that full block's first 5 tokens.
    let mut d = a.clone();
    d.prompt[5] = (d.prompt[5] + 1) % VOCAB as u32;
    let (got, cached) = run_one(&mut c, &mut next, &d);
    assert_eq!((got, cached), (solo(&d), 5));
    assert_eq!(c.scheduler().stats().kv_blocks_used, 0, "every copy source was released");
}

#[test]
fn concurrent_rows_share_blocks_and_survive_preemption() {
    // 6 requests on one 64-token prefix in a pool too small for all: sharing, parking and preemption mix.
    let mut c = cached_core(14, 14, None);
    let mut next = 0;
    let reqs: Vec<EngineRequest> = (0..6)
        .map(|i| {
            let mut r = request(70, 2, 20, 1);
            r.prompt[66..].iter_mut().for_each(|t| *t = (*t + i) % VOCAB as u32);
            r
        })
        .collect();
    let _warm = run_one(&mut c, &mut next, &reqs[0]);
    let mut streams: Vec<_> = reqs.iter().map(|r| submit(&mut c, &mut next, r)).collect();
    run_to_idle(&mut c);
    for (s, r) in streams.iter_mut().zip(&reqs) {
        assert_eq!(drain(s, 1).remove(0).0, solo(r));
    }
    assert!(c.scheduler().stats().prompt_cache.hits >= 6);
    assert_eq!(c.scheduler().stats().kv_blocks_used, 0);
}

#[test]
fn the_cap_and_pool_pressure_evict_least_recently_used_blocks() {
    // Cap of 4 parked blocks: after a 100-token request only its 4 newest full blocks stay... and the oldest
    // (the prefix) went first, so the same prompt misses.
    let mut c = cached_core(64, 4, None);
    let mut next = 0;
    let a = request(100, 4, 3, 1);
    run_one(&mut c, &mut next, &a);
    assert_eq!(c.scheduler().stats().prompt_cache.parked_blocks, 4);
    assert!(c.scheduler().stats().prompt_cache.evictions > 0);
    let (got, cached) = run_one(&mut c, &mut next, &a);
    assert_eq!((got, cached), (solo(&a), 0), "the chain's head was evicted: no hit");
    // A small pool: unrelated requests reuse parked blocks (free ones first), and correctness holds.
    let mut c = cached_core(12, 12, None);
    let mut next = 0;
    for seed in 0..5 {
        let r = request(90, 10 + seed, 8, 1);
        assert_eq!(run_one(&mut c, &mut next, &r).0, solo(&r));
    }
    assert!(c.scheduler().stats().prompt_cache.evictions > 0);
}

#[test]
fn the_cold_tier_restores_spilled_blocks_after_a_restart() {
    let cold = Arc::new(FakeCold::default());
    let a = request(150, 6, 4, 1);
    let want = solo(&a);
    {
        let mut c = cached_core(64, 64, Some(cold.clone()));
        let mut next = 0;
        assert_eq!(run_one(&mut c, &mut next, &a), (want.clone(), 0));
        // A flush spills every cached block (they stay cached).
        assert!(c.flush().is_none(), "the fake runner has no flush marker");
        c.step();
        assert_eq!(cold.blocks.lock().unwrap().len(), 9, "150 + 4 - 1 tokens written: 9 full blocks");
        // Parked: the 9 full blocks and the partial last one (which is never spilled).
        assert_eq!(c.scheduler().stats().prompt_cache.parked_blocks, 10);
    }
    // A new engine (empty pool): the prefix comes back from the cold tier, restored before it computes.
    let mut c = cached_core(64, 64, Some(cold.clone()));
    let mut next = 0;
    let (got, cached) = run_one(&mut c, &mut next, &a);
    assert_eq!((got, cached), (want.clone(), 144));
    assert_eq!(c.runner.restored, 9);
    assert_eq!(first_pos0(&c, 0), Some(144));
    assert_eq!(c.scheduler().stats().prompt_cache.restored_tokens, 144);
    // Now it is in RAM again: no restore for the next hit, which also copies the partial block the restored
    // run left (149 = all but the last prompt token).
    let (got, cached) = run_one(&mut c, &mut next, &a);
    assert_eq!((got, cached), (want.clone(), 149));
    assert_eq!(c.runner.restored, 9);
}

#[test]
fn a_failed_restore_recomputes_and_answers_the_same() {
    let cold = Arc::new(FakeCold::default());
    let a = request(150, 8, 4, 1);
    let want = solo(&a);
    {
        let mut c = cached_core(64, 64, Some(cold.clone()));
        let mut next = 0;
        run_one(&mut c, &mut next, &a);
        c.flush();
    }
    // Block 3 of the chain is listed but unreadable: blocks 0..3 arrive (48 tokens), the row goes back to
    // the queue, finds 0..3 in RAM and computes from 48.
    let h3 = crate::kv::prefix::chain(BlockHash::root(&7u128.to_le_bytes()), &a.prompt[..64], BS)[3];
    let entry = cold.blocks.lock().unwrap().remove(&h3).expect("block 3 was spilled");
    cold.broken.lock().unwrap().push(h3);
    let mut c = cached_core(64, 64, Some(cold.clone()));
    let mut next = 0;
    let (got, cached) = run_one(&mut c, &mut next, &a);
    assert_eq!(got, want);
    assert_eq!(cached, 48);
    assert_eq!(c.scheduler().stats().kv_blocks_used, 0);
    drop(entry);
}

#[test]
fn pool_evictions_spill_to_the_cold_tier_and_idle_ones_demote() {
    let cold = Arc::new(FakeCold::default());
    let mut c = cached_core(12, 12, Some(cold.clone()));
    let mut next = 0;
    let a = request(90, 1, 8, 1);
    run_one(&mut c, &mut next, &a);
    // Unrelated requests need the parked blocks: they spill before they are overwritten.
    for seed in 0..3 {
        run_one(&mut c, &mut next, &request(90, 20 + seed, 8, 1));
    }
    assert!(!cold.blocks.lock().unwrap().is_empty());
    let (got, cached) = run_one(&mut c, &mut next, &a);
    assert_eq!((got, cached), (solo(&a), 80));
    // Idle demotion: with a zero idle time every parked block spills and frees its memory.
    let mut cfg = config(12, 8);
    cfg.cache.max_blocks = 12;
    cfg.cache.ssd = Some(crate::types::SsdSettings {
        dir: std::path::PathBuf::new(),
        max_bytes: 0,
        verify: false,
        demote_idle: Some(std::time::Duration::ZERO),
    });
    let cold = Arc::new(FakeCold::default());
    let mut r = FakeRunner::new(12);
    r.cold = Some(cold.clone());
    let mut c = EngineCore::new(Scheduler::new(cfg, vec![], 4096).with_cold_tier(cold.clone()), r);
    run_one(&mut c, &mut next, &a);
    assert!(c.scheduler().wants_idle_ticks());
    c.step();
    assert_eq!(c.scheduler().stats().prompt_cache.blocks, 0);
    assert_eq!(cold.blocks.lock().unwrap().len(), 6);
    let (got, cached) = run_one(&mut c, &mut next, &a);
    assert_eq!((got, cached), (solo(&a), 80));
}

#[test]
fn a_row_that_has_not_started_finds_blocks_computed_beside_it() {
    // One prompt piece per step: B waits in the batch while A computes the shared prefix, then reuses it.
    let mut cfg = config(64, 8);
    cfg.cache.max_blocks = 64;
    cfg.max_prefill_rows = 1;
    let mut c = EngineCore::new(Scheduler::new(cfg, vec![], 4096), FakeRunner::new(64));
    let mut next = 0;
    let a = request(100, 3, 4, 1);
    let mut b = a.clone();
    b.prompt[90..].iter_mut().for_each(|t| *t = (*t + 5) % VOCAB as u32);
    let mut sa = submit(&mut c, &mut next, &a);
    let mut sb = submit(&mut c, &mut next, &b);
    run_to_idle(&mut c);
    assert_eq!(drain(&mut sa, 1).remove(0).0, solo(&a));
    assert_eq!(drain(&mut sb, 1).remove(0).0, solo(&b));
    assert_eq!(first_pos0(&c, 1), Some(80), "B started after A's prefix was computed and reused it");
    let st = c.scheduler().stats();
    assert_eq!((st.prompt_cache.hits, st.prompt_cache.misses, st.prompt_cache.hit_tokens), (1, 1, 80));
}

#[test]
fn agents_on_one_system_prompt_compute_it_once() {
    // Eight requests on one 100-token prefix arrive together; two prompts prefill per step. The others keep
    // extending their hit from the blocks the first one computes, so only it computes the shared prefix.
    let mut cfg = config(128, 8);
    cfg.cache.max_blocks = 128;
    cfg.max_prefill_rows = 2;
    let mut c = EngineCore::new(Scheduler::new(cfg, vec![], 4096), FakeRunner::new(128));
    let mut next = 0;
    let reqs: Vec<EngineRequest> = (0..8)
        .map(|i| {
            let mut r = request(120, 9, 4, 1);
            r.prompt[100..].iter_mut().for_each(|t| *t = (*t + i) % VOCAB as u32);
            r
        })
        .collect();
    let mut streams: Vec<_> = reqs.iter().map(|r| submit(&mut c, &mut next, r)).collect();
    run_to_idle(&mut c);
    for (s, r) in streams.iter_mut().zip(&reqs) {
        assert_eq!(drain(s, 1).remove(0).0, solo(r));
    }
    let shared_positions_by_others: usize = c
        .runner
        .plans
        .iter()
        .flat_map(|p| &p.rows)
        .filter(|r| r.slot != 0)
        .map(|r| (r.pos0..r.pos0 + r.tokens.len()).filter(|&p| p < 96).count())
        .sum();
    assert_eq!(shared_positions_by_others, 0, "only the first request computed the shared 96 tokens");
    let st = c.scheduler().stats();
    assert_eq!((st.prompt_cache.hits, st.prompt_cache.misses, st.prompt_cache.hit_tokens), (7, 1, 7 * 96));
}

/// A fresh engine whose restores take 6 transfers to arrive, over a cold tier holding a 150-token request's
/// prefix (spilled by an earlier engine); and that request.
fn restoring_engine() -> (EngineCore<FakeRunner>, EngineRequest) {
    let cold = Arc::new(FakeCold::default());
    let a = request(150, 6, 4, 1);
    let mut c = cached_core(64, 64, Some(cold.clone()));
    run_one(&mut c, &mut 0, &a);
    c.flush();
    c.step();
    let mut c = cached_core(64, 64, Some(cold));
    c.runner.restore_delay = 5;
    (c, a)
}

#[test]
fn background_restores_let_other_rows_decode_and_answer_the_same() {
    // A row decoding beside the restoring one keeps stepping meanwhile.
    let (mut c, a) = restoring_engine();
    let mut next = 0;
    let b = request(20, 9, 12, 1);
    let mut sb = submit(&mut c, &mut next, &b);
    c.step();
    let mut sa = submit(&mut c, &mut next, &a);
    let before = c.runner.plans.len();
    for _ in 0..3 {
        c.step();
    }
    assert!(c.scheduler().restores_in_flight(), "the restore is still in flight");
    assert_eq!(first_pos0(&c, 1), None, "the restoring row computes nothing yet");
    assert_eq!(c.runner.plans.len() - before, 3, "the other row ran a step every time");
    run_to_idle(&mut c);
    assert_eq!(drain(&mut sb, 1).remove(0).0, solo(&b));
    assert_eq!(drain(&mut sa, 1).remove(0).0, solo(&a));
    assert_eq!(first_pos0(&c, 1), Some(144), "computed after the restored blocks");
    assert_eq!(c.scheduler().stats().prompt_cache.restored_tokens, 144);
    assert_eq!(c.scheduler().stats().kv_blocks_used, 0);
    assert!(!c.scheduler().restores_in_flight());
}

#[test]
fn a_row_cancelled_mid_restore_frees_its_blocks_once_the_reads_resolve() {
    let (mut c, a) = restoring_engine();
    let mut next = 0;
    let sa = submit(&mut c, &mut next, &a);
    c.step();
    c.step();
    assert!(c.scheduler().restores_in_flight());
    let held = c.scheduler().stats().kv_blocks_used;
    assert!(held >= 8, "the restoring row holds its blocks ({held})");
    drop(sa);
    c.step();
    // The row is gone, but the reads still in flight keep their blocks out of the pool until they resolve.
    assert_eq!(c.scheduler().stats().rows_running, 0);
    assert!(c.scheduler().restores_in_flight());
    assert!(c.scheduler().stats().kv_blocks_used >= 8);
    assert!(!c.scheduler().is_idle(), "the engine keeps polling until they resolve");
    run_to_idle(&mut c);
    assert!(!c.scheduler().restores_in_flight());
    assert_eq!(c.scheduler().stats().kv_blocks_used, 0, "orphaned blocks went back to the pool");
    // The pool is sound: the same request answers like a cold run.
    let (got, _) = run_one(&mut c, &mut next, &a);
    assert_eq!(got, solo(&a));
}
