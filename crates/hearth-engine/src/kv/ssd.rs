//! The SSD cold tier of the prompt cache: blocks evicted from the KV pool are *spilled* here as raw bytes, and a
//! later request whose prompt prefix matches *restores* them instead of recomputing. Files survive restarts
//! (one per block, format in [`super::ssd_file`]) under `dir/<fingerprint>/`, so a different model, tokenizer
//! or KV scheme never sees them.
//!
//! The engine thread never waits on disk for a write: spills go to an in-memory queue drained by a writer
//! thread, which holds back while the engine is decoding (the disk competes with nothing then) unless the queue
//! grows past [`HIGH_WATER`]. A queued block can be restored from memory before it is written. Restores are
//! synchronous reads of one block. Every failure (bad file, full disk, unusable directory) degrades to a cache
//! miss and a counter, never to an error for the request.

use super::prefix::{BlockHash, ColdTier};
pub use super::ssd_file::BlockLayout;
use super::ssd_file::{self, BlockFile, FileError, Format};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// Queued bytes past which the writer writes even while the engine is busy, so memory stays bounded.
pub const HIGH_WATER: u64 = 256 << 20;
/// Queued bytes past which spills are dropped (the disk cannot keep up; the engine must not wait for it).
const MAX_PENDING: u64 = 4 * HIGH_WATER;
/// How often a held-back writer looks again.
const POLL: Duration = Duration::from_millis(10);

pub struct SsdConfig {
    /// The cache root (`--ssd-cache DIR`, created if missing).
    pub dir: PathBuf,
    /// Cap on the bytes of block files (`--ssd-cache-max`).
    pub max_bytes: u64,
    /// Check every restored block's data against its hash (`--ssd-cache-verify`, on by default): a cache must
    /// never change an answer. The header hash (names, shape, tokens) is always checked.
    pub verify: bool,
    /// Model + tokenizer + KV scheme + namespace; names the subdirectory `dir/<32 hex digits>/`.
    pub fingerprint: u128,
    pub layout: BlockLayout,
}

/// One block as spilled: its name, its parent's name (the chain), its `block_size` tokens, and its data
/// (`layout.data_bytes()` bytes: for each layer, K then V, each `block_size*kv_heads*head_dim` values,
/// little-endian raw).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRecord {
    pub hash: BlockHash,
    pub parent: BlockHash,
    pub tokens: Vec<u32>,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SsdStats {
    pub dir: String,
    pub files: usize,
    pub bytes: u64,
    pub max_bytes: u64,
    pub restores: u64,
    pub restore_failures: u64,
    pub spills: u64,
    pub demotions: u64,
    pub quarantined: u64,
    pub write_errors: u64,
    pub pending: usize,
    pub restore_ms_last: f64,
    pub enabled: bool,
    pub warning: Option<String>,
}

/// A block file on disk: its size and last access (LRU clock, ns since the epoch).
struct Entry {
    size: u64,
    atime: u64,
}

enum Job {
    Write(Arc<BlockRecord>),
    /// Answered when the writer reaches it, i.e. once everything queued before it is durable.
    Flush(Sender<()>),
}

#[derive(Default)]
struct State {
    index: HashMap<BlockHash, Entry>,
    /// The index by access time, least recent first.
    lru: BTreeSet<(u64, BlockHash)>,
    clock: u64,
    bytes: u64,
    queue: VecDeque<Job>,
    /// Queued blocks not yet written, restorable from memory.
    pending: HashMap<BlockHash, Arc<BlockRecord>>,
    pending_bytes: u64,
    /// Flush markers in `queue`: while any is, busy gating is off.
    flushes_queued: usize,
    busy: bool,
    /// No more spills; the writer drains the queue and exits.
    stopping: bool,
    writer_alive: bool,
    /// Counters (files, bytes and pending are filled in by `stats()`).
    stats: SsdStats,
}

impl State {
    /// Strictly increasing time, so accesses within one clock tick still order.
    fn tick(&mut self) -> u64 {
        self.clock = ssd_file::epoch_ns(SystemTime::now()).max(self.clock + 1);
        self.clock
    }

    fn insert(&mut self, h: BlockHash, size: u64, atime: u64) {
        self.remove(h);
        self.clock = self.clock.max(atime);
        self.index.insert(h, Entry { size, atime });
        self.lru.insert((atime, h));
        self.bytes += size;
    }

    fn remove(&mut self, h: BlockHash) -> Option<Entry> {
        let e = self.index.remove(&h)?;
        self.lru.remove(&(e.atime, h));
        self.bytes = self.bytes.saturating_sub(e.size);
        Some(e)
    }

    fn touch(&mut self, h: BlockHash) {
        let now = self.tick();
        if let Some(e) = self.index.get_mut(&h) {
            self.lru.remove(&(e.atime, h));
            e.atime = now;
            self.lru.insert((now, h));
        }
    }

    /// Drops least-recently-used blocks from the index until the bytes fit `max`, never `keep`; the caller
    /// deletes the returned files outside the lock.
    fn evict_over(&mut self, max: u64, keep: Option<BlockHash>) -> Vec<BlockHash> {
        let mut out = Vec::new();
        while self.bytes > max {
            let Some(&(_, h)) = self.lru.iter().find(|(_, h)| Some(*h) != keep) else { break };
            self.remove(h);
            out.push(h);
        }
        out
    }

    fn unqueue(&mut self, h: BlockHash) {
        if let Some(r) = self.pending.remove(&h) {
            self.pending_bytes = self.pending_bytes.saturating_sub(r.data.len() as u64);
        }
    }
}

struct Shared {
    fp_dir: PathBuf,
    /// None: the store is disabled (every spill dropped, every lookup a miss).
    fmt: Option<Format>,
    max_bytes: u64,
    verify: bool,
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    /// A panic elsewhere must not disable the cache for good: the state is plain data, valid between calls.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remove_files(&self, hashes: &[BlockHash]) {
        for &h in hashes {
            let _ = fs::remove_file(ssd_file::block_path(&self.fp_dir, h));
        }
    }
}

/// The SSD tier. `Send + Sync`: the engine thread spills and restores, the HTTP side reads stats.
pub struct SsdStore {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl SsdStore {
    /// Opens (or creates) `dir/<fingerprint hex>/`, scans it, and starts the writer thread. Never fails: an
    /// unusable directory gives a disabled store (logged, and in `stats().warning`), since the cache is an
    /// optimisation the server must run without.
    pub fn open(cfg: SsdConfig) -> Arc<SsdStore> {
        let fp_dir = cfg.dir.join(format!("{:032x}", cfg.fingerprint));
        let fmt = match Format::new(cfg.fingerprint, &cfg.layout) {
            Ok(f) => f,
            Err(e) => return Self::disabled(fp_dir, cfg.max_bytes, format!("ssd cache disabled: {e}")),
        };
        if let Err(e) = prepare_dir(&fp_dir) {
            let msg = format!("ssd cache disabled: {} is not usable: {e}", fp_dir.display());
            return Self::disabled(fp_dir, cfg.max_bytes, msg);
        }
        if fmt.file_len() > cfg.max_bytes {
            tracing::warn!(
                "ssd cache: one block ({} bytes) exceeds the cap of {} bytes",
                fmt.file_len(),
                cfg.max_bytes
            );
        }
        let scan = ssd_file::scan(&fp_dir, &fmt);
        let mut st = State { writer_alive: true, ..State::default() };
        for f in scan.found {
            st.insert(f.hash, f.size, f.atime);
        }
        st.stats.quarantined = scan.quarantined;
        let evicted = st.evict_over(cfg.max_bytes, None);
        let shared = Arc::new(Shared {
            fp_dir: fp_dir.clone(),
            fmt: Some(fmt),
            max_bytes: cfg.max_bytes,
            verify: cfg.verify,
            state: Mutex::new(st),
            wake: Condvar::new(),
        });
        shared.remove_files(&evicted);
        let for_writer = Arc::clone(&shared);
        match std::thread::Builder::new().name("hearth-ssd-writer".into()).spawn(move || writer_main(for_writer)) {
            Ok(handle) => {
                let s = shared.lock();
                tracing::info!(dir = %fp_dir.display(), files = s.index.len(), bytes = s.bytes, "ssd cache opened");
                drop(s);
                Arc::new(SsdStore { shared, writer: Mutex::new(Some(handle)) })
            }
            Err(e) => Self::disabled(fp_dir, cfg.max_bytes, format!("ssd cache disabled: no writer thread: {e}")),
        }
    }

    fn disabled(fp_dir: PathBuf, max_bytes: u64, warning: String) -> Arc<SsdStore> {
        tracing::warn!("{warning}");
        let mut st = State::default();
        st.stats.warning = Some(warning);
        let shared =
            Shared { fp_dir, fmt: None, max_bytes, verify: false, state: Mutex::new(st), wake: Condvar::new() };
        Arc::new(SsdStore { shared: Arc::new(shared), writer: Mutex::new(None) })
    }

    /// Whether block `h` can be restored (queued or on disk).
    pub fn contains(&self, h: BlockHash) -> bool {
        let st = self.shared.lock();
        st.pending.contains_key(&h) || st.index.contains_key(&h)
    }

    /// Queues a block for writing and returns at once. `demoted`: evicted for idleness rather than for room
    /// (counted in `demotions` too). A block already queued or on disk only has its access time refreshed (in
    /// memory: the engine thread does no file I/O here).
    pub fn spill(&self, rec: BlockRecord, demoted: bool) {
        self.enqueue(rec, demoted, false);
    }

    /// Like [`SsdStore::spill`], but when the write queue is full it waits for room instead of dropping the
    /// block: a flush writes everything, with at most the queue's bound in memory.
    pub fn spill_waiting(&self, rec: BlockRecord) {
        self.enqueue(rec, false, true);
    }

    fn enqueue(&self, rec: BlockRecord, demoted: bool, wait: bool) {
        let Some(fmt) = self.shared.fmt.as_ref() else { return };
        if rec.tokens.len() != fmt.block_size() || rec.data.len() as u64 != fmt.data_len() {
            let mut st = self.shared.lock();
            st.stats.write_errors += 1;
            if st.stats.write_errors == 1 || st.stats.write_errors.is_multiple_of(100) {
                tracing::warn!(tokens = rec.tokens.len(), bytes = rec.data.len(), "ssd cache: misshapen block dropped");
            }
            return;
        }
        let len = rec.data.len() as u64;
        let mut st = self.shared.lock();
        // The writer always writes while more than HIGH_WATER is queued, so the queue drains below this bound.
        while wait && st.writer_alive && !st.stopping && st.pending_bytes + len > MAX_PENDING {
            drop(st);
            std::thread::sleep(std::time::Duration::from_millis(2));
            st = self.shared.lock();
        }
        if st.stopping || !st.writer_alive || st.pending.contains_key(&rec.hash) {
            return;
        }
        if st.index.contains_key(&rec.hash) {
            st.touch(rec.hash);
            return;
        }
        if fmt.file_len() > self.shared.max_bytes || st.pending_bytes + len > MAX_PENDING {
            return;
        }
        st.stats.spills += 1;
        if demoted {
            st.stats.demotions += 1;
        }
        let rec = Arc::new(rec);
        st.pending.insert(rec.hash, Arc::clone(&rec));
        st.pending_bytes += len;
        st.queue.push_back(Job::Write(rec));
        drop(st);
        self.shared.wake.notify_one();
    }

    /// Reads block `h` back, from the queue if not written yet, else from its file. A stored block that is not
    /// exactly the one asked for (hash, parent, tokens), or any bad file, is a miss; a bad file is quarantined.
    /// With `verify` off a flipped bit in the data goes unnoticed (the header hash covers names and shape only).
    pub fn restore(&self, h: BlockHash, parent: BlockHash, tokens: &[u32]) -> Option<Vec<u8>> {
        let fmt = self.shared.fmt.as_ref()?;
        let t0 = Instant::now();
        let queued = {
            let st = self.shared.lock();
            match st.pending.get(&h) {
                Some(r) => Some(Arc::clone(r)),
                None if st.index.contains_key(&h) => None,
                None => return None,
            }
        };
        let data = match queued {
            Some(rec) if rec.parent == parent && rec.tokens == tokens => Ok(rec.data.clone()),
            Some(_) => {
                self.shared.lock().stats.restore_failures += 1;
                return None;
            }
            None => self.read_file(fmt, h, parent, tokens),
        };
        let mut st = self.shared.lock();
        match data {
            Ok(data) => {
                st.touch(h);
                st.stats.restores += 1;
                st.stats.restore_ms_last = t0.elapsed().as_secs_f64() * 1e3;
                Some(data)
            }
            Err(e) => {
                st.remove(h);
                st.stats.restore_failures += 1;
                if matches!(e, FileError::NotFound) {
                    return None;
                }
                st.stats.quarantined += 1;
                drop(st);
                ssd_file::quarantine(&self.shared.fp_dir, &ssd_file::block_path(&self.shared.fp_dir, h), &e);
                ssd_file::prune_quarantine(&self.shared.fp_dir);
                None
            }
        }
    }

    fn read_file(&self, fmt: &Format, h: BlockHash, parent: BlockHash, tokens: &[u32]) -> Result<Vec<u8>, FileError> {
        let mut bf = BlockFile::open(&ssd_file::block_path(&self.shared.fp_dir, h), fmt)?;
        if bf.header.hash != h {
            return Err(FileError::Mismatch("hash"));
        }
        if bf.header.parent != parent {
            return Err(FileError::Mismatch("parent"));
        }
        if bf.header.tokens != tokens {
            return Err(FileError::Mismatch("tokens"));
        }
        let data = bf.read_data(self.shared.verify)?;
        // Carry the access across restarts (the start-up scan reads mtimes); best effort.
        let _ = bf.file.set_modified(SystemTime::now());
        Ok(data)
    }

    /// Whether the engine is decoding: while it is, the writer holds writes back unless its queue holds more
    /// than [`HIGH_WATER`] bytes.
    pub fn set_busy(&self, busy: bool) {
        self.shared.lock().busy = busy;
        if !busy {
            self.shared.wake.notify_one();
        }
    }

    /// A receiver that gets `()` once every spill queued before this call is durable (busy gating is ignored
    /// until then). If the writer dies first, the sender is dropped and `recv` fails rather than hanging.
    pub fn flush(&self) -> Receiver<()> {
        let (tx, rx) = channel();
        let mut st = self.shared.lock();
        if !st.writer_alive {
            let _ = tx.send(());
            return rx;
        }
        st.flushes_queued += 1;
        st.queue.push_back(Job::Flush(tx));
        drop(st);
        self.shared.wake.notify_one();
        rx
    }

    /// Flushes and stops the writer (later spills are dropped; restores of what is on disk still work).
    pub fn shutdown(&self) {
        self.shared.lock().stopping = true;
        self.shared.wake.notify_all();
        let handle = self.writer.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    pub fn stats(&self) -> SsdStats {
        let st = self.shared.lock();
        SsdStats {
            dir: self.shared.fp_dir.display().to_string(),
            files: st.index.len(),
            bytes: st.bytes,
            max_bytes: self.shared.max_bytes,
            pending: st.pending.len(),
            enabled: self.shared.fmt.is_some(),
            ..st.stats.clone()
        }
    }
}

impl ColdTier for SsdStore {
    fn contains(&self, h: BlockHash) -> bool {
        SsdStore::contains(self, h)
    }
}

impl Drop for SsdStore {
    /// The writer holds only the shared state, not the store: it drains its queue and exits on its own.
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        self.shared.wake.notify_all();
    }
}

/// Creates the fingerprint directory and proves it writable (a read-only mount passes `create_dir_all`).
fn prepare_dir(fp_dir: &Path) -> std::io::Result<()> {
    fs::create_dir_all(fp_dir)?;
    let probe = fp_dir.join(format!(".probe-{}{}", std::process::id(), ssd_file::TMP_SUFFIX));
    fs::write(&probe, b"probe")?;
    fs::remove_file(&probe)
}

/// On the writer's exit, however it happens: later flushes answer at once, and what is still queued is dropped
/// (its flush senders with it, so no caller waits forever; its blocks stop being `contains`).
struct WriterExit(Arc<Shared>);

impl Drop for WriterExit {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.writer_alive = false;
        st.queue.clear();
        st.pending.clear();
        st.pending_bytes = 0;
        st.flushes_queued = 0;
    }
}

fn writer_main(shared: Arc<Shared>) {
    let _exit = WriterExit(Arc::clone(&shared));
    while let Some(job) = next_job(&shared) {
        match job {
            Job::Flush(tx) => {
                let _ = tx.send(());
            }
            Job::Write(rec) => {
                // Group commit: the writes queued right behind this one go with it, durable with one sync.
                let mut batch = vec![rec];
                while batch.len() < WRITE_BATCH {
                    let mut st = shared.lock();
                    match st.queue.front() {
                        Some(Job::Write(_)) => {
                            if let Some(Job::Write(r)) = st.queue.pop_front() {
                                batch.push(r);
                            }
                        }
                        _ => break,
                    }
                }
                write_batch(&shared, &batch);
            }
        }
    }
}

/// Most blocks made durable by one filesystem sync.
const WRITE_BATCH: usize = 64;

/// The next job in FIFO order, waiting while the queue is empty or held back; None once stopping and drained.
fn next_job(shared: &Shared) -> Option<Job> {
    let mut st = shared.lock();
    loop {
        if st.queue.is_empty() {
            if st.stopping {
                return None;
            }
            st = shared.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        let held = st.busy && !st.stopping && st.flushes_queued == 0 && st.pending_bytes <= HIGH_WATER;
        if !held {
            let job = st.queue.pop_front();
            if let Some(Job::Flush(_)) = job {
                st.flushes_queued = st.flushes_queued.saturating_sub(1);
            }
            return job;
        }
        st = shared.wake.wait_timeout(st, POLL).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
    }
}

/// Writes a group of records: every temporary file, one filesystem sync, the renames, one more sync (so the new
/// names are durable too); then indexes them and evicts over the cap. Any failure (a full or read-only disk, or
/// even a panic) drops that record and counts a write error; the writer carries on.
fn write_batch(shared: &Shared, recs: &[Arc<BlockRecord>]) {
    let Some(fmt) = shared.fmt.as_ref() else { return };
    let res = catch_unwind(AssertUnwindSafe(|| {
        let mut done: Vec<std::io::Result<()>> = Vec::with_capacity(recs.len());
        let mut last_file = None;
        for rec in recs {
            let header = fmt.encode(rec.hash, rec.parent, &rec.tokens, &rec.data);
            match ssd_file::write_tmp(&ssd_file::block_path(&shared.fp_dir, rec.hash), &header, &rec.data) {
                Ok(f) => {
                    last_file = Some(f);
                    done.push(Ok(()));
                }
                Err(e) => done.push(Err(e)),
            }
        }
        let synced = match &last_file {
            Some(f) => ssd_file::sync_filesystem(f),
            None => Ok(()),
        };
        for (rec, r) in recs.iter().zip(done.iter_mut()) {
            let path = ssd_file::block_path(&shared.fp_dir, rec.hash);
            let tmp = ssd_file::tmp_path(&path);
            if r.is_ok() {
                *r = match &synced {
                    Ok(()) => ssd_file::commit(&tmp, &path),
                    Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                };
            }
            if r.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
        }
        if let Some(f) = &last_file {
            let _ = ssd_file::sync_filesystem(f);
        }
        done
    }));
    let results: Vec<Result<(), String>> = match res {
        Ok(done) => done.into_iter().map(|r| r.map_err(|e| e.to_string())).collect(),
        Err(_) => recs.iter().map(|_| Err("panic while writing".to_string())).collect(),
    };
    for (rec, r) in recs.iter().zip(results) {
        let mut st = shared.lock();
        st.unqueue(rec.hash);
        let err = match r {
            Ok(()) => {
                let now = st.tick();
                st.insert(rec.hash, fmt.file_len(), now);
                let evicted = st.evict_over(shared.max_bytes, Some(rec.hash));
                drop(st);
                shared.remove_files(&evicted);
                continue;
            }
            Err(e) => e,
        };
        st.stats.write_errors += 1;
        let n = st.stats.write_errors;
        st.stats.warning = Some(format!("ssd cache writes failing: {err}"));
        drop(st);
        if n == 1 || n.is_multiple_of(100) {
            let path = ssd_file::block_path(&shared.fp_dir, rec.hash);
            tracing::warn!(write_errors = n, "ssd cache: cannot write {}: {err}", path.display());
        }
    }
}

#[cfg(test)]
#[path = "ssd_tests.rs"]
mod tests;
