//! From a [`ChatRequest`] to the engine: [`prepare`] checks it and builds the engine request; [`submit`] does that on
//! the blocking pool and queues the request; [`Submitted`] is what an API renders, streamed or whole.

use super::constraint::{Requested, Source};
use super::params::{self, GenParams};
use super::tools::{ToolChoice, Tools};
use super::{images, offload, template, ChatRequest};
use crate::error::{ApiError, ApiResult};
use crate::model::Ready;
use crate::output::answer::AnswerShape;
use crate::output::generation::{collect, ChoiceResult, Generation, Job, TextOptions, UsageTotals};
use crate::output::reasoning;
use crate::output::sse::{self, ChunkFormat, StreamSpec};
use axum::response::Response;
use hearth_engine::engine::EngineRequest;
use hearth_engine::sampling::grammar::ConstraintSpec;
use std::sync::Arc;
use std::time::Duration;

/// A chat request translated onto the engine, and how its answers split.
pub struct Prepared {
    pub req: EngineRequest,
    pub g: GenParams,
    pub shape: AnswerShape,
    pub want_logprobs: bool,
}

/// Check a chat request and build its engine request: sampling, the template's prompt with the tools, the tools'
/// grammar or the request's own constraint, and the reasoning split.
pub fn prepare(ready: &Ready, req: ChatRequest) -> ApiResult<Prepared> {
    prepare_with(ready, req, Vec::new())
}

/// [`prepare`] with the conversation's images ([`images::fetch_all`], in part order).
pub fn prepare_with(ready: &Ready, req: ChatRequest, fetched: Vec<images::FetchedImage>) -> ApiResult<Prepared> {
    let ChatRequest { conversation, params: p, fields, logprobs: want_logprobs, top_logprobs } = req;
    offload::check_text_fits(ready, template::text_bytes(&conversation), fields.messages)?;
    let mut g = params::resolve(&p, &ready.defaults, ready.engine.info().vocab_size, fields)?;
    let top = params::top_count("top_logprobs", top_logprobs)?;
    if top.is_some_and(|k| k > 0) && !want_logprobs {
        return Err(ApiError::param("top_logprobs", "`top_logprobs` needs `logprobs: true`"));
    }
    if want_logprobs {
        g.sampling.logprobs = Some(top.unwrap_or(0));
    }
    let source = template::source(ready);
    let tools = Tools::resolve(&conversation, source, &fields)?;
    // The tools' grammar; with `auto` a request's own constraint wins (its answer is then parsed for calls only).
    let auto = tools.as_ref().is_some_and(|t| t.choice == ToolChoice::Auto);
    if let Some(spec) =
        tools.as_ref().and_then(|t| t.constraint(&ready.tokenizer)).filter(|_| !(auto && g.constraint.is_some()))
    {
        if let Some(other) = &g.constraint {
            return Err(ApiError::param(
                "tool_choice",
                format!("`tool_choice` and `{}` both constrain the output; send one of them", other.param()),
            ));
        }
        g.constraint = Some(Requested { spec, source: Source::Tools });
    }
    let vision = ready.images.vision.as_deref().filter(|_| !fetched.is_empty());
    let (prompt_text, mut prompt) = template::prompt_ids(ready, &conversation, tools.as_ref(), vision)?;
    let mut media = None;
    if let (Some(spec), false) = (&ready.images.vision, fetched.is_empty()) {
        let prepared = images::prepare(spec, &ready.images.limits, fetched)?;
        let (ids, m) = images::splice(spec, &prompt, prepared)?;
        (prompt, media) = (ids, Some(m));
    }
    // A harmony template (gpt-oss): the answer's channels are its parts, read from its special tokens.
    let harmony = crate::output::harmony::template_speaks(source);
    if harmony {
        g.skip_special = false;
        // a call or a return ends the answer (a GGUF names only one end-of-sequence token)
        for end in ["<|call|>", "<|return|>"] {
            if let Some(id) = ready.tokenizer.control_id(end) {
                if !g.stop_token_ids.contains(&id) {
                    g.stop_token_ids.push(id);
                }
            }
        }
        // the tools' grammar is written in harmony's channels; a constraint on the whole answer would break them
        if let Some(c) = g.constraint.as_ref().filter(|c| !matches!(c.source, Source::Tools)) {
            let f = c.param();
            return Err(ApiError::param(
                f,
                format!(
                    "this model answers in the harmony format (gpt-oss), whose channels a constraint from the \
                     answer's first token would break: `{f}` is not supported for it"
                ),
            ));
        }
    }
    // A template that thinks: the answer's `<think>...</think>` part becomes the reasoning.
    let thinks = !harmony && reasoning::template_thinks(source);
    let opened = thinks && reasoning::prompt_opens_thought(&prompt_text);
    // A model that may open its own thought (the prompt neither opened nor closed one: Qwen3 with thinking on) may
    // think first: the constraint applies after `</think>`, or from the first token when it does not think.
    if thinks && !opened && !reasoning::prompt_closes_thought(&prompt_text) {
        if let Some(r) = g.constraint.as_mut() {
            r.spec = ConstraintSpec::AfterOptionalThought(Box::new(r.spec.clone()));
        }
    }
    let mut req = g.engine_request(prompt, ready)?;
    req.media = media;
    // A thought the prompt opened is free text: the constraint (a schema, a tool grammar) applies after it.
    if opened {
        if let Some(c) = req.constraint.as_mut() {
            c.after_marker = Some(reasoning::END.to_string());
        }
    }
    let shape = AnswerShape { thinks, opened, tools: tools.as_ref().map(Tools::offered), harmony };
    Ok(Prepared { req, g, shape, want_logprobs })
}

/// A chat request queued in the engine: its choices, how their text is produced and split, and what the request
/// asked of the answer.
pub struct Submitted {
    pub jobs: Vec<Job>,
    pub text: TextOptions,
    pub shape: AnswerShape,
    pub prompt_tokens: usize,
    /// Choices.
    pub n: usize,
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    pub want_logprobs: bool,
}

/// Prepare `req` on the blocking pool and queue it in `ready`'s engine.
pub async fn submit(ready: &Arc<Ready>, req: ChatRequest) -> ApiResult<Submitted> {
    // Images are fetched first (a text model refuses them here), then decoded with the rest of the preparation.
    let fetched = images::fetch_all(&ready.images, &ready.model_id, &req.conversation).await?;
    let r = ready.clone();
    let Prepared { req, g, shape, want_logprobs } = offload::run(move || prepare_with(&r, req, fetched)).await?;
    let prompt_tokens = req.prompt.len();
    tracing::info!(prompt_tokens, max_tokens = req.max_tokens, n = g.n, stream = g.stream, "accepted");
    let stream = ready.engine.submit(req).await.map_err(|e| g.submit_error(e))?;
    Ok(Submitted {
        jobs: vec![Job { stream, prompt_tokens, n: g.n }],
        text: g.text_options(true),
        shape,
        prompt_tokens,
        n: g.n,
        stream: g.stream,
        include_usage: g.include_usage,
        want_logprobs,
    })
}

impl Submitted {
    /// Stream the choices as `fmt`'s events.
    pub fn into_sse<F: ChunkFormat>(self, ready: &Ready, keepalive: Duration, fmt: F) -> Response {
        let spec = StreamSpec { jobs: self.jobs, text: self.text, include_usage: self.include_usage, keepalive };
        sse::respond(ready.tokenizer.clone(), spec, fmt)
    }

    /// Every choice, whole, and the usage.
    pub async fn collect(self, ready: &Ready) -> ApiResult<(Vec<ChoiceResult>, UsageTotals)> {
        let tok = ready.tokenizer.clone();
        let (choices, usage) = collect(Generation::new(&tok, self.jobs, &self.text)).await?;
        tracing::info!(completion_tokens = usage.completion_tokens, "done");
        Ok((choices, usage))
    }

    /// The one choice (of a request with `n` = 1), whole, and the usage.
    pub async fn answer(self, ready: &Ready) -> ApiResult<(ChoiceResult, UsageTotals)> {
        let (choices, usage) = self.collect(ready).await?;
        let c = choices.into_iter().next().ok_or_else(|| ApiError::internal("the engine returned no answer"))?;
        Ok((c, usage))
    }
}
