//! `POST /v1/completions`: each prompt (`wire::completions::Prompts`) is one engine request with `n` choices;
//! choice `i` of prompt `p` has index `p*n + i`.

use super::logprobs;
use crate::chat::{offload, params, FieldNames};
use crate::error::{ApiError, ApiResult};
use crate::http::body::JsonBody;
use crate::ids::{new_id, unix_now};
use crate::model::Ready;
use crate::output::generation::{collect, Event, Generation, Job, UsageTotals};
use crate::output::sse::{self, ChunkFormat, StreamSpec};
use crate::state::AppState;
use crate::wire::completions::{CompletionChoice, CompletionLogprobs, CompletionRequest, Prompt, Prompts};
use crate::wire::{Chunk, ResponseMeta};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hearth_engine::tokenizer::Tokenizer;
use tracing::Instrument;

const OBJECT: &str = "text_completion";

/// One prompt to submit: text, or token ids inside the vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// The prompts (required), every token id checked against the vocabulary before any is submitted.
pub fn checked_prompts(prompts: Option<Prompts>, vocab: usize) -> ApiResult<Vec<PromptInput>> {
    let Some(Prompts(prompts)) = prompts else { return Err(ApiError::param("prompt", "`prompt` is required")) };
    prompts
        .into_iter()
        .map(|p| match p {
            Prompt::Text(t) => Ok(PromptInput::Text(t)),
            Prompt::Tokens(ids) => Ok(PromptInput::Tokens(ids.check("prompt", vocab)?)),
        })
        .collect()
}

pub async fn handler(State(st): State<AppState>, JsonBody(req): JsonBody<CompletionRequest>) -> ApiResult<Response> {
    let id = new_id("cmpl");
    let span = tracing::info_span!("completion", id = %id);
    run(st, req, id).instrument(span).await
}

/// A prompt's tokens and its text (for `echo`).
fn tokens_and_text(ready: &Ready, prompt: PromptInput) -> ApiResult<(Vec<u32>, String)> {
    match prompt {
        PromptInput::Text(t) => {
            offload::check_text_fits(ready, t.len(), "prompt")?;
            let ids = ready
                .tokenizer
                .encode(&t, true)
                .map_err(|e| ApiError::internal(format!("tokenizing the prompt failed: {e}")))?;
            if ids.is_empty() {
                return Err(ApiError::param("prompt", "the prompt is empty"));
            }
            Ok((ids, t))
        }
        PromptInput::Tokens(ids) => {
            let text = ready.tokenizer.decode(&ids, false);
            Ok((ids, text))
        }
    }
}

async fn run(st: AppState, req: CompletionRequest, id: String) -> ApiResult<Response> {
    let (ready, _admitted) = st.generator_for(req.params.model.as_deref()).await?;
    let CompletionRequest { params: p, options: o } = req;
    let mut g = params::resolve(&p, &ready.defaults, ready.engine.info().vocab_size, FieldNames::CHAT)?;
    let want = params::top_count("logprobs", o.logprobs)?;
    let token_ids = o.return_token_ids.unwrap_or(false);
    if token_ids && g.stream {
        return Err(ApiError::param("return_token_ids", "`return_token_ids` is not supported with `stream`"));
    }
    // The ids come with each token's log-probability.
    g.sampling.logprobs = if token_ids { want.or(Some(0)) } else { want };
    let echo = o.echo.unwrap_or(false);
    // `echo` with `logprobs`: the prompt's tokens are scored too (computed in full, no prompt-cache hit).
    let score_prompt = echo && want.is_some();
    if score_prompt {
        g.sampling.prompt_logprobs = want;
    }
    if o.suffix.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::param("suffix", "`suffix` (insertion) is not supported"));
    }
    if params::int_in("best_of", o.best_of, 1, params::MAX_N)?.is_some_and(|b| b as usize != g.n) {
        return Err(ApiError::param("best_of", "`best_of` other than `n` is not supported"));
    }
    let prompts = checked_prompts(o.prompt, ready.engine.info().vocab_size)?;
    let r = ready.clone();
    let (g, prepared) = offload::run(move || {
        let reqs = prompts
            .into_iter()
            .map(|p| {
                let (ids, text) = tokens_and_text(&r, p)?;
                Ok((g.engine_request(ids, &r)?, text))
            })
            .collect::<ApiResult<Vec<_>>>()?;
        Ok((g, reqs))
    })
    .await?;
    let (reqs, texts): (Vec<_>, Vec<_>) = prepared.into_iter().unzip();
    let prompt_tokens: Vec<usize> = reqs.iter().map(|r| r.prompt.len()).collect();
    let prompt_ids: Vec<Vec<u32>> =
        reqs.iter().map(|r| if score_prompt { r.prompt.clone() } else { Vec::new() }).collect();
    // Every prompt is queued, or none.
    let streams = ready.engine.submit_all(reqs).await.map_err(|e| g.submit_error(e))?;
    let mut jobs = Vec::with_capacity(streams.len());
    let mut echoes = Vec::with_capacity(streams.len() * g.n);
    for (((stream, prompt_tokens), text), ids) in streams.into_iter().zip(prompt_tokens).zip(texts).zip(prompt_ids) {
        tracing::info!(prompt_tokens, n = g.n, stream = g.stream, "accepted");
        jobs.push(Job { stream, prompt_tokens, n: g.n });
        for _ in 0..g.n {
            let text = if echo { text.clone() } else { String::new() };
            let ids = if score_prompt { ids.clone() } else { Vec::new() };
            echoes.push(Echo { chars: text.chars().count(), text, ids });
        }
    }
    let text = g.text_options(false);
    let meta = ResponseMeta { id, created: unix_now(), model: ready.model_id.clone() };
    if g.stream {
        let fmt = CompletionChunks { meta, echoes, include_usage: g.include_usage };
        let spec = StreamSpec { jobs, text, include_usage: g.include_usage, keepalive: st.cfg.keepalive };
        return Ok(sse::respond(ready.tokenizer.clone(), spec, fmt));
    }
    let tok = ready.tokenizer.clone();
    let (choices, usage) = collect(Generation::new(&tok, jobs, &text)).await?;
    let choices = choices
        .into_iter()
        .zip(echoes)
        .enumerate()
        .map(|(index, (c, echo))| {
            let logprobs = want.map(|_| {
                let mut lp = match &c.prompt {
                    Some(scores) => logprobs::prompt(&tok, &echo.ids, scores),
                    None => Default::default(),
                };
                lp.append(logprobs::completion(&tok, &c.logprobs, echo.chars));
                lp
            });
            CompletionChoice {
                index,
                logprobs,
                text: echo.text + &c.text,
                finish_reason: Some(c.finish_reason),
                token_ids: token_ids.then(|| c.logprobs.iter().map(|t| t.id).collect()),
            }
        })
        .collect();
    tracing::info!(completion_tokens = usage.completion_tokens, "done");
    Ok(Json(crate::wire::Response::new(&meta, OBJECT, choices, usage.into())).into_response())
}

/// What a choice echoes of its prompt: its text (`echo`; else empty) and, when the prompt is scored (`echo` with
/// `logprobs`), its token ids (else empty).
struct Echo {
    text: String,
    ids: Vec<u32>,
    /// Characters of the echoed text: where the generated text's offsets start.
    chars: usize,
}

/// `text_completion` stream chunks.
struct CompletionChunks {
    meta: ResponseMeta,
    /// Per choice: what it echoes. An echo is sent first, or with its prompt's scores when they are wanted.
    echoes: Vec<Echo>,
    include_usage: bool,
}

impl CompletionChunks {
    fn chunk(
        &self,
        index: usize,
        text: String,
        logprobs: Option<CompletionLogprobs>,
        finish_reason: Option<&'static str>,
    ) -> Chunk<'_, CompletionChoice> {
        Chunk::new(
            &self.meta,
            OBJECT,
            vec![CompletionChoice { index, text, logprobs, finish_reason, token_ids: None }],
            self.include_usage,
        )
    }
}

impl ChunkFormat for CompletionChunks {
    type Chunk<'a> = Chunk<'a, CompletionChoice>;

    fn start(&mut self) -> Vec<Self::Chunk<'_>> {
        let texts: Vec<(usize, String)> = (self.echoes.iter_mut().enumerate())
            .filter(|(_, e)| !e.text.is_empty() && e.ids.is_empty())
            .map(|(i, e)| (i, std::mem::take(&mut e.text)))
            .collect();
        texts.into_iter().map(|(i, text)| self.chunk(i, text, None, None)).collect()
    }

    fn event(&mut self, tok: &Tokenizer, ev: Event) -> Vec<Self::Chunk<'_>> {
        match ev {
            Event::Token { choice, text, logprob } => {
                if text.is_empty() && logprob.is_none() {
                    return Vec::new();
                }
                let shift = self.echoes.get(choice).map_or(0, |e| e.chars);
                let lp = logprob.map(|l| logprobs::completion(tok, std::slice::from_ref(&l), shift));
                vec![self.chunk(choice, text, lp, None)]
            }
            Event::Finish { choice, text, reason, .. } => vec![self.chunk(choice, text, None, Some(reason))],
            Event::Prompt { choices, scores } => {
                let mut out = Vec::new();
                for i in choices {
                    let Some(e) = self.echoes.get_mut(i) else { continue };
                    let (text, ids) = (std::mem::take(&mut e.text), std::mem::take(&mut e.ids));
                    out.push((i, text, logprobs::prompt(tok, &ids, &scores)));
                }
                out.into_iter().map(|(i, text, lp)| self.chunk(i, text, Some(lp), None)).collect()
            }
            Event::Error(_) => Vec::new(),
        }
    }

    fn usage(&self, u: UsageTotals) -> Vec<Self::Chunk<'_>> {
        vec![Chunk::usage(&self.meta, OBJECT, u.into())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RequestBody;
    use serde_json::{json, Value};

    fn prompts(v: Value) -> ApiResult<Vec<PromptInput>> {
        let r = CompletionRequest::from_body(&json!({ "prompt": v }))?;
        checked_prompts(r.options.prompt, 100)
    }

    fn message(v: Value) -> String {
        prompts(v).map(|_| "ok".into()).unwrap_or_else(|e| e.message)
    }

    fn ids(v: &[u32]) -> PromptInput {
        PromptInput::Tokens(v.to_vec())
    }

    #[test]
    fn prompt_shapes() {
        assert_eq!(prompts(json!("hi")).unwrap(), vec![PromptInput::Text("hi".into())]);
        assert_eq!(prompts(json!(["a", "b"])).unwrap().len(), 2);
        assert_eq!(prompts(json!([1, 2, 3])).unwrap(), vec![ids(&[1, 2, 3])]);
        assert_eq!(prompts(json!([[1], [2, 3]])).unwrap(), vec![ids(&[1]), ids(&[2, 3])]);
        for bad in [
            json!(null),
            json!(5),
            json!([]),
            json!(["a", 1]),
            json!([1, "a"]),
            json!([[1], []]),
            json!([[1], 2]),
            json!([200]),
            json!([-1]),
            json!([{}]),
        ] {
            let e = prompts(bad.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("prompt"), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn prompt_messages_are_exact() {
        assert_eq!(message(json!(null)), "`prompt` is required");
        assert_eq!(message(json!(5)), "`prompt` must be a string, a list of strings, or token ids, got a number");
        assert_eq!(message(json!([])), "`prompt` must not be an empty list");
        assert_eq!(message(json!(["a", 1])), "`prompt` mixes strings with a number");
        assert_eq!(message(json!([1, "a"])), "`prompt` must hold non-negative integer token ids, found a string");
        assert_eq!(message(json!([[1], []])), "`prompt` holds an empty token list");
        assert_eq!(message(json!([[1], 2])), "`prompt` mixes token lists with a number");
        assert_eq!(message(json!([200])), "token id 200 in `prompt` is outside the vocabulary (size 100)");
        assert_eq!(
            message(json!([{}])),
            "`prompt` list items must be strings, token ids or token lists, got an object"
        );
        assert_eq!(message(json!(vec!["a"; 65])), "`prompt` may hold at most 64 prompts, got 65");
    }
}
