//! hearth's CPU work pool (`HEARTH_WORK_POOL`, default on): the calling thread and `threads - 1` workers take a
//! job's units from one shared cursor, and the caller waits only for units some thread has *claimed*. A worker that
//! is not running when a job starts (the OS gave its core to another program) costs nothing: the caller and the
//! running workers take its share, and the late worker finds the job over. candle's barrier pool, by contrast,
//! waits for every worker to report each job, so on a busy machine each of a decode step's ~250 jobs waits for a
//! descheduled worker's next time slice.
//!
//! The protocol: the job's state is one atomic word, `epoch << 32 | cursor`. A thread claims unit `c` of epoch `e`
//! by a compare-exchange from `e | c` to `e | c + 1`; success proves the job is still running (its caller cannot
//! finish while a unit is unclaimed), so the job's closure, read before the exchange, is alive while the unit runs.
//! The caller finishes when the completed count reaches the job's units, then bumps the epoch, so a worker that
//! read the state before cannot claim anything more. Idle workers spin for a bounded time, then park.

use std::cell::Cell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long an idle worker spins before it parks: longer than the gaps between a decode step's jobs and between
/// steps (a worker parked at every step boundary pays a wake-up per step), far shorter than a scheduler time slice.
const SPIN: Duration = Duration::from_millis(1);

/// The running job: a type-erased `&dyn Fn(usize)` over units.
struct Shared {
    /// `epoch << 32 | next unit`.
    state: AtomicU64,
    /// Units of the current job, and how many one claim takes (~8 claims per thread: fewer trips to the shared
    /// cursor than one per unit, enough to even out).
    units: AtomicUsize,
    chunk: AtomicUsize,
    /// Units completed.
    done: AtomicUsize,
    /// The job's closure: a pointer to the caller's `&dyn Fn(Range<usize>) + Sync` (valid while a unit of its epoch is
    /// claimed).
    job: AtomicPtr<()>,
    /// Set when a unit panicked; the caller re-raises it.
    panicked: AtomicBool,
    /// Workers parked (or about to park), to be unparked by the next job.
    parked: Vec<AtomicBool>,
    threads: OnceLock<Vec<Thread>>,
}

pub(crate) struct WorkPool {
    shared: Arc<Shared>,
    /// One job at a time (a job's caller may itself be a worker of nothing: jobs do not nest).
    lock: Mutex<()>,
    workers: usize,
}

thread_local! {
    /// This thread is running a job's unit (a nested `run` then runs inline).
    static IN_JOB: Cell<bool> = const { Cell::new(false) };
}

impl WorkPool {
    /// A pool of `threads` threads in all (the caller counts as one).
    pub(crate) fn new(threads: usize) -> Self {
        let workers = threads.saturating_sub(1);
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            units: AtomicUsize::new(0),
            chunk: AtomicUsize::new(1),
            done: AtomicUsize::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            panicked: AtomicBool::new(false),
            parked: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            threads: OnceLock::new(),
        });
        let mut handles = Vec::with_capacity(workers);
        for i in 0..workers {
            let s = shared.clone();
            let spawned = std::thread::Builder::new().name(format!("hearth-pool-{i}")).spawn(move || worker(&s, i));
            match spawned {
                Ok(h) => handles.push(h.thread().clone()),
                // Fewer workers: the caller and the others take the units.
                Err(_) => break,
            }
        }
        let workers = handles.len();
        let _ = shared.threads.set(handles);
        Self { shared, lock: Mutex::new(()), workers }
    }

    /// Threads that run a job (the caller and the workers).
    pub(crate) fn threads(&self) -> usize {
        self.workers + 1
    }

    /// Run `f` over `0..units` in contiguous ranges spread over the pool; returns when every unit has run once.
    pub(crate) fn run(&self, units: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
        if units == 0 {
            return;
        }
        if self.workers == 0 || units == 1 || IN_JOB.with(Cell::get) || units >= 1 << 31 {
            f(0..units);
            return;
        }
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let s = &*self.shared;
        // Publish the job: closure and size first, then the state (release) that makes them visible. `f` lives on
        // this stack frame, which does not return before every claimed unit has finished.
        let job: &(dyn Fn(Range<usize>) + Sync) = f;
        s.job.store(&job as *const &(dyn Fn(Range<usize>) + Sync) as *mut (), Ordering::Relaxed);
        s.units.store(units, Ordering::Relaxed);
        s.chunk.store(units.div_ceil(8 * self.threads()).max(1), Ordering::Relaxed);
        s.done.store(0, Ordering::Relaxed);
        let epoch = (s.state.load(Ordering::Relaxed) >> 32).wrapping_add(1) & 0xFFFF_FFFF;
        s.state.store(epoch << 32, Ordering::SeqCst);
        if let Some(threads) = s.threads.get() {
            for (i, t) in threads.iter().enumerate() {
                if s.parked[i].swap(false, Ordering::SeqCst) {
                    t.unpark();
                }
            }
        }
        // Take units like any worker, then wait for the claimed ones.
        while claim_and_run(s, epoch) {}
        let mut spins = 0u32;
        while s.done.load(Ordering::Acquire) < units {
            spins += 1;
            if spins < 2000 {
                std::hint::spin_loop();
            } else {
                // A claimed unit's thread lost its core: let it have this one.
                std::thread::yield_now();
            }
        }
        // Close the job: late workers' claims fail from here on.
        s.state.store(epoch << 32 | 0xFFFF_FFFF, Ordering::Release);
        if s.panicked.swap(false, Ordering::AcqRel) {
            panic!("a unit of a parallel CPU kernel panicked");
        }
    }
}

/// Claim the next units of `epoch` and run them; false when there are none left (or the job is over).
fn claim_and_run(s: &Shared, epoch: u64) -> bool {
    let mut state = s.state.load(Ordering::Acquire);
    loop {
        if state >> 32 != epoch {
            return false;
        }
        let first = (state & 0xFFFF_FFFF) as usize;
        let units = s.units.load(Ordering::Relaxed);
        let chunk = s.chunk.load(Ordering::Relaxed);
        let job = s.job.load(Ordering::Relaxed) as *const &(dyn Fn(Range<usize>) + Sync);
        if first >= units || job.is_null() {
            return false;
        }
        let end = (first + chunk).min(units);
        match s.state.compare_exchange_weak(state, state + (end - first) as u64, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // SAFETY: the claim succeeded under `epoch`, so the caller is still waiting for these units and the
                // closure reference it published for this epoch is alive (see the module's text).
                let f: &(dyn Fn(Range<usize>) + Sync) = unsafe { *job };
                IN_JOB.with(|c| c.set(true));
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(first..end))).is_err() {
                    s.panicked.store(true, Ordering::Release);
                }
                IN_JOB.with(|c| c.set(false));
                s.done.fetch_add(end - first, Ordering::Release);
                return true;
            }
            Err(now) => state = now,
        }
    }
}

fn worker(s: &Shared, i: usize) {
    let mut seen = 0u64;
    loop {
        // Wait for a new epoch: spin a little, then park.
        let t0 = Instant::now();
        let mut spins = 0u32;
        let epoch = loop {
            let e = s.state.load(Ordering::Acquire) >> 32;
            if e != seen {
                break e;
            }
            // Look at the state on every spin (a job's start is noticed within one pause); at the clock now and
            // then.
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(1024) || t0.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            s.parked[i].store(true, Ordering::SeqCst);
            // A job published between the load above and this flag would find the flag unset: look again.
            if s.state.load(Ordering::SeqCst) >> 32 == seen {
                std::thread::park_timeout(Duration::from_millis(100));
            }
            s.parked[i].store(false, Ordering::Release);
        };
        seen = epoch;
        while claim_and_run(s, epoch) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_unit_runs_once_across_many_jobs() {
        let pool = WorkPool::new(3);
        for units in [1usize, 2, 7, 64, 1000] {
            for _ in 0..50 {
                let hits: Vec<AtomicU32> = (0..units).map(|_| AtomicU32::new(0)).collect();
                pool.run(units, &|r| {
                    for u in r {
                        hits[u].fetch_add(1, Ordering::Relaxed);
                    }
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "{units} units");
            }
        }
    }

    #[test]
    fn a_panicking_unit_is_reraised_and_the_pool_goes_on() {
        let pool = WorkPool::new(2);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(8, &|r| assert!(!r.contains(&5), "unit 5"));
        }));
        assert!(r.is_err());
        let n = AtomicU32::new(0);
        pool.run(16, &|r| {
            n.fetch_add(r.len() as u32, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 16);
    }

    #[test]
    fn nested_jobs_run_inline() {
        let pool = WorkPool::new(2);
        let n = AtomicU32::new(0);
        pool.run(4, &|r| {
            for _ in r {
                pool.run(3, &|r| {
                    n.fetch_add(r.len() as u32, Ordering::Relaxed);
                })
            }
        });
        assert_eq!(n.load(Ordering::Relaxed), 12);
    }
}
