//! `POST /v1/chat/completions`.

use super::constraint::Requested;
use super::{logprobs, messages, params};
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::generation::{collect, Event, Generation, Job, TextOptions, UsageTotals};
use crate::reasoning::{self, Part, ReasoningSplitter};
use crate::sse::{self, ChunkFormat, StreamSpec};
use crate::state::{new_id, unix_now, AppState};
use crate::tools::parser::{CallParser, Piece};
use crate::tools::{Call, Format, ToolChoice, Tools};
use crate::wire::chat::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletionRequest, Delta, FunctionCall, ToolCall, ToolCallDelta,
};
use crate::wire::{Chunk, ResponseMeta};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::sampling::grammar::ConstraintSpec;
use hearth_engine::tokenizer::Tokenizer;
use tracing::Instrument;

const OBJECT: &str = "chat.completion";
const CHUNK_OBJECT: &str = "chat.completion.chunk";

pub async fn handler(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<ChatCompletionRequest>,
) -> ApiResult<Response> {
    let id = new_id("chatcmpl");
    let span = tracing::info_span!("chat", id = %id);
    run(st, req, id).instrument(span).await
}

async fn run(st: AppState, req: ChatCompletionRequest, id: String) -> ApiResult<Response> {
    let ready = st.ready()?;
    let ChatCompletionRequest { params: p, options, conversation } = req;
    let max_tokens = match options.max_completion_tokens {
        Some(m) => ("max_completion_tokens", Some(m)),
        None => ("max_tokens", p.max_tokens),
    };
    let mut g = params::resolve(&p, &ready.defaults, ready.engine.info.vocab_size, max_tokens)?;
    let want_logprobs = options.logprobs.unwrap_or(false);
    let top = params::top_count("top_logprobs", options.top_logprobs)?;
    if top.is_some_and(|k| k > 0) && !want_logprobs {
        return Err(ApiError::param("top_logprobs", "`top_logprobs` needs `logprobs: true`"));
    }
    if want_logprobs {
        g.sampling.logprobs = Some(top.unwrap_or(0));
    }
    let template = ready.tokenizer.chat_template.as_ref().map(|t| t.source.as_str()).unwrap_or("");
    let tools = Tools::resolve(&conversation, template)?;
    // The tools' grammar; with `auto` a request's own constraint wins (its answer is then parsed for calls only).
    let auto = tools.as_ref().is_some_and(|t| t.choice == ToolChoice::Auto);
    if let Some(spec) =
        tools.as_ref().and_then(|t| t.constraint(&ready.tokenizer)).filter(|_| !(auto && g.constraint.is_some()))
    {
        if let Some(other) = &g.constraint {
            return Err(ApiError::param(
                "tool_choice",
                format!("`tool_choice` and `{}` both constrain the output; send one of them", other.param),
            ));
        }
        g.constraint = Some(Requested { spec, param: "tool_choice" });
    }
    let format = tools.as_ref().map(|t| t.format);
    let (prompt_text, prompt) = messages::prompt_ids(&ready, &conversation, tools.as_ref())?;
    // A template that thinks: the answer's `<think>...</think>` part becomes `reasoning_content`.
    let thinks = reasoning::template_thinks(template);
    let opened = thinks && reasoning::prompt_opens_thought(&prompt_text);
    // A model that may open its own thought (the prompt neither opened nor closed one: Qwen3 with thinking on) may
    // think first: the constraint applies after `</think>`, or from the first token when it does not think.
    if thinks && !opened && !reasoning::prompt_closes_thought(&prompt_text) {
        if let Some(r) = g.constraint.as_mut() {
            r.spec = ConstraintSpec::AfterOptionalThought(Box::new(r.spec.clone()));
        }
    }
    let mut req = g.engine_request(prompt, &ready)?;
    // A thought the prompt opened is free text: the constraint (a schema, a tool grammar) applies after it.
    if opened {
        req.constraint = req.constraint.take().map(|c| c.after_marker(reasoning::END));
    }
    let prompt_tokens = req.prompt.len();
    tracing::info!(prompt_tokens, max_tokens = req.max_tokens, n = g.n, stream = g.stream, "accepted");
    let stream = ready.engine.submit(req)?;
    let jobs = vec![Job { stream, prompt_tokens, n: g.n }];
    let text = TextOptions { stops: g.stops.clone(), trim_leading_space: true, skip_special: g.skip_special };
    let meta = ResponseMeta { id, created: unix_now(), model: ready.model_id.clone() };
    if g.stream {
        let parsers = (0..g.n).map(|_| format.map(CallParser::new)).collect();
        let thinkers = (0..g.n).map(|_| thinks.then(|| ReasoningSplitter::new(opened))).collect();
        let fmt = ChatChunks { meta, n: g.n, include_usage: g.include_usage, parsers, thinkers };
        let spec = StreamSpec { jobs, text, include_usage: g.include_usage, keepalive: st.cfg.keepalive };
        return Ok(sse::respond(ready.tokenizer.clone(), spec, fmt));
    }
    let tok = ready.tokenizer.clone();
    let (choices, usage) = collect(Generation::new(&tok, jobs, &text)).await.map_err(ApiError::engine)?;
    let choices = choices
        .into_iter()
        .enumerate()
        .map(|(index, c)| {
            let (thought, answer) = match thinks {
                true => split_reasoning(opened, &c.text),
                false => (None, c.text),
            };
            let (content, calls) = match format {
                Some(f) => split_calls(f, &answer),
                None => (Some(answer), Vec::new()),
            };
            // Only a thought (cut off by max_tokens): no content.
            let content = content.filter(|t| thought.is_none() || !t.is_empty());
            let finish_reason = finish_reason(c.finish_reason, !calls.is_empty());
            let tool_calls =
                format.filter(|_| !calls.is_empty()).map(|f| calls.into_iter().map(|c| tool_call(c, f)).collect());
            ChatChoice {
                index,
                logprobs: want_logprobs.then(|| logprobs::chat(&tok, &c.logprobs)),
                message: AssistantMessage { role: "assistant", reasoning_content: thought, content, tool_calls },
                finish_reason,
            }
        })
        .collect();
    tracing::info!(completion_tokens = usage.completion_tokens, "done");
    Ok(Json(crate::wire::Response::new(&meta, OBJECT, choices, usage.into())).into_response())
}

/// A whole answer's thought (None when it has none) and the rest.
fn split_reasoning(opened: bool, text: &str) -> (Option<String>, String) {
    let mut s = ReasoningSplitter::new(opened);
    let mut parts = s.feed(text);
    parts.extend(s.finish());
    let (mut thought, mut answer) = (None::<String>, String::new());
    for p in parts {
        match p {
            Part::Reasoning(t) => thought.get_or_insert_with(String::new).push_str(&t),
            Part::Content(t) => answer.push_str(&t),
        }
    }
    (thought, answer)
}

/// A piece of a streamed message.
enum DeltaPart {
    Content(String),
    Reasoning(String),
    Call(ToolCallDelta),
}

/// A whole answer's text and calls (`content` is None when it is only calls).
fn split_calls(f: Format, text: &str) -> (Option<String>, Vec<Call>) {
    let (content, calls) = crate::tools::parser::parse_whole(f, text);
    let content = (calls.is_empty() || !content.trim().is_empty()).then_some(content);
    (content, calls)
}

/// `tool_calls` when a choice that stopped on its own made calls.
fn finish_reason(reason: &'static str, called: bool) -> &'static str {
    if called && reason == "stop" {
        "tool_calls"
    } else {
        reason
    }
}

fn tool_call(c: Call, format: Format) -> ToolCall {
    ToolCall {
        id: crate::tools::call_id(format),
        kind: "function",
        function: FunctionCall { name: c.name, arguments: c.arguments },
    }
}

/// `chat.completion.chunk` objects.
struct ChatChunks {
    meta: ResponseMeta,
    n: usize,
    include_usage: bool,
    /// Each choice's tool-call parser, when the request offers tools.
    parsers: Vec<Option<CallParser>>,
    /// Each choice's reasoning splitter, when the template thinks.
    thinkers: Vec<Option<ReasoningSplitter>>,
}

impl ChatChunks {
    fn chunk(&self, choice: ChatChunkChoice) -> Chunk<'_, ChatChunkChoice> {
        Chunk::new(&self.meta, CHUNK_OBJECT, vec![choice], self.include_usage)
    }

    /// A choice's new text as delta parts: its thought, then content or calls (through its tool-call parser when
    /// the request offers tools; `end`: the choice ended).
    fn parts(&mut self, index: usize, text: String, end: bool) -> Vec<DeltaPart> {
        let mut out = Vec::new();
        let answer = match self.thinkers.get_mut(index).and_then(Option::as_mut) {
            Some(t) => {
                let mut pieces = t.feed(&text);
                if end {
                    pieces.extend(t.finish());
                }
                let mut answer = String::new();
                for p in pieces {
                    match p {
                        Part::Reasoning(r) => out.push(DeltaPart::Reasoning(r)),
                        Part::Content(c) => answer.push_str(&c),
                    }
                }
                answer
            }
            None => text,
        };
        let Some(Some(p)) = self.parsers.get_mut(index) else {
            if !answer.is_empty() {
                out.push(DeltaPart::Content(answer));
            }
            return out;
        };
        let mut call_index = p.calls();
        let format = p.format();
        let mut pieces = p.feed(&answer);
        if end {
            pieces.extend(p.finish());
        }
        for piece in pieces {
            match piece {
                Piece::Text(t) => out.push(DeltaPart::Content(t)),
                Piece::Call(c) => {
                    call_index += 1;
                    out.push(DeltaPart::Call(ToolCallDelta::first(call_index - 1, tool_call(c, format))));
                }
                Piece::CallStart(name) => {
                    call_index += 1;
                    let c = Call { name, arguments: String::new() };
                    out.push(DeltaPart::Call(ToolCallDelta::first(call_index - 1, tool_call(c, format))));
                }
                Piece::CallArgs(a) => out.push(DeltaPart::Call(ToolCallDelta::more(call_index.saturating_sub(1), a))),
            }
        }
        out
    }

    /// Chunks of delta parts; the token's logprobs ride on the first (an empty one when its text is held back).
    fn chunks(
        &self,
        index: usize,
        parts: Vec<DeltaPart>,
        logprobs: Option<crate::wire::chat::ChatLogprobs>,
    ) -> Vec<Chunk<'_, ChatChunkChoice>> {
        let mut parts = parts;
        if parts.is_empty() && logprobs.is_some() {
            parts.push(DeltaPart::Content(String::new()));
        }
        let mut lp = logprobs;
        parts
            .into_iter()
            .map(|part| {
                let mut delta = Delta::default();
                match part {
                    DeltaPart::Content(c) => delta.content = Some(c),
                    DeltaPart::Reasoning(r) => delta.reasoning_content = Some(r),
                    DeltaPart::Call(c) => delta.tool_calls = Some(vec![c]),
                }
                self.chunk(ChatChunkChoice { index, delta, logprobs: lp.take(), finish_reason: None })
            })
            .collect()
    }

    fn called(&self, index: usize) -> bool {
        self.parsers.get(index).and_then(Option::as_ref).is_some_and(|p| p.calls() > 0)
    }
}

impl ChunkFormat for ChatChunks {
    type Chunk<'a> = Chunk<'a, ChatChunkChoice>;

    fn start(&mut self) -> Vec<Self::Chunk<'_>> {
        (0..self.n)
            .map(|index| {
                let delta = Delta { role: Some("assistant"), content: Some(String::new()), ..Delta::default() };
                self.chunk(ChatChunkChoice { index, delta, logprobs: None, finish_reason: None })
            })
            .collect()
    }

    fn event(&mut self, tok: &Tokenizer, ev: Event) -> Vec<Self::Chunk<'_>> {
        match ev {
            Event::Token { choice, text, logprob } => {
                let lp = logprob.map(|l| logprobs::chat(tok, std::slice::from_ref(&l)));
                let parts = self.parts(choice, text, false);
                self.chunks(choice, parts, lp)
            }
            Event::Finish { choice, text, reason } => {
                let parts = self.parts(choice, text, true);
                let reason = finish_reason(reason, self.called(choice));
                let mut out = self.chunks(choice, parts, None);
                let done = ChatChunkChoice {
                    index: choice,
                    delta: Delta::default(),
                    logprobs: None,
                    finish_reason: Some(reason),
                };
                out.push(self.chunk(done));
                out
            }
            Event::Error(_) => Vec::new(),
        }
    }

    fn usage(&self, u: UsageTotals) -> Self::Chunk<'_> {
        Chunk::usage(&self.meta, CHUNK_OBJECT, u.into())
    }
}
