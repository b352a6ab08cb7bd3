//! Checking answers: every success in its route's shape, every failure an OpenAI error; no panics anywhere.

use super::cases::{Case, Route};
use super::server::{Template, SERVERS};
use axum::body::{to_bytes, Body};
use axum::http::{header, HeaderName, Method, Request};
use axum::Router;
use hearth_server::api::openai::completions;
use hearth_server::api::{anthropic, responses};
use hearth_server::chat::{params, template, ChatRequest};
use hearth_server::error::ApiError;
use hearth_server::wire::admin::DetokenizeRequest;
use hearth_server::wire::anthropic::MessagesRequest;
use hearth_server::wire::chat::{ChatCompletionRequest, Conversation};
use hearth_server::wire::completions::CompletionRequest;
use hearth_server::wire::de::parse_object;
use hearth_server::wire::responses::ResponsesRequest;
use hearth_server::wire::RequestBody;
use hearth_server::SamplingDefaults;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use tower::ServiceExt;

/// `{"error": {"message": non-empty string, "type": string, "param": null|string, "code": null|string}}`, exactly.
pub fn check_error(v: &Value) -> Result<(), String> {
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
    if e["message"].as_str().is_none_or(str::is_empty) {
        return Err("empty or non-string message".into());
    }
    if e["type"].as_str().is_none_or(str::is_empty) {
        return Err("empty or non-string type".into());
    }
    for k in ["param", "code"] {
        if !(e[k].is_null() || e[k].is_string()) {
            return Err(format!("`{k}` is neither null nor a string"));
        }
    }
    Ok(())
}

pub fn check_choice_common(c: &Value, object: &str) -> Result<(), String> {
    if !c["index"].is_u64() {
        return Err(format!("{object}: choice without an integer index: {c}"));
    }
    Ok(())
}

pub fn check_usage(u: &Value) -> Result<(), String> {
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        if !u[k].is_u64() {
            return Err(format!("usage.{k} is not an integer: {u}"));
        }
    }
    Ok(())
}

pub fn check_finish(f: &Value) -> Result<(), String> {
    match f.as_str() {
        Some("stop" | "length") => Ok(()),
        _ => Err(format!("bad finish_reason {f}")),
    }
}

/// Anthropic's error shape, exactly: `{"type": "error", "error": {"type": string, "message": non-empty string}}`.
pub fn check_anthropic_error(v: &Value) -> Result<(), String> {
    let e = v.get("error").and_then(Value::as_object).ok_or("no `error` object")?;
    let mut keys: Vec<&str> = e.keys().map(String::as_str).collect();
    keys.sort();
    if v["type"] != "error" || v.as_object().map(|o| o.len()) != Some(2) || keys != ["message", "type"] {
        return Err(format!("not Anthropic's error shape: {v}"));
    }
    if e["message"].as_str().is_none_or(str::is_empty) || e["type"].as_str().is_none_or(str::is_empty) {
        return Err(format!("empty message or type: {v}"));
    }
    Ok(())
}

/// The named events of a stream (`event: NAME` + `data: {json}` frames): each data's `type` is its name.
fn named_events(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for frame in text.split("\n\n").filter(|f| !f.is_empty()) {
        if frame.starts_with(':') {
            continue;
        }
        let line = |prefix: &str| frame.lines().find_map(|l| l.strip_prefix(prefix));
        let short: String = frame.chars().take(200).collect();
        let name = line("event: ").ok_or_else(|| format!("frame without a name: {short:?}"))?;
        let data = line("data: ").ok_or_else(|| format!("frame without data: {short:?}"))?;
        let v: Value = serde_json::from_str(data).map_err(|e| format!("SSE data is not JSON ({e}): {data}"))?;
        if v["type"] != name {
            return Err(format!("event {name} carries type {}", v["type"]));
        }
        out.push(v);
    }
    Ok(out)
}

/// A Messages answer, whole or streamed, or a count.
fn check_messages(path: &str, content_type: &str, body: &[u8]) -> Result<(), String> {
    if content_type.starts_with("text/event-stream") {
        let text = std::str::from_utf8(body).map_err(|e| format!("SSE body is not UTF-8: {e}"))?;
        let ev = named_events(text)?;
        let types: Vec<&str> = ev.iter().filter_map(|v| v["type"].as_str()).collect();
        if types.first() != Some(&"message_start") || types.last() != Some(&"message_stop") {
            return Err(format!("stream events {types:?}"));
        }
        let stop = ev.iter().find(|v| v["type"] == "message_delta").map(|v| v["delta"]["stop_reason"].clone());
        return match stop.as_ref().and_then(Value::as_str) {
            Some("end_turn" | "max_tokens" | "stop_sequence" | "tool_use") => Ok(()),
            _ => Err(format!("stream stop_reason {stop:?}: {types:?}")),
        };
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("200 body is not JSON ({e})"))?;
    if path.ends_with("/count_tokens") {
        return if v["input_tokens"].as_u64().is_some() { Ok(()) } else { Err(format!("count answer {v}")) };
    }
    let stop_ok = matches!(v["stop_reason"].as_str(), Some("end_turn" | "max_tokens" | "stop_sequence" | "tool_use"));
    if v["type"] != "message" || !v["content"].is_array() || !stop_ok || !v["usage"]["output_tokens"].is_u64() {
        return Err(format!("bad message {v}"));
    }
    Ok(())
}

/// A Responses answer, whole or streamed.
fn check_responses(content_type: &str, body: &[u8]) -> Result<(), String> {
    let status_ok =
        |r: &Value| matches!(r["status"].as_str(), Some("completed" | "incomplete")) && r["output"].is_array();
    if content_type.starts_with("text/event-stream") {
        let text = std::str::from_utf8(body).map_err(|e| format!("SSE body is not UTF-8: {e}"))?;
        let ev = named_events(text)?;
        for (i, v) in ev.iter().enumerate() {
            if v["sequence_number"].as_u64() != Some(i as u64) {
                return Err(format!("event {i} has sequence_number {}", v["sequence_number"]));
            }
        }
        let last = ev.last().ok_or("an empty stream")?;
        let done = matches!(last["type"].as_str(), Some("response.completed" | "response.incomplete"));
        return if done && status_ok(&last["response"]) { Ok(()) } else { Err(format!("last event {last}")) };
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("200 body is not JSON ({e})"))?;
    if v["object"] != "response" || !status_ok(&v) {
        return Err(format!("bad response {v}"));
    }
    Ok(())
}

pub fn check_success(route: Route, path: &str, content_type: &str, body: &[u8]) -> Result<(), String> {
    match route {
        Route::Messages => return check_messages(path, content_type, body),
        Route::Responses => return check_responses(content_type, body),
        Route::Other if path == "/metrics" => {
            let text = std::str::from_utf8(body).map_err(|e| format!("metrics are not UTF-8: {e}"))?;
            return if text.starts_with("# HELP") { Ok(()) } else { Err(format!("metrics: {text:.200}")) };
        }
        // The web chat's page.
        Route::Other if path == "/" => {
            let page = content_type.starts_with("text/html") && body.starts_with(b"<!doctype html>");
            return if page { Ok(()) } else { Err(format!("GET / is not the web chat's page: {content_type}")) };
        }
        _ => {}
    }
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
                // `content` is text, or null when the answer is only tool calls or only a thought (cut off by
                // max_tokens inside it: docs/server-api.md).
                let m = &c["message"];
                let only_calls = m["tool_calls"].as_array().is_some_and(|l| !l.is_empty());
                let only_thought = m["reasoning_content"].is_string();
                let content_ok = m["content"].is_string() || (m["content"].is_null() && (only_calls || only_thought));
                if m["role"] != "assistant" || !content_ok {
                    return Err(format!("bad message {m}"));
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
        Route::Messages | Route::Responses => Ok(()),
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

/// The origin of the page every case comes from (a loopback one, which the server lets call it).
const BROWSER_ORIGIN: &str = "http://localhost:5173";

/// What a case returned: the status, and whether it passed the checks.
pub async fn run_case(router: &Router, case: &Case) -> Result<u16, String> {
    let req = Request::builder()
        .method(case.method.clone())
        .uri(case.path.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ORIGIN, BROWSER_ORIGIN)
        .body(Body::from(case.body.clone()))
        .map_err(|e| format!("building the request: {e}"))?;
    let resp = router.clone().oneshot(req).await.map_err(|e| format!("router error: {e}"))?;
    let status = resp.status();
    let content_type = resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    // Every answer, error or not, is open to a loopback page and carries a request id.
    let header_of = |name| resp.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    if header_of(header::ACCESS_CONTROL_ALLOW_ORIGIN) != BROWSER_ORIGIN
        || header_of(HeaderName::from_static("x-request-id")).is_empty()
    {
        return Err(format!("{status} without CORS or request id headers: {:?}", resp.headers()));
    }
    let body = to_bytes(resp.into_body(), 64 << 20).await.map_err(|e| format!("reading the body: {e}"))?;
    if status.is_success() {
        // Every OPTIONS request is answered as a CORS preflight: an empty 200.
        if case.method == Method::OPTIONS {
            return if body.is_empty() {
                Ok(status.as_u16())
            } else {
                Err(format!("OPTIONS answered {status}: {body:?}"))
            };
        }
        check_success(case.route, &case.path, &content_type, &body)?;
        return Ok(status.as_u16());
    }
    if !content_type.starts_with("application/json") {
        return Err(format!("{status} with content-type {content_type:?}: {}", String::from_utf8_lossy(&body)));
    }
    let v: Value = serde_json::from_slice(&body).map_err(|e| format!("{status} body is not JSON ({e})"))?;
    if case.path.starts_with("/v1/messages") {
        check_anthropic_error(&v).map_err(|e| format!("{status}: {e}"))?;
        return if status.is_client_error() { Ok(status.as_u16()) } else { Err(format!("{status}: {v}")) };
    }
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
pub fn direct_parsers(body: &[u8], vocab: usize) -> Result<(), String> {
    let as_json = |e: &ApiError| serde_json::to_value(e.body()).map_err(|e| e.to_string());
    let m = match parse_object(body) {
        Ok(m) => Value::Object(m),
        Err(e) => return check_error(&as_json(&e.into())?),
    };
    let d = SamplingDefaults::default();
    let mut errs: Vec<Option<ApiError>> = Vec::new();
    match ChatCompletionRequest::from_body(&m) {
        Ok(chat) => {
            let chat = ChatRequest::from(chat);
            errs.push(params::resolve(&chat.params, &d, vocab, chat.fields).err());
            errs.push(params::top_count("top_logprobs", chat.top_logprobs).err());
            errs.push(template::normalize(&chat.conversation).err());
        }
        Err(e) => errs.push(Some(e.into())),
    }
    match CompletionRequest::from_body(&m) {
        Ok(c) => errs.push(completions::checked_prompts(c.options.prompt, vocab).err()),
        Err(e) => errs.push(Some(e.into())),
    }
    errs.push(Conversation::from_body(&m).err().map(ApiError::from));
    match MessagesRequest::from_body(&m) {
        Ok(r) => errs.push(anthropic::request::translate(r, false).err()),
        Err(e) => errs.push(Some(e.into())),
    }
    match ResponsesRequest::from_body(&m) {
        Ok(r) => errs.push(responses::request::translate(&r, Vec::new()).err()),
        Err(e) => errs.push(Some(e.into())),
    }
    match DetokenizeRequest::from_body(&m) {
        Ok(DetokenizeRequest { tokens: Some(ids) }) => errs.push(ids.check("tokens", vocab).err().map(ApiError::from)),
        Ok(_) => {}
        Err(e) => errs.push(Some(e.into())),
    }
    for e in errs.into_iter().flatten() {
        check_error(&as_json(&e)?)?;
        if !e.status.is_client_error() {
            return Err(format!("parser returned {}: {}", e.status, e.message));
        }
    }
    Ok(())
}

pub fn show(case: &Case) -> String {
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

pub static PANICS: AtomicUsize = AtomicUsize::new(0);
/// Panics inside minijinja, which `template::render` contains and answers as a 400 `template_error`.
pub static TEMPLATE_PANICS: AtomicUsize = AtomicUsize::new(0);
pub static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

/// Count every panic, on any thread (the engine thread and spawned stream tasks catch their own).
pub fn install_panic_counter() {
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

pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.trim().parse().ok())
}
