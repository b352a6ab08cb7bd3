//! `POST /v1/chat/completions`.

use super::{logprobs, messages, params, usage_json, ResponseMeta};
use crate::body::{JsonObject, Params};
use crate::error::{ApiError, ApiResult};
use crate::generation::{collect, Event, Generation, Job, TextOptions, UsageTotals};
use crate::sse::{self, ChunkFormat, StreamSpec};
use crate::state::{new_id, unix_now, AppState};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use hearth_engine::tokenizer::Tokenizer;
use serde_json::{json, Value};
use tracing::Instrument;

pub async fn handler(State(st): State<AppState>, JsonObject(body): JsonObject) -> ApiResult<Response> {
    let id = new_id("chatcmpl");
    let span = tracing::info_span!("chat", id = %id);
    run(st, body, id).instrument(span).await
}

async fn run(st: AppState, body: serde_json::Map<String, Value>, id: String) -> ApiResult<Response> {
    let ready = st.ready()?;
    let p = Params(&body);
    let mut g = params::parse(p, &ready.defaults, ready.engine.info.vocab_size, &["max_completion_tokens", "max_tokens"])?;
    let want_logprobs = p.bool("logprobs")?.unwrap_or(false);
    let top = params::top_count(p, "top_logprobs")?;
    if top.is_some_and(|k| k > 0) && !want_logprobs {
        return Err(ApiError::param("top_logprobs", "`top_logprobs` needs `logprobs: true`"));
    }
    if want_logprobs {
        g.sampling.logprobs = Some(top.unwrap_or(0));
    }
    let prompt = messages::prompt_ids(&ready, p)?;
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
    let choices: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": if want_logprobs { logprobs::chat(&tok, &c.logprobs) } else { Value::Null },
                "finish_reason": c.finish_reason,
            })
        })
        .collect();
    tracing::info!(completion_tokens = usage.completion_tokens, "done");
    let mut v = meta.envelope("chat.completion", Value::Array(choices), Some(usage_json(usage)));
    v["system_fingerprint"] = Value::Null;
    Ok(axum::Json(v).into_response())
}

/// `chat.completion.chunk` objects.
struct ChatChunks {
    meta: ResponseMeta,
    n: usize,
    include_usage: bool,
}

impl ChatChunks {
    fn chunk(&self, choice: Value) -> Value {
        self.meta.envelope("chat.completion.chunk", json!([choice]), self.include_usage.then_some(Value::Null))
    }
}

impl ChunkFormat for ChatChunks {
    fn start(&mut self) -> Vec<Value> {
        (0..self.n)
            .map(|i| {
                self.chunk(
                    json!({"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}),
                )
            })
            .collect()
    }

    fn event(&mut self, tok: &Tokenizer, ev: Event) -> Vec<Value> {
        match ev {
            Event::Token { choice, text, logprob } => {
                if text.is_empty() && logprob.is_none() {
                    return Vec::new();
                }
                let lp = match logprob {
                    Some(l) => logprobs::chat(tok, std::slice::from_ref(&l)),
                    None => Value::Null,
                };
                vec![self.chunk(json!({"index": choice, "delta": {"content": text}, "logprobs": lp, "finish_reason": null}))]
            }
            Event::Finish { choice, text, reason } => {
                let mut out = Vec::new();
                if !text.is_empty() {
                    out.push(
                        self.chunk(json!({"index": choice, "delta": {"content": text}, "logprobs": null, "finish_reason": null})),
                    );
                }
                out.push(self.chunk(json!({"index": choice, "delta": {}, "logprobs": null, "finish_reason": reason})));
                out
            }
            Event::Error(_) => Vec::new(),
        }
    }

    fn usage(&self, u: UsageTotals) -> Value {
        self.meta.envelope("chat.completion.chunk", json!([]), Some(usage_json(u)))
    }
}
