//! Paged KV: a pool of fixed-size, ref-counted blocks (the one KV substrate of the engine) with the prefix cache
//! over it ([`BlockPool`]: pure accounting) and the content addresses of full blocks ([`prefix`]); the KV cache
//! manager that hands the pool's blocks to rows and plans each step's block transfers ([`KvCacheManager`]); the
//! storage the blocks index (per-layer K/V buffers and this step's block tables, [`PagedKv`]); the block mover
//! that makes the transfers on that storage ([`mover::BlockMover`]); and the SSD cold tier ([`ssd`], read back in
//! the background by [`restorer`]). Attention over the storage lives in `attention::paged`.

pub mod block_pool;
pub mod codec;
pub mod encoding;
mod inflight;
pub mod manager;
#[cfg(test)]
mod manager_tests;
pub mod mover;
pub mod paged;
pub mod prefix;
pub mod restorer;
pub mod ssd;
pub mod ssd_file;
pub mod state_book;
pub mod transfer;

pub use block_pool::{BlockPool, CachedBlock, Evicted};
pub use encoding::{KvEncoding, RowCode};
pub use inflight::RowRestores;
pub use manager::{ForkError, Hit, KvCacheManager, RowKv};
pub use paged::PagedKv;
pub use prefix::{BlockHash, ColdTier};
pub use transfer::{BlockCopy, Restore, RestoreReport, Spill, SpillKind, Transfers};
