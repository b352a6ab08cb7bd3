//! Fuzz every route's request parsing and validation: no input may panic the server, and every answer is either
//! a success of the route's shape or an OpenAI error (`{"error": {"message", "type", "param", "code"}}`, 4xx).
//!
//! The inputs go through the real router in-process (`tower::ServiceExt::oneshot`), so they meet exactly the code
//! the handlers run: the body extractor, `Params`, `params::parse`, `messages::normalize`, the model's real chat
//! template and tokenizer, `engine_request` and the engine's own `submit` checks. Behind it is a real engine
//! thread (scheduler, sampler, streaming detokenizer, stop strings, SSE) over a fake `Model` whose logits are a
//! cheap hash of the last token and position, so requests that pass validation generate a few varied tokens
//! (special, byte and multi-byte ones included) and end with `stop` or `length`.
//!
//! Inputs: arbitrary bytes, arbitrary JSON values, structure-aware mutations of valid chat / completions /
//! tokenize / detokenize / apply-template bodies (wrong types in every field, huge / negative / fractional numbers,
//! NaN-like strings, deep nesting, unicode and special-token text, empty and oversized arrays, null everywhere),
//! and byte-level damage to valid bodies. The same bodies also go straight to the public parsers.
//!
//! `HEARTH_FUZZ_CASES` sets the number of cases (default 10 000: a few seconds in the test profile),
//! `HEARTH_FUZZ_SEED` the seed (default fixed, so CI is reproducible). A failure prints the case index;
//! `HEARTH_FUZZ_ONLY=<index>` replays that one case, `HEARTH_FUZZ_VERBOSE=1` prints every error answer.
//! A long run: `HEARTH_FUZZ_CASES=1000000 cargo test --release -p hearth-server --test fuzz_requests -- --nocapture`.
//! Needs the fetched models (`scripts/fetch-models`) for their real tokenizers; the chat templates are the models'
//! own, none, and the oracle's Qwen3-, Llama-3.1- and Mistral-like ones (`tools/oracle/templates`).

use axum::body::{to_bytes, Body};
use axum::http::{header, Method, Request};
use axum::Router;
use candle_core::{DType, Device, Tensor};
use hearth_engine::attention::{BatchContext, KvStore};
use hearth_engine::engine::EngineConfig;
use hearth_engine::models::Model;
use hearth_engine::tokenizer::{ChatTemplate, Tokenizer};
use hearth_engine::weights::resolve::{resolve, ModelLocation};
use hearth_engine::weights::{GgufFile, ModelConfig};
use hearth_server::body::{parse_object, token_ids, Params};
use hearth_server::openai::{completions, messages, params};
use hearth_server::{AppState, Ready, SamplingDefaults, ServerConfig};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};
use tower::ServiceExt;

// ---------------------------------------------------------------------------------------------------------------
// A deterministic generator (SplitMix64).

#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }
    /// True with probability `p` percent.
    fn pct(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn mix(a: u64, b: u64) -> u64 {
    let mut r = Rng::new(a.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ b);
    r.next()
}

// ---------------------------------------------------------------------------------------------------------------
// A fake model behind a real engine: logits are a hash of (last token, position). Sometimes EOS wins, so greedy
// and sampled requests alike stop after a few tokens; the tiny context bounds the rest.

struct FakeModel {
    cfg: ModelConfig,
    max_positions: usize,
    eos: u32,
}

impl Model for FakeModel {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn dtype(&self) -> DType {
        DType::F32
    }

    fn max_positions(&self) -> usize {
        self.max_positions
    }

    fn forward(&self, tokens: &Tensor, ctx: &BatchContext, _kv: &mut dyn KvStore) -> hearth_engine::Result<Tensor> {
        let toks: Vec<u32> = tokens.to_vec1()?;
        let vocab = self.cfg.vocab_size;
        let mut picks = Vec::new();
        for row in &ctx.rows {
            let positions: Vec<usize> =
                if ctx.all_logits { (0..row.len).collect() } else { vec![row.len - 1] };
            for i in positions {
                picks.push((toks[row.start + i], row.pos0 + i));
            }
        }
        let mut out = vec![0f32; picks.len() * vocab];
        for (r, &(tok, pos)) in picks.iter().enumerate() {
            let h = mix(tok as u64, pos as u64);
            let logits = &mut out[r * vocab..(r + 1) * vocab];
            logits[(h % vocab as u64) as usize] = 14.0;
            logits[((h >> 24) % vocab as u64) as usize] = 13.0;
            if h % 2 == 0 {
                logits[self.eos as usize] = 40.0;
            }
        }
        Ok(Tensor::from_vec(out, (picks.len(), vocab), &Device::Cpu)?)
    }
}

/// A chat template other than the model's own.
enum Template {
    Own,
    None,
    Source(&'static str),
}

/// Chat templates modelled on real ones (tools, reasoning, `raise_exception` on bad role orders).
const QWEN3_LIKE: &str = include_str!("../../../tools/oracle/templates/qwen3_like.jinja");
const LLAMA31_LIKE: &str = include_str!("../../../tools/oracle/templates/llama31_like.jinja");
const MISTRAL_LIKE: &str = include_str!("../../../tools/oracle/templates/mistral_like.jinja");

/// A router whose model is ready: the real tokenizer of `alias` with `template`, the fake model's engine.
fn ready_router(alias: &str, template: Template) -> (Router, usize) {
    let loc = resolve(alias)
        .unwrap_or_else(|e| panic!("fuzz_requests needs the model `{alias}` for its tokenizer: {e} (run scripts/fetch-models)"));
    let ModelLocation::Gguf(path) = &loc else { panic!("{alias}: expected a GGUF file") };
    let g = GgufFile::open(path).expect("opening the GGUF");
    let real = ModelConfig::from_gguf(&g).expect("reading the model config");
    let mut tokenizer = Tokenizer::load(&loc, &real).expect("loading the tokenizer");
    match template {
        Template::Own => {}
        Template::None => tokenizer.chat_template = None,
        Template::Source(src) => {
            tokenizer.chat_template =
                Some(ChatTemplate::new(src, &tokenizer.bos_token(), &tokenizer.eos_token()).expect("compiling the template"))
        }
    }
    let vocab = tokenizer.vocab_size().max(real.vocab_size);
    let eos = tokenizer.eos_ids().to_vec();
    let mut cfg = real.clone();
    cfg.vocab_size = vocab;
    cfg.num_layers = 1;
    cfg.num_heads = 1;
    cfg.num_kv_heads = 1;
    cfg.head_dim = 2;
    cfg.layer_window = vec![None];
    let model = FakeModel { cfg, max_positions: 160, eos: eos.first().copied().unwrap_or(0) };
    let ecfg = EngineConfig { max_batch: 8, kv_block_size: 16, kv_blocks: 64, step_tokens: 256, step_tokens_decoding: 64, max_prefill_rows: 0, max_queue: 64 };
    let engine = hearth_engine::engine::start(Box::new(model), Device::Cpu, ecfg, eos).expect("starting the engine");
    let state = AppState::new(ServerConfig { keepalive: Duration::from_millis(50), ..Default::default() });
    let ready = Ready {
        engine,
        tokenizer: Arc::new(tokenizer),
        model_id: alias.to_string(),
        device: "fake".into(),
        defaults: SamplingDefaults::default(),
        created: 1,
    };
    assert!(state.set_ready(ready));
    (hearth_server::router(state), vocab)
}

/// The servers a case may go to: (alias, template, share of the cases in percent).
const SERVERS: &[(&str, fn() -> Template, u64)] = &[
    ("smollm2-135m", || Template::Own, 55),
    ("smollm2-135m", || Template::Source(MISTRAL_LIKE), 10),
    ("gemma3-270m", || Template::Source(QWEN3_LIKE), 15),
    ("gemma3-270m", || Template::Source(LLAMA31_LIKE), 10),
    ("gemma3-270m", || Template::None, 10),
];

// ---------------------------------------------------------------------------------------------------------------
// Values.

const KNOWN_KEYS: &[&str] = &[
    "model",
    "messages",
    "prompt",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "xtc_probability",
    "xtc_threshold",
    "seed",
    "logit_bias",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "stream",
    "stream_options",
    "response_format",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "skip_special_tokens",
    "logprobs",
    "top_logprobs",
    "echo",
    "suffix",
    "best_of",
    "tools",
    "tool_choice",
    "chat_template_kwargs",
    "add_generation_prompt",
    "content",
    "add_special",
    "with_pieces",
    "tokens",
    "role",
    "type",
    "text",
    "tool_calls",
    "function",
    "arguments",
    "name",
    "include_usage",
    "user",
];

const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "-0.0",
    "1",
    "-1",
    "2",
    "0.5",
    "1.5",
    "-2.5",
    "3",
    "16",
    "17",
    "20",
    "21",
    "100",
    "101",
    "-100",
    "-101",
    "1e308",
    "-1e308",
    "1.7976931348623157e308",
    "1e39",
    "3.5e38",
    "-1e39",
    "1e-45",
    "5e-324",
    "1e-320",
    "4294967295",
    "4294967296",
    "9007199254740993",
    "8999999999999999",
    "9000000000000001",
    "9.0e15",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "1e19",
    "123456789012345678901234567890",
    "0.1",
    "0.999999999",
    "1.0000001",
    "2.0000000001",
];

const STRINGS: &[&str] = &[
    "",
    " ",
    "NaN",
    "nan",
    "Infinity",
    "-Infinity",
    "inf",
    "1e999",
    "0x10",
    "5",
    "-1",
    "true",
    "null",
    "\u{0}",
    "\u{FEFF}",
    "\u{202E}gnirts",
    "🦀🔥👩‍👩‍👧",
    "é\u{301}",
    "日本語のテキスト",
    "\n",
    "\r\n",
    "\t",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<bos>",
    "<eos>",
    "<start_of_turn>user\n",
    "<end_of_turn>",
    "{{ raise_exception('boom') }}",
    "{% for x in y %}",
    "{{",
    "}}",
    "\\u0000",
    "text",
    "image_url",
    "function",
    "user",
    "assistant",
    "system",
    "developer",
    "tool",
    "none",
    "auto",
    "json_object",
    "json_schema",
    "smollm2-135m",
];

fn number(rng: &mut Rng) -> Value {
    match rng.below(4) {
        0 => serde_json::from_str(*rng.pick(NUMBERS)).unwrap_or(Value::Null),
        1 => json!(rng.range(-5, 40)),
        2 => json!(rng.unit() * 4.0 - 1.0),
        _ => json!(rng.next() as i64),
    }
}

fn random_string(rng: &mut Rng) -> String {
    if rng.pct(50) {
        return rng.pick(STRINGS).to_string();
    }
    let len = if rng.pct(5) { rng.below(5000) } else { rng.below(24) };
    let mut s = String::with_capacity(len);
    for _ in 0..len {
        let c = match rng.below(10) {
            0..=4 => (b' ' + rng.below(95) as u8) as char,
            5 => *rng.pick(&['\n', '\t', '\r', '\u{0}', '\u{7f}', '\u{85}', '\u{2028}']),
            6 => char::from_u32(0x80 + rng.below(0x780) as u32).unwrap_or('?'),
            7 => char::from_u32(0x3040 + rng.below(0x6000) as u32).unwrap_or('?'),
            8 => char::from_u32(0x1F300 + rng.below(0x300) as u32).unwrap_or('?'),
            _ => char::from_u32(rng.below(0x110000) as u32).unwrap_or('\u{FFFD}'),
        };
        s.push(c);
    }
    if rng.pct(10) {
        s.push_str(*rng.pick(STRINGS));
    }
    s
}

fn scalar(rng: &mut Rng) -> Value {
    match rng.below(6) {
        0 => Value::Null,
        1 => json!(rng.pct(50)),
        2 | 3 => number(rng),
        _ => json!(random_string(rng)),
    }
}

fn random_key(rng: &mut Rng) -> String {
    if rng.pct(70) {
        rng.pick(KNOWN_KEYS).to_string()
    } else {
        random_string(rng)
    }
}

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    if depth == 0 {
        return scalar(rng);
    }
    match rng.below(8) {
        0..=3 => scalar(rng),
        4 | 5 => {
            let n = if rng.pct(5) { rng.below(300) } else { rng.below(5) };
            Value::Array((0..n).map(|_| random_value(rng, depth - 1)).collect())
        }
        _ => {
            let n = rng.below(6);
            Value::Object((0..n).map(|_| (random_key(rng), random_value(rng, depth - 1))).collect())
        }
    }
}

/// Deeply nested arrays / objects around `v`.
fn nest(rng: &mut Rng, v: Value) -> Value {
    let depth = *rng.pick(&[2usize, 10, 64, 126, 127, 128, 129, 200]);
    let mut v = v;
    for _ in 0..depth {
        v = if rng.pct(50) { json!([v]) } else { json!({ rng.pick(KNOWN_KEYS).to_string(): v }) };
    }
    v
}

fn nasty(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0..=4 => scalar(rng),
        5 => json!([]),
        6 => json!({}),
        7 => {
            let x = scalar(rng);
            Value::Array(vec![x; *rng.pick(&[1usize, 17, 65, 1000, 5000])])
        }
        8 => {
            let inner = scalar(rng);
            nest(rng, inner)
        }
        _ => random_value(rng, 3),
    }
}

fn token_id(rng: &mut Rng, vocab: usize) -> Value {
    match rng.below(10) {
        0 => json!(vocab),
        1 => json!(vocab - 1),
        2 => number(rng),
        3 => json!(rng.below(300)),
        _ => json!(rng.below(vocab)),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Valid bodies.

fn text(rng: &mut Rng) -> String {
    if rng.pct(60) {
        rng.pick(&["Hi", "What is 2+2?", "Say something.", "Bonjour !", "日本", "a b c", "Tell me a story about a fox."])
            .to_string()
    } else {
        random_string(rng)
    }
}

fn content(rng: &mut Rng) -> Value {
    if rng.pct(75) {
        json!(text(rng))
    } else {
        Value::Array((0..rng.range(1, 3)).map(|_| json!({"type": "text", "text": text(rng)})).collect())
    }
}

fn message_list(rng: &mut Rng) -> Value {
    let mut msgs = Vec::new();
    if rng.pct(40) {
        msgs.push(json!({"role": if rng.pct(80) { "system" } else { "developer" }, "content": content(rng)}));
    }
    let turns = rng.range(1, 3);
    for t in 0..turns {
        msgs.push(json!({"role": "user", "content": content(rng)}));
        if t + 1 < turns {
            if rng.pct(20) {
                msgs.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
                ]}));
                msgs.push(json!({"role": "tool", "content": "sunny", "tool_call_id": "call_1"}));
            } else {
                msgs.push(json!({"role": "assistant", "content": content(rng)}));
            }
        }
    }
    Value::Array(msgs)
}

/// Valid sampling / limit parameters (a random subset).
fn gen_params(rng: &mut Rng, m: &mut Map<String, Value>, vocab: usize, chat: bool) {
    let max_key = if chat && rng.pct(50) { "max_completion_tokens" } else { "max_tokens" };
    if rng.pct(85) {
        m.insert(max_key.into(), json!(rng.range(1, 8)));
    }
    let opts: Vec<(&str, Value)> = vec![
        ("temperature", json!(rng.unit() * 2.0)),
        ("top_p", json!(0.05 + rng.unit() * 0.95)),
        ("top_k", json!(rng.range(-1, 50))),
        ("min_p", json!(rng.unit() * 0.5)),
        ("seed", json!(rng.range(0, 1000))),
        ("n", json!(rng.range(1, 3))),
        ("stream", json!(rng.pct(50))),
        ("stream_options", json!({"include_usage": rng.pct(50)})),
        ("stop", if rng.pct(50) { json!("\n") } else { json!([".", "!", text(rng)]) }),
        ("stop_token_ids", json!([rng.below(vocab)])),
        ("logit_bias", json!({ rng.below(vocab).to_string(): rng.range(-100, 100) })),
        ("presence_penalty", json!(rng.unit() * 4.0 - 2.0)),
        ("frequency_penalty", json!(rng.unit() * 4.0 - 2.0)),
        ("repetition_penalty", json!(0.5 + rng.unit())),
        ("xtc_probability", json!(rng.unit())),
        ("xtc_threshold", json!(rng.unit())),
        ("response_format", json!({"type": "text"})),
        ("ignore_eos", json!(rng.pct(50))),
        ("skip_special_tokens", json!(rng.pct(50))),
        ("user", json!("u")),
    ];
    for (k, v) in opts {
        if rng.pct(15) {
            m.insert(k.into(), v);
        }
    }
}

fn chat_body(rng: &mut Rng, vocab: usize) -> Value {
    let mut m = Map::new();
    m.insert("model".into(), json!("smollm2-135m"));
    m.insert("messages".into(), message_list(rng));
    gen_params(rng, &mut m, vocab, true);
    if rng.pct(15) {
        m.insert("logprobs".into(), json!(true));
        if rng.pct(70) {
            m.insert("top_logprobs".into(), json!(rng.range(0, 5)));
        }
    }
    if rng.pct(10) {
        m.insert(
            "tools".into(),
            json!([{"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]),
        );
        m.insert("tool_choice".into(), json!(*rng.pick(&["auto", "none", "required"])));
    }
    if rng.pct(5) {
        m.insert("chat_template_kwargs".into(), json!({"enable_thinking": false}));
    }
    if rng.pct(5) {
        m.insert("add_generation_prompt".into(), json!(rng.pct(50)));
    }
    Value::Object(m)
}

fn ids(rng: &mut Rng, vocab: usize) -> Value {
    Value::Array((0..rng.range(1, 6)).map(|_| json!(rng.below(vocab))).collect())
}

fn completion_body(rng: &mut Rng, vocab: usize) -> Value {
    let mut m = Map::new();
    m.insert("model".into(), json!("smollm2-135m"));
    let prompt = match rng.below(4) {
        0 => json!(text(rng)),
        1 => json!([text(rng), text(rng)]),
        2 => ids(rng, vocab),
        _ => json!([ids(rng, vocab), ids(rng, vocab)]),
    };
    m.insert("prompt".into(), prompt);
    gen_params(rng, &mut m, vocab, false);
    if rng.pct(15) {
        m.insert("logprobs".into(), json!(rng.range(0, 5)));
    } else if rng.pct(10) {
        m.insert("echo".into(), json!(true));
    }
    if rng.pct(5) {
        m.insert("suffix".into(), json!(""));
    }
    if rng.pct(5) {
        let n = m.get("n").cloned().unwrap_or(json!(1));
        m.insert("best_of".into(), n);
    }
    Value::Object(m)
}

fn tokenize_body(rng: &mut Rng) -> Value {
    let mut m = Map::new();
    m.insert("content".into(), json!(text(rng)));
    if rng.pct(50) {
        m.insert("add_special".into(), json!(rng.pct(50)));
    }
    if rng.pct(50) {
        m.insert("with_pieces".into(), json!(rng.pct(50)));
    }
    Value::Object(m)
}

fn detokenize_body(rng: &mut Rng, vocab: usize) -> Value {
    json!({"tokens": ids(rng, vocab)})
}

fn template_body(rng: &mut Rng) -> Value {
    let mut m = Map::new();
    m.insert("messages".into(), message_list(rng));
    if rng.pct(20) {
        m.insert("add_generation_prompt".into(), json!(rng.pct(50)));
    }
    Value::Object(m)
}

// ---------------------------------------------------------------------------------------------------------------
// Mutations.

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Idx(usize),
}

fn paths(v: &Value, here: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    out.push(here.clone());
    if out.len() > 4000 {
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                here.push(Seg::Key(k.clone()));
                paths(c, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate().take(50) {
                here.push(Seg::Idx(i));
                paths(c, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match (s, cur) {
            (Seg::Key(k), Value::Object(m)) => m.get_mut(k)?,
            (Seg::Idx(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn mutate(rng: &mut Rng, v: &mut Value, vocab: usize) {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    let mut path = rng.pick(&all).clone();
    if path.is_empty() && all.len() > 1 && rng.pct(80) {
        path = rng.pick(&all[1..]).clone();
    }
    // Deleting needs the parent.
    if rng.pct(15) && !path.is_empty() {
        let (last, parent) = path.split_last().expect("non-empty");
        if let Some(p) = at(v, parent) {
            match (last, p) {
                (Seg::Key(k), Value::Object(m)) => {
                    m.remove(k);
                }
                (Seg::Idx(i), Value::Array(a)) if *i < a.len() => {
                    a.remove(*i);
                }
                _ => {}
            }
        }
        return;
    }
    let Some(target) = at(v, &path) else { return };
    match rng.below(13) {
        0..=3 => *target = nasty(rng),
        4 => *target = Value::Null,
        5 => {
            // Add a known field with a nasty value to an object.
            if let Value::Object(m) = target {
                let k = rng.pick(KNOWN_KEYS).to_string();
                m.insert(k, nasty(rng));
            } else {
                *target = nasty(rng);
            }
        }
        6 => {
            // Numbers: a neighbour or an extreme; strings: a number-like string; else a type swap.
            *target = match target {
                Value::Number(n) => {
                    let x = n.as_f64().unwrap_or(0.0);
                    match rng.below(6) {
                        0 => json!(-x),
                        1 => json!(x * 1e10),
                        2 => json!(x + 0.5),
                        3 => json!(x.to_string()),
                        4 => json!(x as i64 + 1),
                        _ => number(rng),
                    }
                }
                Value::String(s) if !s.is_empty() && rng.pct(50) => json!(s.len()),
                _ => scalar(rng),
            }
        }
        7 => {
            // Oversize or empty an array.
            if let Value::Array(a) = target {
                if a.is_empty() || rng.pct(30) {
                    a.clear();
                } else {
                    let x = a[rng.below(a.len())].clone();
                    let n = *rng.pick(&[17usize, 65, 300, 3000]);
                    a.extend(std::iter::repeat_n(x, n));
                }
            } else {
                *target = json!([target.clone()]);
            }
        }
        8 => {
            let inner = target.clone();
            *target = nest(rng, inner);
        }
        9 => {
            let inner = target.clone();
            *target = if rng.pct(50) { json!([inner]) } else { json!({"value": inner}) };
        }
        10 => *target = token_id(rng, vocab),
        11 => *target = json!(random_string(rng)),
        _ => *target = random_value(rng, 4),
    }
}

fn damage_bytes(rng: &mut Rng, b: &mut Vec<u8>) {
    for _ in 0..rng.range(1, 3) {
        let len = b.len();
        match rng.below(9) {
            0 if len > 0 => b.truncate(rng.below(len)),
            1 if len > 0 => {
                let i = rng.below(len);
                b[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                let junk: &[u8] = *rng.pick(&[
                    b"NaN".as_slice(),
                    b"Infinity",
                    b"-",
                    b"1e999",
                    b"\"\\ud800\"",
                    b"\\",
                    b"\x00",
                    b"\xff\xfe",
                    b"\xc3",
                    b",",
                    b"}",
                    b"]]]",
                    b"{\"a\":",
                    b"01",
                    b"\"\\u",
                ]);
                b.splice(i..i, junk.iter().copied());
            }
            3 if len > 1 => {
                let i = rng.below(len);
                let j = (i + rng.below(16)).min(len);
                b.drain(i..j);
            }
            4 if len > 0 => {
                // Duplicate a slice (duplicate keys, repeated elements).
                let i = rng.below(len);
                let j = (i + rng.below(64)).min(len);
                let s = b[i..j].to_vec();
                b.splice(j..j, s);
            }
            5 => {
                let i = rng.below(len + 1);
                b.splice(i..i, std::iter::repeat_n(b' ', rng.below(8)));
            }
            6 if len > 0 => {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
            }
            _ => {}
        }
    }
}

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    match rng.below(6) {
        0 => (0..rng.below(64)).map(|_| rng.next() as u8).collect(),
        1 => {
            // JSON-ish token soup.
            let toks: &[&[u8]] =
                &[b"{", b"}", b"[", b"]", b":", b",", b"\"", b"1", b"-", b"e", b"null", b"true", b" ", b"\"messages\"", b"\\"];
            (0..rng.below(40)).flat_map(|_| rng.pick(toks).to_vec()).collect()
        }
        2 => {
            let depth = *rng.pick(&[127usize, 128, 129, 1000, 100_000]);
            let open = if rng.pct(50) { b"[".as_slice() } else { b"{\"a\":".as_slice() };
            open.repeat(depth)
        }
        3 => b"".to_vec(),
        4 => rng.pick(&[&b"null"[..], b"[]", b"\"x\"", b"1e999", b"{}", b"{\"a\":1}{}", b"\xef\xbb\xbf{}", b"  {}  "]).to_vec(),
        _ => random_string(rng).into_bytes(),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Cases.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Route {
    Chat,
    Completions,
    Tokenize,
    Detokenize,
    ApplyTemplate,
    Other,
}

struct Case {
    route: Route,
    method: Method,
    path: String,
    body: Vec<u8>,
    /// Index into `SERVERS`.
    model: usize,
}

fn make_case(rng: &mut Rng, vocabs: &[usize]) -> Case {
    let mut roll = rng.below(100) as u64;
    let mut model = 0;
    while model + 1 < vocabs.len() && roll >= SERVERS[model].2 {
        roll -= SERVERS[model].2;
        model += 1;
    }
    let vocab = vocabs[model];
    let route = match rng.below(100) {
        0..=34 => Route::Chat,
        35..=64 => Route::Completions,
        65..=72 => Route::Tokenize,
        73..=80 => Route::Detokenize,
        81..=93 => Route::ApplyTemplate,
        _ => Route::Other,
    };
    let (method, path) = match route {
        Route::Chat => (Method::POST, "/v1/chat/completions".to_string()),
        Route::Completions => (Method::POST, "/v1/completions".to_string()),
        Route::Tokenize => (Method::POST, "/tokenize".to_string()),
        Route::Detokenize => (Method::POST, "/detokenize".to_string()),
        Route::ApplyTemplate => (Method::POST, "/apply-template".to_string()),
        Route::Other => {
            let id = ["smollm2-135m", "gemma3-270m", "", "a/b/c", "%FF%FE", "%00", "..%2F..", "x%", "%E2%82", "🦀"];
            let path = match rng.below(7) {
                0 => format!("/v1/models/{}", rng.pick(&id)),
                1 => "/v1/models".into(),
                2 => "/health".into(),
                3 => "/stats".into(),
                4 => format!("/v1/{}", rng.pick(&id)),
                5 => "/v1/chat/completions?stream=true&x=%ZZ".into(),
                _ => "/".into(),
            };
            let method = rng.pick(&[Method::GET, Method::GET, Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS]).clone();
            (method, path)
        }
    };
    let valid = |rng: &mut Rng| match route {
        Route::Chat => chat_body(rng, vocab),
        Route::Completions | Route::Other => completion_body(rng, vocab),
        Route::Tokenize => tokenize_body(rng),
        Route::Detokenize => detokenize_body(rng, vocab),
        Route::ApplyTemplate => template_body(rng),
    };
    let body = match rng.below(100) {
        // Structure-aware mutations of a valid body (0 mutations: the valid body itself).
        0..=69 => {
            let mut v = valid(rng);
            let k = *rng.pick(&[0usize, 0, 1, 1, 1, 2, 2, 3, 4]);
            for _ in 0..k {
                mutate(rng, &mut v, vocab);
            }
            serde_json::to_vec(&v).expect("serializing")
        }
        // Arbitrary JSON: mostly objects of known keys.
        70..=84 => {
            let v = if rng.pct(80) {
                let n = rng.range(0, 6);
                Value::Object((0..n).map(|_| (random_key(rng), random_value(rng, 3))).collect())
            } else {
                random_value(rng, 4)
            };
            serde_json::to_vec(&v).expect("serializing")
        }
        // Byte damage to a valid body.
        85..=92 => {
            let mut b = serde_json::to_vec(&valid(rng)).expect("serializing");
            damage_bytes(rng, &mut b);
            b
        }
        _ => random_bytes(rng),
    };
    Case { route, method, path, body, model }
}

// ---------------------------------------------------------------------------------------------------------------
// Checking answers.

/// `{"error": {"message": non-empty string, "type": string, "param": null|string, "code": null|string}}`, exactly.
fn check_error(v: &Value) -> Result<(), String> {
    let obj = v.as_object().ok_or("error body is not an object")?;
    if obj.len() != 1 {
        return Err(format!("error body has keys other than `error`: {v}"));
    }
    let e = obj.get("error").and_then(Value::as_object).ok_or("no `error` object")?;
    let mut keys: Vec<&str> = e.keys().map(String::as_str).collect();
    keys.sort();
    if keys != ["code", "message", "param", "type"] {
        return Err(format!("error object keys {keys:?}"));
    }
    if !e["message"].as_str().is_some_and(|m| !m.is_empty()) {
        return Err("empty or non-string message".into());
    }
    if !e["type"].as_str().is_some_and(|t| !t.is_empty()) {
        return Err("empty or non-string type".into());
    }
    for k in ["param", "code"] {
        if !(e[k].is_null() || e[k].is_string()) {
            return Err(format!("`{k}` is neither null nor a string"));
        }
    }
    Ok(())
}

fn check_choice_common(c: &Value, object: &str) -> Result<(), String> {
    if !c["index"].is_u64() {
        return Err(format!("{object}: choice without an integer index: {c}"));
    }
    Ok(())
}

fn check_usage(u: &Value) -> Result<(), String> {
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        if !u[k].is_u64() {
            return Err(format!("usage.{k} is not an integer: {u}"));
        }
    }
    Ok(())
}

fn check_finish(f: &Value) -> Result<(), String> {
    match f.as_str() {
        Some("stop" | "length") => Ok(()),
        _ => Err(format!("bad finish_reason {f}")),
    }
}

fn check_success(route: Route, path: &str, content_type: &str, body: &[u8]) -> Result<(), String> {
    if content_type.starts_with("text/event-stream") {
        let text = std::str::from_utf8(body).map_err(|e| format!("SSE body is not UTF-8: {e}"))?;
        let mut datas = Vec::new();
        for frame in text.split("\n\n").filter(|f| !f.is_empty()) {
            if frame.starts_with(':') {
                continue;
            }
            let d = frame.strip_prefix("data: ").ok_or_else(|| format!("SSE frame without data: {frame:?}"))?;
            datas.push(d);
        }
        if datas.last() != Some(&"[DONE]") {
            return Err(format!("stream does not end with [DONE]: {:?}", datas.last()));
        }
        let object = if route == Route::Chat { "chat.completion.chunk" } else { "text_completion" };
        let mut finishes = 0;
        for d in &datas[..datas.len() - 1] {
            let v: Value = serde_json::from_str(d).map_err(|e| format!("SSE data is not JSON ({e}): {d}"))?;
            if v.get("error").is_some() {
                return Err(format!("error inside a stream: {v}"));
            }
            if v["object"] != object {
                return Err(format!("chunk object is {} not {object}", v["object"]));
            }
            for c in v["choices"].as_array().ok_or("chunk without choices")? {
                check_choice_common(c, object)?;
                if !c["finish_reason"].is_null() {
                    check_finish(&c["finish_reason"])?;
                    finishes += 1;
                }
            }
            if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                check_usage(u)?;
            }
        }
        if finishes == 0 {
            return Err("stream without a finish_reason".into());
        }
        return Ok(());
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("200 body is not JSON ({e})"))?;
    match route {
        Route::Chat => {
            if v["object"] != "chat.completion" {
                return Err(format!("object {}", v["object"]));
            }
            let choices = v["choices"].as_array().ok_or("no choices")?;
            if choices.is_empty() {
                return Err("empty choices".into());
            }
            for c in choices {
                check_choice_common(c, "chat.completion")?;
                if c["message"]["role"] != "assistant" || !c["message"]["content"].is_string() {
                    return Err(format!("bad message {}", c["message"]));
                }
                check_finish(&c["finish_reason"])?;
            }
            check_usage(&v["usage"])
        }
        Route::Completions => {
            if v["object"] != "text_completion" {
                return Err(format!("object {}", v["object"]));
            }
            let choices = v["choices"].as_array().ok_or("no choices")?;
            if choices.is_empty() {
                return Err("empty choices".into());
            }
            for c in choices {
                check_choice_common(c, "text_completion")?;
                if !c["text"].is_string() {
                    return Err(format!("choice text is not a string: {c}"));
                }
                check_finish(&c["finish_reason"])?;
            }
            check_usage(&v["usage"])
        }
        Route::Tokenize => match v["tokens"].as_array() {
            Some(_) => Ok(()),
            None => Err(format!("tokenize answer {v}")),
        },
        Route::Detokenize => match v["content"].as_str() {
            Some(_) => Ok(()),
            None => Err(format!("detokenize answer {v}")),
        },
        Route::ApplyTemplate => match v["prompt"].as_str() {
            Some(_) => Ok(()),
            None => Err(format!("apply-template answer {v}")),
        },
        Route::Other => {
            let ok = if path == "/health" {
                v["status"] == "ok"
            } else if path == "/v1/models" {
                v["object"] == "list" && v["data"].is_array()
            } else if path.starts_with("/v1/models/") {
                v["object"] == "model"
            } else {
                v.is_object()
            };
            if ok {
                Ok(())
            } else {
                Err(format!("unexpected 200 answer {v}"))
            }
        }
    }
}

/// What a case returned: the status, and whether it passed the checks.
async fn run_case(router: &Router, case: &Case) -> Result<u16, String> {
    let req = Request::builder()
        .method(case.method.clone())
        .uri(case.path.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(case.body.clone()))
        .map_err(|e| format!("building the request: {e}"))?;
    let resp = router.clone().oneshot(req).await.map_err(|e| format!("router error: {e}"))?;
    let status = resp.status();
    let content_type =
        resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let body = to_bytes(resp.into_body(), 64 << 20).await.map_err(|e| format!("reading the body: {e}"))?;
    if status.is_success() {
        if case.method == Method::OPTIONS && status.as_u16() == 204 {
            return Ok(204);
        }
        check_success(case.route, &case.path, &content_type, &body)?;
        return Ok(status.as_u16());
    }
    if !content_type.starts_with("application/json") {
        return Err(format!("{status} with content-type {content_type:?}: {}", String::from_utf8_lossy(&body)));
    }
    let v: Value = serde_json::from_slice(&body).map_err(|e| format!("{status} body is not JSON ({e})"))?;
    check_error(&v).map_err(|e| format!("{status}: {e}: {v}"))?;
    if std::env::var_os("HEARTH_FUZZ_VERBOSE").is_some() {
        let e = &v["error"];
        let mut msg: String = e["message"].as_str().unwrap_or("").chars().take(220).collect();
        msg = msg.chars().filter(|c| !c.is_ascii_digit()).collect();
        eprintln!("ERR {:?} {} {} {} | {msg}", case.route, status.as_u16(), e["code"], e["param"]);
    }
    if !status.is_client_error() {
        return Err(format!("{status} (not a client error): {v}"));
    }
    Ok(status.as_u16())
}

/// The same body through the public parsers directly (they must not panic; their errors are OpenAI errors).
fn direct_parsers(body: &[u8], vocab: usize) -> Result<(), String> {
    let m = match parse_object(body) {
        Ok(m) => m,
        Err(e) => return check_error(&e.body()),
    };
    let p = Params(&m);
    let d = SamplingDefaults::default();
    let mut errs = Vec::new();
    errs.push(params::parse(p, &d, vocab, &["max_completion_tokens", "max_tokens"]).err());
    errs.push(params::top_count(p, "top_logprobs").err());
    errs.push(completions::parse_prompts(p, vocab).err());
    errs.push(messages::normalize(p).err());
    if let Some(Value::Array(a)) = m.get("tokens") {
        errs.push(token_ids("tokens", a, vocab).err());
    }
    for e in errs.into_iter().flatten() {
        check_error(&e.body())?;
        if !e.status.is_client_error() {
            return Err(format!("parser returned {}: {}", e.status, e.message));
        }
    }
    Ok(())
}

fn show(case: &Case) -> String {
    let mut b = String::from_utf8_lossy(&case.body).into_owned();
    if b.len() > 1500 {
        let mut cut = 1500;
        while !b.is_char_boundary(cut) {
            cut -= 1;
        }
        b.truncate(cut);
        b.push_str(&format!("... ({} bytes)", case.body.len()));
    }
    let (alias, t, _) = &SERVERS[case.model];
    let template = match t() {
        Template::Own => "its own template",
        Template::None => "no template",
        Template::Source(_) => "a replaced template",
    };
    format!("{} {} (server {}: {alias}, {template}) body: {b:?}", case.method, case.path, case.model)
}

static PANICS: AtomicUsize = AtomicUsize::new(0);
/// Panics inside minijinja, which `messages::render` contains and answers as a 400 `template_error`.
static TEMPLATE_PANICS: AtomicUsize = AtomicUsize::new(0);
static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

/// Count every panic, on any thread (the engine thread and spawned stream tasks catch their own).
fn install_panic_counter() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.location().is_some_and(|l| l.file().contains("/minijinja-")) {
                TEMPLATE_PANICS.fetch_add(1, Ordering::SeqCst);
                return;
            }
            PANICS.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut s) = LAST_PANIC.lock() {
                *s = format!("{info} (thread {:?})", std::thread::current().name());
            }
            default(info);
        }));
    });
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.trim().parse().ok())
}

#[test]
fn fuzz_requests_never_panic_and_always_answer_in_shape() {
    install_panic_counter();
    let cases = env_u64("HEARTH_FUZZ_CASES").unwrap_or(10_000);
    let seed = env_u64("HEARTH_FUZZ_SEED").unwrap_or(0x4EA7_F022);
    let only = env_u64("HEARTH_FUZZ_ONLY");
    let (routers, vocabs): (Vec<Router>, Vec<usize>) = SERVERS.iter().map(|(alias, t, _)| ready_router(alias, t())).unzip();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");

    let t0 = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let mut failed = 0usize;
    let mut by_status: BTreeMap<(Route, u16), usize> = BTreeMap::new();
    let mut time_by: BTreeMap<(Route, u16), Duration> = BTreeMap::new();
    let mut per_server = vec![(0usize, Duration::ZERO); SERVERS.len()];
    let range = match only {
        Some(i) => i..i + 1,
        None => 0..cases,
    };
    let mut ran = 0u64;
    for i in range {
        let mut rng = Rng::new(mix(seed, i));
        let case = make_case(&mut rng, &vocabs);
        let panics_before = PANICS.load(Ordering::SeqCst);
        let router = &routers[case.model];
        let t_case = Instant::now();
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), run_case(router, &case)).await })
        }));
        let mut problem = match outcome {
            Err(_) => Some(format!("PANIC: {}", LAST_PANIC.lock().map(|s| s.clone()).unwrap_or_default())),
            Ok(Err(_)) => Some("no answer within 60 s".to_string()),
            Ok(Ok(Err(e))) => Some(e),
            Ok(Ok(Ok(status))) => {
                *by_status.entry((case.route, status)).or_default() += 1;
                *time_by.entry((case.route, status)).or_default() += t_case.elapsed();
                per_server[case.model].0 += 1;
                per_server[case.model].1 += t_case.elapsed();
                None
            }
        };
        if problem.is_none() {
            let direct = std::panic::catch_unwind(AssertUnwindSafe(|| direct_parsers(&case.body, vocabs[case.model])));
            problem = match direct {
                Err(_) => Some(format!("PANIC in a parser: {}", LAST_PANIC.lock().map(|s| s.clone()).unwrap_or_default())),
                Ok(Err(e)) => Some(format!("parser: {e}")),
                Ok(Ok(())) => None,
            };
        }
        if problem.is_none() && PANICS.load(Ordering::SeqCst) != panics_before {
            problem = Some(format!("PANIC (caught elsewhere): {}", LAST_PANIC.lock().map(|s| s.clone()).unwrap_or_default()));
        }
        if let Some(p) = problem {
            failed += 1;
            if failures.len() < 20 {
                let msg = format!("case {i} (replay: HEARTH_FUZZ_SEED={seed} HEARTH_FUZZ_ONLY={i}): {p}\n    {}", show(&case));
                eprintln!("{msg}");
                failures.push(msg);
            }
        }
        ran += 1;
        if cases >= 100_000 && only.is_none() && ran % (cases / 10) == 0 {
            eprintln!("fuzz_requests: {ran} / {cases} cases, {:.0} s, {failed} failed", t0.elapsed().as_secs_f64());
        }
    }
    let elapsed = t0.elapsed();
    eprintln!(
        "fuzz_requests: {ran} cases, seed {seed}, {:.1} s, {failed} failed, {} template-engine panics contained as 400s",
        elapsed.as_secs_f64(),
        TEMPLATE_PANICS.load(Ordering::SeqCst)
    );
    for (i, (n, d)) in per_server.iter().enumerate() {
        eprintln!("  server {i} ({}): {n} cases, {:.0} ms", SERVERS[i].0, d.as_secs_f64() * 1e3);
    }
    for ((route, status), n) in &by_status {
        let ms = time_by.get(&(*route, *status)).map(|d| d.as_secs_f64() * 1e3).unwrap_or(0.0);
        eprintln!("  {route:?} {status}: {n} ({ms:.0} ms)");
    }
    assert!(failures.is_empty(), "{failed} of {ran} cases failed; first ones:\n{}", failures.join("\n"));
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "panics were caught somewhere: {}", LAST_PANIC.lock().unwrap());
    if only.is_none() && ran >= 2000 {
        // The fuzz must reach past validation: valid requests generate, invalid ones are rejected.
        for route in [Route::Chat, Route::Completions, Route::Tokenize, Route::Detokenize, Route::ApplyTemplate] {
            let ok = by_status.get(&(route, 200)).copied().unwrap_or(0);
            let bad = by_status.get(&(route, 400)).copied().unwrap_or(0);
            assert!(ok > 0 && bad > 0, "{route:?}: {ok} successes and {bad} rejections; the generator is off");
        }
    }
}

/// While the model loads, arbitrary bodies on every POST route still get a 400 or 503 in shape.
#[test]
fn fuzz_bodies_while_loading() {
    install_panic_counter();
    let cases = env_u64("HEARTH_FUZZ_CASES").unwrap_or(10_000) / 10;
    let seed = env_u64("HEARTH_FUZZ_SEED").unwrap_or(0x4EA7_F022) ^ 0x1;
    let router = hearth_server::router(AppState::new(ServerConfig { max_body: 64 * 1024, ..Default::default() }));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let paths = ["/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize", "/apply-template"];
    for i in 0..cases {
        let mut rng = Rng::new(mix(seed, i));
        let mut case = make_case(&mut rng, &[49152; 5]);
        case.method = Method::POST;
        case.path = rng.pick(&paths).to_string();
        let (status, body) = rt.block_on(async {
            let req = Request::builder().method(Method::POST).uri(case.path.as_str()).body(Body::from(case.body.clone())).unwrap();
            let resp = router.clone().oneshot(req).await.unwrap();
            let status = resp.status().as_u16();
            (status, to_bytes(resp.into_body(), 1 << 20).await.unwrap())
        });
        let v: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("case {i}: not JSON ({e}): {}", show(&case)));
        check_error(&v).unwrap_or_else(|e| panic!("case {i}: {e}: {}", show(&case)));
        assert!(matches!(status, 400 | 413 | 503), "case {i}: status {status}: {v}");
    }
    assert_eq!(PANICS.load(Ordering::SeqCst), 0);
}

/// Found by this fuzzer: minijinja 2.24 panics (index out of bounds) when a template reverses an empty list, as
/// `loop_messages[::-1]` does in a Mistral-style template given only a system message. The server answers 400.
#[test]
fn template_engine_panic_is_a_template_error() {
    install_panic_counter();
    let (router, _) = ready_router("smollm2-135m", Template::Source(MISTRAL_LIKE));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    for path in ["/apply-template", "/v1/chat/completions"] {
        let case = Case {
            route: if path == "/apply-template" { Route::ApplyTemplate } else { Route::Chat },
            method: Method::POST,
            path: path.into(),
            body: br#"{"messages": [{"role": "system", "content": "Bonjour !"}]}"#.to_vec(),
            model: 1,
        };
        let status = rt.block_on(run_case(&router, &case)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(status, 400, "{path}");
    }
}
