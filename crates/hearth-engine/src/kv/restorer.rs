//! Background restores from the SSD tier: reader threads read and check block files while the engine keeps
//! stepping, and hand the bytes back through a bounded queue, so a long restore neither stalls the other rows'
//! decode nor holds more than [`QUEUE_BLOCKS`] blocks of host memory at once.

use super::block_pool::CachedBlock;
use super::ssd::SsdStore;
use std::sync::mpsc::{channel, sync_channel, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Reader threads (reads of different files overlap: page-cache copies and disk queue depth).
const READERS: usize = 4;
/// Blocks read but not yet taken by the engine (bounded memory: 64 blocks are ~128 MB of an 8B model's KV).
pub const QUEUE_BLOCKS: usize = 64;

/// A block to read into pool block `block`.
struct Job {
    block: u32,
    meta: CachedBlock,
}

/// A finished read: the block's bytes, or None (a miss: missing, mismatching or corrupt — quarantined).
pub type Done = (u32, Option<Vec<u8>>);

pub struct Restorer {
    jobs: Option<Sender<Job>>,
    done: Receiver<Done>,
    readers: Vec<JoinHandle<()>>,
    outstanding: usize,
}

impl Restorer {
    pub fn new(store: Arc<SsdStore>) -> Self {
        let (jobs, job_rx) = channel::<Job>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let (done_tx, done) = sync_channel::<Done>(QUEUE_BLOCKS);
        let readers = (0..READERS)
            .filter_map(|i| {
                let (store, job_rx, done_tx) = (Arc::clone(&store), Arc::clone(&job_rx), done_tx.clone());
                std::thread::Builder::new()
                    .name(format!("hearth-ssd-read-{i}"))
                    .spawn(move || read_loop(&store, &job_rx, &done_tx))
                    .map_err(|e| tracing::warn!("starting an SSD reader thread: {e}"))
                    .ok()
            })
            .collect::<Vec<_>>();
        Self { jobs: (!readers.is_empty()).then_some(jobs), done, readers, outstanding: 0 }
    }

    /// Queue a read. Without a reader thread the block is reported failed by the next `poll`.
    pub fn submit(&mut self, block: u32, meta: CachedBlock) -> std::result::Result<(), u32> {
        let sent = self.jobs.as_ref().map(|tx| tx.send(Job { block, meta }).is_ok()).unwrap_or(false);
        if sent {
            self.outstanding += 1;
            Ok(())
        } else {
            Err(block)
        }
    }

    /// Reads submitted and not yet returned by `poll`.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Up to `max` finished reads; waits up to `wait` for the first one when none is ready.
    pub fn poll(&mut self, max: usize, wait: Duration) -> Vec<Done> {
        let mut out = Vec::new();
        let deadline = Instant::now() + wait;
        while out.len() < max && self.outstanding > 0 {
            let got = if out.is_empty() && !wait.is_zero() {
                match self.done.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(d) => Some(d),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => {
                        // Every reader is gone (a panic): nothing more will arrive.
                        self.outstanding = 0;
                        None
                    }
                }
            } else {
                self.done.try_recv().ok()
            };
            let Some(d) = got else { break };
            self.outstanding -= 1;
            out.push(d);
        }
        out
    }
}

impl Drop for Restorer {
    fn drop(&mut self) {
        // Closing the job queue ends the readers once their current read is handed back or refused.
        self.jobs = None;
        while self.done.try_recv().is_ok() {}
        drop(std::mem::replace(&mut self.done, sync_channel(0).1));
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

fn read_loop(store: &SsdStore, jobs: &Mutex<Receiver<Job>>, done: &SyncSender<Done>) {
    loop {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(Job { block, meta }) = job else { return };
        let data = store.restore(meta.hash, meta.parent, &meta.tokens);
        if done.send((block, data)).is_err() {
            return;
        }
    }
}
