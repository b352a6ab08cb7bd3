//! `POST /v1/completions`: `prompt` is a string, a list of strings, a list of token ids, or a list of lists of
//! token ids. Each prompt is one engine request with `n` choices; choice `i` of prompt `p` has index `p*n + i`.

use super::{logprobs, params, usage_json, ResponseMeta};
use crate::body::{token_ids, type_name, JsonObject, Params};
use crate::error::{ApiError, ApiResult};
use crate::generation::{collect, Event, Generation, Job, TextOptions, UsageTotals};
use crate::sse::{self, ChunkFormat, StreamSpec};
use crate::state::{new_id, unix_now, AppState, Ready};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use hearth_engine::tokenizer::Tokenizer;
use serde_json::{json, Value};
use tracing::Instrument;

/// Most prompts in one request.
pub const MAX_PROMPTS: usize = 64;

/// One prompt: its text (for `echo`) and tokens.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// Parse `prompt` into one or more prompts.
pub fn parse_prompts(p: Params, vocab: usize) -> ApiResult<Vec<PromptInput>> {
    let bad = |m: String| ApiError::param("prompt", m);
    let prompts = match p.get("prompt") {
        None => return Err(bad("`prompt` is required".into())),
        Some(Value::String(s)) => vec![PromptInput::Text(s.clone())],
        Some(Value::Array(items)) if items.is_empty() => return Err(bad("`prompt` must not be an empty list".into())),
        Some(Value::Array(items)) => match &items[0] {
            Value::String(_) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(|s| PromptInput::Text(s.to_string()))
                        .ok_or_else(|| bad(format!("`prompt` mixes strings with {}", type_name(v))))
                })
                .collect::<ApiResult<_>>()?,
            Value::Number(_) => vec![PromptInput::Tokens(token_ids("prompt", items, vocab)?)],
            Value::Array(_) => items
                .iter()
                .map(|v| match v.as_array() {
                    Some(a) if !a.is_empty() => token_ids("prompt", a, vocab).map(PromptInput::Tokens),
                    Some(_) => Err(bad("`prompt` holds an empty token list".into())),
                    None => Err(bad(format!("`prompt` mixes token lists with {}", type_name(v)))),
                })
                .collect::<ApiResult<_>>()?,
            other => {
                return Err(bad(format!(
                    "`prompt` list items must be strings, token ids or token lists, got {}",
                    type_name(other)
                )))
            }
        },
        Some(v) => return Err(bad(format!("`prompt` must be a string, a list of strings, or token ids, got {}", type_name(v)))),
    };
    if prompts.len() > MAX_PROMPTS {
        return Err(bad(format!("`prompt` may hold at most {MAX_PROMPTS} prompts, got {}", prompts.len())));
    }
    Ok(prompts)
}

pub async fn handler(State(st): State<AppState>, JsonObject(body): JsonObject) -> ApiResult<Response> {
    let id = new_id("cmpl");
    let span = tracing::info_span!("completion", id = %id);
    run(st, body, id).instrument(span).await
}

fn tokens_and_text(ready: &Ready, prompt: PromptInput) -> ApiResult<(Vec<u32>, String)> {
    match prompt {
        PromptInput::Text(t) => {
            let ids =
                ready.tokenizer.encode(&t, true).map_err(|e| ApiError::internal(format!("tokenizing the prompt failed: {e}")))?;
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

async fn run(st: AppState, body: serde_json::Map<String, Value>, id: String) -> ApiResult<Response> {
    let ready = st.ready()?;
    let p = Params(&body);
    let mut g = params::parse(p, &ready.defaults, ready.engine.info.vocab_size, &["max_tokens"])?;
    let want = params::top_count(p, "logprobs")?;
    g.sampling.logprobs = want;
    let echo = p.bool("echo")?.unwrap_or(false);
    if echo && want.is_some() {
        return Err(ApiError::param(
            "echo",
            "`echo` with `logprobs` is not supported (prompt log-probabilities are not computed)",
        ));
    }
    if p.str("suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::param("suffix", "`suffix` (insertion) is not supported"));
    }
    if p.int_in("best_of", 1, params::MAX_N)?.is_some_and(|b| b as usize != g.n) {
        return Err(ApiError::param("best_of", "`best_of` other than `n` is not supported"));
    }
    let prompts = parse_prompts(p, ready.engine.info.vocab_size)?;
    let mut jobs = Vec::with_capacity(prompts.len());
    let mut echoes = Vec::with_capacity(prompts.len());
    for prompt in prompts {
        let (ids, text) = tokens_and_text(&ready, prompt)?;
        let req = g.engine_request(ids, &ready)?;
        let prompt_tokens = req.prompt.len();
        tracing::info!(prompt_tokens, max_tokens = req.max_tokens, n = g.n, stream = g.stream, "accepted");
        // On an error here the streams already submitted are dropped, which cancels them.
        jobs.push(Job { stream: ready.engine.submit(req)?, prompt_tokens, n: g.n });
        for _ in 0..g.n {
            echoes.push(if echo { text.clone() } else { String::new() });
        }
    }
    let text = TextOptions { stops: g.stops.clone(), trim_leading_space: false, skip_special: g.skip_special };
    let meta = ResponseMeta { id, created: unix_now(), model: ready.model_id.clone() };
    if g.stream {
        let fmt = CompletionChunks { meta, echoes, include_usage: g.include_usage };
        let spec = StreamSpec { jobs, text, include_usage: g.include_usage, keepalive: st.cfg.keepalive };
        return Ok(sse::respond(ready.tokenizer.clone(), spec, fmt));
    }
    let tok = ready.tokenizer.clone();
    let (choices, usage) = collect(Generation::new(&tok, jobs, &text)).await.map_err(ApiError::internal)?;
    let choices: Vec<Value> = choices
        .iter()
        .zip(&echoes)
        .enumerate()
        .map(|(i, (c, e))| {
            json!({
                "index": i,
                "text": format!("{e}{}", c.text),
                "logprobs": if want.is_some() { logprobs::completion(&tok, &c.logprobs, 0) } else { Value::Null },
                "finish_reason": c.finish_reason,
            })
        })
        .collect();
    tracing::info!(completion_tokens = usage.completion_tokens, "done");
    let mut v = meta.envelope("text_completion", Value::Array(choices), Some(usage_json(usage)));
    v["system_fingerprint"] = Value::Null;
    Ok(axum::Json(v).into_response())
}

/// `text_completion` stream chunks.
struct CompletionChunks {
    meta: ResponseMeta,
    /// Per choice: the prompt text to send first (`echo`), else empty.
    echoes: Vec<String>,
    include_usage: bool,
}

impl CompletionChunks {
    fn chunk(&self, index: usize, text: String, logprobs: Value, finish: Value) -> Value {
        let choice = json!({"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish});
        self.meta.envelope("text_completion", json!([choice]), self.include_usage.then_some(Value::Null))
    }
}

impl ChunkFormat for CompletionChunks {
    fn start(&mut self) -> Vec<Value> {
        let echoes = std::mem::take(&mut self.echoes);
        echoes
            .into_iter()
            .enumerate()
            .filter(|(_, e)| !e.is_empty())
            .map(|(i, e)| self.chunk(i, e, Value::Null, Value::Null))
            .collect()
    }

    fn event(&mut self, tok: &Tokenizer, ev: Event) -> Vec<Value> {
        match ev {
            Event::Token { choice, text, logprob } => {
                if text.is_empty() && logprob.is_none() {
                    return Vec::new();
                }
                let lp = match logprob {
                    Some(l) => logprobs::completion(tok, std::slice::from_ref(&l), 0),
                    None => Value::Null,
                };
                vec![self.chunk(choice, text, lp, Value::Null)]
            }
            Event::Finish { choice, text, reason } => vec![self.chunk(choice, text, Value::Null, json!(reason))],
            Event::Error(_) => Vec::new(),
        }
    }

    fn usage(&self, u: UsageTotals) -> Value {
        self.meta.envelope("text_completion", json!([]), Some(usage_json(u)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompts(v: Value) -> ApiResult<Vec<PromptInput>> {
        let m = json!({ "prompt": v });
        parse_prompts(Params(m.as_object().unwrap_or(&serde_json::Map::new())), 100)
    }

    #[test]
    fn prompt_shapes() {
        assert_eq!(prompts(json!("hi")).unwrap(), vec![PromptInput::Text("hi".into())]);
        assert_eq!(prompts(json!(["a", "b"])).unwrap().len(), 2);
        assert_eq!(prompts(json!([1, 2, 3])).unwrap(), vec![PromptInput::Tokens(vec![1, 2, 3])]);
        assert_eq!(prompts(json!([[1], [2, 3]])).unwrap(), vec![PromptInput::Tokens(vec![1]), PromptInput::Tokens(vec![2, 3])]);
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
}
