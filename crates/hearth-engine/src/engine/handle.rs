//! The async side's handle on the engine thread: validate and submit requests, read stats. Nothing here waits
//! for a step. A request's constraint is compiled here, on the submitting thread: a large JSON schema takes a
//! while to compile, and the step thread serves every other row meanwhile.

use super::core::Command;
use crate::kv::ssd::SsdStore;
use crate::sampling::grammar::{Constraint, Grammars};
use crate::scheduler::Sequence;
use crate::types::{EngineConfig, EngineInfo, EngineRequest, EngineStats, RequestStream, SubmitError};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

#[derive(Clone)]
pub struct EngineHandle {
    pub(super) tx: mpsc::Sender<Command>,
    pub(super) stats: Arc<Mutex<EngineStats>>,
    /// Rows reserved by submitters and not yet admitted by the engine thread: those in the channel plus its waiting
    /// queue (for 429s). Submitters add, the engine thread takes off what left its queue.
    pub(super) queued: Arc<AtomicUsize>,
    pub(super) next_slot: Arc<AtomicU64>,
    pub(super) alive: Arc<AtomicBool>,
    pub info: EngineInfo,
    pub(super) cfg: EngineConfig,
    /// The SSD tier, read directly: its writer works while the engine thread sleeps.
    pub(super) ssd: Option<Arc<SsdStore>>,
    /// The model's grammar compiler (None: a request with a constraint is refused).
    pub(super) grammars: Option<Arc<Grammars>>,
}

impl EngineHandle {
    /// Compile requests' constraints with `grammars` (the model's vocabulary index).
    pub fn with_grammars(mut self, grammars: Arc<Grammars>) -> Self {
        self.grammars = Some(grammars);
        self
    }

    /// The compiled form of `req`'s constraint; one that does not compile is the request's error.
    fn compile(&self, req: &EngineRequest) -> Result<Option<Constraint>, SubmitError> {
        let Some(source) = &req.constraint else { return Ok(None) };
        let grammars = self
            .grammars
            .as_ref()
            .ok_or_else(|| SubmitError::Constraint("this engine has no grammar compiler".into()))?;
        grammars.compile_source(source).map(Some).map_err(SubmitError::Constraint)
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = self.stats.lock().map(|s| s.clone()).unwrap_or_default();
        s.ssd_cache = self.ssd.as_ref().map(|c| c.stats());
        s
    }

    /// Rows submitted and not yet admitted to the batch (in the channel or the waiting queue).
    pub fn queued_rows(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Write every cached KV block to the SSD tier. Blocks the caller until the engine thread has queued the
    /// writes (at most one step), then returns a receiver that fires once they are durable; `Ok(None)`: no SSD
    /// tier is configured. Call it off the async runtime.
    pub fn flush_cache(&self) -> Result<Option<mpsc::Receiver<()>>, SubmitError> {
        let (tx, rx) = mpsc::channel();
        self.tx.send(Command::Flush(tx)).map_err(|_| SubmitError::Unavailable)?;
        rx.recv().map_err(|_| SubmitError::Unavailable)
    }

    /// Validate and queue a request; the stream yields its events.
    pub fn submit(&self, req: EngineRequest) -> Result<RequestStream, SubmitError> {
        let mut streams = self.submit_all(vec![req])?;
        streams.pop().ok_or(SubmitError::Unavailable)
    }

    /// Validate and queue requests as one: every one is queued, or none (the queue's room is reserved for all
    /// their rows at once, so a burst never takes the waiting count past `max_queue`).
    pub fn submit_all(&self, reqs: Vec<EngineRequest>) -> Result<Vec<RequestStream>, SubmitError> {
        if !self.is_alive() {
            return Err(SubmitError::Unavailable);
        }
        for r in &reqs {
            self.info.validate(r)?;
        }
        let constraints = reqs.iter().map(|r| self.compile(r)).collect::<Result<Vec<_>, _>>()?;
        let rows: usize = reqs.iter().map(|r| r.n).sum();
        self.reserve(rows)?;
        let mut streams = Vec::with_capacity(reqs.len());
        let mut sent = 0;
        for (req, constraint) in reqs.iter().zip(constraints) {
            let (first, stream) = Sequence::for_request(req, constraint, &self.cfg.spec, || {
                self.next_slot.fetch_add(1, Ordering::Relaxed) as usize
            });
            if self.tx.send(Command::Submit(Box::new(first))).is_err() {
                // The engine is gone: give back the room of what was not sent (the streams sent are dropped).
                self.queued.fetch_sub(rows - sent, Ordering::AcqRel);
                return Err(SubmitError::Unavailable);
            }
            sent += req.n;
            streams.push(stream);
        }
        Ok(streams)
    }

    /// Take room for `rows` in the waiting queue, all or nothing.
    fn reserve(&self, rows: usize) -> Result<(), SubmitError> {
        let limit = self.cfg.max_queue;
        // `--max-queue 0` refuses everything for now (429), as a switch; a positive limit below the request's
        // rows refuses it for good (400).
        if rows > limit && limit > 0 {
            return Err(SubmitError::NeverQueues { rows, limit });
        }
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| (w + rows <= limit).then_some(w + rows))
            .map(|_| ())
            .map_err(|waiting| SubmitError::QueueFull { waiting, rows, limit })
    }
}
