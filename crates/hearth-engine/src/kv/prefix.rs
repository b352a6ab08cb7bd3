//! Content addresses of KV blocks. A full block is named by a hash chained over its parent block's hash and its
//! own token ids; the chain starts at a namespace root (model, tokenizer, KV layout), so equal names mean equal
//! KV on this engine and on the SSD tier across restarts. The hash is xxh3-128: stable across runs and builds,
//! and the SSD tier also stores each block's tokens and parent, so a collision is caught before it is served.

use xxhash_rust::xxh3::xxh3_128;

/// The name of one full KV block (or of a chain's root).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub u128);

impl BlockHash {
    /// The root of every chain in `namespace` (a fingerprint of model, tokenizer and KV layout).
    pub fn root(namespace: &[u8]) -> Self {
        let mut buf = b"hearth-kv-root\0".to_vec();
        buf.extend_from_slice(namespace);
        BlockHash(xxh3_128(&buf))
    }

    /// The block after `self` holding `tokens`.
    pub fn child(self, tokens: &[u32]) -> Self {
        let mut buf = Vec::with_capacity(16 + 4 * tokens.len());
        buf.extend_from_slice(&self.0.to_le_bytes());
        for t in tokens {
            buf.extend_from_slice(&t.to_le_bytes());
        }
        BlockHash(xxh3_128(&buf))
    }

    /// The name of a partial block after `self` holding `tokens` (fewer than a block's): a different space from
    /// full blocks' names, so a chain lookup never finds one.
    pub fn partial(self, tokens: &[u32]) -> Self {
        let mut buf = b"hearth-kv-partial\0".to_vec();
        buf.extend_from_slice(&self.child(tokens).0.to_le_bytes());
        BlockHash(xxh3_128(&buf))
    }

    /// 32 lowercase hex digits (file names).
    pub fn hex(self) -> String {
        format!("{:032x}", self.0)
    }

    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_le_bytes()
    }

    pub fn from_bytes(b: [u8; 16]) -> Self {
        BlockHash(u128::from_le_bytes(b))
    }
}

/// What the scheduler asks of a cold tier (the SSD store; a map in tests): can a block with this name be
/// restored? The data itself moves in the runner.
pub trait ColdTier: Send + Sync {
    fn contains(&self, h: BlockHash) -> bool;
}

/// The hashes of the full blocks of `tokens` under `root`, block `i` covering `tokens[i*bs..(i+1)*bs]`.
pub fn chain(root: BlockHash, tokens: &[u32], block_size: usize) -> Vec<BlockHash> {
    let mut h = root;
    tokens
        .chunks_exact(block_size.max(1))
        .map(|c| {
            h = h.child(c);
            h
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chained_names_depend_on_every_earlier_token_and_the_namespace() {
        let r = BlockHash::root(b"model-a");
        let a = chain(r, &[1, 2, 3, 4, 5, 6, 7], 2);
        assert_eq!(a.len(), 3, "the partial block has no name");
        let b = chain(r, &[1, 2, 3, 4, 5, 9], 2);
        assert_eq!(a[..2], b[..2]);
        assert_ne!(a[2], b[2]);
        // A change in block 0 renames every later block, even with equal tokens there.
        let c = chain(r, &[9, 2, 3, 4, 5, 6], 2);
        assert!(a.iter().zip(&c).all(|(x, y)| x != y));
        assert_ne!(chain(BlockHash::root(b"model-b"), &[1, 2], 2), a[..1]);
        // Stable across runs (SSD file names): a fixed value.
        assert_eq!(BlockHash::root(b"x"), BlockHash::root(b"x"));
        assert_eq!(BlockHash::from_bytes(a[1].to_bytes()), a[1]);
        assert_eq!(a[0].hex().len(), 32);
    }
}
