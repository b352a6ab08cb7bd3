//! The drain switch: while it is on, no generation request is admitted (they get 503 `draining` with
//! `Retry-After`), and the requests admitted before are counted until they reach the engine, so that a drain
//! (`POST /admin/drain`, `api::admin::drain`) can wait for them. `/health` says `draining` meanwhile, so a load
//! balancer moves traffic away.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Whether the server is draining, and how many admitted generation requests have not reached the engine yet.
#[derive(Default)]
pub struct Drain {
    draining: AtomicBool,
    preparing: Arc<AtomicUsize>,
}

/// A generation request admitted but not yet queued in the engine (rendering, tokenizing); a drain waits for it.
pub struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drain {
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Admit a generation request (None while draining). Counted before the flag is read, so a drain that sets
    /// the flag afterwards sees the request.
    pub fn admit(&self) -> Option<Admitted> {
        self.preparing.fetch_add(1, Ordering::AcqRel);
        let admitted = Admitted(self.preparing.clone());
        (!self.is_draining()).then_some(admitted)
    }

    /// Turn draining on or off.
    pub fn set_draining(&self, on: bool) {
        self.draining.store(on, Ordering::Release);
    }

    /// Admitted requests not yet queued in the engine.
    pub fn preparing(&self) -> usize {
        self.preparing.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_stops_while_draining_and_is_counted() {
        let d = Drain::default();
        let a = d.admit().expect("admitted");
        assert_eq!(d.preparing(), 1);
        d.set_draining(true);
        assert!(d.admit().is_none());
        assert_eq!(d.preparing(), 1, "a refused request is not counted");
        drop(a);
        assert_eq!(d.preparing(), 0);
    }
}
