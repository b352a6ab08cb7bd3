//! A streamed response as the Responses API's events, each with its `sequence_number`: `response.created`,
//! `response.in_progress`; per output item `response.output_item.added`, its content events, and
//! `response.output_item.done` — a message's `response.content_part.added`, `response.output_text.delta`s,
//! `response.output_text.done`, `response.content_part.done`; a function call's
//! `response.function_call_arguments.delta`s and `.done`; a thought's `response.reasoning_text.delta`s and `.done`;
//! then `response.completed` (or `response.incomplete` when the length limit cut it) with the whole response. An
//! engine failure ends the stream with an `error` event.

use super::{call_item, finish, response_object, Echo};
use crate::error::ApiError;
use crate::ids::item_id;
use crate::output::answer::{AnswerPart, AnswerShape, AnswerSplitter, Flow};
use crate::output::generation::{Event, UsageTotals};
use crate::output::sse::{typed, ChunkFormat};
use crate::output::tools::{call_id, Call, Format};
use crate::wire::responses::{At, Event as Ev, OutputItem, OutputText, Sequenced};
use axum::response::sse::Event as SseEvent;
use hearth_engine::tokenizer::Tokenizer;

/// The output item being streamed.
enum Open {
    Reasoning { id: String, text: String },
    Message { id: String, text: String },
    Call { id: String, call_id: String, name: String, args: String },
}

impl Open {
    fn id(&self) -> &str {
        match self {
            Open::Reasoning { id, .. } | Open::Message { id, .. } | Open::Call { id, .. } => id,
        }
    }
}

pub struct ResponseEvents {
    echo: Echo,
    format: Format,
    splitter: AnswerSplitter,
    /// Finished output items.
    items: Vec<OutputItem>,
    open: Option<Open>,
    seq: u64,
    finish_reason: &'static str,
}

impl ResponseEvents {
    pub fn new(echo: Echo, shape: AnswerShape) -> Self {
        Self {
            echo,
            format: shape.tools.as_ref().map_or(Format::Generic, |t| t.format),
            splitter: AnswerSplitter::new(&shape),
            items: Vec::new(),
            open: None,
            seq: 0,
            finish_reason: "stop",
        }
    }

    /// `event` with its sequence number.
    fn ev(&mut self, event: Ev) -> Sequenced {
        self.seq += 1;
        Sequenced { event, sequence_number: self.seq - 1 }
    }

    /// Where the open item is.
    fn at(&self) -> At {
        At {
            item_id: self.open.as_ref().map(|o| o.id().to_string()).unwrap_or_default(),
            output_index: self.items.len(),
        }
    }

    /// Finish the open item, if any.
    fn close(&mut self, out: &mut Vec<Sequenced>) {
        let at = self.at();
        let Some(open) = self.open.take() else { return };
        let output_index = at.output_index;
        let item = match open {
            Open::Reasoning { id, text } => {
                let e = self.ev(Ev::ReasoningDone { at, content_index: 0, text: text.clone() });
                out.push(e);
                OutputItem::reasoning(id, Some(text))
            }
            Open::Message { id, text } => {
                let done = Ev::TextDone { at: at.clone(), content_index: 0, text: text.clone(), logprobs: Vec::new() };
                let e = self.ev(done);
                out.push(e);
                let e = self.ev(Ev::PartDone { at, content_index: 0, part: OutputText::new(text.clone()) });
                out.push(e);
                OutputItem::message(id, Some(text), "completed")
            }
            Open::Call { id, call_id, name, args } => {
                let e = self.ev(Ev::ArgumentsDone { at, name: name.clone(), arguments: args.clone() });
                out.push(e);
                call_item(id, call_id, Call { name, arguments: args }, "completed")
            }
        };
        let e = self.ev(Ev::ItemDone { output_index, item: item.clone() });
        out.push(e);
        self.items.push(item);
    }

    /// Open a new item (closing the open one): `output_item.added`, and a message's `content_part.added`.
    fn open(&mut self, open: Open, out: &mut Vec<Sequenced>) {
        self.close(out);
        let output_index = self.items.len();
        let item = match &open {
            Open::Reasoning { id, .. } => OutputItem::reasoning(id.clone(), None),
            Open::Message { id, .. } => OutputItem::message(id.clone(), None, "in_progress"),
            Open::Call { id, call_id, name, .. } => call_item(
                id.clone(),
                call_id.clone(),
                Call { name: name.clone(), arguments: String::new() },
                "in_progress",
            ),
        };
        let is_message = matches!(open, Open::Message { .. });
        self.open = Some(open);
        let e = self.ev(Ev::ItemAdded { output_index, item });
        out.push(e);
        if is_message {
            let e = self.ev(Ev::PartAdded { at: self.at(), content_index: 0, part: OutputText::new(String::new()) });
            out.push(e);
        }
    }

    /// Append `delta` to the open item's text (opening one of `kind` first unless it is open) and send it.
    fn text(&mut self, reasoning: bool, delta: String, out: &mut Vec<Sequenced>) {
        let fits = match &self.open {
            Some(Open::Reasoning { .. }) => reasoning,
            Some(Open::Message { .. }) => !reasoning,
            _ => false,
        };
        if !fits {
            let open = if reasoning {
                Open::Reasoning { id: item_id("rs"), text: String::new() }
            } else {
                Open::Message { id: item_id("msg"), text: String::new() }
            };
            self.open(open, out);
        }
        let at = self.at();
        if let Some(Open::Reasoning { text, .. } | Open::Message { text, .. }) = &mut self.open {
            text.push_str(&delta);
        }
        let event = if reasoning {
            Ev::ReasoningDelta { at, content_index: 0, delta }
        } else {
            Ev::TextDelta { at, content_index: 0, delta, logprobs: Vec::new() }
        };
        let e = self.ev(event);
        out.push(e);
    }

    fn parts(&mut self, text: &str, flow: Flow) -> Vec<Sequenced> {
        let mut out = Vec::new();
        for part in self.splitter.feed(text, flow) {
            match part {
                AnswerPart::Reasoning(t) => self.text(true, t, &mut out),
                AnswerPart::Content(t) if t.is_empty() => {}
                AnswerPart::Content(t) => self.text(false, t, &mut out),
                AnswerPart::CallStart { call, whole, .. } => {
                    let open = Open::Call {
                        id: item_id("fc"),
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
    fn args_delta(&mut self, delta: String) -> Option<Sequenced> {
        let at = self.at();
        let Some(Open::Call { args, .. }) = &mut self.open else { return None };
        args.push_str(&delta);
        Some(self.ev(Ev::ArgumentsDelta { at, delta }))
    }
}

impl ChunkFormat for ResponseEvents {
    type Chunk<'a> = Sequenced;

    fn start(&mut self) -> Vec<Sequenced> {
        let r = response_object(&self.echo, "in_progress", Vec::new(), None);
        let created = self.ev(Ev::Created { response: r.clone() });
        vec![created, self.ev(Ev::InProgress { response: r })]
    }

    fn event(&mut self, _tok: &Tokenizer, ev: Event) -> Vec<Sequenced> {
        match ev {
            Event::Token { text, .. } => self.parts(&text, Flow::More),
            Event::Finish { text, reason, .. } => {
                let mut out = self.parts(&text, Flow::finished(reason));
                self.close(&mut out);
                self.finish_reason = reason;
                out
            }
            Event::Error(_) | Event::Prompt { .. } => Vec::new(),
        }
    }

    fn finish(&mut self, u: UsageTotals) -> Vec<Sequenced> {
        let response = finish(&self.echo, std::mem::take(&mut self.items), self.finish_reason, &u);
        let event =
            if response.status == "incomplete" { Ev::Incomplete { response } } else { Ev::Completed { response } };
        vec![self.ev(event)]
    }

    fn frame(chunk: &Sequenced) -> SseEvent {
        typed(chunk)
    }

    fn error(&mut self, e: &ApiError) -> SseEvent {
        let event = Ev::Error { code: e.code, message: e.message.clone(), param: e.param.clone() };
        typed(&self.ev(event))
    }

    const DONE: bool = false;
}
