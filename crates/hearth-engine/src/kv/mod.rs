//! Paged KV: a pool of fixed-size, ref-counted blocks (the one KV substrate of the engine) and the attention
//! store that reads and writes sequences through their block tables.

pub mod block_pool;
pub mod paged;

pub use block_pool::BlockPool;
pub use paged::PagedKv;
