//! The KV cache manager: the block pool and the prefix cache over it, seen from the rows ([`RowKv`]). It finds a
//! waiting row's cached prefix (RAM/VRAM first, then the cold tier), gives rows blocks as they grow and takes them
//! back when they leave, shares a computed prompt's blocks with its forked choices, registers blocks under their
//! content addresses as rows compute them, and plans each step's block transfers ([`Transfers`]: copies, spills
//! of evicted blocks, restores from the cold tier), tracking the restores in flight. It moves no data: the block
//! mover ([`super::mover`]) does, in the runner.
//!
//! Hits end at block boundaries and keep batch invariance: the rest of the prompt is computed in pieces whose
//! attention sub-blocks the portable backend pads back to the `PIECE_ALIGN` grid (`attention::paged_gather`), so
//! every token's arithmetic is the one of a cold run (the cached KV was itself made by that arithmetic). At least
//! one prompt token is always computed: its logits are the first sample.

use super::block_pool::{BlockPool, CachedBlock};
use super::inflight::{InflightRestores, RowRestores};
use super::prefix::{chain, BlockHash, ColdTier};
use super::state_book::StateBook;
use super::transfer::{BlockCopy, Restore, RestoreReport, Spill, SpillKind, Transfers};
use crate::types::{EngineConfig, EngineStats, PromptCacheStats};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A row's share of the KV cache: its blocks and how much of its KV is written.
#[derive(Debug, Default)]
pub struct RowKv {
    pub blocks: Vec<u32>,
    /// Content addresses of the first full, computed blocks (registered in the prefix cache, or tried).
    pub hashes: Vec<BlockHash>,
    /// Tokens whose KV is written.
    pub computed: usize,
    /// Prompt tokens whose KV came from another sequence.
    pub cached: usize,
    /// Waiting for blocks restored from the cold tier; then `computed` becomes this.
    pub restoring: Option<usize>,
    /// Hybrid models: the end of the cached KV this row's prompt shares beyond the last state snapshot, where its
    /// state is worth keeping (the next request with this prefix resumes there).
    pub capture_at: Option<usize>,
    /// A restore from the cold tier failed: look only in RAM from now on.
    pub skip_cold: bool,
}

/// What a waiting row found in the cache.
pub struct Hit {
    /// Blocks of the pool referenced for the row (RAM hits), in order.
    ram: Vec<u32>,
    /// Names of the blocks after them to restore from the cold tier.
    cold: Vec<CachedBlock>,
    hashes: Vec<BlockHash>,
    /// A partial block after the RAM hits (referenced) and how many of its first tokens the row shares: the row
    /// gets a copy of it.
    partial: Option<(u32, usize)>,
    /// Hybrid models: the blocks of cached KV found before trimming to the last state snapshot.
    kv_blocks: usize,
}

impl Hit {
    /// Nothing found: a row that computes its whole prompt (one that scores its prompt tokens).
    pub fn miss() -> Self {
        Hit { ram: Vec::new(), cold: Vec::new(), hashes: Vec::new(), partial: None, kv_blocks: 0 }
    }

    fn blocks(&self) -> usize {
        self.ram.len() + self.cold.len()
    }

    /// Hit tokens.
    fn tokens(&self, block_size: usize) -> usize {
        self.blocks() * block_size + self.partial.map_or(0, |(_, n)| n)
    }

    /// Free blocks a row of `total` blocks needs to be admitted with this hit: cached blocks it shares need no
    /// room, blocks restored from the cold tier do, and a partial block's source is held until its copy is made
    /// (the copy is one of the row's blocks).
    pub fn room(&self, total: usize) -> usize {
        total - self.ram.len() + usize::from(self.partial.is_some())
    }

    /// Of [`Hit::room`], the blocks the row allocates later, as it computes (attaching takes the rest at once).
    pub fn later(&self, total: usize) -> usize {
        self.room(total) - self.cold.len() - 2 * usize::from(self.partial.is_some())
    }
}

/// Hybrid models keep a snapshot of their recurrent state every this many blocks of a prompt (1,024 tokens in
/// 16-token blocks), so a prefix that parts from a cached prompt somewhere inside it resumes at most this far back.
pub const STATE_PERIOD_BLOCKS: usize = 64;

/// Why a choice could not fork off its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForkError {
    /// The parent holds no KV for the whole prompt.
    NoPromptKv,
    /// The pool has no block for the copy of the partial prompt block.
    NoRoom,
}

pub struct KvCacheManager {
    pool: BlockPool,
    /// (blocks, block size, most cached blocks): the pool a reset starts afresh.
    shape: (usize, usize, usize),
    /// The root of every block address (the cache namespace).
    root: BlockHash,
    cold: Option<Arc<dyn ColdTier>>,
    demote_idle: Option<Duration>,
    /// Transfers planned for the next step. A copy holds a reference on its source block until the step that makes
    /// it is done.
    pending: Transfers,
    inflight: InflightRestores,
    stats: PromptCacheStats,
    /// Hybrid models: the recurrent-state snapshots a cached prefix needs (None: a model of attention only).
    states: Option<StateBook>,
}

impl KvCacheManager {
    pub fn new(cfg: &EngineConfig) -> Self {
        let shape = (cfg.kv_blocks, cfg.kv_block_size, cfg.cache.max_blocks);
        let pool = BlockPool::with_cache(shape.0, shape.1, shape.2);
        let stats = PromptCacheStats { enabled: pool.caching(), ..Default::default() };
        Self {
            pool,
            shape,
            root: BlockHash::root(&cfg.cache.namespace.to_le_bytes()),
            cold: None,
            demote_idle: cfg.cache.ssd.as_ref().and_then(|s| s.demote_idle),
            pending: Transfers::default(),
            inflight: InflightRestores::default(),
            stats,
            states: cfg.cache.recurrent.then(|| StateBook::new(cfg.cache.state_snapshots)),
        }
    }

    /// Look up (and spill to) a cold tier beside the pool.
    pub fn set_cold_tier(&mut self, tier: Arc<dyn ColdTier>) {
        self.cold = Some(tier);
    }

    /// Hybrid models: the SSD store their recurrent-state snapshots spill to and come back from.
    pub fn set_state_tier(&mut self, tier: Arc<super::ssd::SsdStore>) {
        if let Some(book) = self.states.as_mut() {
            book.set_cold(tier);
        }
    }

    pub fn block_size(&self) -> usize {
        self.pool.block_size()
    }

    pub fn total_blocks(&self) -> usize {
        self.pool.total()
    }

    /// Blocks an allocation can get (free ones and unreferenced cached ones).
    pub fn num_free(&self) -> usize {
        self.pool.num_free()
    }

    /// Whether idle demotion may have work.
    pub fn wants_idle_ticks(&self) -> bool {
        self.cold.is_some() && self.demote_idle.is_some() && self.pool.num_parked() > 0
    }

    /// Whether restores are in flight (the engine keeps stepping, polling the mover, until they resolve).
    pub fn restores_in_flight(&self) -> bool {
        !self.inflight.is_empty()
    }

    /// The pool's counters and the prompt cache's, into `st`.
    pub fn fill_stats(&self, st: &mut EngineStats) {
        st.kv_blocks_used = self.pool.num_used();
        st.kv_blocks_free = self.pool.num_free();
        st.prompt_cache = PromptCacheStats {
            blocks: self.pool.num_cached(),
            parked_blocks: self.pool.num_parked(),
            evictions: self.pool.evictions(),
            state_snapshots: self.states.as_ref().map_or(0, StateBook::len),
            ..self.stats.clone()
        };
    }

    /// Look up the longest cached prefix of a waiting row's `tokens` (taking references on RAM hits; the cold tier
    /// unless `skip_cold`).
    pub fn lookup(&mut self, tokens: &[u32], skip_cold: bool) -> Hit {
        if !self.pool.caching() || tokens.len() < 2 {
            return Hit::miss();
        }
        let bs = self.pool.block_size();
        let limit = (tokens.len() - 1) / bs * bs;
        let hashes = chain(self.root, &tokens[..limit], bs);
        let mut ram = self.pool.lookup(&hashes);
        let mut cold = Vec::new();
        if let Some(tier) = self.cold.as_ref().filter(|_| !skip_cold) {
            for (i, &h) in hashes.iter().enumerate().skip(ram.len()) {
                if !tier.contains(h) {
                    break;
                }
                let parent = if i == 0 { self.root } else { hashes[i - 1] };
                cold.push(CachedBlock { hash: h, parent, tokens: tokens[i * bs..(i + 1) * bs].to_vec() });
            }
        }
        if let Some(book) = self.states.as_mut() {
            // a hybrid model resumes only where a snapshot of its state was kept (no partial block: its end has
            // none)
            let kv_blocks = ram.len() + cold.len();
            let keep = book.usable(self.root, &hashes[..kv_blocks], 0, bs);
            for &b in &ram[keep.min(ram.len())..] {
                self.pool.release(b);
            }
            ram.truncate(keep);
            cold.truncate(keep - ram.len());
            return Hit { hashes: hashes[..keep].to_vec(), ram, cold, partial: None, kv_blocks };
        }
        // Where the RAM hits end (and nothing follows from the cold tier), a cached block after them may start
        // with more of the prompt (a finished row's partial block, or a full block the prompt parts from): its
        // shared tokens are copied, up to the last prompt token, which is always computed.
        let partial = if cold.is_empty() {
            let parent = ram.len().checked_sub(1).map_or(self.root, |i| hashes[i]);
            self.pool.lookup_partial(parent, &tokens[ram.len() * bs..tokens.len() - 1])
        } else {
            None
        };
        Hit { hashes: hashes[..ram.len() + cold.len()].to_vec(), ram, cold, partial, kv_blocks: 0 }
    }

    /// Give back what [`Self::lookup`] took (the row could not be admitted).
    pub fn release_hit(&mut self, hit: Hit) {
        for b in hit.ram.into_iter().chain(hit.partial.map(|(b, _)| b)) {
            self.pool.release(b);
        }
    }

    /// Attach an admitted row (`slot`, holding nothing yet) to its hit: RAM blocks are its first blocks; cold ones
    /// get fresh blocks and are restored before the row computes anything.
    pub fn attach(&mut self, slot: usize, row: &mut RowKv, hit: Hit) {
        let bs = self.pool.block_size();
        row.capture_at = (hit.kv_blocks > hit.ram.len()).then_some(hit.kv_blocks * bs);
        if hit.tokens(bs) == 0 {
            self.stats.misses += 1;
            return;
        }
        self.stats.hits += 1;
        let restored = hit.blocks() * bs;
        row.computed = hit.ram.len() * bs;
        row.cached = row.computed;
        row.blocks = hit.ram;
        // a hybrid row starts from the state after its last hit block (RAM or restored from the cold tier)
        if let (Some(book), Some(&last)) = (self.states.as_mut(), hit.hashes.last()) {
            book.restore(slot, last);
        }
        row.hashes = hit.hashes;
        row.hashes.truncate(row.blocks.len());
        if let Some((src, n)) = hit.partial {
            // Copy-on-write: the row writes after the shared tokens, so it gets its own copy of the block (made
            // before the next step's forward; the source stays referenced until then).
            match self.pool.allocate() {
                Some(dst) => {
                    self.pending.copies.push(BlockCopy { src, dst });
                    row.blocks.push(dst);
                    row.computed += n;
                    row.cached = row.computed;
                }
                None => self.pool.release(src),
            }
        }
        if !hit.cold.is_empty() {
            for meta in hit.cold {
                // Admission counted these blocks as available.
                let Some(block) = self.pool.allocate() else { break };
                row.blocks.push(block);
                self.pending.restores.push(Restore { slot, block, meta });
            }
            row.restoring = Some(restored);
        }
        self.stats.hit_tokens += row.computed as u64;
    }

    /// A row that has computed nothing of its own yet (of `prompt_len` prompt tokens) looks again every step and
    /// extends its hit: a row admitted beside another with the same prefix (eight agents on one system prompt)
    /// picks up the blocks the first one computes, as it computes them, instead of computing them too.
    pub fn extend_hit(&mut self, slot: usize, row: &mut RowKv, tokens: &[u32], prompt_len: usize) {
        if !self.pool.caching() {
            return;
        }
        let bs = self.pool.block_size();
        let idle = row.restoring.is_none() && row.computed == row.cached && row.computed < prompt_len;
        if !idle || row.blocks.len() * bs != row.computed || row.hashes.len() != row.blocks.len() {
            return;
        }
        let limit = (tokens.len() - 1) / bs * bs;
        if row.computed >= limit {
            return;
        }
        let parent = row.hashes.last().copied().unwrap_or(self.root);
        let more = chain(parent, &tokens[row.computed..limit], bs);
        let mut got = self.pool.lookup(&more);
        if let Some(book) = self.states.as_mut() {
            let keep = book.usable(parent, &more[..got.len()], row.computed / bs, bs);
            for &b in &got[keep..] {
                self.pool.release(b);
            }
            got.truncate(keep);
            if let Some(&last) = more[..keep].last() {
                book.restore(slot, last);
            }
        }
        if got.is_empty() {
            return;
        }
        if row.computed == 0 {
            self.stats.misses = self.stats.misses.saturating_sub(1);
            self.stats.hits += 1;
        }
        self.stats.hit_tokens += (got.len() * bs) as u64;
        row.hashes.extend_from_slice(&more[..got.len()]);
        row.blocks.extend(got);
        row.computed = row.blocks.len() * bs;
        row.cached = row.computed;
    }

    /// Give a row blocks for `n_new` more tokens, as many as the pool has; false when it still lacks some.
    pub fn allocate_for(&mut self, row: &mut RowKv, n_new: usize) -> bool {
        let needed = self.pool.blocks_for(row.computed + n_new);
        while row.blocks.len() < needed {
            match self.pool.allocate() {
                Some(b) => row.blocks.push(b),
                None => return false,
            }
        }
        true
    }

    /// Fork a choice (`child`, holding nothing) off `parent`, whose KV of the `prompt_len` prompt tokens is
    /// complete: share the full prompt blocks, copy the partial one before the next step.
    pub fn fork(&mut self, parent: &RowKv, child: &mut RowKv, prompt_len: usize) -> Result<(), ForkError> {
        let bs = self.pool.block_size();
        let full = prompt_len / bs;
        let partial = !prompt_len.is_multiple_of(bs);
        if parent.blocks.len() < full + partial as usize {
            return Err(ForkError::NoPromptKv);
        }
        let mut blocks: Vec<u32> = parent.blocks[..full].to_vec();
        if partial {
            let src = parent.blocks[full];
            let Some(dst) = self.pool.allocate() else { return Err(ForkError::NoRoom) };
            // The source stays allocated until the copy is made, even if the parent finishes now.
            self.pool.retain(src);
            self.pending.copies.push(BlockCopy { src, dst });
            blocks.push(dst);
        }
        for &b in &parent.blocks[..full] {
            self.pool.retain(b);
        }
        child.blocks = blocks;
        child.hashes = parent.hashes.iter().take(full).copied().collect();
        child.computed = prompt_len;
        // Its prompt was computed (or reused) once, by the parent: report the same reuse.
        child.cached = parent.cached;
        Ok(())
    }

    /// Choice `to` continues from `from`'s recurrent state (hybrid models; after a [`Self::fork`]).
    pub fn fork_state(&mut self, from: usize, to: usize) {
        if let Some(book) = self.states.as_mut() {
            book.fork(from, to);
        }
    }

    /// Hybrid models: the snapshots row `slot` takes in a step that computes `n_new` more of its `tokens` (of which
    /// `prompt_len` are prompt): at the prompt's last block boundary and the one before its last token, where its
    /// prompt parts from cached KV that had no snapshot (`capture_at`), every [`STATE_PERIOD_BLOCKS`] blocks of
    /// prompt, and at every boundary it reaches while decoding (each replacing the one before).
    pub fn plan_captures(&mut self, slot: usize, row: &RowKv, tokens: &[u32], prompt_len: usize, n_new: usize) {
        let Some(book) = self.states.as_mut().filter(|_| self.pool.caching()) else { return };
        let bs = self.pool.block_size();
        let marks = [prompt_len / bs * bs, prompt_len.saturating_sub(1) / bs * bs, row.capture_at.unwrap_or(0)];
        let period = STATE_PERIOD_BLOCKS * bs;
        let end = (row.computed + n_new).min(tokens.len());
        let done = row.hashes.len() * bs;
        let mut q = (row.computed / bs + 1) * bs;
        while q <= end {
            let decoding = q > prompt_len;
            if (decoding || marks.contains(&q) || q.is_multiple_of(period)) && q > done {
                let parent = row.hashes.last().copied().unwrap_or(self.root);
                let names = chain(parent, &tokens[done..q], bs);
                if let Some(&name) = names.last() {
                    let parent = if names.len() > 1 { names[names.len() - 2] } else { parent };
                    book.capture(crate::recurrent::Capture { slot, pos: q, name, parent }, decoding);
                }
            }
            q += bs;
        }
    }

    /// A step failed: its captures are not kept, nor the snapshots its rows were to start from.
    pub fn state_step_failed(&mut self, ops: &crate::recurrent::StateOps) {
        if let Some(book) = self.states.as_mut() {
            book.step_failed(ops);
        }
    }

    /// The recurrent-state orders for the next step (none for a model of attention only).
    pub fn take_state_ops(&mut self) -> crate::recurrent::StateOps {
        self.states.as_mut().map(StateBook::take).unwrap_or_default()
    }

    /// Register the row's newly completed full blocks (of `tokens`) under their addresses.
    pub fn register_computed(&mut self, row: &mut RowKv, tokens: &[u32]) {
        if !self.pool.caching() {
            return;
        }
        let bs = self.pool.block_size();
        let full = (row.computed / bs).min(row.blocks.len());
        while row.hashes.len() < full {
            let i = row.hashes.len();
            let parent = row.hashes.last().copied().unwrap_or(self.root);
            let tokens = tokens[i * bs..(i + 1) * bs].to_vec();
            let hash = parent.child(&tokens);
            self.pool.register(row.blocks[i], CachedBlock { hash, parent, tokens });
            row.hashes.push(hash);
        }
    }

    /// A row that finished leaves its last, partial block in the cache (registered by the tokens whose KV it
    /// holds), for a next turn that continues its tokens.
    pub fn keep_partial(&mut self, row: &RowKv, tokens: &[u32]) {
        let bs = self.pool.block_size();
        let (full, n) = (row.computed / bs, row.computed % bs);
        if !self.pool.caching()
            || n == 0
            || row.hashes.len() != full
            || row.blocks.len() <= full
            || row.restoring.is_some()
        {
            return;
        }
        let parent = row.hashes.last().copied().unwrap_or(self.root);
        let tokens = tokens[full * bs..row.computed].to_vec();
        self.pool.register_partial(row.blocks[full], CachedBlock { hash: parent.partial(&tokens), parent, tokens });
    }

    /// Give back the blocks of the row `slot`, dropping a copy or restore still planned into one of them; blocks
    /// with a restore in flight leave the row and return to the pool only once it resolves.
    pub fn free(&mut self, slot: usize, row: &mut RowKv) {
        let dropped: Vec<BlockCopy> =
            self.pending.copies.iter().filter(|c| row.blocks.contains(&c.dst)).copied().collect();
        self.pending.copies.retain(|c| !row.blocks.contains(&c.dst));
        self.pending.restores.retain(|r| r.slot != slot);
        let held = self.inflight.orphan(slot);
        if !held.is_empty() {
            row.blocks.retain(|b| !held.contains(b));
            row.restoring = None;
        }
        self.release_copy_sources(&dropped);
        self.pool.release_all(&mut row.blocks);
        if let Some(book) = self.states.as_mut() {
            book.release(slot);
        }
    }

    /// Free the row and forget its progress: it computes again from its tokens (preempted, or its restore failed).
    pub fn reset_row(&mut self, slot: usize, row: &mut RowKv) {
        self.free(slot, row);
        row.computed = 0;
        row.cached = 0;
        row.hashes.clear();
        row.restoring = None;
    }

    fn release_copy_sources(&mut self, copies: &[BlockCopy]) {
        for c in copies {
            self.pool.release(c.src);
        }
    }

    /// Spill idle parked blocks to the cold tier (`--ssd-demote-idle`); before a step is planned.
    pub fn demote_idle(&mut self) {
        if let (Some(_), Some(idle)) = (&self.cold, self.demote_idle) {
            self.pool.evict_idle(idle, Instant::now());
        }
    }

    /// The next step's transfers, with the pool's evictions turned into spills (read before the blocks are written
    /// again).
    pub fn take_transfers(&mut self) -> Transfers {
        let evicted = self.pool.take_evicted();
        if let Some(tier) = &self.cold {
            for e in evicted {
                if !tier.contains(e.meta.hash) {
                    let kind = if e.idle { SpillKind::Idle } else { SpillKind::Evicted };
                    self.pending.spills.push(Spill { block: e.block, meta: e.meta, kind });
                }
            }
        }
        std::mem::take(&mut self.pending)
    }

    /// A step's transfers were made (or failed: `report` then fails every restore): copies release their sources,
    /// restores join those in flight. Returns the rows whose restores have all resolved; each goes to
    /// [`Self::finish_restores`].
    pub fn transfers_done(&mut self, t: Transfers, report: &RestoreReport) -> Vec<RowRestores> {
        self.release_copy_sources(&t.copies);
        self.inflight.track(t.restores, report, &mut self.pool)
    }

    /// Restores resolved outside a step (a flush's transfers).
    pub fn restores_resolved(&mut self, report: &RestoreReport) -> Vec<RowRestores> {
        self.inflight.track(Vec::new(), report, &mut self.pool)
    }

    /// Every restore of a row resolved. True when they all arrived (the row continues after them, or was not
    /// restoring); false when one failed: it keeps what did arrive (registered, so its next lookup finds it) and
    /// must compute the rest (the caller puts it back in the queue, after [`Self::reset_row`]).
    pub fn finish_restores(&mut self, row: &mut RowKv, done: &RowRestores) -> bool {
        let Some(target) = row.restoring.take() else { return true };
        let bs = self.pool.block_size();
        let ok = row.blocks.iter().take(target / bs).take_while(|b| !done.failed.contains(b)).count();
        for (j, r) in done.restores.iter().enumerate() {
            let idx = row.hashes.len() + j;
            if idx < ok && row.blocks.get(idx) == Some(&r.block) {
                self.pool.register(r.block, r.meta.clone());
            }
        }
        if ok * bs < target {
            row.skip_cold = true;
            return false;
        }
        self.stats.restored_tokens += (target - row.computed) as u64;
        row.hashes.extend(done.restores.iter().map(|r| r.meta.hash));
        row.computed = target;
        row.cached = target;
        true
    }

    /// Spills of every cached block not yet in the cold tier (the blocks stay cached): a flush.
    pub fn flush_spills(&self) -> Vec<Spill> {
        let Some(tier) = &self.cold else { return Vec::new() };
        let mut out: Vec<Spill> = self
            .pool
            .cached()
            .filter(|(_, m)| !tier.contains(m.hash))
            .map(|(block, meta)| Spill { block, meta: meta.clone(), kind: SpillKind::Flush })
            .collect();
        out.sort_by_key(|s| s.block);
        out
    }

    /// Start the pool afresh, forgetting every planned and in-flight transfer (nothing holds blocks any more).
    pub fn reset(&mut self) {
        self.pool = BlockPool::with_cache(self.shape.0, self.shape.1, self.shape.2);
        self.pending = Transfers::default();
        self.inflight.clear();
        if let Some(book) = self.states.as_mut() {
            book.clear();
        }
    }
}
