//! Block accounting: a free list and a reference count per block. A block with more than one reference is
//! shared (choices of one prompt); it returns to the free list when the last reference goes.

#[derive(Debug)]
pub struct BlockPool {
    block_size: usize,
    refcount: Vec<u32>,
    free: Vec<u32>,
}

impl BlockPool {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        // Pop from the end: low block ids are handed out first.
        Self { block_size, refcount: vec![0; num_blocks], free: (0..num_blocks as u32).rev().collect() }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn total(&self) -> usize {
        self.refcount.len()
    }

    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    pub fn num_used(&self) -> usize {
        self.total() - self.num_free()
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }

    pub fn allocate(&mut self) -> Option<u32> {
        let b = self.free.pop()?;
        self.refcount[b as usize] = 1;
        Some(b)
    }

    /// Add a reference to an allocated block (sharing).
    pub fn retain(&mut self, b: u32) {
        let rc = &mut self.refcount[b as usize];
        debug_assert!(*rc > 0, "retain of a free block {b}");
        *rc += 1;
    }

    /// Drop a reference; the block is free again when none remain.
    pub fn release(&mut self, b: u32) {
        let rc = &mut self.refcount[b as usize];
        debug_assert!(*rc > 0, "release of a free block {b}");
        *rc = rc.saturating_sub(1);
        if *rc == 0 {
            self.free.push(b);
        }
    }

    pub fn release_all(&mut self, blocks: &mut Vec<u32>) {
        for b in blocks.drain(..) {
            self.release(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
