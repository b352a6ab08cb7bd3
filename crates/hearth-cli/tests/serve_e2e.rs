//! End-to-end: the real `hearth serve` binary with the default model (smollm2-135m, from scripts/fetch-models),
//! spoken to over HTTP on a free loopback port.

mod support;

use serde_json::{json, Value};
use std::io::Read;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use support::*;

/// One server shared by the tests that do not need special flags (SSE keep-alives every 50 ms, 64 KiB bodies).
/// The guard serializes those tests: some compare two greedy runs, which must not be batched differently.
fn shared() -> (&'static Server, MutexGuard<'static, ()>) {
    static S: OnceLock<Server> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    (S.get_or_init(|| Server::start(&["--max-body", "64K"], &[("HEARTH_SSE_KEEPALIVE_MS", "50")])), guard)
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// The calls of a streamed chat completion, put together from their `delta.tool_calls` entries as clients do:
/// (name, arguments, how many deltas carried the call).
fn streamed_calls(events: &[Value]) -> Vec<(String, String, usize)> {
    let mut calls: Vec<(String, String, usize)> = Vec::new();
    for d in events.iter().filter_map(|ch| ch["choices"][0]["delta"]["tool_calls"].as_array()).flatten() {
        let i = d["index"].as_u64().unwrap_or(u64::MAX) as usize;
        if i == calls.len() {
            calls.push((d["function"]["name"].as_str().unwrap_or("").to_string(), String::new(), 0));
        }
        let c = calls.get_mut(i).unwrap_or_else(|| panic!("call index {i} out of order: {d}"));
        c.1.push_str(d["function"]["arguments"].as_str().unwrap_or(""));
        c.2 += 1;
    }
    calls
}

fn ok(r: Resp) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn check_usage(u: &Value) {
    let (p, c) = (
        u["prompt_tokens"].as_u64().expect("prompt_tokens"),
        u["completion_tokens"].as_u64().expect("completion_tokens"),
    );
    assert!(p > 0 && c > 0, "{u}");
    assert_eq!(u["total_tokens"].as_u64(), Some(p + c));
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64(), "{u}");
}

#[test]
fn chat_non_stream_shape_and_logprobs() {
    let (s, _serial) = shared();
    let v = ok(s.post(
        "/v1/chat/completions",
        &json!({"model": "x", "messages": user("What is the capital of France?"), "max_tokens": 12}),
    ));
    assert!(v["id"].as_str().is_some_and(|i| i.starts_with("chatcmpl-")), "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "smollm2-135m");
    assert!(v["created"].is_u64());
    let c = &v["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    let text = c["message"]["content"].as_str().expect("content").to_string();
    assert!(!text.is_empty() && !text.starts_with(' '), "{text:?}");
    assert!(["stop", "length"].contains(&c["finish_reason"].as_str().unwrap_or("")), "{c}");
    assert!(c["logprobs"].is_null());
    check_usage(&v["usage"]);

    // Text parts give the same prompt, so the same greedy answer.
    let parts = json!([{"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]}]);
    let v2 = ok(s.post("/v1/chat/completions", &json!({"messages": parts, "max_tokens": 12})));
    assert_eq!(v2["choices"][0]["message"]["content"], text.as_str());

    // logprobs in OpenAI's chat shape.
    let v = ok(s.post(
        "/v1/chat/completions",
        &json!({"messages": user("Hi"), "max_tokens": 5, "logprobs": true, "top_logprobs": 2, "ignore_eos": true}),
    ));
    let content = v["choices"][0]["logprobs"]["content"].as_array().expect("logprobs.content").clone();
    assert_eq!(content.len() as u64, v["usage"]["completion_tokens"].as_u64().unwrap_or(0));
    for e in &content {
        assert!(e["token"].is_string() && e["bytes"].is_array(), "{e}");
        assert!(e["logprob"].as_f64().is_some_and(|l| l <= 0.0), "{e}");
        let top = e["top_logprobs"].as_array().expect("top_logprobs");
        assert_eq!(top.len(), 2);
        assert!(top[0]["logprob"].as_f64() >= top[1]["logprob"].as_f64());
    }
}

#[test]
fn chat_stream_shape() {
    let (s, _serial) = shared();
    let body = json!({"messages": user("Tell me a short story."), "max_tokens": 10, "stream": true,
        "stream_options": {"include_usage": true}, "logprobs": true, "ignore_eos": true});
    let r = s.post("/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")));
    let frames = r.sse();
    assert_eq!(frames.last(), Some(&Sse::Data("[DONE]".into())), "{frames:?}");
    let chunks = r.sse_json();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"]));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage = chunks.last().map(|c| c["usage"].clone()).unwrap_or_default();
    check_usage(&usage);
    assert_eq!(chunks.last().map(|c| c["choices"].clone()), Some(json!([])));
    let finish = &chunks[chunks.len() - 2]["choices"][0];
    assert_eq!(finish["finish_reason"], "length");
    let deltas: Vec<&Value> = chunks[1..chunks.len() - 2].iter().map(|c| &c["choices"][0]).collect();
    // One event per token: each carries exactly one token's logprob.
    assert_eq!(deltas.len() as u64, usage["completion_tokens"].as_u64().unwrap_or(0));
    for d in &deltas {
        assert_eq!(d["logprobs"]["content"].as_array().map(Vec::len), Some(1), "{d}");
        assert!(d["finish_reason"].is_null());
    }
    let streamed: String = deltas.iter().filter_map(|d| d["delta"]["content"].as_str()).collect();
    let body = json!({"messages": user("Tell me a short story."), "max_tokens": 10, "ignore_eos": true});
    let v = ok(s.post("/v1/chat/completions", &body));
    assert_eq!(v["choices"][0]["message"]["content"], streamed.as_str());
}

#[test]
fn completions_prompt_shapes_echo_and_logprobs() {
    let (s, _serial) = shared();
    let prompt = "The capital of France is";
    let one = |p: Value| ok(s.post("/v1/completions", &json!({"prompt": p, "max_tokens": 6, "ignore_eos": true})));
    let v = one(json!(prompt));
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().is_some_and(|i| i.starts_with("cmpl-")));
    check_usage(&v["usage"]);
    let text = v["choices"][0]["text"].as_str().expect("text").to_string();
    assert!(!text.is_empty());

    // [int]: the same tokens /tokenize gives (with BOS as the model wants) -> the same text.
    let ids = ok(s.post("/tokenize", &json!({"content": prompt, "add_special": true})))["tokens"].clone();
    assert_eq!(one(ids.clone())["choices"][0]["text"], text.as_str());

    // [string] and [[int]]: one choice per prompt, in order.
    let v = one(json!([prompt, "Once upon a time"]));
    let choices = v["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 2);
    assert_eq!((choices[0]["index"].clone(), choices[1]["index"].clone()), (json!(0), json!(1)));
    assert_eq!(choices[0]["text"], text.as_str());
    let v = one(json!([ids, ids]));
    assert_eq!(v["choices"][1]["text"], text.as_str());
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(2 * ids.as_array().map(Vec::len).unwrap_or(0) as u64));

    // echo puts the prompt first.
    let v =
        ok(s.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 6, "ignore_eos": true, "echo": true})));
    assert_eq!(v["choices"][0]["text"], format!("{prompt}{text}").as_str());

    // logprobs in the completions shape.
    let v =
        ok(s.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 4, "ignore_eos": true, "logprobs": 3})));
    let lp = &v["choices"][0]["logprobs"];
    let n = lp["tokens"].as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(n, 4, "{lp}");
    for k in ["token_logprobs", "top_logprobs", "text_offset"] {
        assert_eq!(lp[k].as_array().map(Vec::len), Some(n), "{k}: {lp}");
    }
    assert_eq!(lp["top_logprobs"][0].as_object().map(|o| o.len()), Some(3));
    assert_eq!(lp["text_offset"][0], 0);
    let joined: String = lp["tokens"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert_eq!(joined, v["choices"][0]["text"].as_str().unwrap_or(""));

    // echo with logprobs: every prompt token scored first (the first one null), then the same generated entries.
    let (plain, plain_text) = (lp.clone(), v["choices"][0]["text"].as_str().unwrap_or("").to_string());
    let body = json!({"prompt": prompt, "max_tokens": 4, "ignore_eos": true, "logprobs": 2, "echo": true});
    let v = ok(s.post("/v1/completions", &body));
    let lp = &v["choices"][0]["logprobs"];
    let p = ids.as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(lp["tokens"].as_array().map(Vec::len), Some(p + 4), "{lp}");
    assert!(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null(), "{lp}");
    for i in 1..p + 4 {
        assert!(lp["token_logprobs"][i].as_f64().is_some_and(|x| x <= 0.0), "{i}: {lp}");
        assert_eq!(lp["top_logprobs"][i].as_object().map(|o| o.len()), Some(2), "{i}: {lp}");
    }
    for i in 0..4 {
        let (a, b) = (lp["token_logprobs"][p + i].as_f64(), plain["token_logprobs"][i].as_f64());
        assert!(a.zip(b).is_some_and(|(a, b)| (a - b).abs() < 1e-3), "generated token {i}: {a:?} vs {b:?}");
        assert_eq!(lp["tokens"][p + i], plain["tokens"][i]);
    }
    assert_eq!(lp["text_offset"][p].as_u64(), Some(prompt.chars().count() as u64), "{lp}");
    assert_eq!(v["choices"][0]["text"], format!("{prompt}{plain_text}").as_str());
    // Streamed: the echo comes in one chunk with the prompt's entries, before the generated tokens.
    let r = s.post(
        "/v1/completions",
        &json!({"stream": true, "prompt": prompt, "max_tokens": 2, "ignore_eos": true,
        "logprobs": 1, "echo": true}),
    );
    let chunks = r.sse_json();
    assert_eq!(chunks[0]["choices"][0]["text"], prompt, "{chunks:?}");
    let first = &chunks[0]["choices"][0]["logprobs"];
    assert_eq!(first["tokens"].as_array().map(Vec::len), Some(p), "{first}");
    assert!(first["token_logprobs"][0].is_null() && first["token_logprobs"][1].as_f64().is_some(), "{first}");
    assert_eq!(chunks[1]["choices"][0]["logprobs"]["text_offset"][0].as_u64(), Some(prompt.chars().count() as u64));

    // n choices.
    let v = ok(
        s.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 3, "n": 2, "temperature": 0.8, "seed": 1}))
    );
    assert_eq!(v["choices"].as_array().map(Vec::len), Some(2));
}

const EIGHT_PROMPTS: [&str; 8] = [
    "The capital of France is",
    "def fibonacci(n):",
    "Shopping list:\n1. Eggs\n2.",
    "Once upon a time, in a small village,",
    "Q: What is 12 times 12?\nA:",
    "The three primary colors are",
    "In 1969, the first humans",
    "My favourite food is",
];

/// Each prompt alone (non-streamed), then all 8 streamed at once: every stream must equal its solo text.
fn concurrent_streams_equal_solo(s: &Server) {
    let body = |p: &str, stream: bool| json!({"prompt": p, "max_tokens": 16, "ignore_eos": true, "stream": stream});
    let solo: Vec<String> = EIGHT_PROMPTS
        .iter()
        .map(|p| {
            ok(s.post("/v1/completions", &body(p, false)))["choices"][0]["text"].as_str().unwrap_or("").to_string()
        })
        .collect();
    let port = s.port;
    let handles: Vec<_> = EIGHT_PROMPTS
        .iter()
        .map(|p| {
            let b = body(p, true).to_string();
            std::thread::spawn(move || request(port, "POST", "/v1/completions", &[], Some(b.as_bytes())))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let r = h.join().expect("client thread");
        assert_eq!(r.status, 200, "{}", r.text());
        let chunks = r.sse_json();
        let text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
        assert_eq!(text, solo[i], "prompt {i} streamed beside 7 others differs from its solo output");
        // One chunk per token, plus the finish chunk.
        assert!(chunks.len() <= 17, "{} chunks", chunks.len());
        assert_eq!(chunks.last().map(|c| c["choices"][0]["finish_reason"].clone()), Some(json!("length")));
    }
}

/// The server end to end: 8 concurrent streams, none mixed up with another, each equal to its solo output
/// (the engine's batch invariance: row-independent int8 matmuls and prompt pieces at fixed boundaries).
#[test]
fn concurrent_greedy_streams_equal_their_solo_output() {
    let s = Server::start(&[], &[]);
    concurrent_streams_equal_solo(&s);
}

/// The same with candle's own kernels (`HEARTH_FAST_QUANT=0`).
#[test]
fn concurrent_greedy_streams_equal_their_solo_output_candle_kernels() {
    let s = Server::start(&[], &[("HEARTH_FAST_QUANT", "0")]);
    concurrent_streams_equal_solo(&s);
}

/// OpenAI's `prediction` through the server (speculation on by default): the answer is the same text as without
/// it, and the usage counts the drafted tokens verification kept; `"speculative": false` drafts nothing.
#[test]
fn a_prediction_speeds_up_nothing_but_the_decode() {
    let (s, _serial) = shared();
    let ask = |extra: Value| {
        let mut body = json!({"messages": user("Write the numbers one to twenty in words, one per line."),
            "max_tokens": 48, "temperature": 0});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        ok(s.post("/v1/chat/completions", &body))
    };
    let plain = ask(json!({"speculative": false}));
    let text = plain["choices"][0]["message"]["content"].as_str().unwrap_or("").to_string();
    assert!(!text.is_empty(), "{plain}");
    assert_eq!(plain["usage"]["completion_tokens_details"]["accepted_prediction_tokens"], 0);
    for prediction in [json!(text), json!([{"type": "text", "text": text}])] {
        let v = ask(json!({"prediction": {"type": "content", "content": prediction}}));
        assert_eq!(v["choices"][0]["message"]["content"], plain["choices"][0]["message"]["content"]);
        let kept = v["usage"]["completion_tokens_details"]["accepted_prediction_tokens"].as_u64().unwrap_or(0);
        assert!(kept > 10, "{}", v["usage"]);
    }
    let off = ask(json!({"speculative": false, "prediction": {"type": "content", "content": text}}));
    assert_eq!(
        off["usage"]["completion_tokens_details"],
        json!({"accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0})
    );
    let bad = s.post("/v1/chat/completions", &json!({"messages": user("hi"), "prediction": {"type": "text"}}));
    assert_eq!(bad.status, 400, "{}", bad.text());
    assert!(bad.text().contains("prediction"), "{}", bad.text());
}

#[test]
fn stop_strings_are_excluded() {
    let (s, _serial) = shared();
    let prompt = "Shopping list:\n1. Eggs\n2.";
    let full = ok(s.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 20, "ignore_eos": true})))
        ["choices"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_string();
    // Stop at the second line break of the continuation (or its middle, if it has none).
    let cut = full.match_indices('\n').nth(1).map(|(i, _)| i).unwrap_or(full.len() / 2);
    let stop: String = full[cut..].chars().take(2).collect();
    assert!(!stop.is_empty(), "continuation too short: {full:?}");
    let expect = &full[..full.find(&stop).unwrap_or(cut)];
    for stops in [json!(stop), json!(["<never>", stop])] {
        let v = ok(
            s.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 20, "ignore_eos": true, "stop": stops}))
        );
        assert_eq!(v["choices"][0]["text"], expect, "full: {full:?}, stop: {stop:?}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        let r = s.post(
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 20, "ignore_eos": true, "stop": stops, "stream": true}),
        );
        let chunks = r.sse_json();
        let text: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
        assert_eq!(text, expect);
        assert_eq!(chunks.last().map(|c| c["choices"][0]["finish_reason"].clone()), Some(json!("stop")));
    }
}

#[test]
fn errors_have_the_openai_shape() {
    let (s, _serial) = shared();
    let raw = |path: &str, body: &[u8]| request(s.port, "POST", path, &[], Some(body));
    let expect = |r: Resp, status: u16, param: Option<&str>| {
        assert_eq!(r.status, status, "{}", r.text());
        let e = error_of(&r);
        if let Some(p) = param {
            assert_eq!(e["param"], p, "{e}");
        }
        e
    };
    let chat = "/v1/chat/completions";
    let e = expect(raw(chat, b"{not json"), 400, None);
    assert_eq!(e["type"], "invalid_request_error");
    expect(raw(chat, b"[1, 2]"), 400, None);
    expect(s.post(chat, &json!({"messages": user("hi"), "temperature": "hot"})), 400, Some("temperature"));
    expect(s.post(chat, &json!({"messages": user("hi"), "top_p": 2})), 400, Some("top_p"));
    expect(s.post(chat, &json!({"messages": user("hi"), "max_tokens": -1})), 400, Some("max_tokens"));
    expect(s.post(chat, &json!({"messages": user("hi"), "n": 99})), 400, Some("n"));
    expect(s.post(chat, &json!({"messages": user("hi"), "logit_bias": {"x": 1}})), 400, Some("logit_bias"));
    expect(s.post(chat, &json!({"messages": []})), 400, Some("messages"));
    expect(s.post(chat, &json!({"model": "m"})), 400, Some("messages"));
    expect(s.post(chat, &json!({"messages": [{"role": "wizard", "content": "hi"}]})), 400, Some("messages[0].role"));
    expect(
        s.post(
            chat,
            &json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
        ),
        400,
        Some("messages[0].content[0]"),
    );
    let e = expect(s.post(chat, &json!({"messages": user("hi"), "max_tokens": 1_000_000})), 400, Some("max_tokens"));
    assert_eq!(e["code"], "context_length_exceeded");
    expect(s.post("/v1/completions", &json!({"max_tokens": 3})), 400, Some("prompt"));
    expect(s.post("/v1/completions", &json!({"prompt": [1, "a"]})), 400, Some("prompt"));
    expect(s.post("/v1/completions", &json!({"prompt": [999_999_999]})), 400, Some("prompt"));
    expect(s.post("/detokenize", &json!({"tokens": "abc"})), 400, Some("tokens"));

    let e = expect(s.get("/v1/nothing"), 404, None);
    assert_eq!(e["type"], "not_found_error");
    let e = expect(s.get("/v1/models/some-other-model"), 404, None);
    assert_eq!(e["code"], "model_not_found");
    expect(s.get(chat), 405, None);
    let big = format!("{{\"prompt\": \"{}\"}}", "a".repeat(80 * 1024));
    let e = expect(raw("/v1/completions", big.as_bytes()), 413, None);
    assert_eq!(e["code"], "body_too_large");
}

#[test]
fn keepalive_comments_before_the_first_token() {
    let (s, _serial) = shared();
    // A prompt long enough that prefill takes far longer than the 50 ms keep-alive interval.
    let prompt = "The quick brown fox jumps over the lazy dog. ".repeat(120);
    let r = s.post("/v1/completions", &json!({"prompt": prompt, "max_tokens": 2, "ignore_eos": true, "stream": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    let frames = r.sse();
    let first_data = frames.iter().position(|f| matches!(f, Sse::Data(_))).expect("no data frame");
    assert!(
        first_data > 0 && frames[..first_data].iter().all(|f| *f == Sse::Comment("keep-alive".into())),
        "{:?}",
        &frames[..first_data.min(5)]
    );
    // None after the first token.
    assert!(frames[first_data..].iter().all(|f| matches!(f, Sse::Data(_))));

    // Chat: the role chunk comes at once, keep-alives follow it.
    let r = s.post("/v1/chat/completions", &json!({"messages": user(&prompt), "max_tokens": 2, "stream": true}));
    let frames = r.sse();
    assert!(matches!(&frames[0], Sse::Data(d) if d.contains("\"role\":\"assistant\"")), "{:?}", frames.first());
    assert_eq!(frames[1], Sse::Comment("keep-alive".into()));
}

#[test]
fn admin_endpoints() {
    let (s, _serial) = shared();
    assert_eq!(ok(s.get("/health")), json!({"status": "ok"}));
    let st = ok(s.get("/stats"));
    for k in [
        "rows_running",
        "rows_waiting",
        "kv_blocks_total",
        "kv_blocks_free",
        "kv_block_size",
        "tokens_generated_total",
        "kv_capacity_tokens",
    ] {
        assert!(st[k].is_u64(), "/stats lacks {k}: {st}");
    }
    assert_eq!(st["levers"]["HEARTH_FAST_QUANT"], "on", "/stats shows the effective levers: {st}");
    assert_eq!(st["prompt_cache"]["enabled"], true, "the prompt cache is on by default: {st}");
    assert!(st["prompt_cache"]["max_bytes"].as_u64().is_some_and(|b| b > 0), "{st}");
    assert!(st["ssd_cache"].is_null(), "no SSD tier without --ssd-cache: {st}");
    let r = s.post("/admin/cache/flush", &json!({}));
    assert_eq!(r.status, 400, "flush without an SSD tier: {}", r.text());
    assert!(r.text().contains("--ssd-cache"), "{}", r.text());
    let models = ok(s.get("/v1/models"));
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "smollm2-135m");
    assert_eq!(ok(s.get("/v1/models/smollm2-135m"))["object"], "model");

    let toks = ok(s.post("/tokenize", &json!({"content": "Hello world"})))["tokens"].clone();
    assert!(toks.as_array().is_some_and(|t| t.len() == 2), "{toks}");
    assert_eq!(ok(s.post("/detokenize", &json!({"tokens": toks})))["content"], "Hello world");
    let pieces = ok(s.post("/tokenize", &json!({"content": "Hello world", "with_pieces": true})))["tokens"].clone();
    assert_eq!(pieces[1]["piece"], " world");
    let p =
        ok(s.post("/apply-template", &json!({"messages": user("hi")})))["prompt"].as_str().unwrap_or("").to_string();
    assert!(p.contains("<|im_start|>user\nhi<|im_end|>") && p.ends_with("<|im_start|>assistant\n"), "{p:?}");
}

#[test]
fn api_key_guards_everything_but_health() {
    let s = Server::start(&["--api-key", "sekrit"], &[]);
    assert_eq!(s.get("/health").status, 200);
    let r = s.get("/v1/models");
    assert_eq!(r.status, 401);
    assert_eq!(error_of(&r)["code"], "invalid_api_key");
    assert_eq!(request(s.port, "GET", "/v1/models", &[("Authorization", "Bearer wrong")], None).status, 401);
    assert_eq!(request(s.port, "GET", "/v1/models", &[("Authorization", "Bearer sekrit")], None).status, 200);
    let body = json!({"prompt": "Hi", "max_tokens": 2}).to_string();
    assert_eq!(request(s.port, "POST", "/v1/completions", &[], Some(body.as_bytes())).status, 401);
    assert_eq!(
        request(s.port, "POST", "/v1/completions", &[("Authorization", "Bearer sekrit")], Some(body.as_bytes())).status,
        200
    );
}

#[test]
fn queue_full_is_429_and_a_model_without_template_refuses_chat() {
    // Gemma 3 270M (base) has no chat template; --max-queue 0 refuses every submission.
    let s = Server::start(&["--model", "gemma3-270m", "--max-queue", "0"], &[]);
    let r = s.post("/v1/completions", &json!({"prompt": "Hello", "max_tokens": 2}));
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(error_of(&r)["type"], "rate_limit_error");
    let r = s.post("/v1/chat/completions", &json!({"messages": user("hi")}));
    assert_eq!(r.status, 400, "{}", r.text());
    let e = error_of(&r);
    assert_eq!(e["code"], "no_chat_template");
    assert!(e["message"].as_str().unwrap_or("").contains("--chat-template"));
}

#[test]
fn client_disconnect_cancels_the_request() {
    let s = Server::start(&[], &[]);
    let body =
        json!({"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true, "stream": true}).to_string();
    let mut c = connect(s.port);
    write_request(&mut c, "POST", "/v1/completions", &[], Some(body.as_bytes()));
    // Read until a couple of tokens arrived, then hang up.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.windows(6).filter(|w| w == b"data: ").count() < 3 {
        let n = c.read(&mut buf).expect("reading the stream");
        assert!(n > 0, "stream ended early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    drop(c);
    let t0 = Instant::now();
    loop {
        let st = ok(s.get("/stats"));
        if st["rows_running"] == 0 && st["rows_waiting"] == 0 && st["kv_blocks_used"] == 0 {
            let generated = st["tokens_generated_total"].as_u64().unwrap_or(u64::MAX);
            assert!(generated < 1000, "the request kept running after the client left: {st}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "request still running 20 s after the client left: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A template that thinks (tests/fixtures/templates/chatml-think.jinja opens `<think>` in its generation prompt):
/// the answer goes to `reasoning_content` until `</think>`, streamed as `delta.reasoning_content` with the same
/// greedy text; with `enable_thinking: false` the template closes the thought and the answer is plain content.
#[test]
fn thinking_templates_split_reasoning_content() {
    let root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/templates/chatml-think.jinja");
    let s = Server::start(&["--chat-template", root.to_str().unwrap()], &[]);
    let body = json!({"messages": user("What is 2+2?"), "max_tokens": 12, "temperature": 0});
    let v = ok(s.post("/v1/chat/completions", &body));
    let m = &v["choices"][0]["message"];
    let thought = m["reasoning_content"].as_str().unwrap_or_else(|| panic!("no reasoning_content: {v}"));
    assert!(!thought.is_empty(), "{v}");
    // SmolLM2 does not close the thought within 12 tokens: no content then.
    if !thought.contains("</think>") && v["choices"][0]["finish_reason"] == "length" {
        assert!(m["content"].is_null() || m["content"] == "", "{v}");
    }
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let r = s.post("/v1/chat/completions", &sb);
    assert_eq!(r.status, 200);
    let mut streamed = String::new();
    for c in r.sse_json() {
        if let Some(t) = c["choices"][0]["delta"]["reasoning_content"].as_str() {
            streamed.push_str(t);
        }
    }
    assert_eq!(streamed, thought, "streamed and non-streamed thoughts differ");
    // A constraint waits for the thought to end: the (unfinished) thought is the same free text.
    let mut constrained = body.clone();
    constrained["response_format"] = json!({"type": "json_object"});
    let v = ok(s.post("/v1/chat/completions", &constrained));
    assert_eq!(v["choices"][0]["message"]["reasoning_content"].as_str(), Some(thought), "{v}");
    let mut off = body.clone();
    off["chat_template_kwargs"] = json!({"enable_thinking": false});
    let v = ok(s.post("/v1/chat/completions", &off));
    let m = &v["choices"][0]["message"];
    assert!(m.get("reasoning_content").is_none(), "{v}");
    assert!(m["content"].as_str().is_some_and(|c| !c.is_empty()), "{v}");
    // Anthropic's Messages API: the thought is a `thinking` block, streamed as `thinking_delta`s.
    let msg = json!({"model": "m", "max_tokens": 12, "temperature": 0, "thinking": {"type": "enabled",
        "budget_tokens": 1024}, "messages": [{"role": "user", "content": "What is 2+2?"}]});
    let v = ok(s.post("/v1/messages", &msg));
    assert_eq!(
        (v["content"][0]["type"].as_str(), v["content"][0]["thinking"].as_str()),
        (Some("thinking"), Some(thought)),
        "{v}"
    );
    let mut sm = msg.clone();
    sm["stream"] = json!(true);
    let r = s.post("/v1/messages", &sm);
    assert_eq!(r.status, 200);
    let events = r.sse_events();
    let start =
        events.iter().find(|(n, _)| n == "content_block_start").map(|(_, d)| d["content_block"]["type"].clone());
    assert_eq!(start, Some(json!("thinking")), "{events:?}");
    let streamed: String = events.iter().filter_map(|(_, d)| d["delta"]["thinking"].as_str()).collect();
    assert_eq!(streamed, thought, "{events:?}");
    assert!(
        events.iter().all(|(n, d)| d["type"].as_str() == Some(n.as_str())),
        "event names are the types: {events:?}"
    );
    let mut off = msg.clone();
    off["thinking"] = json!({"type": "disabled"});
    let v = ok(s.post("/v1/messages", &off));
    assert_eq!(v["content"][0]["type"], "text", "{v}");
    drop(s);
    // `--reasoning off` makes that the default; a request can still turn thinking on.
    let s = Server::start(&["--chat-template", root.to_str().unwrap(), "--reasoning", "off"], &[]);
    let v = ok(s.post("/v1/chat/completions", &body));
    assert!(v["choices"][0]["message"].get("reasoning_content").is_none(), "{v}");
    let mut on = body.clone();
    on["chat_template_kwargs"] = json!({"enable_thinking": true});
    let v = ok(s.post("/v1/chat/completions", &on));
    assert_eq!(v["choices"][0]["message"]["reasoning_content"].as_str(), Some(thought), "{v}");
}

/// `GET /metrics` counts what requests did (Prometheus text, `hearth:` names); `GET /v1` lists the endpoints, each
/// of which is routed.
#[test]
fn metrics_and_the_endpoint_index() {
    let s = Server::start(&[], &[]);
    let value = |text: &str, series: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '));
        line.and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok()).unwrap_or(-1.0)
    };
    let r = s.get("/metrics");
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type").is_some_and(|c| c.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        r.header("content-type")
    );
    let before = r.text();
    assert_eq!(value(&before, "hearth:model_loaded"), 1.0, "{before}");
    for (path, body) in [
        ("/v1/chat/completions", json!({"messages": user("Hi"), "max_tokens": 4})),
        ("/v1/completions", json!({"prompt": "Hi", "max_tokens": 3, "stream": true})),
        ("/v1/messages", json!({"messages": user("Hi"), "max_tokens": 2})),
    ] {
        assert_eq!(s.post(path, &body).status, 200, "{path}");
    }
    let after = s.get("/metrics").text();
    let grew = |series: &str, by: f64| {
        let (a, b) = (value(&before, series), value(&after, series));
        assert!(
            a >= 0.0 && b >= a + by,
            "{series}: {a} -> {b}
{after}"
        );
    };
    grew("hearth:e2e_request_latency_seconds_count", 3.0);
    grew("hearth:time_to_first_token_seconds_count", 3.0);
    grew("hearth:inter_token_latency_seconds_count", 1.0);
    grew("hearth:generation_tokens_total", 3.0);
    grew("hearth:prompt_tokens_total", 3.0);
    let finished = |t: &str| {
        ["stop", "length"]
            .iter()
            .map(|r| value(t, &format!("hearth:request_success_total{{finished_reason=\"{r}\"}}")))
            .sum::<f64>()
    };
    assert_eq!(finished(&after) - finished(&before), 3.0, "{after}");
    for g in ["hearth:num_requests_running", "hearth:num_requests_waiting", "hearth:kv_cache_usage_perc"] {
        assert!(value(&after, g) >= 0.0, "{g}: {after}");
    }
    // Every histogram's buckets are cumulative and end in +Inf = count.
    let inf = value(&after, "hearth:e2e_request_latency_seconds_bucket{le=\"+Inf\"}");
    assert_eq!(inf, value(&after, "hearth:e2e_request_latency_seconds_count"), "{after}");

    let index = ok(s.get("/v1"));
    let list = index["data"].as_array().cloned().unwrap_or_default();
    assert!(list.len() >= 10, "{index}");
    for e in &list {
        let (method, path) = (e["method"].as_str().unwrap_or(""), e["path"].as_str().unwrap_or(""));
        let path = path.replace("{id}", "smollm2-135m");
        let r = match method {
            "GET" => s.get(&path),
            "POST" => s.post(&path, &json!({})),
            m => support::request(s.port, m, &path, &[], None),
        };
        // Routed: not "no route" (a 404 of a missing resource is fine), not a wrong method.
        assert!(!r.text().contains("no route for"), "{method} {path}: {}", r.text());
        assert_ne!(r.status, 405, "{method} {path}: {}", r.text());
    }
}

/// `/v1/embeddings` with `--embedding-model` beside the chat model: the vectors match sentence-transformers' (the
/// golden of tools/oracle/embeddings_golden.py) for text and for the same text's token ids, base64 is the same
/// floats, `dimensions` other than the model's is a 400; an embedding model alone answers chat with a 400, and a
/// chat model alone answers embeddings with a 400.
#[test]
fn embeddings_beside_and_alone() {
    let cases = embedding_cases("embeddings_all_minilm_l6_v2.json");
    let s = Server::start(&["--embedding-model", "all-minilm-l6-v2"], &[]);
    let texts: Vec<&str> = cases.iter().filter_map(|c| c["text"].as_str()).collect();
    let v = ok(s.post("/v1/embeddings", &json!({"model": "all-minilm-l6-v2", "input": texts})));
    assert_eq!((v["object"].as_str(), v["model"].as_str()), (Some("list"), Some("all-minilm-l6-v2")), "{v}");
    let data = assert_embeddings_match(&v, &cases, 384);
    // Token ids give the same vector as their text; base64 is the same floats.
    let ids = cases[1]["input_ids"].clone();
    let by_ids = ok(s.post("/v1/embeddings", &json!({"input": ids})));
    let by_b64 = ok(s.post("/v1/embeddings", &json!({"input": texts[1], "encoding_format": "base64"})));
    let text_vec = floats(&data[1]["embedding"]);
    assert!(cosine(&floats(&by_ids["data"][0]["embedding"]), &text_vec) > 0.999999, "{by_ids}");
    let b64 = by_b64["data"][0]["embedding"].as_str().unwrap_or_else(|| panic!("{by_b64}"));
    let bytes = base64_decode(b64);
    let decoded: Vec<f64> =
        bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect();
    assert_eq!(decoded.len(), 384);
    assert!(decoded.iter().zip(&text_vec).all(|(a, b)| (a - b).abs() < 1e-6), "base64 and float vectors differ");
    // Bad requests.
    for (body, param) in [
        (json!({"input": "x", "dimensions": 128}), "dimensions"),
        (json!({"input": "x", "encoding_format": "int8"}), "encoding_format"),
        (json!({"input": ""}), "input"),
        (json!({"input": [1, 999999]}), "input"),
        (json!({"input": "word ".repeat(300)}), "input"),
        (json!({}), "input"),
    ] {
        let r = s.post("/v1/embeddings", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], param, "{body}: {}", r.text());
    }
    assert_eq!(s.post("/v1/embeddings", &json!({"input": "x", "dimensions": 384})).status, 200);
    // Both models are served.
    let models = ok(s.get("/v1/models"));
    let ids: Vec<&str> = models["data"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["smollm2-135m", "all-minilm-l6-v2"], "{models}");
    assert_eq!(s.post("/v1/chat/completions", &json!({"messages": user("Hi"), "max_tokens": 2})).status, 200);
    drop(s);

    // An embedding model alone: chat is a 400 that says so; health and models are fine.
    let s = Server::start(&["-m", "all-minilm-l6-v2"], &[]);
    let r = s.post("/v1/chat/completions", &json!({"messages": user("Hi"), "max_tokens": 2}));
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("model_not_generative")), "{}", r.text());
    assert_eq!(ok(s.get("/health"))["status"], "ok");
    assert_eq!(ok(s.get("/v1/models"))["data"][0]["id"], "all-minilm-l6-v2");
    assert_eq!(s.post("/v1/embeddings", &json!({"input": "x"})).status, 200);
    drop(s);
    // A chat model alone: embeddings are a 400 that says how to get them.
    let s = Server::start(&[], &[]);
    let r = s.post("/v1/embeddings", &json!({"input": "x"}));
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (400, Some("model_not_embedding")), "{}", r.text());
}

/// A server started with a `.gguf` file's path serves the model under the file's name without the extension;
/// `--served-model-name` (or `HEARTH_SERVED_MODEL_NAME`) names it instead, in `/v1/models` and in every answer.
#[test]
fn a_gguf_path_is_served_under_its_stem_or_the_served_model_name() {
    let path = match hearth_engine::weights::resolve::resolve("smollm2-135m") {
        Ok(hearth_engine::weights::resolve::ModelLocation::Gguf(p)) => p,
        other => panic!("smollm2-135m is a GGUF file (scripts/fetch-models): {other:?}"),
    };
    let path = path.to_string_lossy();
    let ask = json!({"messages": user("Hi"), "max_tokens": 1});
    let s = Server::start(&["-m", &path], &[]);
    assert_eq!(ok(s.get("/v1/models"))["data"][0]["id"], "SmolLM2-135M-Instruct.Q4_1");
    assert_eq!(ok(s.post("/v1/chat/completions", &ask))["model"], "SmolLM2-135M-Instruct.Q4_1");
    drop(s);
    let s = Server::start(&["-m", &path, "--served-model-name", "my-model"], &[]);
    assert_eq!(ok(s.get("/v1/models/my-model"))["id"], "my-model");
    assert_eq!(ok(s.post("/v1/chat/completions", &ask))["model"], "my-model");
    drop(s);
    let s = Server::start(&[], &[("HEARTH_SERVED_MODEL_NAME", "from-env")]);
    assert_eq!(ok(s.get("/v1/models"))["data"][0]["id"], "from-env");
}

/// A decoder embedding model (the tiny Qwen3 in Qwen3-Embedding's layout) beside the chat model and alone: the
/// server's vectors match the sentence-transformers golden, and its token counts include the appended
/// `<|endoftext|>`.
#[test]
fn decoder_embedding_model_beside_chat_and_alone() {
    let cases = embedding_cases("embeddings_tiny_qwen3.json");
    let dir = repo_root().join("tests/fixtures/tiny-qwen3-embedding");
    let dir = dir.to_string_lossy();
    let s = Server::start(&["--embedding-model", &dir], &[]);
    let texts: Vec<&str> = cases.iter().filter_map(|c| c["text"].as_str()).collect();
    assert_embeddings_match(&ok(s.post("/v1/embeddings", &json!({"model": dir, "input": texts}))), &cases, 64);
    let models = ok(s.get("/v1/models"));
    let ids: Vec<&str> = models["data"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["smollm2-135m", dir.as_ref()], "{models}");
    drop(s);
    // Alone, as --model.
    let s = Server::start(&["-m", &dir], &[]);
    assert_embeddings_match(&ok(s.post("/v1/embeddings", &json!({"input": texts}))), &cases, 64);
}

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The cases of an embeddings golden in `tests/goldens/` (text, input_ids, embedding).
fn embedding_cases(name: &str) -> Vec<Value> {
    let golden: Value =
        serde_json::from_slice(&std::fs::read(repo_root().join("tests/goldens").join(name)).unwrap()).unwrap();
    let cases = golden["cases"].as_array().cloned().unwrap_or_default();
    assert!(cases.len() >= 4, "{golden}");
    cases
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().into_iter().flatten().filter_map(Value::as_f64).collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

/// A `/v1/embeddings` answer to every case's text, in order: `dims`-long vectors at cosine >= 0.9999 with the
/// golden's, and usage counting the golden's tokens. Returns its `data`.
fn assert_embeddings_match(v: &Value, cases: &[Value], dims: usize) -> Vec<Value> {
    let data = v["data"].as_array().cloned().unwrap_or_default();
    assert_eq!(data.len(), cases.len(), "{v}");
    let tokens: usize = cases.iter().map(|c| c["input_ids"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(tokens as u64), "{}", v["usage"]);
    for (i, (d, c)) in data.iter().zip(cases).enumerate() {
        assert_eq!((d["object"].as_str(), d["index"].as_u64()), (Some("embedding"), Some(i as u64)), "{d}");
        let got = floats(&d["embedding"]);
        assert_eq!(got.len(), dims);
        let cos = cosine(&got, &floats(&c["embedding"]));
        assert!(cos >= 0.9999, "input {i} ({:?}): cosine {cos}", c["text"]);
    }
    data
}

/// Standard base64 (with padding) to bytes.
fn base64_decode(s: &str) -> Vec<u8> {
    const ABC: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let vals: Vec<u32> =
        s.bytes().filter(|&b| b != b'=').map(|b| ABC.find(b as char).expect("base64") as u32).collect();
    let mut out = Vec::new();
    for chunk in vals.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, v)| acc | (v << (18 - 6 * i)));
        out.extend(n.to_be_bytes()[1..chunk.len()].iter());
    }
    out
}

/// Anthropic's paths answer every failure in Anthropic's error shape: malformed JSON, a missing field, an unknown
/// path under `/v1/messages`, a wrong method, a body over the limit; and the server keeps serving.
#[test]
fn anthropic_errors_have_anthropics_shape() {
    let s = Server::start(&["--max-body", "4096"], &[]);
    let check = |r: &support::Resp, status: u16, kind: &str| {
        assert_eq!(r.status, status, "{}", r.text());
        let v = r.json();
        assert_eq!((v["type"].as_str(), v["error"]["type"].as_str()), (Some("error"), Some(kind)), "{v}");
        assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    };
    let raw = |method: &str, path: &str, body: &[u8]| {
        support::request(s.port, method, path, &[("content-type", "application/json")], Some(body))
    };
    check(&raw("POST", "/v1/messages", b"{nope"), 400, "invalid_request_error");
    check(&raw("POST", "/v1/messages", b"[1]"), 400, "invalid_request_error");
    let r = s.post("/v1/messages", &json!({"messages": [{"role": "user", "content": "hi"}]}));
    check(&r, 400, "invalid_request_error");
    assert!(r.json()["error"]["message"].as_str().is_some_and(|m| m.contains("max_tokens")), "{}", r.text());
    check(&s.post("/v1/messages/nope", &json!({})), 404, "not_found_error");
    check(&raw("GET", "/v1/messages", b""), 405, "invalid_request_error");
    let big = json!({"max_tokens": 4, "messages": [{"role": "user", "content": "x".repeat(8192)}]});
    check(&s.post("/v1/messages", &big), 413, "request_too_large");
    // Chat Completions keeps OpenAI's shape.
    let v = s.post("/v1/chat/completions", &json!({})).json();
    assert!(v["error"]["message"].is_string() && v.get("type").is_none(), "{v}");
    let v = ok(s.post("/v1/messages", &json!({"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})));
    assert_eq!(v["type"], "message", "{v}");
    // The raw stream: named events in Anthropic's exact order, a ping after the first block starts, no [DONE].
    let r = s.post(
        "/v1/messages",
        &json!({"max_tokens": 4, "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 200);
    assert!(!r.text().contains("[DONE]"), "{}", r.text());
    let names: Vec<String> = r.sse_events().into_iter().map(|(n, _)| n).collect();
    let deltas = names.iter().filter(|n| *n == "content_block_delta").count();
    let mut want = vec!["message_start", "content_block_start", "ping"];
    want.extend(std::iter::repeat_n("content_block_delta", deltas));
    want.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert!(deltas >= 1 && names == want, "{names:?}");
}

/// A Qwen3-shaped checkpoint (tests/fixtures/tiny-qwen3: random weights, q/k norms) served with a Qwen3-style
/// tools-and-thinking template (tools/oracle/templates/qwen3_like.jinja, whose rendering the chat goldens check against
/// transformers). `tool_choice: "required"` makes even random weights answer a Hermes call, with thinking off (the
/// prompt closes an empty thought) and on (the prompt opens none: the model may think first, which these weights do
/// not; `grammar::a_model_may_think_before_its_constraint` checks the thought itself); the call comes back as
/// `tool_calls` with no `reasoning_content`, streams its arguments over several `delta.tool_calls` entries, and the
/// template renders it again with its result in the next turn (without the tools: the context is 512 tokens).
#[test]
fn qwen3_shaped_tools_and_thinking() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let model = root.join("tests/fixtures/tiny-qwen3");
    let t = root.join("tools/oracle/templates/qwen3_like.jinja");
    let s = Server::start(&["-m", model.to_str().unwrap(), "--chat-template", t.to_str().unwrap()], &[]);
    for thinking in [false, true] {
        // The checkpoint's context is 512 tokens and its 512-token vocabulary spells slowly: a short tool.
        let (message, deltas) = required_call(
            &s,
            "w",
            "c",
            2,
            json!({"max_tokens": 60,
                                              "chat_template_kwargs": {"enable_thinking": thinking}}),
        );
        assert!(message.get("reasoning_content").is_none_or(Value::is_null), "{message}");
        assert!(deltas > 1, "a Hermes call's arguments stream in fragments: {deltas} deltas");
        let call = &message["tool_calls"][0];
        let body = json!({"messages": [user("Weather in Lima?")[0], message,
                                       {"role": "tool", "tool_call_id": call["id"], "content": "19"}],
                          "max_tokens": 4, "temperature": 0});
        ok(s.post("/v1/chat/completions", &body));
    }
}

/// `tool_choice: "required"` in each tool format hearth speaks besides Hermes, chosen from the template: Llama 3 JSON
/// (tests/fixtures/templates/chatml-llama3-tools.jinja mentions `<|python_tag|>`), Mistral (`[TOOL_CALLS]`, the
/// oracle's Mistral v0.3-style template) and pythonic (the Gemma 3 template, which does not render tools: they are
/// described in a system message). SmolLM2 answers with a valid call of the enforced shape, returned as
/// `tool_calls` and streamed as one `delta.tool_calls` entry; the call and its result render in the next turn.
#[test]
fn tool_calls_in_every_format() {
    for fixture in [
        "tests/fixtures/templates/chatml-llama3-tools.jinja",
        "tools/oracle/templates/mistral_like.jinja",
        "bench/templates/gemma3.jinja",
    ] {
        let t = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(fixture);
        let s = Server::start(&["--chat-template", t.to_str().unwrap()], &[]);
        let (message, deltas) = required_call(&s, "get_weather", "city", 20, json!({"max_tokens": 40}));
        assert_eq!(deltas, 1, "{fixture}: whole-answer formats send a call in one entry");
        // The call goes back into the conversation (with its id). Gemma's template has no `tool` role: its result
        // comes back as a user message.
        let call = &message["tool_calls"][0];
        let result = if fixture.contains("gemma") {
            json!({"role": "user", "content": "{\"temp_c\": 19}"})
        } else {
            json!({"role": "tool", "tool_call_id": call["id"], "content": "{\"temp_c\": 19}"})
        };
        let tools = tool("get_weather", "city", 20);
        let body = json!({"messages": [user("Weather in Lima?")[0], message, result], "tools": tools,
                          "tool_choice": "auto", "max_tokens": 4, "temperature": 0});
        ok(s.post("/v1/chat/completions", &body));
    }
}

/// A function `name` with one required string parameter `param` of at most `max` characters.
fn tool(name: &str, param: &str, max: usize) -> Value {
    json!([{"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {param: {"type": "string", "maxLength": max}}, "required": [param],
        "additionalProperties": false}}}])
}

/// Ask for a required call of that function (with `extra` fields merged into the body), non-streamed and streamed:
/// it is a valid call, and the streamed one assembled from its deltas is the same. Returns the non-streamed message
/// and how many deltas carried the streamed call.
fn required_call(s: &Server, name: &str, param: &str, max: usize, extra: Value) -> (Value, usize) {
    let mut body = json!({"messages": user("Weather in Lima?"), "tools": tool(name, param, max),
                          "tool_choice": "required", "parallel_tool_calls": false, "temperature": 0});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let v = ok(s.post("/v1/chat/completions", &body));
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls", "{v}");
    let call = &c["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], name, "{v}");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or("")).expect("JSON arguments");
    assert!(args[param].as_str().is_some_and(|a| a.chars().count() <= max), "{v}");
    body["stream"] = json!(true);
    let calls = streamed_calls(&s.post("/v1/chat/completions", &body).sse_json());
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        (calls[0].0.as_str(), Some(calls[0].1.as_str())),
        (name, call["function"]["arguments"].as_str()),
        "streamed and non-streamed calls differ"
    );
    (c["message"].clone(), calls[0].2)
}

/// A vision-language GGUF with llama.cpp's `mmproj` file for its vision tower (`--mmproj`), its engine in a
/// child process (`--isolate` passes the flag on): `/v1/models` lists the image modality and an image gets the
/// answer the checkpoint's own directory gives (tests/fixtures/tiny-qwen2_5_vl and its conversion).
#[test]
fn a_gguf_with_its_mmproj_takes_images() {
    let root = repo_root().join("tests/fixtures");
    let (dir, text, mmproj) =
        (root.join("tiny-qwen2_5_vl"), root.join("tiny-qwen2_5_vl.gguf"), root.join("tiny-qwen2_5_vl-mmproj.gguf"));
    let golden: Value =
        serde_json::from_slice(&std::fs::read(repo_root().join("tests/goldens/tiny_qwen2_5_vl.json")).unwrap())
            .unwrap();
    let png = golden["chat"]["png_base64"].as_str().unwrap();
    let ask = json!({"max_tokens": 6, "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}},
        {"type": "text", "text": golden["chat"]["text"]}]}]});
    let answer = |s: &Server| ok(s.post("/v1/chat/completions", &ask))["choices"][0]["message"]["content"].clone();
    let s = Server::start(&["-m", &dir.to_string_lossy()], &[]);
    let want = answer(&s);
    drop(s);
    let s = Server::start(&["-m", &text.to_string_lossy(), "--mmproj", &mmproj.to_string_lossy(), "--isolate"], &[]);
    assert_eq!(ok(s.get("/v1/models"))["data"][0]["input_modalities"], json!(["text", "image"]));
    assert_eq!(answer(&s), want);
}
