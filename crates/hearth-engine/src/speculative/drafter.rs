//! The draft model: a second, smaller model with the target's tokenizer and its own paged KV, proposing the next
//! tokens of the rows that ask ([`Drafter::draft`]).
//!
//! Each call drafts for every asking row at once, in batched forward passes: the first pass feeds each row what
//! the draft model has not seen of it (after a step, the tokens the target kept and its own next token; for a new
//! row, its prompt and output, in pieces of at most [`CATCH_UP`] tokens), every later pass the token the one before
//! it drafted. A row's draft is greedy (the draft model's most likely token at each position) and ends at `k`
//! tokens, or after a token the draft model gives less than [`CONFIDENCE`] (a guess it is unsure of is rarely the
//! target's, and every further position costs a pass). The rows' verification is the target's own sampling
//! (`scheduler::speculate`), which is the rejection-sampling rule for a draft that is one token, so the output
//! follows the target's distribution whatever the draft model proposes.
//!
//! The draft KV keeps what the draft model has fed of each row: the next call keeps the longest prefix of it
//! that the row's tokens still agree with (the drafted tokens the target kept stay; the rejected ones are
//! written over) and frees the blocks past it. A row the scheduler no longer runs is forgotten; when blocks run
//! short, the rows not asking this call go first (least recently used), and a row that still does not fit gets
//! no draft.

use crate::attention::{BatchContext, PagedAttention};
use crate::models::Model;
use crate::Result;
use candle_core::{Device, Tensor, D};
use std::collections::HashMap;

/// A row asking for a draft.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftAsk {
    /// The row's KV slot (its identity across calls).
    pub slot: usize,
    /// The row's prompt and output so far.
    pub tokens: Vec<u32>,
    /// The most tokens to draft.
    pub k: usize,
}

/// The most tokens of one row a catch-up pass feeds.
pub const CATCH_UP: usize = 512;
/// A drafted token the draft model gives less probability than this ends the row's draft.
pub const CONFIDENCE: f32 = 0.6;

#[derive(Default)]
struct DraftRow {
    blocks: Vec<u32>,
    /// The tokens whose KV the draft model has written, in order.
    fed: Vec<u32>,
    last_used: u64,
}

pub struct Drafter {
    model: Box<dyn Model>,
    device: Device,
    kv: PagedAttention,
    block_size: usize,
    free: Vec<u32>,
    rows: HashMap<usize, DraftRow>,
    clock: u64,
    /// Drafted ids must be below this (the target's vocabulary).
    vocab: usize,
}

/// A row in one pass: which ask, what it feeds at which position, and whether its last fed token drafts.
struct Feed {
    ask: usize,
    slot: usize,
    tokens: Vec<u32>,
    pos0: usize,
    drafts: bool,
}

impl Drafter {
    /// A drafter running `model` on `device` with `blocks` KV blocks of `block_size` tokens; drafted ids stay below
    /// `vocab`.
    pub fn new(model: Box<dyn Model>, device: Device, blocks: usize, block_size: usize, vocab: usize) -> Result<Self> {
        let c = model.config();
        let kv = PagedAttention::new(
            c.kv_layers(),
            blocks,
            block_size,
            c.num_heads,
            c.num_kv_heads,
            c.head_dim,
            model.kv_encoding(),
            &device,
        )?;
        let free = (0..blocks as u32).rev().collect();
        Ok(Self { model, device, kv, block_size, free, rows: HashMap::new(), clock: 0, vocab })
    }

    /// Forget every row (the engine started its block pool afresh).
    pub fn reset(&mut self) {
        for (_, r) in self.rows.drain() {
            self.free.extend(r.blocks);
        }
    }

    /// Drafts for `asks`, in order (empty where a row gets none); `alive` lists the slots still running (the
    /// others are forgotten).
    pub fn draft(&mut self, asks: &[DraftAsk], alive: &[usize]) -> Result<Vec<Vec<u32>>> {
        self.clock += 1;
        let gone: Vec<usize> = self.rows.keys().copied().filter(|s| !alive.contains(s)).collect();
        for slot in gone {
            self.forget(slot);
        }
        let mut drafts = vec![Vec::new(); asks.len()];
        let mut feeds: Vec<Feed> = Vec::new();
        for (i, ask) in asks.iter().enumerate() {
            if let Some(f) = self.prepare(i, ask, asks) {
                feeds.push(f);
            }
        }
        while !feeds.is_empty() {
            let picks = self.pass(&feeds)?;
            let mut next = Vec::with_capacity(feeds.len());
            for (mut f, (id, p)) in feeds.into_iter().zip(picks) {
                let ask = &asks[f.ask];
                let row = self.rows.entry(ask.slot).or_default();
                row.fed.extend_from_slice(&f.tokens);
                f.pos0 += f.tokens.len();
                if !f.drafts {
                    // Still catching up: the next piece of what it has not fed.
                    let rest = &ask.tokens[f.pos0..];
                    let n = rest.len().min(CATCH_UP);
                    f.tokens = rest[..n].to_vec();
                    f.drafts = n == rest.len();
                    next.push(f);
                    continue;
                }
                if id as usize >= self.vocab {
                    continue;
                }
                let d = &mut drafts[f.ask];
                d.push(id);
                if d.len() < ask.k && p >= CONFIDENCE {
                    f.tokens = vec![id];
                    next.push(f);
                }
            }
            feeds = next;
        }
        Ok(drafts)
    }

    /// Set a row up for this call: keep the KV of what it fed that its tokens still agree with, make room for
    /// what it feeds now and the draft, and return its first pass (None: no draft for it).
    fn prepare(&mut self, i: usize, ask: &DraftAsk, asks: &[DraftAsk]) -> Option<Feed> {
        let n = ask.tokens.len();
        if n == 0 || ask.k == 0 || n + ask.k > self.model.max_positions() {
            return None;
        }
        let clock = self.clock;
        let bs = self.block_size;
        let row = self.rows.entry(ask.slot).or_default();
        row.last_used = clock;
        // At least the last token is fed: its logits draft the first token.
        let keep = row.fed.iter().zip(&ask.tokens).take_while(|(a, b)| a == b).count().min(n - 1);
        row.fed.truncate(keep);
        let held = keep.div_ceil(bs);
        let released: Vec<u32> = row.blocks.drain(held..).collect();
        self.free.extend(released);
        // Every token it has not fed, and the drafted ones but the last.
        let need = (n + ask.k - 1).div_ceil(bs).saturating_sub(held);
        if !self.make_room(need, asks) {
            return None;
        }
        let row = self.rows.get_mut(&ask.slot)?;
        let at = self.free.len() - need;
        row.blocks.extend(self.free.drain(at..));
        let rest = &ask.tokens[keep..];
        let len = rest.len().min(CATCH_UP);
        Some(Feed { ask: i, slot: ask.slot, tokens: rest[..len].to_vec(), pos0: keep, drafts: len == rest.len() })
    }

    /// Free blocks until `need` are free: the least recently used rows not asking this call go first.
    fn make_room(&mut self, need: usize, asks: &[DraftAsk]) -> bool {
        while self.free.len() < need {
            let victim = self
                .rows
                .iter()
                .filter(|(slot, r)| !r.blocks.is_empty() && !asks.iter().any(|a| a.slot == **slot))
                .min_by_key(|(_, r)| r.last_used)
                .map(|(slot, _)| *slot);
            match victim {
                Some(slot) => self.forget(slot),
                None => return false,
            }
        }
        true
    }

    fn forget(&mut self, slot: usize) {
        if let Some(r) = self.rows.remove(&slot) {
            self.free.extend(r.blocks);
        }
    }

    /// One batched forward over `feeds`: each row's most likely next token and its probability.
    fn pass(&mut self, feeds: &[Feed]) -> Result<Vec<(u32, f32)>> {
        let tables: Vec<(usize, &[u32])> = feeds
            .iter()
            .map(|f| (f.slot, self.rows.get(&f.slot).map(|r| r.blocks.as_slice()).unwrap_or_default()))
            .collect();
        self.kv.storage_mut().set_tables(tables);
        let spans: Vec<(usize, usize, usize)> = feeds.iter().map(|f| (f.slot, f.pos0, f.tokens.len())).collect();
        let mut ctx = BatchContext::new(&spans, false, &self.device)?;
        ctx.mark_prompt(feeds.iter().map(|f| f.tokens.len() > 1));
        let tokens: Vec<u32> = feeds.iter().flat_map(|f| f.tokens.iter().copied()).collect();
        let input = Tensor::new(tokens.as_slice(), &self.device)?;
        let logits = self.model.forward(&input, &ctx, &mut self.kv)?;
        let ids = logits.argmax(D::Minus1)?.to_vec1::<u32>()?;
        // The top token's probability: 1 / Σ exp(l - max).
        let max = logits.max_keepdim(D::Minus1)?;
        let sums = logits.broadcast_sub(&max)?.exp()?.sum(D::Minus1)?.to_vec1::<f32>()?;
        Ok(ids.into_iter().zip(sums).map(|(id, s)| (id, 1.0 / s)).collect())
    }
}
