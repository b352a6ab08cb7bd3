//! The engine thread and its handle. `start` moves the model onto a dedicated OS thread running the scheduler's
//! step loop; `EngineHandle::submit` validates a request, queues it, and returns its event stream. Nothing on the
//! async side ever waits for a step.

pub mod api;

pub use api::{EngineConfig, EngineEvent, EngineRequest, EngineStats, RequestStream, SubmitError, Usage};

use crate::kv::PagedKv;
use crate::models::Model;
use crate::sampling::{Sampler, SamplingParams};
use crate::scheduler::{Scheduler, Sequence};
use crate::{Error, Result};
use candle_core::Device;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

enum Command {
    Submit(Vec<Sequence>),
}

/// Facts about the served model the server needs without touching the engine thread.
#[derive(Debug, Clone)]
pub struct EngineInfo {
    pub vocab_size: usize,
    pub max_positions: usize,
    pub kv_capacity_tokens: usize,
    pub max_batch: usize,
    pub kv_block_size: usize,
    /// The most prompt + max_tokens one request may ask for (context and KV pool permitting).
    pub max_request_tokens: usize,
}

#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Command>,
    stats: Arc<Mutex<EngineStats>>,
    /// Requests submitted but not yet seen by the engine thread, plus its waiting queue (for 429s).
    queued: Arc<AtomicUsize>,
    next_slot: Arc<AtomicU64>,
    alive: Arc<AtomicBool>,
    pub info: EngineInfo,
    cfg: EngineConfig,
}

/// Choose the number of KV blocks for a byte budget.
pub fn blocks_for_budget(model: &dyn Model, budget_bytes: u64, block_size: usize) -> usize {
    let c = model.config();
    let per_token = PagedKv::bytes_per_token(c.num_layers, c.num_kv_heads, c.head_dim, model.dtype()) as u64;
    (budget_bytes / (per_token * block_size as u64).max(1)) as usize
}

pub fn start(model: Box<dyn Model>, device: Device, cfg: EngineConfig, eos: Vec<u32>) -> Result<EngineHandle> {
    if cfg.max_batch == 0 || cfg.kv_block_size == 0 || cfg.kv_blocks == 0 || cfg.step_tokens == 0 || cfg.step_tokens_decoding == 0 {
        return Err(Error::InvalidRequest("batch, block size, KV blocks and step tokens must all be at least 1".into()));
    }
    let info = EngineInfo {
        vocab_size: model.config().vocab_size,
        max_positions: model.max_positions(),
        kv_capacity_tokens: cfg.kv_blocks * cfg.kv_block_size,
        max_batch: cfg.max_batch,
        kv_block_size: cfg.kv_block_size,
        // One block of slack for the token being decoded (see `submit`).
        max_request_tokens: model.max_positions().min((cfg.kv_blocks - 1) * cfg.kv_block_size),
    };
    let (tx, rx) = mpsc::channel::<Command>();
    let stats = Arc::new(Mutex::new(EngineStats::default()));
    let queued = Arc::new(AtomicUsize::new(0));
    let alive = Arc::new(AtomicBool::new(true));
    // Batch invariance: every accelerated matmul takes the row-independent int8 path (HEARTH_BATCH_INVARIANT=0
    // allows the faster dequant+f32 prefill path, at the cost of batch-dependent rounding).
    let invariant = std::env::var("HEARTH_BATCH_INVARIANT").map(|v| !matches!(v.as_str(), "0" | "off" | "false")).unwrap_or(true);
    crate::kernels::set_row_invariant(invariant);
    let mut sched = Scheduler::new(model, device, cfg.clone(), eos)?;
    {
        let (stats, queued, alive) = (stats.clone(), queued.clone(), alive.clone());
        std::thread::Builder::new()
            .name("hearth-engine".into())
            .spawn(move || {
                run_loop(&mut sched, rx, &stats, &queued);
                alive.store(false, Ordering::Relaxed);
            })
            .map_err(|e| Error::io("spawning the engine thread", e))?;
    }
    Ok(EngineHandle { tx, stats, queued, next_slot: Arc::new(AtomicU64::new(0)), alive, info, cfg })
}

fn run_loop(sched: &mut Scheduler, rx: mpsc::Receiver<Command>, stats: &Mutex<EngineStats>, queued: &AtomicUsize) {
    loop {
        // Block only when there is nothing to do.
        let first = if sched.is_idle() {
            match rx.recv() {
                Ok(c) => Some(c),
                Err(_) => return,
            }
        } else {
            None
        };
        for cmd in first.into_iter().chain(rx.try_iter()) {
            match cmd {
                Command::Submit(seqs) => {
                    for s in seqs {
                        sched.enqueue(s);
                    }
                }
            }
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sched.step()));
        match r {
            Ok(Ok(true)) => {}
            // Work is queued but nothing could run this step: wait for a submit instead of spinning.
            Ok(Ok(false)) => {
                if let Ok(cmd) = rx.recv_timeout(std::time::Duration::from_millis(5)) {
                    let Command::Submit(seqs) = cmd;
                    for s in seqs {
                        sched.enqueue(s);
                    }
                }
            }
            Ok(Err(e)) => sched.fail_all(&format!("engine step failed: {e}")),
            Err(_) => sched.fail_all("engine step panicked; the requests in flight were failed"),
        }
        queued.store(sched.waiting_rows(), Ordering::Relaxed);
        if let Ok(mut s) = stats.lock() {
            *s = sched.stats.clone();
        }
    }
}

impl EngineHandle {
    pub fn stats(&self) -> EngineStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Validate and queue a request; the stream yields its events.
    pub fn submit(&self, req: EngineRequest) -> std::result::Result<RequestStream, SubmitError> {
        if !self.is_alive() {
            return Err(SubmitError::Unavailable);
        }
        let info = &self.info;
        if req.prompt.is_empty() {
            return Err(SubmitError::Invalid("the prompt is empty".into()));
        }
        if let Some(&bad) = req.prompt.iter().chain(&req.stop_token_ids).find(|&&t| t as usize >= info.vocab_size) {
            return Err(SubmitError::Invalid(format!("token id {bad} is outside the vocabulary (size {})", info.vocab_size)));
        }
        if req.n == 0 || req.n > 16 {
            return Err(SubmitError::Invalid(format!("n must be between 1 and 16, got {}", req.n)));
        }
        if req.n > info.max_batch {
            return Err(SubmitError::Invalid(format!(
                "n = {} choices exceed the server's batch of {} rows (--batch)",
                req.n, info.max_batch
            )));
        }
        if req.max_tokens == 0 {
            return Err(SubmitError::Invalid("max_tokens must be at least 1".into()));
        }
        req.sampling.validate(info.vocab_size).map_err(|e| SubmitError::Invalid(e.to_string()))?;
        let total = req.prompt.len() + req.max_tokens;
        if total > info.max_positions {
            return Err(SubmitError::TooLong(format!(
                "prompt ({} tokens) + max_tokens ({}) = {total} exceeds the model's context of {} tokens",
                req.prompt.len(),
                req.max_tokens,
                info.max_positions
            )));
        }
        // The request must fit in the whole pool: one block of slack for the token being decoded, and per extra
        // choice a copied partial block plus one (the admission rule in the scheduler).
        let blocks = total.div_ceil(self.cfg.kv_block_size) + 1 + 2 * (req.n - 1);
        if blocks > self.cfg.kv_blocks {
            return Err(SubmitError::TooLong(format!(
                "prompt + max_tokens = {total} tokens can never fit in the KV cache ({} tokens); lower max_tokens or raise --kv-budget",
                info.kv_capacity_tokens
            )));
        }
        let waiting = self.queued.fetch_add(req.n, Ordering::Relaxed);
        if waiting >= self.cfg.max_queue {
            self.queued.fetch_sub(req.n, Ordering::Relaxed);
            return Err(SubmitError::QueueFull { waiting, limit: self.cfg.max_queue });
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let cancel: Vec<Arc<AtomicBool>> = (0..req.n).map(|_| Arc::new(AtomicBool::new(false))).collect();
        let mut seqs = Vec::with_capacity(req.n);
        for choice in 0..req.n {
            let slot = self.next_slot.fetch_add(1, Ordering::Relaxed) as usize;
            let params = SamplingParams { seed: req.sampling.seed.map(|s| s.wrapping_add(choice as u64)), ..req.sampling.clone() };
            seqs.push(Sequence {
                slot,
                arrival: slot as u64,
                choice,
                siblings: Vec::new(),
                tokens: req.prompt.clone(),
                prompt_len: req.prompt.len(),
                computed: 0,
                cached: 0,
                blocks: Vec::new(),
                sampler: Sampler::new(params),
                max_tokens: req.max_tokens,
                stop_ids: req.stop_token_ids.clone(),
                ignore_eos: req.ignore_eos,
                tx: tx.clone(),
                cancel: cancel[choice].clone(),
            });
        }
        // Choices 1.. ride on choice 0 until its prompt is computed.
        let mut first = seqs.remove(0);
        first.siblings = seqs;
        if self.tx.send(Command::Submit(vec![first])).is_err() {
            self.queued.fetch_sub(req.n, Ordering::Relaxed);
            return Err(SubmitError::Unavailable);
        }
        Ok(RequestStream { rx, cancel })
    }
}
