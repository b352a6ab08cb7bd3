//! Server-sent events for a streamed request, framed by axum's `Sse`: `data: {json}` per chunk, `data: [DONE]` at
//! the end.
//!
//! A task drives the `Generation` (it borrows the tokenizer, so it cannot live inside the response body) and sends
//! events into a small channel that the body reads. When the client hangs up, hyper drops the body and with it the
//! channel's receiver; the task sees that at once (even mid-prefill), stops, and drops the engine stream, which
//! cancels the request.
//!
//! Keep-alive comments (`: keep-alive`) are sent by the task, not by axum's `KeepAlive`: the API promises them only
//! until the first token, so a client that counts frames sees nothing but data once tokens flow, whereas `KeepAlive`
//! fills every pause of the stream.

use crate::error::ApiError;
use crate::output::generation::{Event, Generation, Job, TextOptions, UsageTotals};
use axum::http::HeaderValue;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use hearth_engine::tokenizer::Tokenizer;
use serde::Serialize;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::Instrument;

/// Turns generation events into the API's chunk objects.
pub trait ChunkFormat: Send + 'static {
    type Chunk<'a>: Serialize
    where
        Self: 'a;
    /// Chunks sent as soon as the request is accepted (chat: the role delta).
    fn start(&mut self) -> Vec<Self::Chunk<'_>>;
    /// Chunks for one event (`Token` / `Finish`); an empty vec sends nothing.
    fn event(&mut self, tok: &Tokenizer, ev: Event) -> Vec<Self::Chunk<'_>>;
    /// The final usage chunk (`stream_options.include_usage`; only chat and completions have one).
    fn usage(&self, _u: UsageTotals) -> Vec<Self::Chunk<'_>> {
        Vec::new()
    }
    /// Chunks after every choice finished (Anthropic: `message_delta` and `message_stop`).
    fn finish(&mut self, _u: UsageTotals) -> Vec<Self::Chunk<'_>> {
        Vec::new()
    }
    /// One chunk as an SSE event: `data: {json}` (APIs that name their events override this).
    fn frame(chunk: &Self::Chunk<'_>) -> SseEvent {
        data(chunk)
    }
    /// An error that ends the stream.
    fn error(&mut self, e: &ApiError) -> SseEvent {
        data(&e.body())
    }
    /// Whether the stream ends with `data: [DONE]` (OpenAI's chat and completions).
    const DONE: bool = true;
}

/// A chunk whose JSON has a `type` (Anthropic's and the Responses API's events) as `event: TYPE` + `data: {json}`.
pub fn typed<T: Serialize>(v: &T) -> SseEvent {
    match serde_json::to_value(v) {
        Ok(v) => {
            let name = v.get("type").and_then(serde_json::Value::as_str).unwrap_or("message").to_string();
            data(&v).event(name)
        }
        Err(e) => {
            tracing::warn!("could not serialize a stream event: {e}");
            SseEvent::default().comment("unserializable event")
        }
    }
}

pub struct StreamSpec {
    pub jobs: Vec<Job>,
    pub text: TextOptions,
    pub include_usage: bool,
    pub keepalive: Duration,
}

/// `data: {json}`. Our chunk types always serialize; should one not, a comment takes its place (clients skip it).
pub fn data<T: Serialize>(v: &T) -> SseEvent {
    SseEvent::default().json_data(v).unwrap_or_else(|e| {
        tracing::warn!("could not serialize a stream chunk: {e}");
        SseEvent::default().comment("unserializable chunk")
    })
}

/// Start streaming: returns the response at once; the task runs until the generation ends or the client leaves.
pub fn respond<F: ChunkFormat>(tok: Arc<Tokenizer>, spec: StreamSpec, fmt: F) -> Response {
    let (tx, rx) = mpsc::channel::<SseEvent>(64);
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
    let mut r = Sse::new(EventStream(rx)).into_response();
    // Reverse proxies (nginx) would otherwise buffer the stream.
    r.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

async fn pump<F: ChunkFormat>(
    tok: &Tokenizer,
    g: &mut Generation<'_>,
    fmt: &mut F,
    tx: &mpsc::Sender<SseEvent>,
    include_usage: bool,
    keepalive: Duration,
) -> &'static str {
    macro_rules! send {
        ($e:expr) => {
            if tx.send($e).await.is_err() {
                return "client disconnected";
            }
        };
    }
    let start: Vec<SseEvent> = fmt.start().iter().map(F::frame).collect();
    for e in start {
        send!(e);
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
                send!(SseEvent::default().comment("keep-alive"));
                continue;
            }
        };
        match ev {
            None => break,
            Some(Event::Error(error)) => {
                let e = fmt.error(&error);
                send!(e);
                outcome = "engine error";
                break;
            }
            Some(ev) => {
                before_first = false;
                let chunks: Vec<SseEvent> = fmt.event(tok, ev).iter().map(F::frame).collect();
                for e in chunks {
                    send!(e);
                }
            }
        }
    }
    if include_usage && outcome == "finished" {
        let usage: Vec<SseEvent> = fmt.usage(g.usage()).iter().map(F::frame).collect();
        for e in usage {
            send!(e);
        }
    }
    if outcome == "finished" {
        let end: Vec<SseEvent> = fmt.finish(g.usage()).iter().map(F::frame).collect();
        for e in end {
            send!(e);
        }
    }
    if F::DONE {
        send!(SseEvent::default().data("[DONE]"));
    }
    outcome
}

/// The channel's receiver as the `Stream` that `Sse` reads.
struct EventStream(mpsc::Receiver<SseEvent>);

impl futures_core::Stream for EventStream {
    type Item = Result<SseEvent, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|o| o.map(Ok))
    }
}
