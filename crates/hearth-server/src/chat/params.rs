//! The generation parameters chat and completions share, checked against their ranges and the model's vocabulary
//! and resolved against the server's defaults. Each value out of range is a 400 naming the parameter. (Their JSON
//! shapes were checked when the body was deserialized: `wire::common::GenerationParams`.)

use super::constraint::{self, Requested, Source};
use super::request::FieldNames;
use crate::config::SamplingDefaults;
use crate::error::{ApiError, ApiResult};
use crate::model::Ready;
use crate::output::generation::TextOptions;
use crate::wire::common::Prediction;
use crate::wire::GenerationParams;
use hearth_engine::engine::{EngineRequest, SubmitError};
use hearth_engine::sampling::grammar::ConstraintSource;
use hearth_engine::sampling::params::MAX_TOP_LOGPROBS;
use hearth_engine::sampling::SamplingParams;
use hearth_engine::speculative::SpecRequest;
use hearth_engine::types::MAX_CHOICES;

/// Most choices per prompt: the engine's limit, as request integers are checked.
pub const MAX_N: i64 = MAX_CHOICES as i64;
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
    /// The grammar the output follows, and the field that asked for it.
    pub constraint: Option<Requested>,
    /// `prediction` (a draft for speculative decoding: text, or token ids checked against the vocabulary), and
    /// `speculative: false`.
    pub prediction: Option<Prediction>,
    pub speculative: bool,
    /// How the request's API names the fields, for the errors found later (at submit).
    pub fields: FieldNames,
}

/// A number within `[lo, hi]` (`hi = f64::MAX`: no upper bound).
pub fn number_in(name: &str, x: Option<f64>, lo: f64, hi: f64) -> ApiResult<Option<f32>> {
    match x {
        None => Ok(None),
        Some(x) if (lo..=hi).contains(&x) => Ok(Some(x as f32)),
        Some(x) if hi == f64::MAX => Err(ApiError::param(name, format!("`{name}` must be at least {lo}, got {x}"))),
        Some(x) => Err(ApiError::param(name, format!("`{name}` must be between {lo} and {hi}, got {x}"))),
    }
}

/// An integer within `[lo, hi]` (`hi = i64::MAX`: no upper bound).
pub fn int_in(name: &str, x: Option<i64>, lo: i64, hi: i64) -> ApiResult<Option<i64>> {
    match x {
        None => Ok(None),
        Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
        Some(x) if hi == i64::MAX => Err(ApiError::param(name, format!("`{name}` must be at least {lo}, got {x}"))),
        Some(x) => Err(ApiError::param(name, format!("`{name}` must be between {lo} and {hi}, got {x}"))),
    }
}

/// A `top_logprobs`-style count: 0..=20.
pub fn top_count(name: &str, x: Option<i64>) -> ApiResult<Option<usize>> {
    Ok(int_in(name, x, 0, MAX_TOP_LOGPROBS as i64)?.map(|k| k as usize))
}

/// Check and resolve the shared parameters; errors name the fields as `fields` spells them (the length limit as
/// the field it came as: chat's `max_completion_tokens` wins over `max_tokens`).
pub fn resolve(p: &GenerationParams, d: &SamplingDefaults, vocab: usize, fields: FieldNames) -> ApiResult<GenParams> {
    let mut s = SamplingParams {
        temperature: d.temperature,
        top_p: d.top_p,
        top_k: d.top_k,
        min_p: d.min_p,
        repetition_penalty: d.repetition_penalty,
        ..SamplingParams::default()
    };
    if let Some(t) = number_in("temperature", p.temperature, 0.0, f64::MAX)? {
        s.temperature = t;
    }
    if let Some(t) = number_in("top_p", p.top_p, 0.0, 1.0)? {
        if t <= 0.0 {
            return Err(ApiError::param("top_p", "`top_p` must be greater than 0 and at most 1"));
        }
        s.top_p = t;
    }
    if let Some(k) = int_in("top_k", p.top_k, -1, i64::MAX)? {
        s.top_k = k.max(0) as usize;
    }
    if let Some(m) = number_in("min_p", p.min_p, 0.0, 1.0)? {
        s.min_p = m;
    }
    if let Some(x) = number_in("presence_penalty", p.presence_penalty, -2.0, 2.0)? {
        s.presence_penalty = x;
    }
    if let Some(x) = number_in("frequency_penalty", p.frequency_penalty, -2.0, 2.0)? {
        s.frequency_penalty = x;
    }
    if let Some(r) = number_in("repetition_penalty", p.repetition_penalty, 0.0, f64::MAX)? {
        if r <= 0.0 {
            return Err(ApiError::param("repetition_penalty", "`repetition_penalty` must be greater than 0 (1 = off)"));
        }
        s.repetition_penalty = r;
    }
    if let Some(x) = number_in("xtc_probability", p.xtc_probability, 0.0, 1.0)? {
        s.xtc_probability = x;
    }
    if let Some(x) = number_in("xtc_threshold", p.xtc_threshold, 0.0, 1.0)? {
        s.xtc_threshold = x;
    }
    // A negative seed is as good as any other: its bits are the seed.
    s.seed = p.seed.map(|x| x as u64);
    if let Some(bias) = &p.logit_bias {
        s.logit_bias = bias
            .0
            .iter()
            .map(|&(id, b)| match id as usize {
                i if i < vocab => Ok((id, b as f32)),
                _ => Err(ApiError::param(
                    "logit_bias",
                    format!("`logit_bias` token id {id} is outside the vocabulary (size {vocab})"),
                )),
            })
            .collect::<ApiResult<_>>()?;
    }
    let max_tokens = int_in(fields.max_tokens, p.max_tokens, 1, i64::MAX)?.map(|m| m as usize);
    let n = int_in("n", p.n, 1, MAX_N)?.unwrap_or(1) as usize;
    let constraint = constraint::requested(p, &fields)?;
    let stop_token_ids = match &p.stop_token_ids {
        Some(ids) => ids.check("stop_token_ids", vocab)?,
        None => Vec::new(),
    };
    Ok(GenParams {
        sampling: s,
        max_tokens,
        stops: p.stop.clone().map(|s| s.0).unwrap_or_default(),
        stop_token_ids,
        n,
        stream: p.stream.unwrap_or(false),
        include_usage: p.stream_options.is_some_and(|o| o.include_usage),
        ignore_eos: p.ignore_eos.unwrap_or(false),
        skip_special: p.skip_special_tokens.unwrap_or(true),
        constraint,
        prediction: p.prediction.clone().filter(|x| !x.is_empty()),
        speculative: p.speculative.unwrap_or(true),
        fields,
    })
}

impl GenParams {
    /// The error of a refused submission: a constraint that does not compile is a 400 naming the field the request
    /// stated it in (for the tools' grammar, their parameter schemas).
    pub fn submit_error(&self, e: SubmitError) -> ApiError {
        match (e, self.constraint.as_ref().map(|c| c.source)) {
            (SubmitError::Constraint(why), Some(Source::Field(f))) => {
                ApiError::param(f, format!("`{f}` is not a constraint this server can enforce: {why}"))
            }
            (SubmitError::Constraint(why), Some(Source::Tools)) => ApiError::param(
                "tools",
                format!(
                    "the tools' parameter schemas (`tools[].{}`) are not ones this server can enforce: {why}",
                    self.fields.tool_schema
                ),
            ),
            (e, _) => e.into(),
        }
    }

    /// How the choices' text is produced (stop strings, special tokens; chat drops the answer's leading space).
    pub fn text_options(&self, trim_leading_space: bool) -> TextOptions {
        TextOptions { stops: self.stops.clone(), trim_leading_space, skip_special: self.skip_special }
    }

    /// The engine request for one tokenized prompt. Without an explicit `max_tokens`, the default is capped to
    /// what is left of the context (and of the KV cache), so a long prompt still gets an answer.
    pub fn engine_request(&self, prompt: Vec<u32>, ready: &Ready) -> ApiResult<EngineRequest> {
        let info = ready.engine.info();
        // The engine's own prompt rule (context and KV pool), as a 400 `context_length_exceeded`.
        info.check_prompt(prompt.len())?;
        // The engine's rules on `n` and the length limit, checked here to name the fields as the request did.
        if self.n > info.max_batch {
            let message =
                format!("`n` = {} choices exceed the server's batch of {} rows (--batch)", self.n, info.max_batch);
            return Err(ApiError::param("n", message));
        }
        let limit = ready.max_request_tokens();
        if let Some(m) = self.max_tokens.filter(|m| prompt.len() + m > limit) {
            let f = self.fields.max_tokens;
            let message = format!(
                "the prompt ({} tokens) + `{f}` ({m}) = {} tokens, more than this server can hold per request: {limit} tokens (model context {}, KV cache {}); lower `{f}`",
                prompt.len(),
                prompt.len() + m,
                info.max_positions,
                info.kv_capacity_tokens
            );
            return Err(ApiError { param: Some(f.to_string()), ..ApiError::bad_request(message) }
                .with_code("context_length_exceeded"));
        }
        let room = limit - prompt.len();
        let max_tokens = match self.max_tokens {
            Some(m) => m,
            None => ready.defaults.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).min(room).max(1),
        };
        // The prediction as tokens (what the output may repeat; more than the context could never be used).
        let mut prediction = match &self.prediction {
            Some(Prediction::Text(text)) if self.speculative => ready
                .tokenizer
                .encode(text, false)
                .map_err(|e| ApiError::param("prediction", format!("`prediction` could not be tokenized: {e}")))?,
            Some(Prediction::Tokens(ids)) if self.speculative => ids.check("prediction", info.vocab_size)?,
            _ => Vec::new(),
        };
        prediction.truncate(info.max_positions);
        // The engine compiles it at submit; a bad schema, regex or grammar comes back as `submit_error` names it.
        let constraint =
            self.constraint.as_ref().map(|c| ConstraintSource { spec: c.spec.clone(), after_marker: None });
        Ok(EngineRequest {
            prompt,
            sampling: self.sampling.clone(),
            max_tokens,
            stop_token_ids: self.stop_token_ids.clone(),
            ignore_eos: self.ignore_eos,
            n: self.n,
            constraint,
            spec: SpecRequest { off: !self.speculative, prediction },
            media: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::chat::ChatCompletionRequest;
    use crate::wire::RequestBody;
    use serde_json::{json, Value};

    /// Deserialize as a chat body, then resolve (as the chat handler does).
    fn parse_json(v: Value) -> ApiResult<GenParams> {
        let r = crate::chat::ChatRequest::from(ChatCompletionRequest::from_body(&v)?);
        resolve(&r.params, &SamplingDefaults::default(), 100, r.fields)
    }

    fn param_of(v: Value) -> String {
        parse_json(v).map(|_| "ok".to_string()).unwrap_or_else(|e| e.param.unwrap_or_default())
    }

    fn message_of(v: Value) -> String {
        parse_json(v).map(|_| "ok".to_string()).unwrap_or_else(|e| e.message)
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
        assert_eq!(g.sampling.logit_bias, vec![(12, -100.0), (3, 5.5)]);
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
        assert_eq!(param_of(json!({"max_completion_tokens": 0, "max_tokens": 5})), "max_completion_tokens");
        assert_eq!(param_of(json!({"stop": 5})), "stop");
        assert_eq!(param_of(json!({"stop": [""]})), "stop");
        assert_eq!(param_of(json!({"stop": vec!["a"; 17]})), "stop");
        assert_eq!(param_of(json!({"stop_token_ids": [100]})), "stop_token_ids");
        assert_eq!(param_of(json!({"logit_bias": {"abc": 1}})), "logit_bias");
        assert_eq!(param_of(json!({"logit_bias": {"100": 1}})), "logit_bias");
        assert_eq!(param_of(json!({"logit_bias": {"1": 101}})), "logit_bias");
        assert_eq!(param_of(json!({"stream": "yes"})), "stream");
        assert_eq!(param_of(json!({"stream_options": {"include_usage": 1}})), "stream_options");
        assert_eq!(param_of(json!({"response_format": {"type": "json_object"}})), "ok");
        assert_eq!(param_of(json!({"response_format": {"type": "text"}})), "ok");
        assert_eq!(param_of(json!({"response_format": {"type": 5}})), "response_format");
        assert_eq!(param_of(json!({"response_format": {"type": "xml"}})), "response_format");
        assert_eq!(param_of(json!({"guided_json": 5})), "guided_json");
        assert_eq!(param_of(json!({"guided_choice": []})), "guided_choice");
        assert_eq!(param_of(json!({"structured_outputs": {"foo": 1}})), "structured_outputs");
        assert_eq!(param_of(json!({"grammar": "root ::= \"a\"", "guided_regex": "a"})), "grammar");
    }

    #[test]
    fn messages_are_exact() {
        let cases = [
            (json!({"temperature": "hot"}), "`temperature` must be a number, got a string"),
            (json!({"temperature": -0.1}), "`temperature` must be at least 0, got -0.1"),
            (json!({"top_p": 0}), "`top_p` must be greater than 0 and at most 1"),
            (json!({"top_p": 1.5}), "`top_p` must be between 0 and 1, got 1.5"),
            (json!({"top_k": 1.5}), "`top_k` must be an integer, got a number"),
            (json!({"top_k": -2}), "`top_k` must be at least -1, got -2"),
            (json!({"presence_penalty": 3}), "`presence_penalty` must be between -2 and 2, got 3"),
            (json!({"repetition_penalty": 0}), "`repetition_penalty` must be greater than 0 (1 = off)"),
            (json!({"n": 17}), "`n` must be between 1 and 16, got 17"),
            (json!({"max_tokens": -1}), "`max_tokens` must be at least 1, got -1"),
            (json!({"max_tokens": "5"}), "`max_tokens` must be an integer, got a string"),
            (json!({"seed": true}), "`seed` must be an integer, got a boolean"),
            (json!({"stream": "yes"}), "`stream` must be a boolean, got a string"),
            (json!({"stop": 5}), "`stop` must be a string or a list of strings, got a number"),
            (json!({"stop": ["a", 1]}), "`stop` must hold strings, found a number"),
            (json!({"stop": [""]}), "`stop` strings must not be empty"),
            (json!({"stop": vec!["a"; 17]}), "`stop` may hold at most 16 strings, got 17"),
            (json!({"stop_token_ids": "1"}), "`stop_token_ids` must be an array, got a string"),
            (
                json!({"stop_token_ids": [1.5]}),
                "`stop_token_ids` must hold non-negative integer token ids, found a number",
            ),
            (json!({"stop_token_ids": [100]}), "token id 100 in `stop_token_ids` is outside the vocabulary (size 100)"),
            (json!({"logit_bias": []}), "`logit_bias` must be an object, got an array"),
            (json!({"logit_bias": {"abc": 1}}), "`logit_bias` keys must be token ids, got \"abc\""),
            (json!({"logit_bias": {"100": 1}}), "`logit_bias` token id 100 is outside the vocabulary (size 100)"),
            (json!({"logit_bias": {"1": 101}}), "`logit_bias` value for token 1 must be between -100 and 100, got 101"),
            (json!({"logit_bias": {"1": "x"}}), "`logit_bias` value for token 1 must be a number, got a string"),
            (json!({"stream_options": true}), "`stream_options` must be an object, got a boolean"),
            (json!({"stream_options": {"include_usage": 1}}), "`stream_options.include_usage` must be a boolean"),
            (json!({"response_format": "json"}), "`response_format` must be an object, got a string"),
            (json!({"response_format": {}}), "`response_format.type` is required"),
            (
                json!({"response_format": {"type": "xml"}}),
                "`response_format.type` must be `text`, `json_object` or `json_schema`, got `xml`",
            ),
            (
                json!({"response_format": {"type": "json_schema"}}),
                "`response_format.json_schema` is required with type `json_schema`",
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"schema": 5}}}),
                "`response_format.json_schema.schema` must be an object, got a number",
            ),
            (json!({"guided_json": "{"}), "`guided_json` must be a JSON schema (an object, or a string holding one)"),
            (json!({"guided_choice": ["a", 1]}), "`guided_choice` must hold non-empty strings"),
            (
                json!({"structured_outputs": {}}),
                "`structured_outputs` must set one of json, regex, choice, grammar, json_object",
            ),
            (
                json!({"structured_outputs": {"regex": "a", "choice": ["b"]}}),
                "`structured_outputs` may set only one of json, regex, choice, grammar, json_object",
            ),
            (
                json!({"structured_outputs": {"xml": "a"}}),
                "`structured_outputs.xml` is not supported (use one of json, regex, choice, grammar, json_object)",
            ),
            (json!({"structured_outputs": {"regex": 5}}), "`structured_outputs.regex` must be a string"),
            (
                json!({"response_format": {"type": "json_object"}, "guided_regex": "a"}),
                "`response_format` and `guided_regex` both constrain the output; send one of them",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(message_of(body.clone()), want, "{body}");
        }
    }
}
