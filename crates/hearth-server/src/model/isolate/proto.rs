//! The framed protocol between a serving parent and its engine child over a UNIX stream socket.
//!
//! A frame is a little-endian `u32` byte length, then that many bytes of JSON. The parent sends [`ToChild`]
//! messages (requests, cancellations, stats and flush queries, shutdown); the child sends [`ToParent`] messages
//! (a hello with the engine's limits, whether each request was admitted, its events, answers to queries).
//! A request crosses as the [`EngineRequest`] itself: its output constraint is a specification, which the child's
//! engine compiles at submit with its own vocabulary index (the parent compiles nothing).
//!
//! Reading is defensive: a length above [`MAX_FRAME`] is refused before anything is allocated, a frame cut short
//! is an error, and EOF exactly between frames is the peer's clean close.

use hearth_engine::engine::{EngineEvent, EngineInfo, EngineRequest, SubmitError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Version of this protocol; the child's hello carries it and the parent refuses another.
pub const VERSION: u32 = 2;

/// Largest frame either side accepts: a request of a million prompt tokens is ~8 MB of JSON.
pub const MAX_FRAME: usize = 64 << 20;

/// Parent to child.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToChild {
    /// Start request `id` (ids are the parent's, unique per connection).
    Submit { id: u64, request: Box<EngineRequest> },
    /// Cancel one choice of request `id`, or all of them (`choice: None`).
    Cancel { id: u64, choice: Option<usize> },
    /// Ask for the engine's statistics; answered by [`ToParent::Stats`] with the same `query`.
    Stats { query: u64 },
    /// Write the prompt cache to its SSD tier; answered by [`ToParent::Flushed`] once durable.
    Flush { query: u64 },
    /// Finish: the child stops reading, ends its rows and exits.
    Shutdown,
}

/// Child to parent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToParent {
    /// First message on a connection: the engine is up.
    Hello { version: u32, pid: u32, info: EngineInfo, device: String },
    /// Request `id` was admitted: its events follow.
    Accepted { id: u64 },
    /// An event of request `id`; after `Finished` for every choice, or an `Error`, no more follow.
    Event { id: u64, event: EngineEvent },
    /// Request `id` was not admitted.
    Refused { id: u64, error: SubmitError },
    /// The engine's `/stats` object.
    Stats { query: u64, stats: serde_json::Value },
    /// The flush of `query` is durable: `Ok(false)` when no SSD tier is configured, or why it failed.
    Flushed { query: u64, result: Result<bool, String> },
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("reading the engine socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("a frame of {0} bytes is over the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    #[error("the connection closed inside a frame")]
    Truncated,
    #[error("a malformed frame: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Write one message as a frame (not flushed: callers batch frames and flush once).
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, msg: &T) -> std::io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len()).ok().filter(|&n| n as usize <= MAX_FRAME).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("a {}-byte frame is too large", body.len()))
    })?;
    w.write_all(&len.to_le_bytes()).await?;
    w.write_all(&body).await
}

/// Write the messages of `rx` until it closes or a write fails, flushing whenever the queue is empty: what a step
/// emits for many streams leaves in one write.
pub async fn write_queue<W: AsyncWrite + Unpin, T: Serialize>(
    mut w: W,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) {
    while let Some(m) = rx.recv().await {
        if write_frame(&mut w, &m).await.is_err() {
            return;
        }
        while let Ok(m) = rx.try_recv() {
            if write_frame(&mut w, &m).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
}

/// Read one message; `Ok(None)` when the peer closed the connection between frames.
pub async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(r: &mut R) -> Result<Option<T>, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < len.len() {
        match r.read(&mut len[got..]).await? {
            0 if got == 0 => return Ok(None),
            0 => return Err(FrameError::Truncated),
            n => got += n,
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => FrameError::Truncated,
        _ => FrameError::Io(e),
    })?;
    Ok(Some(serde_json::from_slice(&body)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_engine::engine::{EngineErrorKind, FinishReason, Usage};
    use hearth_engine::sampling::grammar::{ConstraintSource, ConstraintSpec};
    use hearth_engine::sampling::{SamplingParams, TopLogprob};

    fn request() -> EngineRequest {
        EngineRequest {
            prompt: vec![1, 2, 3],
            sampling: SamplingParams {
                temperature: 0.7,
                seed: Some(9),
                logit_bias: vec![(5, -1.5)],
                ..Default::default()
            },
            max_tokens: 16,
            stop_token_ids: vec![7],
            ignore_eos: false,
            n: 2,
            constraint: Some(ConstraintSource {
                spec: ConstraintSpec::AfterOptionalThought(Box::new(ConstraintSpec::JsonSchema(
                    serde_json::json!({"type": "object"}),
                ))),
                after_marker: Some("</think>".into()),
            }),
            spec: hearth_engine::speculative::SpecRequest { off: false, prediction: vec![4, 5, 6] },
            // An image crosses as its hash and base64 pixels.
            media: Some(hearth_engine::vision::RequestMedia {
                images: vec![hearth_engine::vision::PromptImage {
                    start: 1,
                    tokens: 1,
                    hash: [0xab; 32],
                    width: 2,
                    height: 1,
                    rgb: vec![0, 1, 2, 253, 254, 255],
                }],
                rope: Some(hearth_engine::vision::MropePositions {
                    rows: [vec![0, 1, 2], vec![0, 1, 2], vec![0, 1, 2]],
                    delta: 0,
                }),
            }),
        }
    }

    fn info() -> EngineInfo {
        EngineInfo {
            vocab_size: 100,
            max_positions: 2048,
            kv_capacity_tokens: 4096,
            kv_capacity_bytes: 1 << 20,
            kv_cache_dtype: "f16".into(),
            max_batch: 8,
            kv_block_size: 16,
            kv_blocks: 256,
            max_request_tokens: 2048,
            images: true,
        }
    }

    #[tokio::test]
    async fn every_message_survives_the_round_trip() {
        let to_child = vec![
            ToChild::Submit { id: 1, request: Box::new(request()) },
            ToChild::Cancel { id: 1, choice: Some(1) },
            ToChild::Cancel { id: 2, choice: None },
            ToChild::Stats { query: 3 },
            ToChild::Flush { query: 4 },
            ToChild::Shutdown,
        ];
        let to_parent = vec![
            ToParent::Hello { version: VERSION, pid: 42, info: info(), device: "cpu (2 threads)".into() },
            ToParent::Accepted { id: 1 },
            ToParent::Event {
                id: 1,
                event: EngineEvent::Token {
                    choice: 0,
                    id: 17,
                    logprob: Some(-0.25),
                    top: vec![TopLogprob { id: 17, logprob: -0.25 }],
                },
            },
            ToParent::Event {
                id: 1,
                event: EngineEvent::Finished {
                    choice: 1,
                    reason: FinishReason::Length,
                    usage: Usage {
                        prompt_tokens: 3,
                        completion_tokens: 16,
                        cached_tokens: 2,
                        accepted_prediction_tokens: 5,
                        rejected_prediction_tokens: 1,
                    },
                },
            },
            ToParent::Event {
                id: 5,
                event: EngineEvent::Error { kind: EngineErrorKind::GrammarFailed, message: "boom".into() },
            },
            ToParent::Refused { id: 7, error: SubmitError::Constraint("an unknown type".into()) },
            ToParent::Refused { id: 6, error: SubmitError::QueueFull { rows: 2, waiting: 3, limit: 4 } },
            ToParent::Stats { query: 3, stats: serde_json::json!({"rows_running": 1}) },
            ToParent::Flushed { query: 4, result: Ok(false) },
            ToParent::Flushed { query: 5, result: Err("the SSD writer stopped".into()) },
        ];
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        for m in &to_child {
            write_frame(&mut a, m).await.unwrap();
        }
        for m in &to_parent {
            write_frame(&mut a, m).await.unwrap();
        }
        drop(a);
        for m in &to_child {
            assert_eq!(&read_frame::<_, ToChild>(&mut b).await.unwrap().unwrap(), m);
        }
        for m in &to_parent {
            assert_eq!(&read_frame::<_, ToParent>(&mut b).await.unwrap().unwrap(), m);
        }
        assert!(read_frame::<_, ToParent>(&mut b).await.unwrap().is_none(), "EOF between frames is a clean close");
    }

    #[tokio::test]
    async fn hostile_frames_are_errors_not_allocations_or_hangs() {
        // A length over the limit is refused before its body is read or allocated.
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&u32::MAX.to_le_bytes()).await.unwrap();
        assert!(
            matches!(read_frame::<_, ToChild>(&mut b).await, Err(FrameError::TooLarge(n)) if n == u32::MAX as usize)
        );

        // Cut inside the length, and inside the body.
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&[5, 0]).await.unwrap();
        drop(a);
        assert!(matches!(read_frame::<_, ToChild>(&mut b).await, Err(FrameError::Truncated)));
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&10u32.to_le_bytes()).await.unwrap();
        a.write_all(b"{\"Sh").await.unwrap();
        drop(a);
        assert!(matches!(read_frame::<_, ToChild>(&mut b).await, Err(FrameError::Truncated)));

        // Whole frames that are not a message of the protocol.
        for body in [&b"not json"[..], b"{\"Launch\":{}}", b"{\"Cancel\":{\"id\":-1,\"choice\":null}}"] {
            let (mut a, mut b) = tokio::io::duplex(256);
            a.write_all(&(body.len() as u32).to_le_bytes()).await.unwrap();
            a.write_all(body).await.unwrap();
            assert!(matches!(read_frame::<_, ToChild>(&mut b).await, Err(FrameError::Malformed(_))), "{body:?}");
        }
    }
}
