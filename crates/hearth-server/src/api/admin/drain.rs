//! Draining: `POST /admin/drain` stops admitting generation requests (the switch: `state::drain`), waits for the
//! requests already admitted to finish, writes the prompt cache to the SSD tier (when there is one) and reports;
//! `POST /admin/undrain` admits again. Other routes (`/tokenize`, `/stats`, ...) keep answering while it drains.

use crate::error::ApiResult;
use crate::state::AppState;
use crate::wire::admin::DrainResponse;
use axum::extract::State;
use axum::Json;
use std::time::{Duration, Instant};

/// How often a drain looks whether the engine has finished.
const POLL: Duration = Duration::from_millis(50);

/// `POST /admin/drain`: answers once every admitted request has finished and the cache is written.
pub async fn drain(State(st): State<AppState>) -> ApiResult<Json<DrainResponse>> {
    let r = st.ready()?;
    st.drain.set_draining(true);
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
    let ssd_flushed = r.flush_ssd().await?;
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
    st.drain.set_draining(false);
    tracing::info!("admitting generation requests again");
    Json(serde_json::json!({"drained": false}))
}
