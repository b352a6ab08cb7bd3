//! Paged KV: a pool of fixed-size, ref-counted blocks (the one KV substrate of the engine; pure accounting), the
//! content addresses of full blocks and the prefix cache over them, the SSD cold tier, and the storage those
//! blocks index (per-layer K/V buffers and this step's block tables). Attention over the storage lives in
//! `attention::paged`.

pub mod block_pool;
pub mod paged;
pub mod prefix;
pub mod restorer;
pub mod ssd;
pub mod ssd_file;

pub use block_pool::{BlockPool, CachedBlock, Evicted};
pub use paged::PagedKv;
pub use prefix::{BlockHash, ColdTier};
