//! `POST /admin/cache/flush`: the prompt cache written to its SSD tier.

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::wire::admin::CacheFlushResponse;
use axum::extract::State;
use axum::Json;

/// `POST /admin/cache/flush`: write every cached KV block to the SSD tier; 200 once all of it is durable.
pub async fn cache_flush(State(st): State<AppState>) -> ApiResult<Json<CacheFlushResponse>> {
    let r = st.ready()?;
    if !r.flush_ssd().await? {
        return Err(ApiError::bad_request("there is no SSD tier to flush to: start the server with --ssd-cache DIR"));
    }
    let ssd = r.engine.stats().ssd_cache.unwrap_or_default();
    Ok(Json(CacheFlushResponse { status: "flushed", files: ssd.files, bytes: ssd.bytes }))
}
