//! The engine's shared vocabulary: what the server submits (`EngineRequest`), what comes back (`EngineEvent`,
//! `Usage`, `FinishReason`), how the engine is sized (`EngineConfig`), what the server may know without asking
//! the engine thread (`EngineInfo`, with the one request-validation rule), and the `/stats` snapshot.
//!
//! A leaf module: it imports nothing from `engine`, `scheduler` or the runner, so every one of them (and the
//! server) can import it without cycles.

use crate::sampling::{SamplingParams, TopLogprob};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Most choices (`n`) one request may ask for.
pub const MAX_CHOICES: usize = 16;

/// One generation request (one prompt; `n` choices share its KV blocks). It crosses to an isolated engine as it is.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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
    /// The grammar every choice's output follows, as its specification: the engine compiles it once at submit
    /// (each choice gets its own copy of the compiled state).
    pub constraint: Option<crate::sampling::grammar::ConstraintSource>,
    /// Speculation: a `prediction` to draft from, or `"speculative": false`.
    pub spec: crate::speculative::SpecRequest,
    /// Images in the prompt (vision-language models).
    #[serde(default)]
    pub media: Option<crate::vision::RequestMedia>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FinishReason {
    /// An EOS or stop token (not included in the output).
    Stop,
    /// `max_tokens` reached, or the context is full.
    Length,
    /// The caller stopped it (a dropped stream, a cancelled choice, or `generate`'s callback).
    Cancelled,
}

impl FinishReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens whose KV was reused rather than computed.
    pub cached_tokens: usize,
    /// Drafted tokens (from a `prediction` or prompt lookup) that verification kept, and that it did not.
    #[serde(default)]
    pub accepted_prediction_tokens: usize,
    #[serde(default)]
    pub rejected_prediction_tokens: usize,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum EngineEvent {
    /// One generated token of choice `choice`.
    Token { choice: usize, id: u32, logprob: Option<f32>, top: Vec<TopLogprob> },
    /// The log-probability of each prompt token after the first under the tokens before it, with the top
    /// alternatives asked for (`SamplingParams::prompt_logprobs`): sent once per request, before its first token.
    PromptLogprobs { logprobs: Vec<f32>, top: Vec<Vec<TopLogprob>> },
    /// Choice `choice` ended (the stop token, if any, was not emitted as a Token).
    Finished { choice: usize, reason: FinishReason, usage: Usage },
    /// The request failed inside the engine; no more events follow.
    Error { kind: EngineErrorKind, message: String },
}

/// Why a request failed after it was admitted: whose fault it is, which is what a client is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum EngineErrorKind {
    /// The output grammar cannot go on with this model's tokens: the request's constraint is the cause.
    GrammarFailed,
    /// The engine's process stopped under the request (an isolated engine); the server itself is fine.
    Unavailable,
    /// Anything else: the engine's own failure.
    Internal,
}

impl EngineEvent {
    /// The engine's own failure of a request.
    pub fn internal(message: impl Into<String>) -> Self {
        EngineEvent::Error { kind: EngineErrorKind::Internal, message: message.into() }
    }

    /// A request whose grammar cannot go on (`why`).
    pub fn grammar_failed(why: impl std::fmt::Display) -> Self {
        EngineEvent::Error { kind: EngineErrorKind::GrammarFailed, message: EngineErrorKind::grammar_message(why) }
    }
}

impl EngineErrorKind {
    /// The message of a [`EngineErrorKind::GrammarFailed`] error: what the grammar could not do, and why.
    pub fn grammar_message(why: impl std::fmt::Display) -> String {
        format!("{}: {why}", crate::sampling::grammar::GRAMMAR_FAILED)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum SubmitError {
    /// The waiting queue has no room for the request's rows now (HTTP 429).
    #[error("the server is busy: {waiting} sequences are already waiting and this request needs {rows} more (limit {limit}, --max-queue); retry later")]
    QueueFull { waiting: usize, rows: usize, limit: usize },
    /// The request has more rows (prompts × `n`) than the waiting queue can ever hold (HTTP 400).
    #[error("this request needs {rows} sequences (prompts × n) but the server queues at most {limit} (--max-queue); lower n or send fewer prompts")]
    NeverQueues { rows: usize, limit: usize },
    /// prompt + max_tokens can never fit in the KV cache or the context (HTTP 400).
    #[error("{0}")]
    TooLong(String),
    /// One choice would fit in the KV cache, but the request's `n` choices together never can (HTTP 400 on `n`).
    #[error("{0}")]
    ChoicesNeverFit(String),
    /// Invalid parameters (HTTP 400).
    #[error("{0}")]
    Invalid(String),
    /// The output constraint does not compile (why); HTTP 400 naming the field the request stated it in.
    #[error("the output constraint is not one this server can enforce: {0}")]
    Constraint(String),
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

    /// The per-choice cancel flags (set by `cancel`, `cancel_choice` and drop), for a caller that forwards
    /// cancellation to an engine in another process.
    pub fn cancel_flags(&self) -> &[Arc<AtomicBool>] {
        &self.cancel
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
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
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
    /// Speculation: drafted tokens verified, and those kept.
    #[serde(default)]
    pub spec_drafted_total: u64,
    #[serde(default)]
    pub spec_accepted_total: u64,
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
    /// Grammar masks computed for constrained rows (while the forward pass runs, or at sampling for choices forked
    /// that step), their total and largest time in milliseconds.
    pub grammar_masks_total: u64,
    pub grammar_mask_ms_total: f64,
    pub grammar_mask_ms_max: f64,
    /// Their median and 99th percentile, to within a factor of 2^(1/4) (a log histogram).
    pub grammar_mask_ms_p50: f64,
    pub grammar_mask_ms_p99: f64,
    /// The histogram: `grammar_mask_hist[i]` masks took between 2^((i-1)/4) and 2^(i/4) microseconds.
    #[serde(skip)]
    pub grammar_mask_hist: Vec<u64>,
    pub prompt_cache: PromptCacheStats,
    /// The SSD tier, when `--ssd-cache` is set.
    pub ssd_cache: Option<crate::kv::ssd::SsdStats>,
    /// The image encoder and its cache (vision-language models).
    #[serde(default)]
    pub images: ImageStats,
}

/// Images in `/stats`: what the engine encoded, and what its encoder cache saved.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ImageStats {
    /// Images run through the vision tower.
    pub encoded_total: u64,
    /// Their total encoding time.
    pub encode_ms_total: f64,
    /// Images whose embeddings came from the cache.
    pub cache_hits_total: u64,
    /// Images the cache holds now, and their embeddings' bytes.
    pub cached: usize,
    pub cached_bytes: u64,
}

impl EngineStats {
    /// Fill the grammar masks' p50 / p99 from their histogram (on a snapshot, not per mask).
    pub fn grammar_quantiles(&mut self) {
        let quantile = |q: f64| -> f64 {
            let want = (q * self.grammar_masks_total as f64).ceil() as u64;
            let mut seen = 0;
            for (i, &n) in self.grammar_mask_hist.iter().enumerate() {
                seen += n;
                if seen >= want {
                    return 2f64.powf(i as f64 / 4.0) / 1e3;
                }
            }
            self.grammar_mask_ms_max
        };
        (self.grammar_mask_ms_p50, self.grammar_mask_ms_p99) = (quantile(0.5), quantile(0.99));
    }
}

/// The prompt cache in `/stats`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PromptCacheStats {
    pub enabled: bool,
    /// KV blocks registered under a content address (shared by running rows or parked for reuse).
    pub blocks: usize,
    /// Of those, blocks no row references (reusable, evicted least recently used first).
    pub parked_blocks: usize,
    pub bytes: u64,
    /// The cap on parked blocks (`--prompt-cache`), in bytes.
    pub max_bytes: u64,
    /// Admitted requests that reused cached KV, and those that found none.
    pub hits: u64,
    pub misses: u64,
    /// Prompt tokens reused from RAM/VRAM blocks, and restored from the SSD tier.
    pub hit_tokens: u64,
    pub restored_tokens: u64,
    /// Cached blocks given up for room (spilled to the SSD tier when it is on).
    pub evictions: u64,
    /// Hybrid models: recurrent-state snapshots kept at block boundaries (a cached prefix resumes at one).
    #[serde(default)]
    pub state_snapshots: usize,
}

/// Engine sizing (the defaults on a device: `EngineConfig::defaults_for`, in `crate::sizing`).
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
    /// The prompt cache (prefix sharing on KV blocks) and its SSD tier.
    pub cache: CacheConfig,
    /// Speculative decoding (`--speculative`, `--spec-tokens`).
    pub spec: crate::speculative::SpecConfig,
}

/// Prompt-cache settings.
#[derive(Debug, Clone, Default)]
pub struct CacheConfig {
    /// Most unreferenced cached KV blocks kept in the pool (`--prompt-cache`; 0 = no prefix caching).
    pub max_blocks: usize,
    /// Fingerprint of model and tokenizer: block addresses (and SSD files) are only shared under the same one.
    pub namespace: u128,
    /// The SSD tier (`--ssd-cache`).
    pub ssd: Option<SsdSettings>,
    /// The model keeps recurrent state (linear-attention layers): cached prefixes resume only at snapshots of it.
    /// The engine sets this from the model.
    pub recurrent: bool,
    /// Most recurrent-state snapshots kept (hybrid models; the engine derives it from `state_bytes`).
    pub state_snapshots: usize,
    /// The bytes snapshots of recurrent state may take (`--prompt-cache-state`; hybrid models only).
    pub state_bytes: u64,
}

/// `--ssd-cache DIR`, `--ssd-cache-max`, `--ssd-cache-verify`, `--ssd-demote-idle`.
#[derive(Debug, Clone)]
pub struct SsdSettings {
    pub dir: std::path::PathBuf,
    pub max_bytes: u64,
    /// Hash every block's data on restore (on by default; the header hash is always checked).
    pub verify: bool,
    /// Spill cached blocks unused this long and free their KV memory (None: never).
    pub demote_idle: Option<std::time::Duration>,
}

impl EngineConfig {
    pub fn check(&self) -> Result<(), String> {
        let sizes = [self.max_batch, self.kv_block_size, self.kv_blocks, self.step_tokens, self.step_tokens_decoding];
        if sizes.contains(&0) {
            return Err("batch, block size, KV blocks and step tokens must all be at least 1".into());
        }
        if self.kv_blocks < 2 {
            return Err("the KV cache must hold at least 2 blocks".into());
        }
        self.spec.check()
    }
}

/// KV blocks a request must be able to hold before it is admitted: its `tokens` plus one being decoded, and for
/// each choice beyond the first a copy of the partial last prompt block and one more block. The scheduler's
/// admission and the submit-time "can this ever fit" check both use this one rule.
pub fn blocks_to_admit(tokens: usize, extra_choices: usize, block_size: usize) -> usize {
    (tokens + 1).div_ceil(block_size.max(1)) + 2 * extra_choices
}

/// Facts about the served model and engine the server needs without touching the engine thread, and the
/// validation every caller (server, CLI, engine) applies to a request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EngineInfo {
    pub vocab_size: usize,
    pub max_positions: usize,
    pub kv_capacity_tokens: usize,
    /// The KV cache's bytes (0 where there is no pool).
    #[serde(default)]
    pub kv_capacity_bytes: u64,
    /// How the KV cache keeps its rows (`--kv-cache-dtype`: f32, f16, bf16, q8_0; empty where there is no pool).
    #[serde(default)]
    pub kv_cache_dtype: String,
    pub max_batch: usize,
    pub kv_block_size: usize,
    pub kv_blocks: usize,
    /// The most prompt + max_tokens one request may ask for (context and KV pool permitting).
    pub max_request_tokens: usize,
    /// The model takes images (a vision-language model whose vision tower hearth runs).
    #[serde(default)]
    pub images: bool,
}

impl EngineInfo {
    pub fn new(vocab_size: usize, max_positions: usize, cfg: &EngineConfig) -> Self {
        let bs = cfg.kv_block_size.max(1);
        // The largest total whose admission (one extra token) fits in the whole pool.
        let kv_total = (cfg.kv_blocks * bs).saturating_sub(1);
        Self {
            vocab_size,
            max_positions,
            kv_capacity_tokens: cfg.kv_blocks * bs,
            kv_capacity_bytes: 0,
            kv_cache_dtype: String::new(),
            max_batch: cfg.max_batch,
            kv_block_size: bs,
            kv_blocks: cfg.kv_blocks,
            max_request_tokens: max_positions.min(kv_total),
            images: false,
        }
    }

    /// Limits of a single sequence outside the engine (`hearth generate`): no batch, no KV pool.
    pub fn unpooled(vocab_size: usize, max_positions: usize) -> Self {
        Self {
            vocab_size,
            max_positions,
            kv_capacity_tokens: max_positions,
            kv_capacity_bytes: 0,
            kv_cache_dtype: String::new(),
            max_batch: 1,
            kv_block_size: 1,
            kv_blocks: max_positions + 1,
            max_request_tokens: max_positions,
            images: false,
        }
    }

    /// Whether a prompt of `len` tokens leaves room for at least one generated token.
    pub fn check_prompt(&self, len: usize) -> Result<(), SubmitError> {
        if len == 0 {
            return Err(SubmitError::Invalid("the prompt is empty".into()));
        }
        if len >= self.max_request_tokens {
            return Err(SubmitError::TooLong(format!(
                "the prompt has {len} tokens; this server can hold at most {} tokens per request (model context {}, KV cache {})",
                self.max_request_tokens, self.max_positions, self.kv_capacity_tokens
            )));
        }
        Ok(())
    }

    /// What a prompt, its stop ids and its sampling must satisfy wherever they run (engine or `generate`).
    pub fn validate_prompt(
        &self,
        prompt: &[u32],
        stop_ids: &[u32],
        sampling: &SamplingParams,
    ) -> Result<(), SubmitError> {
        self.check_prompt(prompt.len())?;
        if let Some(&bad) = prompt.iter().chain(stop_ids).find(|&&t| t as usize >= self.vocab_size) {
            return Err(SubmitError::Invalid(format!(
                "token id {bad} is outside the vocabulary (size {})",
                self.vocab_size
            )));
        }
        sampling.validate(self.vocab_size).map_err(|e| SubmitError::Invalid(e.to_string()))
    }

    /// Everything a request must satisfy to be queued.
    pub fn validate(&self, req: &EngineRequest) -> Result<(), SubmitError> {
        self.validate_prompt(&req.prompt, &req.stop_token_ids, &req.sampling)?;
        if req.n == 0 || req.n > MAX_CHOICES {
            return Err(SubmitError::Invalid(format!("n must be between 1 and {MAX_CHOICES}, got {}", req.n)));
        }
        if req.n > self.max_batch {
            return Err(SubmitError::Invalid(format!(
                "n = {} choices exceed the server's batch of {} rows (--batch)",
                req.n, self.max_batch
            )));
        }
        if req.max_tokens == 0 {
            return Err(SubmitError::Invalid("max_tokens must be at least 1".into()));
        }
        if let Some(m) = &req.media {
            if !m.images.is_empty() && !self.images {
                return Err(SubmitError::Invalid("this model does not take images".into()));
            }
            m.validate(req.prompt.len()).map_err(SubmitError::Invalid)?;
        }
        let total = req.prompt.len() + req.max_tokens;
        if total > self.max_positions {
            return Err(SubmitError::TooLong(format!(
                "prompt ({} tokens) + max_tokens ({}) = {total} exceeds the model's context of {} tokens",
                req.prompt.len(),
                req.max_tokens,
                self.max_positions
            )));
        }
        if blocks_to_admit(total, req.n - 1, self.kv_block_size) > self.kv_blocks {
            if req.n > 1 && blocks_to_admit(total, 0, self.kv_block_size) <= self.kv_blocks {
                return Err(SubmitError::ChoicesNeverFit(format!(
                    "n = {} choices of prompt + max_tokens = {total} tokens each can never fit in the KV cache ({} tokens) together; lower n or max_tokens, or raise --kv-budget",
                    req.n, self.kv_capacity_tokens
                )));
            }
            return Err(SubmitError::TooLong(format!(
                "prompt + max_tokens = {total} tokens can never fit in the KV cache ({} tokens); lower max_tokens or raise --kv-budget",
                self.kv_capacity_tokens
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(blocks: usize) -> EngineInfo {
        let cfg = EngineConfig {
            max_batch: 4,
            kv_block_size: 16,
            kv_blocks: blocks,
            step_tokens: 64,
            step_tokens_decoding: 32,
            max_prefill_rows: 0,
            max_queue: 8,
            cache: CacheConfig::default(),
            spec: Default::default(),
        };
        EngineInfo::new(100, 128, &cfg)
    }

    fn req(prompt: usize, max_tokens: usize, n: usize) -> EngineRequest {
        EngineRequest {
            prompt: vec![1; prompt],
            sampling: SamplingParams::default(),
            max_tokens,
            stop_token_ids: vec![],
            ignore_eos: false,
            n,
            constraint: None,
            spec: Default::default(),
            media: None,
        }
    }

    #[test]
    fn the_largest_request_fits_the_admission_rule() {
        let i = info(4); // 64 tokens of KV, context 128
        assert_eq!(i.max_request_tokens, 63);
        assert!(i.validate(&req(10, 53, 1)).is_ok());
        assert!(matches!(i.validate(&req(10, 54, 1)), Err(SubmitError::TooLong(_))));
        assert_eq!(blocks_to_admit(63, 0, 16), 4);
        // Context bound: 128 positions.
        let i = info(100);
        assert!(i.validate(&req(100, 28, 1)).is_ok());
        assert!(matches!(i.validate(&req(100, 29, 1)), Err(SubmitError::TooLong(_))));
        assert!(matches!(i.check_prompt(128), Err(SubmitError::TooLong(_))));
    }

    #[test]
    fn invalid_requests_are_named() {
        let i = info(100);
        let bad = |r: EngineRequest| match i.validate(&r) {
            Err(SubmitError::Invalid(m)) => m,
            other => panic!("expected Invalid, got {other:?}"),
        };
        assert!(bad(req(0, 1, 1)).contains("empty"));
        assert!(bad(req(3, 0, 1)).contains("max_tokens"));
        assert!(bad(req(3, 1, 0)).contains("n must be"));
        assert!(bad(req(3, 1, 5)).contains("--batch"));
        let mut r = req(3, 1, 1);
        r.prompt[1] = 100;
        assert!(bad(r).contains("outside the vocabulary"));
        // Each extra choice needs two more blocks.
        let i = info(6);
        assert!(i.validate(&req(16, 16, 2)).is_ok());
        // ...and the message says it is the choices that do not fit.
        assert!(matches!(i.validate(&req(16, 16, 3)), Err(SubmitError::ChoicesNeverFit(m)) if m.contains("n = 3")));
    }
}
