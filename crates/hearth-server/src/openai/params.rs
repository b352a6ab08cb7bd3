//! The generation parameters chat and completions share: sampling, limits, stops, `n`, streaming. Each wrong
//! type or range is a 400 naming the parameter; unknown fields are ignored.

use crate::body::{type_name, Params};
use crate::config::SamplingDefaults;
use crate::error::{ApiError, ApiResult};
use crate::state::Ready;
use hearth_engine::engine::EngineRequest;
use hearth_engine::sampling::params::MAX_TOP_LOGPROBS;
use hearth_engine::sampling::SamplingParams;
use serde_json::Value;

/// Most stop strings per request (OpenAI allows 4; agents often send more).
pub const MAX_STOPS: usize = 16;
/// Most choices per prompt (the engine's limit).
pub const MAX_N: i64 = 16;
/// Default completion length when neither the request nor `--max-tokens` sets one.
pub const DEFAULT_MAX_TOKENS: usize = 2048;

#[derive(Debug, Clone, PartialEq)]
pub struct GenParams {
    pub sampling: SamplingParams,
    /// As the request set it; `None` = the server default.
    pub max_tokens: Option<usize>,
    pub stops: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub n: usize,
    pub stream: bool,
    pub include_usage: bool,
    pub ignore_eos: bool,
    pub skip_special: bool,
}

/// Parse the shared fields. `max_tokens_fields` lists the names a length limit may come under, first wins.
pub fn parse(p: Params, d: &SamplingDefaults, vocab: usize, max_tokens_fields: &[&str]) -> ApiResult<GenParams> {
    let mut s = SamplingParams {
        temperature: d.temperature,
        top_p: d.top_p,
        top_k: d.top_k,
        min_p: d.min_p,
        repetition_penalty: d.repetition_penalty,
        ..SamplingParams::default()
    };
    if let Some(t) = p.f32_in("temperature", 0.0, f64::MAX)? {
        s.temperature = t;
    }
    if let Some(t) = p.f32_in("top_p", 0.0, 1.0)? {
        if t <= 0.0 {
            return Err(ApiError::param("top_p", "`top_p` must be greater than 0 and at most 1"));
        }
        s.top_p = t;
    }
    // vLLM spells "off" -1; 0 is off too.
    if let Some(k) = p.int_in("top_k", -1, i64::MAX)? {
        s.top_k = k.max(0) as usize;
    }
    if let Some(m) = p.f32_in("min_p", 0.0, 1.0)? {
        s.min_p = m;
    }
    if let Some(x) = p.f32_in("presence_penalty", -2.0, 2.0)? {
        s.presence_penalty = x;
    }
    if let Some(x) = p.f32_in("frequency_penalty", -2.0, 2.0)? {
        s.frequency_penalty = x;
    }
    if let Some(r) = p.f32_in("repetition_penalty", 0.0, f64::MAX)? {
        if r <= 0.0 {
            return Err(ApiError::param("repetition_penalty", "`repetition_penalty` must be greater than 0 (1 = off)"));
        }
        s.repetition_penalty = r;
    }
    if let Some(x) = p.f32_in("xtc_probability", 0.0, 1.0)? {
        s.xtc_probability = x;
    }
    if let Some(x) = p.f32_in("xtc_threshold", 0.0, 1.0)? {
        s.xtc_threshold = x;
    }
    s.seed = p.i64("seed")?.map(|x| x as u64);
    s.logit_bias = logit_bias(p, vocab)?;

    let mut max_tokens = None;
    for name in max_tokens_fields {
        if let Some(m) = p.int_in(name, 1, i64::MAX)? {
            max_tokens = Some(m as usize);
            break;
        }
    }
    let n = p.int_in("n", 1, MAX_N)?.unwrap_or(1) as usize;
    let stream = p.bool("stream")?.unwrap_or(false);
    let include_usage = match p.object("stream_options")? {
        Some(o) => Params(o)
            .bool("include_usage")
            .map_err(|_| ApiError::param("stream_options", "`stream_options.include_usage` must be a boolean"))?
            .unwrap_or(false),
        None => false,
    };
    if let Some(rf) = p.object("response_format")? {
        match rf.get("type").and_then(Value::as_str) {
            None | Some("text") => {}
            Some(other) => return Err(ApiError::param(
                "response_format",
                format!(
                    "`response_format` type `{other}` is not supported yet (constrained decoding is not implemented); use `text`"
                ),
            )),
        }
    }
    Ok(GenParams {
        sampling: s,
        max_tokens,
        stops: stops(p)?,
        stop_token_ids: p.token_ids("stop_token_ids", vocab)?.unwrap_or_default(),
        n,
        stream,
        include_usage,
        ignore_eos: p.bool("ignore_eos")?.unwrap_or(false),
        skip_special: p.bool("skip_special_tokens")?.unwrap_or(true),
    })
}

/// `stop`: a string or a list of strings.
fn stops(p: Params) -> ApiResult<Vec<String>> {
    let list: Vec<String> = match p.get("stop") {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::param("stop", format!("`stop` must hold strings, found {}", type_name(v))))
            })
            .collect::<ApiResult<_>>()?,
        Some(v) => {
            return Err(ApiError::param("stop", format!("`stop` must be a string or a list of strings, got {}", type_name(v))))
        }
    };
    if list.len() > MAX_STOPS {
        return Err(ApiError::param("stop", format!("`stop` may hold at most {MAX_STOPS} strings, got {}", list.len())));
    }
    if list.iter().any(String::is_empty) {
        return Err(ApiError::param("stop", "`stop` strings must not be empty"));
    }
    Ok(list)
}

/// `logit_bias`: `{"token id": bias}` with bias in [-100, 100].
fn logit_bias(p: Params, vocab: usize) -> ApiResult<Vec<(u32, f32)>> {
    let Some(m) = p.object("logit_bias")? else { return Ok(Vec::new()) };
    let bad = |m: String| ApiError::param("logit_bias", m);
    m.iter()
        .map(|(k, v)| {
            let id: u32 = k.trim().parse().map_err(|_| bad(format!("`logit_bias` keys must be token ids, got {k:?}")))?;
            if id as usize >= vocab {
                return Err(bad(format!("`logit_bias` token id {id} is outside the vocabulary (size {vocab})")));
            }
            match v.as_f64() {
                Some(b) if (-100.0..=100.0).contains(&b) => Ok((id, b as f32)),
                Some(b) => Err(bad(format!("`logit_bias` value for token {id} must be between -100 and 100, got {b}"))),
                None => Err(bad(format!("`logit_bias` value for token {id} must be a number, got {}", type_name(v)))),
            }
        })
        .collect()
}

/// `top_logprobs`-style count: 0..=20.
pub fn top_count(p: Params, name: &str) -> ApiResult<Option<usize>> {
    Ok(p.int_in(name, 0, MAX_TOP_LOGPROBS as i64)?.map(|k| k as usize))
}

impl GenParams {
    /// The engine request for one tokenized prompt. Without an explicit `max_tokens`, the default is capped to
    /// what is left of the context (and of the KV cache), so a long prompt still gets an answer.
    pub fn engine_request(&self, prompt: Vec<u32>, ready: &Ready) -> ApiResult<EngineRequest> {
        let limit = ready.max_request_tokens();
        if prompt.len() >= limit {
            return Err(ApiError::bad_request(format!(
                "the prompt has {} tokens; this server can hold at most {limit} tokens per request (model context {}, KV cache {})",
                prompt.len(),
                ready.engine.info.max_positions,
                ready.engine.info.kv_capacity_tokens
            ))
            .with_code("context_length_exceeded"));
        }
        let room = limit - prompt.len();
        let max_tokens = match self.max_tokens {
            Some(m) => m,
            None => ready.defaults.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).min(room).max(1),
        };
        Ok(EngineRequest {
            prompt,
            sampling: self.sampling.clone(),
            max_tokens,
            stop_token_ids: self.stop_token_ids.clone(),
            ignore_eos: self.ignore_eos,
            n: self.n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(v: Value) -> ApiResult<GenParams> {
        let m = v.as_object().cloned().unwrap_or_default();
        parse(Params(&m), &SamplingDefaults::default(), 100, &["max_completion_tokens", "max_tokens"])
    }

    fn param_of(v: Value) -> String {
        parse_json(v).map(|_| "ok".to_string()).unwrap_or_else(|e| e.param.unwrap_or_default())
    }

    #[test]
    fn defaults_are_greedy_and_unknown_fields_ignored() {
        let g = parse_json(json!({"model": "x", "whatever": [1], "user": "u", "temperature": null})).unwrap();
        assert_eq!(g.sampling, SamplingParams::default());
        assert_eq!((g.n, g.stream, g.max_tokens, g.skip_special), (1, false, None, true));
    }

    #[test]
    fn fields_parse() {
        let g = parse_json(json!({
            "temperature": 0.7, "top_p": 0.9, "top_k": -1, "min_p": 0.05, "seed": 42, "n": 3,
            "max_tokens": 10, "max_completion_tokens": 7, "stop": "\n", "stop_token_ids": [5],
            "logit_bias": {"12": -100, "3": 5.5}, "stream": true, "stream_options": {"include_usage": true},
            "presence_penalty": 1.0, "frequency_penalty": -1.0, "repetition_penalty": 1.1, "ignore_eos": true,
        }))
        .unwrap();
        assert_eq!(g.sampling.temperature, 0.7);
        assert_eq!(g.sampling.top_k, 0);
        assert_eq!(g.sampling.seed, Some(42));
        assert_eq!(g.max_tokens, Some(7), "max_completion_tokens wins");
        assert_eq!(g.stops, vec!["\n".to_string()]);
        assert_eq!(g.stop_token_ids, vec![5]);
        assert_eq!(g.sampling.logit_bias.len(), 2);
        assert!(g.stream && g.include_usage && g.ignore_eos);
        assert_eq!(g.n, 3);
    }

    #[test]
    fn bad_types_and_ranges_name_the_param() {
        assert_eq!(param_of(json!({"temperature": "hot"})), "temperature");
        assert_eq!(param_of(json!({"temperature": -0.1})), "temperature");
        assert_eq!(param_of(json!({"top_p": 0})), "top_p");
        assert_eq!(param_of(json!({"top_p": 1.5})), "top_p");
        assert_eq!(param_of(json!({"top_k": 1.5})), "top_k");
        assert_eq!(param_of(json!({"min_p": 2})), "min_p");
        assert_eq!(param_of(json!({"presence_penalty": 3})), "presence_penalty");
        assert_eq!(param_of(json!({"repetition_penalty": 0})), "repetition_penalty");
        assert_eq!(param_of(json!({"n": 0})), "n");
        assert_eq!(param_of(json!({"n": 17})), "n");
        assert_eq!(param_of(json!({"max_tokens": 0})), "max_tokens");
        assert_eq!(param_of(json!({"max_tokens": "5"})), "max_tokens");
        assert_eq!(param_of(json!({"stop": 5})), "stop");
        assert_eq!(param_of(json!({"stop": [""]})), "stop");
        assert_eq!(param_of(json!({"stop": vec!["a"; 17]})), "stop");
        assert_eq!(param_of(json!({"stop_token_ids": [100]})), "stop_token_ids");
        assert_eq!(param_of(json!({"logit_bias": {"abc": 1}})), "logit_bias");
        assert_eq!(param_of(json!({"logit_bias": {"100": 1}})), "logit_bias");
        assert_eq!(param_of(json!({"logit_bias": {"1": 101}})), "logit_bias");
        assert_eq!(param_of(json!({"stream": "yes"})), "stream");
        assert_eq!(param_of(json!({"stream_options": {"include_usage": 1}})), "stream_options");
        assert_eq!(param_of(json!({"response_format": {"type": "json_object"}})), "response_format");
        assert_eq!(param_of(json!({"response_format": {"type": "text"}})), "ok");
    }
}
