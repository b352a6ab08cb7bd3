//! A streamed Messages answer as Anthropic's events: `message_start`; per content block `content_block_start`,
//! its deltas (`thinking_delta`, `text_delta`, `input_json_delta`) and `content_block_stop` (a `ping` after the
//! first block starts); then `message_delta` (`stop_reason`, `stop_sequence`, usage) and `message_stop`. An error
//! ends the stream as an `error` event.

use super::{error_event, stop_reason, tool_use, usage_json};
use crate::answer::{AnswerPart, AnswerShape, AnswerSplitter};
use crate::error::ApiError;
use crate::generation::{Event, UsageTotals};
use crate::sse::{typed, ChunkFormat};
use crate::tools::Format;
use axum::response::sse::Event as SseEvent;
use hearth_engine::tokenizer::Tokenizer;
use serde_json::{json, Value};

/// The kind of the open content block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    ToolUse,
}

pub struct MessageEvents {
    id: String,
    model: String,
    prompt_tokens: usize,
    format: Format,
    splitter: AnswerSplitter,
    /// The open block and its index.
    open: Option<(Block, usize)>,
    /// Blocks started so far.
    blocks: usize,
    stop_reason: &'static str,
    stop_sequence: Option<String>,
}

impl MessageEvents {
    pub fn new(id: String, model: String, prompt_tokens: usize, shape: AnswerShape) -> Self {
        Self {
            id,
            model,
            prompt_tokens,
            format: shape.tools.unwrap_or(Format::Generic),
            splitter: AnswerSplitter::new(shape),
            open: None,
            blocks: 0,
            stop_reason: "end_turn",
            stop_sequence: None,
        }
    }

    /// Close the open block, if any.
    fn close(&mut self, out: &mut Vec<Value>) {
        if let Some((_, index)) = self.open.take() {
            out.push(json!({"type": "content_block_stop", "index": index}));
        }
    }

    /// Open a block of `kind` (closing another kind first) unless one is open; its index.
    fn block(&mut self, kind: Block, start: Value, out: &mut Vec<Value>) -> usize {
        match self.open {
            Some((k, index)) if k == kind && kind != Block::ToolUse => return index,
            _ => self.close(out),
        }
        let index = self.blocks;
        self.blocks += 1;
        self.open = Some((kind, index));
        out.push(json!({"type": "content_block_start", "index": index, "content_block": start}));
        if index == 0 {
            out.push(json!({"type": "ping"}));
        }
        index
    }

    fn parts(&mut self, text: &str, end: bool) -> Vec<Value> {
        let mut out = Vec::new();
        for part in self.splitter.feed(text, end) {
            match part {
                AnswerPart::Reasoning(t) => {
                    let start = json!({"type": "thinking", "thinking": "", "signature": ""});
                    let index = self.block(Block::Thinking, start, &mut out);
                    out.push(delta(index, json!({"type": "thinking_delta", "thinking": t})));
                }
                AnswerPart::Content(t) if t.is_empty() => {}
                AnswerPart::Content(t) => {
                    let index = self.block(Block::Text, json!({"type": "text", "text": ""}), &mut out);
                    out.push(delta(index, json!({"type": "text_delta", "text": t})));
                }
                AnswerPart::CallStart { call, whole, .. } => {
                    let mut start = tool_use(call.clone(), self.format);
                    start["input"] = json!({});
                    let index = self.block(Block::ToolUse, start, &mut out);
                    if whole {
                        let args = serde_json::from_str::<Value>(&call.arguments)
                            .map(|v| v.to_string())
                            .unwrap_or_else(|_| "{}".into());
                        out.push(delta(index, json!({"type": "input_json_delta", "partial_json": args})));
                    }
                }
                AnswerPart::CallArgs { args, .. } => {
                    if let Some((Block::ToolUse, index)) = self.open {
                        out.push(delta(index, json!({"type": "input_json_delta", "partial_json": args})));
                    }
                }
            }
        }
        out
    }
}

fn delta(index: usize, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

impl ChunkFormat for MessageEvents {
    type Chunk<'a> = Value;

    fn start(&mut self) -> Vec<Value> {
        let usage = usage_json(&UsageTotals { prompt_tokens: self.prompt_tokens, ..UsageTotals::default() });
        vec![json!({"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": usage,
        }})]
    }

    fn event(&mut self, _tok: &Tokenizer, ev: Event) -> Vec<Value> {
        match ev {
            Event::Token { text, .. } => self.parts(&text, false),
            Event::Finish { text, reason, stop_sequence, .. } => {
                let mut out = self.parts(&text, true);
                self.close(&mut out);
                self.stop_reason = stop_reason(reason, stop_sequence.is_some(), self.splitter.calls() > 0);
                self.stop_sequence = stop_sequence;
                out
            }
            Event::Error(_) => Vec::new(),
        }
    }

    fn usage(&self, u: UsageTotals) -> Value {
        usage_json(&u)
    }

    fn finish(&mut self, u: UsageTotals) -> Vec<Value> {
        vec![
            json!({"type": "message_delta",
                "delta": {"stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence},
                "usage": usage_json(&u)}),
            json!({"type": "message_stop"}),
        ]
    }

    fn frame(chunk: &Value) -> SseEvent {
        typed(chunk)
    }

    fn error(&mut self, e: &ApiError) -> SseEvent {
        typed(&error_event(e))
    }

    const DONE: bool = false;
}
