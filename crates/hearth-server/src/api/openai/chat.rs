//! `POST /v1/chat/completions`.

use super::constraint::Requested;
use super::params::GenParams;
use super::{logprobs, messages, params};
use crate::answer::{Answer, AnswerPart, AnswerShape, AnswerSplitter};
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::generation::{collect, ChoiceResult, Event, Generation, Job, TextOptions, UsageTotals};
use crate::reasoning;
use crate::sse::{self, ChunkFormat, StreamSpec};
use crate::state::{new_id, unix_now, AppState, Ready};
use crate::tools::{Call, Format, ToolChoice, Tools};
use crate::wire::chat::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletionRequest, Delta, FunctionCall, ToolCall, ToolCallDelta,
};
use crate::wire::{Chunk, RequestBody, ResponseMeta};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::engine::EngineRequest;
use hearth_engine::sampling::grammar::ConstraintSpec;
use hearth_engine::tokenizer::Tokenizer;
use std::sync::Arc;
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

/// A chat request translated onto the engine: what every chat-shaped API (Chat Completions, Anthropic Messages,
/// Responses) submits, and how its answers split.
pub(crate) struct Prepared {
    pub req: EngineRequest,
    pub g: GenParams,
    pub shape: AnswerShape,
    pub want_logprobs: bool,
}

/// Check a chat request and build its engine request: sampling, the template's prompt with the tools, the tools'
/// grammar or the request's own constraint, and the reasoning split.
pub(crate) fn prepare(ready: &Ready, req: ChatCompletionRequest) -> ApiResult<Prepared> {
    let ChatCompletionRequest { params: p, options, conversation } = req;
    crate::offload::check_text_fits(ready, messages::text_bytes(&conversation), "messages")?;
    let max_tokens = match options.max_completion_tokens {
        Some(m) => ("max_completion_tokens", Some(m)),
        None => ("max_tokens", p.max_tokens),
    };
    let mut g = params::resolve(&p, &ready.defaults, ready.engine.info().vocab_size, max_tokens)?;
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
    let (prompt_text, prompt) = messages::prompt_ids(ready, &conversation, tools.as_ref())?;
    // A template that thinks: the answer's `<think>...</think>` part becomes the reasoning.
    let thinks = reasoning::template_thinks(template);
    let opened = thinks && reasoning::prompt_opens_thought(&prompt_text);
    // A model that may open its own thought (the prompt neither opened nor closed one: Qwen3 with thinking on) may
    // think first: the constraint applies after `</think>`, or from the first token when it does not think.
    if thinks && !opened && !reasoning::prompt_closes_thought(&prompt_text) {
        if let Some(r) = g.constraint.as_mut() {
            r.spec = ConstraintSpec::AfterOptionalThought(Box::new(r.spec.clone()));
        }
    }
    let mut req = g.engine_request(prompt, ready)?;
    // A thought the prompt opened is free text: the constraint (a schema, a tool grammar) applies after it.
    if opened {
        req.constraint = req.constraint.take().map(|c| c.after_marker(reasoning::END));
    }
    let shape = AnswerShape { thinks, opened, tools: tools.as_ref().map(|t| t.format) };
    Ok(Prepared { req, g, shape, want_logprobs })
}

/// A chat request of another API (Anthropic Messages, Responses), translated into Chat Completions' body, checked
/// and submitted as one choice.
pub(crate) struct Submitted {
    pub jobs: Vec<Job>,
    pub text: TextOptions,
    pub shape: AnswerShape,
    pub prompt_tokens: usize,
}

pub(crate) async fn submit_translated(
    ready: &Arc<Ready>,
    chat: serde_json::Value,
    stream: bool,
) -> ApiResult<Submitted> {
    let r = ready.clone();
    let Prepared { req, g, shape, .. } =
        crate::offload::run(move || prepare(&r, ChatCompletionRequest::from_body(&chat)?)).await?;
    let prompt_tokens = req.prompt.len();
    tracing::info!(prompt_tokens, max_tokens = req.max_tokens, stream, "accepted");
    let rs = ready.engine.submit(req).await?;
    Ok(Submitted {
        jobs: vec![Job { stream: rs, prompt_tokens, n: 1 }],
        text: g.text_options(true),
        shape,
        prompt_tokens,
    })
}

impl Submitted {
    /// Stream the choice in `fmt`'s events.
    pub fn stream<F: ChunkFormat>(self, ready: &Ready, keepalive: std::time::Duration, fmt: F) -> Response {
        let spec = StreamSpec { jobs: self.jobs, text: self.text, include_usage: false, keepalive };
        sse::respond(ready.tokenizer.clone(), spec, fmt)
    }

    /// The whole choice and the usage.
    pub async fn answer(self, ready: &Ready) -> ApiResult<(ChoiceResult, UsageTotals)> {
        let tok = ready.tokenizer.clone();
        let (choices, usage) = collect(Generation::new(&tok, self.jobs, &self.text)).await.map_err(ApiError::engine)?;
        let c = choices.into_iter().next().ok_or_else(|| ApiError::internal("the engine returned no answer"))?;
        tracing::info!(completion_tokens = usage.completion_tokens, "done");
        Ok((c, usage))
    }
}

async fn run(st: AppState, req: ChatCompletionRequest, id: String) -> ApiResult<Response> {
    let (ready, _admitted) = st.generator_for(req.params.model.as_deref()).await?;
    let r = ready.clone();
    let Prepared { req, g, shape, want_logprobs } = crate::offload::run(move || prepare(&r, req)).await?;
    let prompt_tokens = req.prompt.len();
    tracing::info!(prompt_tokens, max_tokens = req.max_tokens, n = g.n, stream = g.stream, "accepted");
    let stream = ready.engine.submit(req).await?;
    let jobs = vec![Job { stream, prompt_tokens, n: g.n }];
    let text = g.text_options(true);
    let meta = ResponseMeta { id, created: unix_now(), model: ready.model_id.clone() };
    if g.stream {
        let splitters = (0..g.n).map(|_| AnswerSplitter::new(shape)).collect();
        let fmt = ChatChunks { meta, n: g.n, include_usage: g.include_usage, splitters, format: shape.tools };
        let spec = StreamSpec { jobs, text, include_usage: g.include_usage, keepalive: st.cfg.keepalive };
        return Ok(sse::respond(ready.tokenizer.clone(), spec, fmt));
    }
    let tok = ready.tokenizer.clone();
    let (choices, usage) = collect(Generation::new(&tok, jobs, &text)).await.map_err(ApiError::engine)?;
    let choices = choices
        .into_iter()
        .enumerate()
        .map(|(index, c)| {
            let a = Answer::split(shape, &c.text);
            let finish_reason = finish_reason(c.finish_reason, !a.calls.is_empty());
            let tool_calls = shape
                .tools
                .filter(|_| !a.calls.is_empty())
                .map(|f| a.calls.into_iter().map(|c| tool_call(c, f)).collect());
            ChatChoice {
                index,
                logprobs: want_logprobs.then(|| logprobs::chat(&tok, &c.logprobs)),
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
    tracing::info!(completion_tokens = usage.completion_tokens, "done");
    Ok(Json(crate::wire::Response::new(&meta, OBJECT, choices, usage.into())).into_response())
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
    fn deltas(&mut self, index: usize, text: String, end: bool) -> Vec<Delta> {
        let Some(s) = self.splitters.get_mut(index) else { return Vec::new() };
        let format = self.format.unwrap_or(Format::Generic);
        s.feed(&text, end)
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
        logprobs: Option<crate::wire::chat::ChatLogprobs>,
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
                let deltas = self.deltas(choice, text, false);
                self.chunks(choice, deltas, lp)
            }
            Event::Finish { choice, text, reason, .. } => {
                let deltas = self.deltas(choice, text, true);
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
            Event::Error(_) => Vec::new(),
        }
    }

    fn usage(&self, u: UsageTotals) -> Vec<Self::Chunk<'_>> {
        vec![Chunk::usage(&self.meta, CHUNK_OBJECT, u.into())]
    }
}
