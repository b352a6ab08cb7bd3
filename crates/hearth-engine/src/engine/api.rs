//! The engine's public surface: what the server submits and what comes back. The engine runs on its own OS
//! thread; the HTTP side never blocks on it.

use crate::generate::FinishReason;
use crate::sampling::{SamplingParams, TopLogprob};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One generation request (one prompt; `n` choices share its KV blocks).
#[derive(Debug, Clone)]
pub struct EngineRequest {
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    /// Generated tokens per choice.
    pub max_tokens: usize,
    /// Token ids that end a choice (finish_reason `stop`), besides the model's EOS set.
    pub stop_token_ids: Vec<u32>,
    /// Do not stop at EOS (benchmarks).
    pub ignore_eos: bool,
    /// Number of choices (>= 1).
    pub n: usize,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens whose KV was reused rather than computed.
    pub cached_tokens: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EngineEvent {
    /// One generated token of choice `choice`.
    Token { choice: usize, id: u32, logprob: Option<f32>, top: Vec<TopLogprob> },
    /// Choice `choice` ended (the stop token, if any, was not emitted as a Token).
    Finished { choice: usize, reason: FinishReason, usage: Usage },
    /// The request failed inside the engine; no more events follow.
    Error { message: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The waiting queue is full (HTTP 429).
    #[error("the server is busy: {waiting} requests are already waiting (limit {limit}); retry later")]
    QueueFull { waiting: usize, limit: usize },
    /// prompt + max_tokens can never fit in the KV cache or the context (HTTP 400).
    #[error("{0}")]
    TooLong(String),
    /// Invalid parameters (HTTP 400).
    #[error("{0}")]
    Invalid(String),
    /// The engine thread has stopped (HTTP 503).
    #[error("the engine is not running")]
    Unavailable,
}

/// The events of one request. Dropping it cancels the request: its rows and blocks are freed within one step.
pub struct RequestStream {
    pub rx: tokio::sync::mpsc::UnboundedReceiver<EngineEvent>,
    /// One flag per choice.
    pub(crate) cancel: Vec<Arc<AtomicBool>>,
}

impl RequestStream {
    pub async fn next(&mut self) -> Option<EngineEvent> {
        self.rx.recv().await
    }

    /// Blocking receive, for non-async callers.
    pub fn blocking_next(&mut self) -> Option<EngineEvent> {
        self.rx.blocking_recv()
    }

    /// A stream fed by the caller (tests of the HTTP layer without a model).
    pub fn from_parts(rx: tokio::sync::mpsc::UnboundedReceiver<EngineEvent>, choices: usize) -> Self {
        Self { rx, cancel: (0..choices.max(1)).map(|_| Arc::new(AtomicBool::new(false))).collect() }
    }

    /// Cancel every choice.
    pub fn cancel(&self) {
        for c in &self.cancel {
            c.store(true, Ordering::Relaxed);
        }
    }

    /// Cancel one choice (it ends with `Finished { reason: Cancelled }` carrying its usage); the others go on.
    pub fn cancel_choice(&self, choice: usize) {
        if let Some(c) = self.cancel.get(choice) {
            c.store(true, Ordering::Relaxed);
        }
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// A snapshot for `/stats`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct EngineStats {
    pub rows_running: usize,
    pub rows_waiting: usize,
    /// Rows (choices) ever submitted.
    pub rows_submitted_total: u64,
    pub kv_blocks_used: usize,
    pub kv_blocks_free: usize,
    pub kv_blocks_total: usize,
    pub kv_block_size: usize,
    pub tokens_generated_total: u64,
    pub prompt_tokens_processed_total: u64,
    pub preemptions_total: u64,
    pub steps_total: u64,
    /// Where step time goes (milliseconds, cumulative): building inputs and issuing the forward pass (on a GPU
    /// this is host time: kernels run asynchronously), waiting for its logits (device time not hidden behind the
    /// host), and sampling plus emitting tokens.
    pub step_issue_ms_total: f64,
    pub step_wait_ms_total: f64,
    pub step_sample_ms_total: f64,
    /// With `HEARTH_CUDA_STEP_TIMING=1` (CUDA builds): the device's time from a step's first upload to its last
    /// kernel (CUDA events), and the time from one step's last kernel to the next step's first upload, summed over
    /// `step_gaps_total` consecutive pairs (the device idles there unless the host queued work). 0 when off.
    pub step_device_ms_total: f64,
    pub step_gap_ms_total: f64,
    pub step_gaps_total: u64,
}

/// Engine sizing.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Most rows decoding at once (`--batch`).
    pub max_batch: usize,
    /// Tokens per KV block (`--kv-block-size`).
    pub kv_block_size: usize,
    /// Total KV blocks (from `--kv-budget`).
    pub kv_blocks: usize,
    /// Prompt tokens per step (`--prefill-chunk`).
    pub step_tokens: usize,
    /// Most tokens of one prompt a step computes while rows are decoding (`--prefill-chunk-decoding`): bounds the
    /// inter-token latency running streams see while a long prompt is prefilled. Decoding rows add one token each.
    pub step_tokens_decoding: usize,
    /// Most prompts a step starts or continues prefilling (`--prefill-seqs`, 0 = no limit). On a compute-bound
    /// device a burst of short prompts is prefilled about as fast one after another as together, so starting them
    /// one by one gives the first ones their first token sooner (lower mean TTFT) instead of all at the end.
    pub max_prefill_rows: usize,
    /// Most requests waiting for admission (`--max-queue`); more get `QueueFull`.
    pub max_queue: usize,
}
