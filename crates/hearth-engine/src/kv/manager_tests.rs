//! The KV cache manager alone: hits, forks, frees and transfers keep every reference on the pool straight.

use super::manager::{ForkError, KvCacheManager, RowKv};
use super::transfer::RestoreReport;
use crate::types::{CacheConfig, EngineConfig, EngineStats};

fn manager(blocks: usize) -> KvCacheManager {
    KvCacheManager::new(&EngineConfig {
        max_batch: 8,
        kv_block_size: 4,
        kv_blocks: blocks,
        step_tokens: 64,
        step_tokens_decoding: 32,
        max_prefill_rows: 0,
        max_queue: 8,
        cache: CacheConfig { max_blocks: blocks, ..Default::default() },
        spec: Default::default(),
    })
}

fn used(m: &KvCacheManager) -> usize {
    let mut st = EngineStats::default();
    m.fill_stats(&mut st);
    st.kv_blocks_used
}

/// A row that computed `tokens` (2 full blocks of 4 and 2 tokens) in `m`.
fn computed_row(m: &mut KvCacheManager, slot: usize, tokens: &[u32]) -> RowKv {
    let mut row = RowKv::default();
    let hit = m.lookup(tokens, false);
    m.attach(slot, &mut row, hit);
    let new = tokens.len() - row.computed;
    assert!(m.allocate_for(&mut row, new));
    row.computed = tokens.len();
    m.register_computed(&mut row, tokens);
    row
}

#[test]
fn forks_share_full_blocks_and_a_finished_prompt_is_found_again() {
    let mut m = manager(16);
    let tokens: Vec<u32> = (0..10).collect();
    let mut a = computed_row(&mut m, 0, &tokens);
    assert_eq!((a.blocks.len(), a.hashes.len(), a.cached), (3, 2, 0));
    // A forked choice shares the 2 full blocks and gets a copy of the partial one.
    let mut b = RowKv::default();
    assert_eq!(m.fork(&a, &mut b, 10), Ok(()));
    assert_eq!(b.blocks[..2], a.blocks[..2]);
    assert_ne!(b.blocks[2], a.blocks[2]);
    assert_eq!((b.computed, used(&m)), (10, 4));
    let t = m.take_transfers();
    assert_eq!(t.copies.len(), 1);
    assert!(m.transfers_done(t, &RestoreReport::default()).is_empty());
    m.keep_partial(&a, &tokens);
    m.free(0, &mut a);
    m.free(1, &mut b);
    assert_eq!(used(&m), 0, "every reference was given back");
    // The same prompt: both full blocks, and a copy of the partial one up to the last token (always computed).
    let mut c = RowKv::default();
    let hit = m.lookup(&tokens, false);
    assert_eq!((hit.room(3), hit.later(3)), (2, 0));
    m.attach(2, &mut c, hit);
    assert_eq!((c.computed, c.cached, c.blocks.len()), (9, 9, 3));
    let t = m.take_transfers();
    assert_eq!(t.copies.len(), 1);
    m.transfers_done(t, &RestoreReport::default());
    m.reset_row(2, &mut c);
    assert_eq!((c.computed, c.cached, c.blocks.len(), used(&m)), (0, 0, 0, 0));
}

#[test]
fn a_fork_without_room_or_prompt_kv_fails_and_a_dropped_copy_frees_its_source() {
    let mut m = manager(3);
    let tokens: Vec<u32> = (0..10).collect();
    let mut a = computed_row(&mut m, 0, &tokens);
    let mut b = RowKv::default();
    assert_eq!(m.fork(&a, &mut b, 10), Err(ForkError::NoRoom));
    assert_eq!(m.fork(&RowKv::default(), &mut b, 10), Err(ForkError::NoPromptKv));
    // A choice freed before its copy is made drops the copy, and the source's extra reference with it.
    m.free(0, &mut a);
    // (6 tokens: the first block cached, a copy of the second up to the last token.)
    let mut a = computed_row(&mut m, 0, &tokens[..6]);
    let t = m.take_transfers();
    assert_eq!(t.copies.len(), 1);
    m.transfers_done(t, &RestoreReport::default());
    // The pool is full but for the parked source of that copy: the fork evicts it for its own copy.
    assert_eq!(m.fork(&a, &mut b, 6), Ok(()));
    m.free(1, &mut b);
    assert!(m.take_transfers().copies.is_empty());
    m.free(0, &mut a);
    assert_eq!(used(&m), 0);
}
