//! [`Engine`]: what the routes submit to, the engine in this process or one in a supervised child process
//! (`--isolate`, [`super::isolate`]).

use super::isolate::{EngineStatus, Supervisor};
use hearth_engine::engine::{EngineHandle, EngineInfo, EngineRequest, EngineStats, RequestStream, SubmitError};
use std::sync::Arc;

/// Most time a flush of the prompt cache may take before its caller gives up (the writes go on).
pub const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Flush an in-process engine's prompt cache and wait: `Ok(false)` when it has no SSD tier.
pub fn flush_blocking(h: &EngineHandle) -> Result<bool, String> {
    match h.flush_cache() {
        Ok(Some(done)) => done.recv().map(|()| true).map_err(|_| "the SSD writer stopped".to_string()),
        Ok(None) => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Submit to an in-process engine. It compiles constraints as it submits, which can take a while for a large
/// schema: a constrained submission runs on the blocking pool, never on the async workers.
async fn local_submit(h: &EngineHandle, reqs: Vec<EngineRequest>) -> Result<Vec<RequestStream>, SubmitError> {
    if reqs.iter().all(|r| r.constraint.is_none()) {
        return h.submit_all(reqs);
    }
    let h = h.clone();
    tokio::task::spawn_blocking(move || h.submit_all(reqs)).await.unwrap_or(Err(SubmitError::Unavailable))
}

/// The engine the routes submit to.
#[derive(Clone)]
pub enum Engine {
    /// In this process (the default).
    Local(Box<EngineHandle>),
    /// In a supervised child process (`--isolate`).
    Isolated(Arc<Supervisor>),
}

impl Engine {
    pub fn info(&self) -> &EngineInfo {
        match self {
            Engine::Local(h) => &h.info,
            Engine::Isolated(s) => s.info(),
        }
    }

    /// Validate and queue a request; the stream yields its events.
    pub async fn submit(&self, req: EngineRequest) -> Result<RequestStream, SubmitError> {
        match self {
            Engine::Local(h) => {
                let mut streams = local_submit(h, vec![req]).await?;
                streams.pop().ok_or(SubmitError::Unavailable)
            }
            Engine::Isolated(s) => s.submit(req).await,
        }
    }

    /// Validate and queue requests as one: every one is queued, or none. An isolated engine takes them one by one;
    /// when one is refused, the streams of those before it are dropped, which cancels them.
    pub async fn submit_all(&self, reqs: Vec<EngineRequest>) -> Result<Vec<RequestStream>, SubmitError> {
        match self {
            Engine::Local(h) => local_submit(h, reqs).await,
            Engine::Isolated(s) => {
                let mut streams = Vec::with_capacity(reqs.len());
                for req in reqs {
                    streams.push(s.submit(req).await?);
                }
                Ok(streams)
            }
        }
    }

    /// Rows submitted and not yet admitted to the batch; for an isolated engine, every request still open (its
    /// process's own counts reach this one with the stats, up to a quarter second late).
    pub fn queued_rows(&self) -> usize {
        match self {
            Engine::Local(h) => h.queued_rows(),
            Engine::Isolated(s) => s.open_requests(),
        }
    }

    /// A snapshot for `/stats` (an isolated engine's is at most a quarter second old).
    pub fn stats(&self) -> EngineStats {
        match self {
            Engine::Local(h) => h.stats(),
            Engine::Isolated(s) => s.stats(),
        }
    }

    /// Whether an engine is up to take requests.
    pub fn is_alive(&self) -> bool {
        match self {
            Engine::Local(h) => h.is_alive(),
            Engine::Isolated(s) => s.is_up(),
        }
    }

    /// Write the prompt cache to its SSD tier and wait until that is durable (at most `FLUSH_TIMEOUT`):
    /// `Ok(false)` when there is no SSD tier, or why it failed.
    pub async fn flush(&self) -> Result<bool, String> {
        let run = async {
            match self {
                Engine::Local(h) => {
                    let h = h.as_ref().clone();
                    tokio::task::spawn_blocking(move || flush_blocking(&h))
                        .await
                        .unwrap_or_else(|e| Err(format!("the flush failed: {e}")))
                }
                Engine::Isolated(s) => s.flush().await,
            }
        };
        tokio::time::timeout(FLUSH_TIMEOUT, run)
            .await
            .unwrap_or_else(|_| Err("the SSD tier did not finish writing in time; the writes go on".into()))
    }

    /// The isolated engine's state for `GET /engine` (None in process).
    pub fn status(&self) -> Option<EngineStatus> {
        match self {
            Engine::Local(_) => None,
            Engine::Isolated(s) => Some(s.status()),
        }
    }
}
