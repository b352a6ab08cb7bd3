//! Block accounting: a reference count per block, a free list, and the prefix cache over full blocks.
//!
//! A block with more than one reference is shared (choices of one prompt, or requests with a common prefix). A
//! full block whose KV is complete can be *registered* under its content address ([`BlockHash`]); when its last
//! reference goes it is not freed but parked in an LRU of cached blocks, where a later request with the same
//! prefix takes it back ([`BlockPool::lookup`]). Allocation takes a free block first and only then evicts the
//! least recently used cached block, so cached prefixes are reused before anything else is given up. Evicted
//! blocks are reported ([`BlockPool::take_evicted`]) so a cold tier can keep their data.
//!
//! A finished row's last, partial block can be registered too ([`BlockPool::register_partial`]). Where a request's
//! chain of full blocks ends, the cached block after it (partial or full) that starts with the most of its next
//! tokens is copied ([`BlockPool::lookup_partial`]) and only the rest is computed: hits are token-granular.
//! Partial blocks live in this pool only: they are never spilled, flushed or listed by [`BlockPool::cached`].

use super::prefix::BlockHash;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// What names a cached block: its address, its parent's, and its tokens (the SSD tier stores all three so a
/// hash collision is caught on restore).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedBlock {
    pub hash: BlockHash,
    pub parent: BlockHash,
    pub tokens: Vec<u32>,
}

/// A cached block given up for reuse (its data is still in the block until the step's transfers run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evicted {
    pub block: u32,
    pub meta: CachedBlock,
    /// Evicted because it sat unused too long (idle demotion), not for room.
    pub idle: bool,
}

#[derive(Debug)]
pub struct BlockPool {
    block_size: usize,
    refcount: Vec<u32>,
    free: Vec<u32>,
    /// Registered blocks, by address and by block.
    by_hash: HashMap<BlockHash, u32>,
    meta: HashMap<u32, CachedBlock>,
    /// Unreferenced cached blocks, least recently used first: tick -> block, and each one's tick and release time.
    lru: BTreeMap<u64, u32>,
    parked: HashMap<u32, (u64, Instant)>,
    tick: u64,
    /// Most unreferenced cached blocks kept (0: nothing is cached).
    max_cached: usize,
    evicted: Vec<Evicted>,
    /// Cached blocks given up for room (not counting idle demotions).
    evictions: u64,
    /// Registered blocks (full and partial) by their parent's address.
    children: HashMap<BlockHash, Vec<u32>>,
}

impl BlockPool {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        Self::with_cache(num_blocks, block_size, 0)
    }

    /// A pool whose unreferenced cached blocks are kept up to `max_cached` blocks.
    pub fn with_cache(num_blocks: usize, block_size: usize, max_cached: usize) -> Self {
        Self {
            block_size,
            refcount: vec![0; num_blocks],
            // Pop from the end: low block ids are handed out first.
            free: (0..num_blocks as u32).rev().collect(),
            by_hash: HashMap::new(),
            meta: HashMap::new(),
            lru: BTreeMap::new(),
            parked: HashMap::new(),
            tick: 0,
            max_cached: max_cached.min(num_blocks),
            evicted: Vec::new(),
            evictions: 0,
            children: HashMap::new(),
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn total(&self) -> usize {
        self.refcount.len()
    }

    /// Blocks an allocation can get: free ones plus unreferenced cached ones (evicted on demand).
    pub fn num_free(&self) -> usize {
        self.free.len() + self.lru.len()
    }

    /// Blocks referenced by a row.
    pub fn num_used(&self) -> usize {
        self.total() - self.num_free()
    }

    /// Registered blocks (referenced or not).
    pub fn num_cached(&self) -> usize {
        self.meta.len()
    }

    /// Unreferenced cached blocks.
    pub fn num_parked(&self) -> usize {
        self.lru.len()
    }

    pub fn caching(&self) -> bool {
        self.max_cached > 0
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    pub fn allocate(&mut self) -> Option<u32> {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let (_, b) = self.lru.pop_first()?;
                self.parked.remove(&b);
                self.evict(b, false);
                b
            }
        };
        self.refcount[b as usize] = 1;
        Some(b)
    }

    /// Add a reference to an allocated block (sharing).
    pub fn retain(&mut self, b: u32) {
        let rc = &mut self.refcount[b as usize];
        debug_assert!(*rc > 0, "retain of a free block {b}");
        *rc += 1;
    }

    /// Drop a reference. With none left a registered block is parked in the LRU (when caching), any other
    /// block is free again.
    pub fn release(&mut self, b: u32) {
        let rc = &mut self.refcount[b as usize];
        debug_assert!(*rc > 0, "release of a free block {b}");
        *rc = rc.saturating_sub(1);
        if *rc > 0 {
            return;
        }
        if self.max_cached > 0 && self.meta.contains_key(&b) {
            self.tick += 1;
            self.lru.insert(self.tick, b);
            self.parked.insert(b, (self.tick, Instant::now()));
            while self.lru.len() > self.max_cached {
                if let Some((_, old)) = self.lru.pop_first() {
                    self.parked.remove(&old);
                    self.evict(old, false);
                    self.free.push(old);
                }
            }
        } else {
            self.unregister(b);
            self.free.push(b);
        }
    }

    pub fn release_all(&mut self, blocks: &mut Vec<u32>) {
        for b in blocks.drain(..) {
            self.release(b);
        }
    }

    /// Register a full, computed block under its address. False (and nothing changes) when caching is off, the
    /// block is already registered, or another block holds this address (this one stays private).
    pub fn register(&mut self, b: u32, meta: CachedBlock) -> bool {
        if self.max_cached == 0 || self.meta.contains_key(&b) || self.by_hash.contains_key(&meta.hash) {
            return false;
        }
        self.by_hash.insert(meta.hash, b);
        self.children.entry(meta.parent).or_default().push(b);
        self.meta.insert(b, meta);
        true
    }

    /// Whether a block is cached under `h` (referenced or parked).
    /// Register `b`, whose first `meta.tokens.len()` (< block size) positions hold those tokens' KV after the
    /// block named `meta.parent`, as a partial block (its name: `meta.parent.partial(&meta.tokens)`).
    pub fn register_partial(&mut self, b: u32, meta: CachedBlock) -> bool {
        !meta.tokens.is_empty() && meta.tokens.len() < self.block_size && self.register(b, meta)
    }

    /// The registered block after `parent` (partial or full) sharing the longest run of first tokens with `tokens`
    /// (at least one), referenced for the caller (who copies it and then releases it), and that run's length.
    pub fn lookup_partial(&mut self, parent: BlockHash, tokens: &[u32]) -> Option<(u32, usize)> {
        let common = |m: &CachedBlock| m.tokens.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        let (b, n) = self
            .children
            .get(&parent)?
            .iter()
            .filter_map(|b| self.meta.get(b).map(|m| (*b, common(m))))
            .max_by_key(|&(b, n)| (n, std::cmp::Reverse(b)))?;
        if n == 0 {
            return None;
        }
        if let Some((tick, _)) = self.parked.remove(&b) {
            self.lru.remove(&tick);
            self.refcount[b as usize] = 1;
        } else {
            self.retain(b);
        }
        Some((b, n))
    }

    pub fn lookup_one(&self, h: BlockHash) -> Option<u32> {
        self.by_hash.get(&h).copied()
    }

    /// Take a reference on the cached blocks of the longest prefix of `hashes` held here, in order.
    pub fn lookup(&mut self, hashes: &[BlockHash]) -> Vec<u32> {
        let mut got = Vec::new();
        for h in hashes {
            let Some(&b) = self.by_hash.get(h) else { break };
            if let Some((tick, _)) = self.parked.remove(&b) {
                self.lru.remove(&tick);
                self.refcount[b as usize] = 1;
            } else {
                self.retain(b);
            }
            got.push(b);
        }
        got
    }

    /// Evict parked blocks unused for `idle` or more (idle demotion to a cold tier).
    pub fn evict_idle(&mut self, idle: Duration, now: Instant) -> usize {
        let old: Vec<(u64, u32)> = self
            .lru
            .iter()
            .map(|(&t, &b)| (t, b))
            .take_while(|(_, b)| self.parked.get(b).is_some_and(|(_, at)| now.saturating_duration_since(*at) >= idle))
            .collect();
        for &(t, b) in &old {
            self.lru.remove(&t);
            self.parked.remove(&b);
            self.evict(b, true);
            self.free.push(b);
        }
        old.len()
    }

    /// Every registered block and its name (for a flush to the cold tier).
    /// Registered full blocks (what a cold tier can keep).
    pub fn cached(&self) -> impl Iterator<Item = (u32, &CachedBlock)> {
        let bs = self.block_size;
        self.meta.iter().filter(move |(_, m)| m.tokens.len() == bs).map(|(&b, m)| (b, m))
    }

    /// Cached blocks given up since the last call: their data must be read before the block is written again.
    pub fn take_evicted(&mut self) -> Vec<Evicted> {
        std::mem::take(&mut self.evicted)
    }

    /// Cached blocks given up for room so far.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    fn evict(&mut self, b: u32, idle: bool) {
        self.evictions += u64::from(!idle);
        if let Some(meta) = self.unregister(b).filter(|m| m.tokens.len() == self.block_size) {
            self.evicted.push(Evicted { block: b, meta, idle });
        }
    }

    fn unregister(&mut self, b: u32) -> Option<CachedBlock> {
        let meta = self.meta.remove(&b)?;
        self.by_hash.remove(&meta.hash);
        if let Some(list) = self.children.get_mut(&meta.parent) {
            list.retain(|&x| x != b);
            if list.is_empty() {
                self.children.remove(&meta.parent);
            }
        }
        Some(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(n: u128) -> CachedBlock {
        CachedBlock { hash: BlockHash(n), parent: BlockHash(0), tokens: vec![n as u32; 16] }
    }

    #[test]
    fn allocate_share_release() {
        let mut p = BlockPool::new(3, 16);
        assert_eq!(p.blocks_for(0), 0);
        assert_eq!(p.blocks_for(16), 1);
        assert_eq!(p.blocks_for(17), 2);
        let a = p.allocate().unwrap();
        let b = p.allocate().unwrap();
        assert_eq!((a, b), (0, 1));
        p.retain(a);
        p.release(a);
        assert_eq!(p.num_free(), 1, "a is still referenced once");
        p.release(a);
        assert_eq!(p.num_free(), 2);
        let _ = p.allocate().unwrap();
        let _ = p.allocate().unwrap();
        assert!(p.allocate().is_none());
        let mut v = vec![b];
        p.release_all(&mut v);
        assert!(v.is_empty());
        assert_eq!(p.num_used(), 2);
        assert!(!p.register(0, meta(1)), "caching is off");
    }

    #[test]
    fn released_cached_blocks_park_and_are_found_again() {
        let mut p = BlockPool::with_cache(4, 16, 4);
        let a = p.allocate().unwrap();
        let b = p.allocate().unwrap();
        assert!(p.register(a, meta(10)));
        assert!(p.register(b, meta(11)));
        assert!(!p.register(b, meta(12)), "already registered");
        let c = p.allocate().unwrap();
        assert!(!p.register(c, meta(10)), "the address belongs to another block");
        p.release(a);
        p.release(b);
        p.release(c);
        assert_eq!((p.num_free(), p.num_parked(), p.num_cached()), (4, 2, 2));
        // The longest held prefix, in order, stopping at the first miss.
        assert_eq!(p.lookup(&[BlockHash(10), BlockHash(11), BlockHash(99), BlockHash(10)]), vec![a, b]);
        assert_eq!((p.num_free(), p.num_parked()), (2, 0));
        assert_eq!(p.lookup(&[BlockHash(10)]), vec![a], "a referenced cached block is shared");
        p.release(a);
        p.release(a);
        p.release(b);
        assert!(p.take_evicted().is_empty());
        // Free blocks go first, then the least recently used cached block.
        let x = p.allocate().unwrap();
        let y = p.allocate().unwrap();
        assert!(![x, y].contains(&a) && ![x, y].contains(&b));
        assert_eq!(p.allocate(), Some(a), "a was parked before b");
        let ev = p.take_evicted();
        assert_eq!(ev, vec![Evicted { block: a, meta: meta(10), idle: false }]);
        assert_eq!(p.lookup(&[BlockHash(10)]), Vec::<u32>::new());
        assert_eq!(p.lookup(&[BlockHash(11)]), vec![b]);
    }

    #[test]
    fn the_cap_and_idle_demotion_evict_oldest_first() {
        let mut p = BlockPool::with_cache(8, 16, 2);
        let blocks: Vec<u32> = (0..3).map(|_| p.allocate().unwrap()).collect();
        for (i, &b) in blocks.iter().enumerate() {
            assert!(p.register(b, meta(i as u128)));
        }
        for &b in &blocks {
            p.release(b);
        }
        assert_eq!(p.num_parked(), 2, "capped at 2");
        assert_eq!(p.take_evicted().iter().map(|e| e.block).collect::<Vec<_>>(), vec![blocks[0]]);
        assert_eq!(p.num_free(), 8);
        assert_eq!(p.evict_idle(Duration::from_secs(3600), Instant::now()), 0);
        assert_eq!(p.evict_idle(Duration::ZERO, Instant::now() + Duration::from_millis(1)), 2);
        assert!(p.take_evicted().iter().all(|e| e.idle));
        assert_eq!((p.num_cached(), p.num_parked(), p.num_free()), (0, 0, 8));
    }

    #[test]
    fn partial_blocks_continue_a_chain_and_are_never_spilled() {
        let mut p = BlockPool::with_cache(4, 4, 4);
        let root = BlockHash(1);
        let (full, part) = (p.allocate().unwrap(), p.allocate().unwrap());
        let full_meta = CachedBlock { hash: root.child(&[1, 2, 3, 4]), parent: root, tokens: vec![1, 2, 3, 4] };
        assert!(p.register(full, full_meta.clone()));
        let part_meta =
            CachedBlock { hash: full_meta.hash.partial(&[5, 6]), parent: full_meta.hash, tokens: vec![5, 6] };
        assert!(!p.register_partial(part, CachedBlock { tokens: vec![5, 6, 7, 8], ..part_meta.clone() }), "full");
        assert!(p.register_partial(part, part_meta.clone()));
        p.release(full);
        p.release(part);
        assert_eq!(p.cached().count(), 1, "only full blocks are listed for a cold tier");
        // After the chain's first block, the partial one shares 2 tokens, the full one (after the root) 3.
        assert_eq!(p.lookup_partial(full_meta.hash, &[5, 6, 9]), Some((part, 2)));
        assert_eq!(p.lookup_partial(full_meta.hash, &[5, 7]), Some((part, 1)));
        assert_eq!(p.lookup_partial(full_meta.hash, &[9]), None);
        assert_eq!(p.lookup_partial(root, &[1, 2, 3, 9]), Some((full, 3)));
        p.release(part);
        p.release(part);
        p.release(full);
        // Evicted for room: the full block is reported for a spill, the partial one is not.
        for _ in 0..4 {
            p.allocate().unwrap();
        }
        let ev = p.take_evicted();
        assert_eq!(ev.iter().map(|e| e.block).collect::<Vec<_>>(), vec![full]);
        assert_eq!(p.lookup_partial(full_meta.hash, &[5, 6]), None);
    }
}
