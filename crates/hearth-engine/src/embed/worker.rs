//! The embedder's worker thread and the async side's handle on it. Requests from many clients queue on one
//! channel; the worker takes whatever is waiting (up to `limits.max_rows` inputs) into one call of
//! [`Embedder::embed`], so concurrent small requests share forward passes. Each request's reply is a oneshot.

use super::embedder::{Embedder, EmbedderInfo};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use tokio::sync::oneshot;

/// Why a request got no vectors, by the HTTP status a server answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    /// An input is empty, too long or holds an id outside the vocabulary; or there are no inputs (400).
    #[error("{0}")]
    Invalid(String),
    /// Too many inputs are already waiting (429).
    #[error("the server is busy: {waiting} inputs are already waiting (limit {limit}); retry later")]
    QueueFull { waiting: usize, limit: usize },
    /// The worker thread has stopped (503).
    #[error("the embedding worker is not running")]
    Unavailable,
    /// The forward pass failed (500).
    #[error("embedding failed: {0}")]
    Failed(String),
}

/// The vectors of one request, in input order.
pub type EmbeddingReply = oneshot::Receiver<std::result::Result<Vec<Vec<f32>>, EmbedError>>;

struct Job {
    inputs: Vec<Vec<u32>>,
    reply: oneshot::Sender<std::result::Result<Vec<Vec<f32>>, EmbedError>>,
}

/// A cheap, cloneable (`Send + Sync`) handle on a running embedder.
#[derive(Clone)]
pub struct EmbedderHandle {
    tx: mpsc::Sender<Job>,
    embedder: Arc<Embedder>,
    queued: Arc<AtomicUsize>,
    alive: Arc<AtomicBool>,
}

/// Move the embedder onto its worker thread. The thread ends when the last handle is dropped.
pub fn start(embedder: Embedder) -> Result<EmbedderHandle> {
    let embedder = Arc::new(embedder);
    let (tx, rx) = mpsc::channel::<Job>();
    let queued = Arc::new(AtomicUsize::new(0));
    let alive = Arc::new(AtomicBool::new(true));
    {
        let (embedder, queued, alive) = (embedder.clone(), queued.clone(), alive.clone());
        std::thread::Builder::new()
            .name("hearth-embed".into())
            .spawn(move || {
                run(&embedder, &rx, &queued);
                alive.store(false, Ordering::Relaxed);
            })
            .map_err(|e| Error::io("spawning the embedding thread", e))?;
    }
    Ok(EmbedderHandle { tx, embedder, queued, alive })
}

/// The worker loop: wait for one request, gather what else is waiting, embed it all, reply to each.
fn run(embedder: &Embedder, rx: &mpsc::Receiver<Job>, queued: &AtomicUsize) {
    let gather = embedder.opts.limits.max_rows.max(1);
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        let mut n = jobs[0].inputs.len();
        while n < gather {
            match rx.try_recv() {
                Ok(j) => {
                    n += j.inputs.len();
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        queued.fetch_sub(n, Ordering::Relaxed);
        // A client that went away needs no vectors.
        jobs.retain(|j| !j.reply.is_closed());
        let inputs: Vec<&[u32]> = jobs.iter().flat_map(|j| j.inputs.iter().map(Vec::as_slice)).collect();
        let result = match catch_unwind(AssertUnwindSafe(|| embedder.embed(&inputs))) {
            Ok(r) => r.map_err(|e| EmbedError::Failed(e.to_string())),
            Err(_) => Err(EmbedError::Failed("the forward pass panicked".into())),
        };
        match result {
            Ok(vectors) => {
                let mut vectors = vectors.into_iter();
                for j in jobs {
                    let mine: Vec<Vec<f32>> = vectors.by_ref().take(j.inputs.len()).collect();
                    let _ = j.reply.send(Ok(mine));
                }
            }
            Err(e) => {
                tracing::error!("{e}");
                for j in jobs {
                    let _ = j.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

impl EmbedderHandle {
    pub fn info(&self) -> &EmbedderInfo {
        self.embedder.info()
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        self.embedder.tokenizer()
    }

    /// [`Embedder::tokenize`]: one input text to the model's token ids.
    pub fn tokenize(&self, text: &str) -> std::result::Result<Vec<u32>, EmbedError> {
        self.embedder.tokenize(text).map_err(|e| EmbedError::Invalid(e.to_string()))
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Inputs submitted and not yet taken by the worker.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Check and queue one request's inputs; the reply resolves to their vectors in order. Never waits for the
    /// worker. Dropping the reply before it resolves lets the worker skip the request.
    pub fn submit(&self, inputs: Vec<Vec<u32>>) -> std::result::Result<EmbeddingReply, EmbedError> {
        if !self.is_alive() {
            return Err(EmbedError::Unavailable);
        }
        if inputs.is_empty() {
            return Err(EmbedError::Invalid("no inputs to embed".into()));
        }
        for (i, ids) in inputs.iter().enumerate() {
            self.embedder.check_input(i, ids).map_err(|e| EmbedError::Invalid(invalid_message(e)))?;
        }
        let limit = self.embedder.opts.max_queued_inputs;
        let waiting = self.queued.fetch_add(inputs.len(), Ordering::Relaxed);
        // One request larger than the whole queue still runs when nothing else waits.
        if waiting > 0 && waiting + inputs.len() > limit {
            self.queued.fetch_sub(inputs.len(), Ordering::Relaxed);
            return Err(EmbedError::QueueFull { waiting, limit });
        }
        let n = inputs.len();
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Job { inputs, reply }).is_err() {
            self.queued.fetch_sub(n, Ordering::Relaxed);
            return Err(EmbedError::Unavailable);
        }
        Ok(rx)
    }

    /// [`EmbedderHandle::submit`] and wait for the vectors.
    pub async fn embed(&self, inputs: Vec<Vec<u32>>) -> std::result::Result<Vec<Vec<f32>>, EmbedError> {
        self.submit(inputs)?.await.map_err(|_| EmbedError::Unavailable)?
    }
}

/// The message of an input check, without the error kind's prefix.
fn invalid_message(e: Error) -> String {
    match e {
        Error::InvalidRequest(m) => m,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync_clone<T: Send + Sync + Clone + 'static>() {}
    fn send<T: Send>(_: &T) {}

    /// What an axum handler needs: a shared, cloneable handle whose `embed` future is `Send`.
    #[test]
    fn the_handle_fits_an_async_handler() {
        send_sync_clone::<EmbedderHandle>();
        send_sync_clone::<EmbedError>();
        fn future_is_send(h: &EmbedderHandle) {
            send(&h.embed(Vec::new()));
        }
        let _ = future_is_send;
    }
}
