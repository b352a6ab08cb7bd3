//! A streamed response as the Responses API's events, each with its `sequence_number`: `response.created`,
//! `response.in_progress`; per output item `response.output_item.added`, its content events, and
//! `response.output_item.done` — a message's `response.content_part.added`, `response.output_text.delta`s,
//! `response.output_text.done`, `response.content_part.done`; a function call's
//! `response.function_call_arguments.delta`s and `.done`; a thought's `response.reasoning_text.delta`s and `.done`;
//! then `response.completed` (or `response.incomplete` when the length limit cut it) with the whole response. An
//! engine failure ends the stream with an `error` event.

use super::{call_item, finish, message_item, output_text, reasoning_item, response_object, Echo};
use crate::answer::{AnswerPart, AnswerShape, AnswerSplitter};
use crate::error::ApiError;
use crate::generation::{Event, UsageTotals};
use crate::sse::{typed, ChunkFormat};
use crate::tools::{call_id, Call, Format};
use axum::response::sse::Event as SseEvent;
use hearth_engine::tokenizer::Tokenizer;
use serde_json::{json, Value};

/// The output item being streamed.
enum Open {
    Reasoning { id: String, text: String },
    Message { id: String, text: String },
    Call { id: String, call_id: String, name: String, args: String },
}

pub struct ResponseEvents {
    echo: Echo,
    format: Format,
    splitter: AnswerSplitter,
    /// Finished output items.
    items: Vec<Value>,
    open: Option<Open>,
    seq: u64,
    finish_reason: &'static str,
}

impl ResponseEvents {
    pub fn new(echo: Echo, shape: AnswerShape) -> Self {
        Self {
            echo,
            format: shape.tools.unwrap_or(Format::Generic),
            splitter: AnswerSplitter::new(shape),
            items: Vec::new(),
            open: None,
            seq: 0,
            finish_reason: "stop",
        }
    }

    /// `v` with its sequence number.
    fn ev(&mut self, mut v: Value) -> Value {
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        v
    }

    /// The output index of the open item.
    fn index(&self) -> usize {
        self.items.len()
    }

    /// Finish the open item, if any.
    fn close(&mut self, out: &mut Vec<Value>) {
        let output_index = self.index();
        let Some(open) = self.open.take() else { return };
        let item = match open {
            Open::Reasoning { id, text } => {
                let done = json!({"type": "response.reasoning_text.done", "item_id": id, "output_index": output_index,
                    "content_index": 0, "text": text});
                out.push(self.ev(done));
                reasoning_item(&id, &text)
            }
            Open::Message { id, text } => {
                let base = json!({"item_id": id, "output_index": output_index, "content_index": 0});
                let mut done = base.clone();
                done["type"] = json!("response.output_text.done");
                done["text"] = json!(text);
                done["logprobs"] = json!([]);
                out.push(self.ev(done));
                let mut part = base;
                part["type"] = json!("response.content_part.done");
                part["part"] = output_text(&text);
                out.push(self.ev(part));
                message_item(&id, &text, "completed")
            }
            Open::Call { id, call_id, name, args } => {
                let done = json!({"type": "response.function_call_arguments.done", "item_id": id,
                    "output_index": output_index, "name": name, "arguments": args});
                out.push(self.ev(done));
                call_item(&id, &call_id, &Call { name, arguments: args }, "completed")
            }
        };
        let done = json!({"type": "response.output_item.done", "output_index": output_index, "item": item});
        out.push(self.ev(done));
        self.items.push(item);
    }

    /// Open a new item (closing the open one): `output_item.added`, and a message's `content_part.added`.
    fn open(&mut self, open: Open, out: &mut Vec<Value>) {
        self.close(out);
        let output_index = self.index();
        let item = match &open {
            Open::Reasoning { id, .. } => json!({"type": "reasoning", "id": id, "summary": [], "content": []}),
            Open::Message { id, .. } => message_item(id, "", "in_progress"),
            Open::Call { id, call_id, name, .. } => {
                call_item(id, call_id, &Call { name: name.clone(), arguments: String::new() }, "in_progress")
            }
        };
        let added = json!({"type": "response.output_item.added", "output_index": output_index, "item": item});
        out.push(self.ev(added));
        if let Open::Message { id, .. } = &open {
            let part = json!({"type": "response.content_part.added", "item_id": id, "output_index": output_index,
                "content_index": 0, "part": output_text("")});
            out.push(self.ev(part));
        }
        self.open = Some(open);
    }

    fn parts(&mut self, text: &str, end: bool) -> Vec<Value> {
        let mut out = Vec::new();
        for part in self.splitter.feed(text, end) {
            match part {
                AnswerPart::Reasoning(t) => {
                    if !matches!(self.open, Some(Open::Reasoning { .. })) {
                        self.open(Open::Reasoning { id: super::item_id("rs"), text: String::new() }, &mut out);
                    }
                    let output_index = self.index();
                    let d = match &mut self.open {
                        Some(Open::Reasoning { id, text }) => {
                            text.push_str(&t);
                            Some(json!({"type": "response.reasoning_text.delta", "item_id": id,
                                "output_index": output_index, "content_index": 0, "delta": t}))
                        }
                        _ => None,
                    };
                    if let Some(d) = d {
                        let d = self.ev(d);
                        out.push(d);
                    }
                }
                AnswerPart::Content(t) if t.is_empty() => {}
                AnswerPart::Content(t) => {
                    if !matches!(self.open, Some(Open::Message { .. })) {
                        self.open(Open::Message { id: super::item_id("msg"), text: String::new() }, &mut out);
                    }
                    let output_index = self.index();
                    let d = match &mut self.open {
                        Some(Open::Message { id, text }) => {
                            text.push_str(&t);
                            Some(json!({"type": "response.output_text.delta", "item_id": id,
                                "output_index": output_index, "content_index": 0, "delta": t, "logprobs": []}))
                        }
                        _ => None,
                    };
                    if let Some(d) = d {
                        let d = self.ev(d);
                        out.push(d);
                    }
                }
                AnswerPart::CallStart { call, whole, .. } => {
                    let open = Open::Call {
                        id: super::item_id("fc"),
                        call_id: call_id(self.format),
                        name: call.name,
                        args: String::new(),
                    };
                    self.open(open, &mut out);
                    if whole {
                        out.extend(self.args_delta(call.arguments));
                        self.close(&mut out);
                    }
                }
                AnswerPart::CallArgs { args, .. } => out.extend(self.args_delta(args)),
            }
        }
        out
    }

    /// A `function_call_arguments.delta` of the open call (its text appended); None when no call is open.
    fn args_delta(&mut self, delta: String) -> Option<Value> {
        let output_index = self.index();
        let Some(Open::Call { id, args, .. }) = &mut self.open else { return None };
        args.push_str(&delta);
        let d = json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": output_index,
            "delta": delta});
        Some(self.ev(d))
    }
}

impl ChunkFormat for ResponseEvents {
    type Chunk<'a> = Value;

    fn start(&mut self) -> Vec<Value> {
        let r = response_object(&self.echo, "in_progress", Vec::new(), None);
        let created = json!({"type": "response.created", "response": r});
        let progress = json!({"type": "response.in_progress", "response": r});
        vec![self.ev(created), self.ev(progress)]
    }

    fn event(&mut self, _tok: &Tokenizer, ev: Event) -> Vec<Value> {
        match ev {
            Event::Token { text, .. } => self.parts(&text, false),
            Event::Finish { text, reason, .. } => {
                let mut out = self.parts(&text, true);
                self.close(&mut out);
                self.finish_reason = reason;
                out
            }
            Event::Error(_) => Vec::new(),
        }
    }

    fn usage(&self, _u: UsageTotals) -> Value {
        Value::Null
    }

    fn finish(&mut self, u: UsageTotals) -> Vec<Value> {
        let response = finish(&self.echo, std::mem::take(&mut self.items), self.finish_reason, &u);
        let kind = if response["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
        let done = json!({"type": kind, "response": response});
        vec![self.ev(done)]
    }

    fn frame(chunk: &Value) -> SseEvent {
        typed(chunk)
    }

    fn error(&mut self, e: &ApiError) -> SseEvent {
        let v = json!({"type": "error", "code": e.code, "message": e.message, "param": e.param});
        typed(&self.ev(v))
    }

    const DONE: bool = false;
}
