//! The async side's handle on the engine thread: validate and submit requests, read stats. Nothing here waits
//! for a step.

use super::core::Command;
use crate::kv::ssd::SsdStore;
use crate::scheduler::Sequence;
use crate::types::{EngineConfig, EngineInfo, EngineRequest, EngineStats, RequestStream, SubmitError};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

#[derive(Clone)]
pub struct EngineHandle {
    pub(super) tx: mpsc::Sender<Command>,
    pub(super) stats: Arc<Mutex<EngineStats>>,
    /// Requests submitted but not yet seen by the engine thread, plus its waiting queue (for 429s).
    pub(super) queued: Arc<AtomicUsize>,
    pub(super) next_slot: Arc<AtomicU64>,
    pub(super) alive: Arc<AtomicBool>,
    pub info: EngineInfo,
    pub(super) cfg: EngineConfig,
    /// The SSD tier, read directly: its writer works while the engine thread sleeps.
    pub(super) ssd: Option<Arc<SsdStore>>,
}

impl EngineHandle {
    pub fn stats(&self) -> EngineStats {
        let mut s = self.stats.lock().map(|s| s.clone()).unwrap_or_default();
        s.ssd_cache = self.ssd.as_ref().map(|c| c.stats());
        s
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
        if !self.is_alive() {
            return Err(SubmitError::Unavailable);
        }
        self.info.validate(&req)?;
        let waiting = self.queued.fetch_add(req.n, Ordering::Relaxed);
        if waiting >= self.cfg.max_queue {
            self.queued.fetch_sub(req.n, Ordering::Relaxed);
            return Err(SubmitError::QueueFull { waiting, limit: self.cfg.max_queue });
        }
        let (first, stream) = Sequence::for_request(&req, || self.next_slot.fetch_add(1, Ordering::Relaxed) as usize);
        if self.tx.send(Command::Submit(Box::new(first))).is_err() {
            self.queued.fetch_sub(req.n, Ordering::Relaxed);
            return Err(SubmitError::Unavailable);
        }
        Ok(stream)
    }
}
