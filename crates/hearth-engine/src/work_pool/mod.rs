//! The threads hearth's parallel CPU kernels run on (the quantized matmuls, the gated activation, the in-place
//! attention): hearth's work pool ([`pool`], `HEARTH_WORK_POOL`), or candle's barrier pool, the threads candle's own
//! quantized matmuls use. Two pools spinning on the same cores fight, so a model some of whose weights decode with
//! candle's kernels runs hearth's kernels on candle's pool too. Which pool is a property of the model, decided when
//! it loads ([`KernelPool`]) and in force while its forward pass runs ([`KernelPool::run`]): a model loaded beside
//! it (a pool's other models, the embedder) keeps its own.

mod pool;

use std::cell::Cell;
use std::ops::Range;
use std::sync::OnceLock;

/// The pool a model's parallel CPU kernels run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelPool {
    /// hearth's work pool (unless `HEARTH_WORK_POOL=0`).
    #[default]
    Hearth,
    /// candle's barrier pool: some of the model's CPU weights decode with candle's quantized kernels.
    Candle,
}

thread_local! {
    /// The pool of the forward pass this thread is running (hearth's outside any).
    static CURRENT: Cell<KernelPool> = const { Cell::new(KernelPool::Hearth) };
    /// Set inside [`serial`]: this thread's kernels run on it alone.
    static SERIAL: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` with every kernel it starts on this thread alone (no hand-out to a pool): for work that is itself one
/// unit of an outer [`par_chunks`], such as one expert's MLP among a token's experts. The setting before is back
/// afterwards, also when `f` panics.
pub(crate) fn serial<R>(f: impl FnOnce() -> R) -> R {
    with_set(&SERIAL, true, f)
}

/// Run `f` with this thread's `key` set to `value`; the value before is back afterwards, also when `f` panics.
fn with_set<T: Copy + 'static, R>(key: &'static std::thread::LocalKey<Cell<T>>, value: T, f: impl FnOnce() -> R) -> R {
    struct Restore<T: Copy + 'static>(&'static std::thread::LocalKey<Cell<T>>, T);
    impl<T: Copy + 'static> Drop for Restore<T> {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _restore = Restore(key, key.with(|c| c.replace(value)));
    f()
}

impl KernelPool {
    /// Run `f` (a model's forward pass) with this pool for the kernels this thread starts; the pool before is back
    /// afterwards, also when `f` fails or panics.
    pub fn run<R>(self, f: impl FnOnce() -> R) -> R {
        with_set(&CURRENT, self, f)
    }

    /// The pool in force on this thread.
    pub fn current() -> KernelPool {
        CURRENT.with(Cell::get)
    }
}

/// hearth's work pool, as many threads as candle's pools.
fn work_pool() -> &'static pool::WorkPool {
    static POOL: OnceLock<pool::WorkPool> = OnceLock::new();
    POOL.get_or_init(|| pool::WorkPool::new(candle_core::utils::get_num_threads()))
}

/// The threads of hearth's work pool (`own`) or of candle's barrier pool.
fn threads(own: bool) -> usize {
    if own {
        work_pool().threads()
    } else {
        candle_core::utils::barrier_pool().n_workers() + 1
    }
}

/// The threads [`par_chunks`] would split work over on this thread now (1 inside [`serial`]).
pub(crate) fn current_threads() -> usize {
    if SERIAL.with(Cell::get) {
        return 1;
    }
    threads(crate::levers::get().work_pool && KernelPool::current() == KernelPool::Hearth)
}

/// Split `n_items` in chunks of at least `grain` items over the current [`KernelPool`]: hearth's work pool, or
/// candle's barrier pool where `HEARTH_WORK_POOL` is off or the running model's kernels share candle's.
pub(crate) fn par_chunks(n_items: usize, grain: usize, f: impl Fn(Range<usize>) + Sync) {
    if n_items == 0 {
        return;
    }
    let own = crate::levers::get().work_pool && KernelPool::current() == KernelPool::Hearth;
    let threads = threads(own);
    if threads <= 1 || n_items <= grain || SERIAL.with(Cell::get) {
        f(0..n_items);
        return;
    }
    let units = n_items.div_ceil(grain);
    let per_unit = n_items.div_ceil(units);
    let unit = |u: Range<usize>| {
        let lo = u.start * per_unit;
        let hi = (u.end * per_unit).min(n_items);
        if lo < hi {
            f(lo..hi)
        }
    };
    if own {
        // Units from a shared cursor; the caller waits only for claimed ones (see `pool`).
        work_pool().run(units, &unit)
    } else {
        // execute_chunked hands out ~8 chunks per thread from a shared cursor.
        candle_core::utils::barrier_pool().execute_chunked(units, unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn a_pool_is_in_force_inside_its_run_only() {
        assert_eq!(KernelPool::current(), KernelPool::Hearth);
        KernelPool::Candle.run(|| {
            assert_eq!(KernelPool::current(), KernelPool::Candle);
            KernelPool::Hearth.run(|| assert_eq!(KernelPool::current(), KernelPool::Hearth));
            assert_eq!(KernelPool::current(), KernelPool::Candle);
            // another thread (another model's engine) is not affected
            std::thread::scope(|s| s.spawn(|| assert_eq!(KernelPool::current(), KernelPool::Hearth)).join().unwrap());
        });
        assert_eq!(KernelPool::current(), KernelPool::Hearth);
        let panicked = std::panic::catch_unwind(|| KernelPool::Candle.run(|| panic!("a failing forward pass")));
        assert!(panicked.is_err());
        assert_eq!(KernelPool::current(), KernelPool::Hearth);
    }

    #[test]
    fn serial_runs_every_item_on_the_calling_thread() {
        let me = std::thread::current().id();
        let hits: Vec<AtomicU32> = (0..1000).map(|_| AtomicU32::new(0)).collect();
        serial(|| {
            par_chunks(1000, 1, |r| {
                assert_eq!(std::thread::current().id(), me);
                for i in r {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                }
            })
        });
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        assert!(!SERIAL.with(Cell::get), "serial mode ends with its closure");
    }

    #[test]
    fn every_item_runs_once_on_either_pool() {
        for pool in [KernelPool::Hearth, KernelPool::Candle] {
            for (n, grain) in [(0, 1), (1, 4), (37, 1), (1000, 16)] {
                let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                pool.run(|| {
                    par_chunks(n, grain, |r| {
                        for i in r {
                            hits[i].fetch_add(1, Ordering::Relaxed);
                        }
                    })
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "{pool:?} {n} items, grain {grain}");
            }
        }
    }
}
