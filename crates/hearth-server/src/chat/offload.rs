//! Request work whose cost grows with the request (rendering the chat template, tokenizing, parsing or compressing a
//! large body) runs on tokio's blocking pool, a bounded number at once, never on the async workers that answer
//! `/health` and write running streams. A prompt whose text alone proves it cannot fit is refused before any of that.

use crate::error::{ApiError, ApiResult};
use crate::model::Ready;
use std::sync::LazyLock;
use tokio::sync::Semaphore;

/// Bytes of a body from which reading it (a request's JSON) or compressing it (a response) runs here, on the blocking
/// pool, rather than on the async workers.
pub const LARGE_BYTES: usize = 256 << 10;

/// Most requests preparing at once: one per core, at least 2. The rest wait their turn without holding a thread,
/// so a burst of huge prompts leaves the blocking pool to the rest of the server (model loading, cache flushes).
static SLOTS: LazyLock<Semaphore> =
    LazyLock::new(|| Semaphore::new(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).max(2)));

/// Run `f` on the blocking pool once a slot is free.
pub async fn run<T, F>(f: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> ApiResult<T> + Send + 'static,
{
    let _slot = SLOTS.acquire().await.map_err(|_| ApiError::internal("the request preparation pool is closed"))?;
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("preparing the request failed: {e}")))?
}

/// Refuse a prompt whose text is too long to fit whatever it tokenizes to: no token of the model spells more than
/// its longest token's bytes, so `bytes / longest` tokens is a lower bound. `param` names the field.
pub fn check_text_fits(ready: &Ready, text_bytes: usize, param: &str) -> ApiResult<()> {
    let limit = ready.max_request_tokens();
    // Every token spells at least one byte; only a longer text can prove anything.
    if text_bytes < limit {
        return Ok(());
    }
    let tok = &ready.tokenizer;
    let longest = (0..tok.vocab_size() as u32).map(|id| tok.token_bytes(id).len()).max().unwrap_or(1).max(1);
    let at_least = text_bytes.div_ceil(longest);
    if at_least < limit {
        return Ok(());
    }
    let info = ready.engine.info();
    Err(ApiError {
        param: Some(param.to_string()),
        ..ApiError::bad_request(format!(
            "`{param}` holds {text_bytes} bytes of text, at least {at_least} tokens (no token of this model spells more than {longest} bytes); this server can hold at most {limit} tokens per request (model context {}, KV cache {})",
            info.max_positions, info.kv_capacity_tokens
        ))
        .with_code("context_length_exceeded")
    })
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn results_and_errors_come_back() {
        assert_eq!(super::run(|| Ok(7)).await, Ok(7));
        let e = super::run(|| Err::<(), _>(crate::error::ApiError::bad_request("no"))).await;
        assert!(e.is_err_and(|e| e.message == "no"));
    }
}
