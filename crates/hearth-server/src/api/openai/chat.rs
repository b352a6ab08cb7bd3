//! `POST /v1/chat/completions`: the body as the chat core's [`ChatRequest`], its answer as `chat.completion` (or
//! streamed `chat.completion.chunk`s): reasoning as `reasoning_content`, calls as `tool_calls`.

use super::logprobs;
use crate::chat::{self, ChatRequest, FieldNames};
use crate::error::ApiResult;
use crate::http::body::JsonBody;
use crate::ids::{new_id, unix_now};
use crate::output::answer::{Answer, AnswerPart, AnswerSplitter, Flow};
use crate::output::generation::{Event, UsageTotals};
use crate::output::sse::ChunkFormat;
use crate::output::tools::{call_id, Call, Format};
use crate::state::AppState;
use crate::wire::chat::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletionRequest, ChatLogprobs, Delta, FunctionCall, ToolCall,
    ToolCallDelta,
};
use crate::wire::{Chunk, ResponseMeta};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
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
    run(st, req.into(), id).instrument(span).await
}

async fn run(st: AppState, req: ChatRequest, id: String) -> ApiResult<Response> {
    let (ready, _admitted) = st.generator_for(req.params.model.as_deref()).await?;
    let sub = chat::submit(&ready, req).await?;
    let (shape, n, want_logprobs) = (sub.shape.clone(), sub.n, sub.want_logprobs);
    let meta = ResponseMeta { id, created: unix_now(), model: ready.model_id.clone() };
    if sub.stream {
        let splitters = (0..n).map(|_| AnswerSplitter::new(&shape)).collect();
        let format = shape.tools.map(|t| t.format);
        let fmt = ChatChunks { meta, n, include_usage: sub.include_usage, splitters, format };
        return Ok(sub.into_sse(&ready, st.cfg.keepalive, fmt));
    }
    let (choices, usage) = sub.collect(&ready).await?;
    let tok = &ready.tokenizer;
    let choices = choices
        .into_iter()
        .enumerate()
        .map(|(index, c)| {
            let a = Answer::split(&shape, &c.text, c.finish_reason);
            let finish_reason = finish_reason(c.finish_reason, !a.calls.is_empty());
            let tool_calls = shape
                .tools
                .as_ref()
                .filter(|_| !a.calls.is_empty())
                .map(|t| a.calls.into_iter().map(|c| tool_call(c, t.format)).collect());
            ChatChoice {
                index,
                logprobs: want_logprobs.then(|| logprobs::chat(tok, &c.logprobs)),
                message: AssistantMessage {
                    role: "assistant",
                    reasoning_content: a.reasoning,
                    content: a.content,
                    tool_calls,
                },
                finish_reason,
            }
        })
        .collect();
    Ok(Json(crate::wire::Response::new(&meta, OBJECT, choices, usage.into())).into_response())
}

/// A Chat Completions request as the chat core's: `max_completion_tokens` wins over `max_tokens`.
impl From<ChatCompletionRequest> for ChatRequest {
    fn from(r: ChatCompletionRequest) -> Self {
        let ChatCompletionRequest { mut params, options, conversation } = r;
        let mut fields = FieldNames::CHAT;
        if let Some(m) = options.max_completion_tokens {
            params.max_tokens = Some(m);
            fields.max_tokens = "max_completion_tokens";
        }
        ChatRequest {
            conversation,
            params,
            fields,
            logprobs: options.logprobs.unwrap_or(false),
            top_logprobs: options.top_logprobs,
        }
    }
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
    ToolCall { id: call_id(format), kind: "function", function: FunctionCall { name: c.name, arguments: c.arguments } }
}

/// `chat.completion.chunk` objects.
struct ChatChunks {
    meta: ResponseMeta,
    n: usize,
    include_usage: bool,
    /// Each choice's answer splitter.
    splitters: Vec<AnswerSplitter>,
    /// The request's tool-call format, when it offers tools.
    format: Option<Format>,
}

impl ChatChunks {
    fn chunk(&self, choice: ChatChunkChoice) -> Chunk<'_, ChatChunkChoice> {
        Chunk::new(&self.meta, CHUNK_OBJECT, vec![choice], self.include_usage)
    }

    /// A choice's new text as deltas (`end`: the choice ended).
    fn deltas(&mut self, index: usize, text: String, flow: Flow) -> Vec<Delta> {
        let Some(s) = self.splitters.get_mut(index) else { return Vec::new() };
        let format = self.format.unwrap_or(Format::Generic);
        s.feed(&text, flow)
            .into_iter()
            .map(|part| match part {
                AnswerPart::Content(c) => Delta { content: Some(c), ..Delta::default() },
                AnswerPart::Reasoning(r) => Delta { reasoning_content: Some(r), ..Delta::default() },
                AnswerPart::CallStart { index, call, .. } => Delta {
                    tool_calls: Some(vec![ToolCallDelta::first(index, tool_call(call, format))]),
                    ..Delta::default()
                },
                AnswerPart::CallArgs { index, args } => {
                    Delta { tool_calls: Some(vec![ToolCallDelta::more(index, args)]), ..Delta::default() }
                }
            })
            .collect()
    }

    /// Chunks of deltas; the token's logprobs ride on the first (an empty one when its text is held back).
    fn chunks(
        &self,
        index: usize,
        deltas: Vec<Delta>,
        logprobs: Option<ChatLogprobs>,
    ) -> Vec<Chunk<'_, ChatChunkChoice>> {
        let mut deltas = deltas;
        if deltas.is_empty() && logprobs.is_some() {
            deltas.push(Delta { content: Some(String::new()), ..Delta::default() });
        }
        let mut lp = logprobs;
        deltas
            .into_iter()
            .map(|delta| self.chunk(ChatChunkChoice { index, delta, logprobs: lp.take(), finish_reason: None }))
            .collect()
    }

    fn called(&self, index: usize) -> bool {
        self.splitters.get(index).is_some_and(|s| s.calls() > 0)
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
                let deltas = self.deltas(choice, text, Flow::More);
                self.chunks(choice, deltas, lp)
            }
            Event::Finish { choice, text, reason, .. } => {
                let deltas = self.deltas(choice, text, Flow::finished(reason));
                let reason = finish_reason(reason, self.called(choice));
                let mut out = self.chunks(choice, deltas, None);
                let done = ChatChunkChoice {
                    index: choice,
                    delta: Delta::default(),
                    logprobs: None,
                    finish_reason: Some(reason),
                };
                out.push(self.chunk(done));
                out
            }
            Event::Error(_) | Event::Prompt { .. } => Vec::new(),
        }
    }

    fn usage(&self, u: UsageTotals) -> Vec<Self::Chunk<'_>> {
        vec![Chunk::usage(&self.meta, CHUNK_OBJECT, u.into())]
    }
}
