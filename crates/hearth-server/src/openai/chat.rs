//! `POST /v1/chat/completions`.

use super::{logprobs, messages, params};
use crate::body::JsonBody;
use crate::error::{ApiError, ApiResult};
use crate::generation::{collect, Event, Generation, Job, TextOptions, UsageTotals};
use crate::sse::{self, ChunkFormat, StreamSpec};
use crate::state::{new_id, unix_now, AppState};
use crate::wire::chat::{AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletionRequest, Delta};
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
    let prompt = messages::prompt_ids(&ready, &conversation)?;
    let req = g.engine_request(prompt, &ready)?;
    let prompt_tokens = req.prompt.len();
    tracing::info!(prompt_tokens, max_tokens = req.max_tokens, n = g.n, stream = g.stream, "accepted");
    let stream = ready.engine.submit(req)?;
    let jobs = vec![Job { stream, prompt_tokens, n: g.n }];
    let text = TextOptions { stops: g.stops.clone(), trim_leading_space: true, skip_special: g.skip_special };
    let meta = ResponseMeta { id, created: unix_now(), model: ready.model_id.clone() };
    if g.stream {
        let fmt = ChatChunks { meta, n: g.n, include_usage: g.include_usage };
        let spec = StreamSpec { jobs, text, include_usage: g.include_usage, keepalive: st.cfg.keepalive };
        return Ok(sse::respond(ready.tokenizer.clone(), spec, fmt));
    }
    let tok = ready.tokenizer.clone();
    let (choices, usage) = collect(Generation::new(&tok, jobs, &text)).await.map_err(ApiError::internal)?;
    let choices = choices
        .into_iter()
        .enumerate()
        .map(|(index, c)| ChatChoice {
            index,
            logprobs: want_logprobs.then(|| logprobs::chat(&tok, &c.logprobs)),
            message: AssistantMessage { role: "assistant", content: c.text },
            finish_reason: c.finish_reason,
        })
        .collect();
    tracing::info!(completion_tokens = usage.completion_tokens, "done");
    Ok(Json(crate::wire::Response::new(&meta, OBJECT, choices, usage.into())).into_response())
}

/// `chat.completion.chunk` objects.
struct ChatChunks {
    meta: ResponseMeta,
    n: usize,
    include_usage: bool,
}

impl ChatChunks {
    fn chunk(&self, choice: ChatChunkChoice) -> Chunk<'_, ChatChunkChoice> {
        Chunk::new(&self.meta, CHUNK_OBJECT, vec![choice], self.include_usage)
    }

    fn content(
        &self,
        index: usize,
        text: String,
        logprobs: Option<crate::wire::chat::ChatLogprobs>,
    ) -> Chunk<'_, ChatChunkChoice> {
        self.chunk(ChatChunkChoice {
            index,
            delta: Delta { role: None, content: Some(text) },
            logprobs,
            finish_reason: None,
        })
    }
}

impl ChunkFormat for ChatChunks {
    type Chunk<'a> = Chunk<'a, ChatChunkChoice>;

    fn start(&mut self) -> Vec<Self::Chunk<'_>> {
        (0..self.n)
            .map(|index| {
                let delta = Delta { role: Some("assistant"), content: Some(String::new()) };
                self.chunk(ChatChunkChoice { index, delta, logprobs: None, finish_reason: None })
            })
            .collect()
    }

    fn event(&mut self, tok: &Tokenizer, ev: Event) -> Vec<Self::Chunk<'_>> {
        match ev {
            Event::Token { choice, text, logprob } => {
                if text.is_empty() && logprob.is_none() {
                    return Vec::new();
                }
                let lp = logprob.map(|l| logprobs::chat(tok, std::slice::from_ref(&l)));
                vec![self.content(choice, text, lp)]
            }
            Event::Finish { choice, text, reason } => {
                let mut out = Vec::new();
                if !text.is_empty() {
                    out.push(self.content(choice, text, None));
                }
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
