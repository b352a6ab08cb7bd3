//! Paged KV: a pool of fixed-size, ref-counted blocks (the one KV substrate of the engine; pure accounting) and
//! the storage those blocks index (per-layer K/V buffers and this step's block tables). Attention over the
//! storage lives in `attention::paged`.

pub mod block_pool;
pub mod paged;

pub use block_pool::BlockPool;
pub use paged::PagedKv;
