//! A streamed Messages answer as Anthropic's events: `message_start`; per content block `content_block_start`,
//! its deltas (`thinking_delta`, `text_delta`, `input_json_delta`) and `content_block_stop` (a `ping` after the
//! first block starts); then `message_delta` (`stop_reason`, `stop_sequence`, usage) and `message_stop`. An error
//! ends the stream as an `error` event.

use super::{stop_reason, tool_use, usage_of};
use crate::error::ApiError;
use crate::output::answer::{AnswerPart, AnswerShape, AnswerSplitter, Flow};
use crate::output::generation::{Event, UsageTotals};
use crate::output::sse::{typed, ChunkFormat};
use crate::output::tools::Format;
use crate::wire::anthropic::{Block as ContentBlock, BlockDelta, Event as Ev, Message, MessageDelta};
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
            format: shape.tools.as_ref().map_or(Format::Generic, |t| t.format),
            splitter: AnswerSplitter::new(&shape),
            open: None,
            blocks: 0,
            stop_reason: "end_turn",
            stop_sequence: None,
        }
    }

    /// Close the open block, if any.
    fn close(&mut self, out: &mut Vec<Ev>) {
        if let Some((_, index)) = self.open.take() {
            out.push(Ev::ContentBlockStop { index });
        }
    }

    /// Open a block of `kind` (closing another kind first) unless one is open; its index.
    fn block(&mut self, kind: Block, start: ContentBlock, out: &mut Vec<Ev>) -> usize {
        match self.open {
            Some((k, index)) if k == kind && kind != Block::ToolUse => return index,
            _ => self.close(out),
        }
        let index = self.blocks;
        self.blocks += 1;
        self.open = Some((kind, index));
        out.push(Ev::ContentBlockStart { index, content_block: start });
        if index == 0 {
            out.push(Ev::Ping);
        }
        index
    }

    fn parts(&mut self, text: &str, flow: Flow) -> Vec<Ev> {
        let mut out = Vec::new();
        for part in self.splitter.feed(text, flow) {
            match part {
                AnswerPart::Reasoning(thinking) => {
                    let start = ContentBlock::Thinking { thinking: String::new(), signature: String::new() };
                    let index = self.block(Block::Thinking, start, &mut out);
                    out.push(Ev::ContentBlockDelta { index, delta: BlockDelta::ThinkingDelta { thinking } });
                }
                AnswerPart::Content(t) if t.is_empty() => {}
                AnswerPart::Content(text) => {
                    let index = self.block(Block::Text, ContentBlock::Text { text: String::new() }, &mut out);
                    out.push(Ev::ContentBlockDelta { index, delta: BlockDelta::TextDelta { text } });
                }
                AnswerPart::CallStart { call, whole, .. } => {
                    let args = call.arguments.clone();
                    let start = match tool_use(call, self.format) {
                        ContentBlock::ToolUse { id, name, .. } => ContentBlock::ToolUse { id, name, input: json!({}) },
                        other => other,
                    };
                    let index = self.block(Block::ToolUse, start, &mut out);
                    if whole {
                        let partial_json =
                            serde_json::from_str::<Value>(&args).map(|v| v.to_string()).unwrap_or_else(|_| "{}".into());
                        out.push(Ev::ContentBlockDelta { index, delta: BlockDelta::InputJsonDelta { partial_json } });
                    }
                }
                AnswerPart::CallArgs { args, .. } => {
                    if let Some((Block::ToolUse, index)) = self.open {
                        let delta = BlockDelta::InputJsonDelta { partial_json: args };
                        out.push(Ev::ContentBlockDelta { index, delta });
                    }
                }
            }
        }
        out
    }
}

impl ChunkFormat for MessageEvents {
    type Chunk<'a> = Ev;

    fn start(&mut self) -> Vec<Ev> {
        let usage = usage_of(&UsageTotals { prompt_tokens: self.prompt_tokens, ..UsageTotals::default() });
        let message = Message {
            id: self.id.clone(),
            kind: "message",
            role: "assistant",
            model: self.model.clone(),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage,
        };
        vec![Ev::MessageStart { message }]
    }

    fn event(&mut self, _tok: &Tokenizer, ev: Event) -> Vec<Ev> {
        match ev {
            Event::Token { text, .. } => self.parts(&text, Flow::More),
            Event::Finish { text, reason, stop_sequence, .. } => {
                let mut out = self.parts(&text, Flow::finished(reason));
                self.close(&mut out);
                self.stop_reason = stop_reason(reason, stop_sequence.is_some(), self.splitter.calls() > 0);
                self.stop_sequence = stop_sequence;
                out
            }
            Event::Error(_) | Event::Prompt { .. } => Vec::new(),
        }
    }

    fn finish(&mut self, u: UsageTotals) -> Vec<Ev> {
        let delta = MessageDelta { stop_reason: self.stop_reason, stop_sequence: self.stop_sequence.clone() };
        vec![Ev::MessageDelta { delta, usage: usage_of(&u) }, Ev::MessageStop]
    }

    fn frame(chunk: &Ev) -> SseEvent {
        typed(chunk)
    }

    fn error(&mut self, e: &ApiError) -> SseEvent {
        typed(&Ev::Error { error: e.anthropic() })
    }

    const DONE: bool = false;
}
