//! One row: a choice of a request, with its tokens, KV blocks, sampler and event channel.

use crate::engine::api::{EngineEvent, Usage};
use crate::generate::FinishReason;
use crate::sampling::Sampler;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

pub struct Sequence {
    /// Unique id; also the KV slot.
    pub slot: usize,
    /// Admission order (FIFO; preemption takes the newest).
    pub arrival: u64,
    pub choice: usize,
    /// Choices 1..n of the request, forked from this one when its prompt is computed: they share its prompt
    /// blocks (a copy of the partial last one) and sample their first token from the same logits.
    pub siblings: Vec<Sequence>,
    /// Prompt followed by generated tokens.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// Tokens whose KV is written.
    pub computed: usize,
    /// Prompt tokens whose KV came from another sequence.
    pub cached: usize,
    pub blocks: Vec<u32>,
    pub sampler: Sampler,
    pub max_tokens: usize,
    pub stop_ids: Vec<u32>,
    pub ignore_eos: bool,
    pub tx: UnboundedSender<EngineEvent>,
    pub cancel: Arc<AtomicBool>,
}

impl Sequence {
    pub fn generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.tx.is_closed()
    }

    /// Tokens still to compute before the next sample.
    pub fn pending(&self) -> usize {
        self.tokens.len() - self.computed
    }

    pub fn usage(&self) -> Usage {
        Usage { prompt_tokens: self.prompt_len, completion_tokens: self.generated(), cached_tokens: self.cached }
    }

    pub fn emit(&self, ev: EngineEvent) {
        // A closed receiver means the client went away; the next step drops the row.
        let _ = self.tx.send(ev);
    }

    pub fn finish(&self, reason: FinishReason) {
        self.emit(EngineEvent::Finished { choice: self.choice, reason, usage: self.usage() });
    }
}
