//! Draining: `POST /admin/drain` stops admitting generation requests (they get 503 `draining` with `Retry-After`),
//! waits for the requests already admitted to finish, writes the prompt cache to the SSD tier (when there is one)
//! and reports; `POST /admin/undrain` admits again. `/health` says `draining` meanwhile, so a load balancer moves
//! traffic away. Other routes (`/tokenize`, `/stats`, ...) keep answering.

use crate::admin::flush_ssd;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::State;
use axum::Json;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

    fn preparing(&self) -> usize {
        self.preparing.load(Ordering::Acquire)
    }
}

#[derive(Debug, Serialize)]
pub struct DrainResponse {
    pub drained: bool,
    /// Sequences (choices) running or queued when the drain began; all have finished.
    pub rows_finished: usize,
    /// How long the drain waited for them.
    pub waited_ms: u64,
    /// Whether the prompt cache was written to the SSD tier (false: there is none).
    pub ssd_flushed: bool,
    /// The SSD tier after the flush.
    pub ssd_files: usize,
    pub ssd_bytes: u64,
}

/// How often a drain looks whether the engine has finished.
const POLL: Duration = Duration::from_millis(50);

/// `POST /admin/drain`: answers once every admitted request has finished and the cache is written.
pub async fn drain(State(st): State<AppState>) -> ApiResult<Json<DrainResponse>> {
    let r = st.ready()?;
    st.drain.draining.store(true, Ordering::Release);
    tracing::info!("draining: no new generation requests are admitted");
    let t0 = Instant::now();
    let busy = |rows_only: bool| {
        let s = r.engine.stats();
        let rows = s.rows_running + r.engine.queued_rows();
        if rows_only {
            rows
        } else {
            rows + st.drain.preparing()
        }
    };
    let rows_finished = busy(true);
    while busy(false) > 0 {
        tokio::time::sleep(POLL).await;
    }
    let waited_ms = t0.elapsed().as_millis() as u64;
    let ssd_flushed = flush_ssd(&r).await?;
    let ssd = r.engine.stats().ssd_cache.unwrap_or_default();
    tracing::info!(rows_finished, waited_ms, ssd_flushed, "drained");
    Ok(Json(DrainResponse {
        drained: true,
        rows_finished,
        waited_ms,
        ssd_flushed,
        ssd_files: ssd.files,
        ssd_bytes: ssd.bytes,
    }))
}

/// `POST /admin/undrain`: admit generation requests again.
pub async fn undrain(State(st): State<AppState>) -> Json<serde_json::Value> {
    st.drain.draining.store(false, Ordering::Release);
    tracing::info!("admitting generation requests again");
    Json(serde_json::json!({"drained": false}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_stops_while_draining_and_is_counted() {
        let d = Drain::default();
        let a = d.admit().expect("admitted");
        assert_eq!(d.preparing(), 1);
        d.draining.store(true, Ordering::Release);
        assert!(d.admit().is_none());
        assert_eq!(d.preparing(), 1, "a refused request is not counted");
        drop(a);
        assert_eq!(d.preparing(), 0);
    }
}
