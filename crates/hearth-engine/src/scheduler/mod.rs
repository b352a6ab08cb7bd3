//! Continuous batching: sequences, admission within the row and KV budgets, step planning (decode rows first,
//! then prefill chunks within the step's token budget), preemption when blocks run out.

pub mod scheduler;
pub mod sequence;

pub use scheduler::Scheduler;
pub use sequence::Sequence;
