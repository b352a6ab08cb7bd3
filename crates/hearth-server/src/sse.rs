//! Server-sent events for a streamed request. A task drives the `Generation` and writes `data: {json}` frames
//! into a small channel that the response body reads. Until the first token it also writes `: keep-alive`
//! comments, so clients do not time out during a long prefill. When the client hangs up, the body and the
//! channel's receiver are dropped; the task sees it at once (even mid-prefill) and drops the engine stream,
//! which cancels the request.

use crate::error::ApiError;
use crate::generation::{Event, Generation, Job, TextOptions, UsageTotals};
use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::Response;
use hearth_engine::tokenizer::Tokenizer;
use serde_json::Value;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::Instrument;

/// Turns generation events into the API's chunk objects.
pub trait ChunkFormat: Send + 'static {
    /// Chunks sent as soon as the request is accepted (chat: the role delta).
    fn start(&mut self) -> Vec<Value>;
    /// Chunks for one event (`Token` / `Finish`); an empty vec sends nothing.
    fn event(&mut self, tok: &Tokenizer, ev: Event) -> Vec<Value>;
    /// The final usage chunk (`stream_options.include_usage`).
    fn usage(&self, u: UsageTotals) -> Value;
}

pub struct StreamSpec {
    pub jobs: Vec<Job>,
    pub text: TextOptions,
    pub include_usage: bool,
    pub keepalive: Duration,
}

fn frame(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// Start streaming: returns the response at once; the task runs until the generation ends or the client leaves.
pub fn respond<F: ChunkFormat>(tok: Arc<Tokenizer>, spec: StreamSpec, fmt: F) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let span = tracing::Span::current();
    tokio::spawn(
        async move {
            let t0 = Instant::now();
            let StreamSpec { jobs, text, include_usage, keepalive } = spec;
            let mut g = Generation::new(&tok, jobs, &text);
            let mut fmt = fmt;
            let outcome = pump(&tok, &mut g, &mut fmt, &tx, include_usage, keepalive).await;
            let u = g.usage();
            tracing::info!(
                outcome,
                prompt_tokens = u.prompt_tokens,
                completion_tokens = u.completion_tokens,
                ms = t0.elapsed().as_millis() as u64,
                "stream ended"
            );
        }
        .instrument(span),
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(ChunkStream(rx)))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

async fn pump<F: ChunkFormat>(
    tok: &Tokenizer,
    g: &mut Generation<'_>,
    fmt: &mut F,
    tx: &mpsc::Sender<Bytes>,
    include_usage: bool,
    keepalive: Duration,
) -> &'static str {
    macro_rules! send {
        ($b:expr) => {
            if tx.send($b).await.is_err() {
                return "client disconnected";
            }
        };
    }
    for c in fmt.start() {
        send!(frame(&c));
    }
    let mut before_first = true;
    let mut ka = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    ka.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut outcome = "finished";
    loop {
        let ev = tokio::select! {
            biased;
            _ = tx.closed() => return "client disconnected",
            ev = g.next() => ev,
            _ = ka.tick(), if before_first => {
                send!(Bytes::from_static(b": keep-alive\n\n"));
                continue;
            }
        };
        match ev {
            None => break,
            Some(Event::Error(message)) => {
                send!(frame(&ApiError::internal(message).body()));
                outcome = "engine error";
                break;
            }
            Some(ev) => {
                before_first = false;
                for c in fmt.event(tok, ev) {
                    send!(frame(&c));
                }
            }
        }
    }
    if include_usage && outcome == "finished" {
        send!(frame(&fmt.usage(g.usage())));
    }
    send!(Bytes::from_static(b"data: [DONE]\n\n"));
    outcome
}

struct ChunkStream(mpsc::Receiver<Bytes>);

impl futures_core::Stream for ChunkStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|o| o.map(Ok))
    }
}
