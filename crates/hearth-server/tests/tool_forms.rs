//! Tool calls as models write them outside their template's format, through every chat API, streamed and whole:
//! a scripted model writes exactly the text a test puts between `<<<` and `>>>` in the user's message, behind a real
//! engine, SmolLM2's tokenizer, a Hermes chat template shaped as Qwen 2.5's and the tools' `auto` grammar (which the
//! script passes through: a call it opens is already valid).

mod served;

use axum::body::{to_bytes, Body};
use axum::http::{Method, Request};
use axum::Router;
use hearth_engine::attention::BatchContext;
use hearth_engine::tokenizer::Tokenizer;
use serde_json::{json, Value};
use served::{FnModel, Template};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tower::ServiceExt;

/// A Hermes template as Qwen 2.5's: the tools in the system message, `<tool_call>` asked for.
const QWEN25_LIKE: &str = r#"{%- if tools %}<|im_start|>system
You are a helpful assistant.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"#;

fn router() -> (Router, Arc<Tokenizer>) {
    let mut tok = None;
    let (router, _) = served::ready_router("smollm2-135m", Template::Source(QWEN25_LIKE), 512, |cfg, t| {
        tok = Some(t.clone());
        let (t, rows) = (t.clone(), Mutex::new(HashMap::new()));
        let logits = move |toks: &[u32], ctx: &BatchContext, vocab| served::scripted(&t, &rows, toks, ctx, vocab);
        Box::new(FnModel { cfg, max_positions: 4096, logits })
    });
    (router, tok.expect("the tokenizer"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Messages,
    Responses,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    /// The model stopped after calling.
    Calls,
    /// The model stopped with text only.
    Stop,
    /// The length limit.
    Length,
}

/// What an API answered, in one shape: the text, the calls (name, arguments), how it finished.
#[derive(Debug, Clone, PartialEq)]
struct Got {
    text: String,
    calls: Vec<(String, Value)>,
    finish: Finish,
}

const PARAMS: &str = r#"{"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}"#;

fn body(api: Api, script: &str, max_tokens: Option<usize>, stream: bool) -> (&'static str, Value) {
    let params: Value = serde_json::from_str(PARAMS).expect("schema");
    let names = ["get_weather", "get_time"];
    let content = format!("<<<{script}>>>");
    let mut b = match api {
        Api::Chat => json!({"messages": [{"role": "user", "content": content}], "tool_choice": "auto",
            "tools": names.map(|n| json!({"type": "function", "function": {"name": n, "parameters": params}}))}),
        Api::Messages => json!({"messages": [{"role": "user", "content": content}], "tool_choice": {"type": "auto"},
            "max_tokens": 1000, "tools": names.map(|n| json!({"name": n, "input_schema": params}))}),
        Api::Responses => json!({"input": content, "tool_choice": "auto",
            "tools": names.map(|n| json!({"type": "function", "name": n, "parameters": params}))}),
    };
    b["stream"] = json!(stream);
    if let Some(m) = max_tokens {
        b[if api == Api::Responses { "max_output_tokens" } else { "max_tokens" }] = json!(m);
    }
    let path = match api {
        Api::Chat => "/v1/chat/completions",
        Api::Messages => "/v1/messages",
        Api::Responses => "/v1/responses",
    };
    (path, b)
}

async fn ask(router: &Router, api: Api, script: &str, max_tokens: Option<usize>, stream: bool) -> Got {
    let (path, b) = body(api, script, max_tokens, stream);
    let req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(b.to_string()))
        .expect("request");
    let resp = router.clone().oneshot(req).await.expect("answer");
    let status = resp.status();
    let raw = to_bytes(resp.into_body(), 1 << 22).await.expect("body");
    let text = String::from_utf8_lossy(&raw).into_owned();
    assert_eq!(status, 200, "{text}");
    if !stream {
        return whole(api, &serde_json::from_str(&text).expect("JSON"));
    }
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).expect("an event's JSON"))
        .collect();
    streamed(api, &events)
}

fn args(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
        v => v.clone(),
    }
}

fn whole(api: Api, v: &Value) -> Got {
    let (mut text, mut calls) = (String::new(), Vec::new());
    let finish = match api {
        Api::Chat => {
            let c = &v["choices"][0];
            text = c["message"]["content"].as_str().unwrap_or_default().to_string();
            for t in c["message"]["tool_calls"].as_array().into_iter().flatten() {
                calls.push((
                    t["function"]["name"].as_str().unwrap_or_default().into(),
                    args(&t["function"]["arguments"]),
                ));
            }
            match c["finish_reason"].as_str() {
                Some("tool_calls") => Finish::Calls,
                Some("length") => Finish::Length,
                _ => Finish::Stop,
            }
        }
        Api::Messages => {
            for b in v["content"].as_array().into_iter().flatten() {
                match b["type"].as_str() {
                    Some("text") => text.push_str(b["text"].as_str().unwrap_or_default()),
                    Some("tool_use") => calls.push((b["name"].as_str().unwrap_or_default().into(), b["input"].clone())),
                    _ => {}
                }
            }
            match v["stop_reason"].as_str() {
                Some("tool_use") => Finish::Calls,
                Some("max_tokens") => Finish::Length,
                _ => Finish::Stop,
            }
        }
        Api::Responses => {
            for item in v["output"].as_array().into_iter().flatten() {
                match item["type"].as_str() {
                    Some("message") => item["content"].as_array().into_iter().flatten().for_each(|c| {
                        text.push_str(c["text"].as_str().unwrap_or_default());
                    }),
                    Some("function_call") => {
                        assert_eq!(item["status"], "completed", "a call that completed: {item}");
                        calls.push((item["name"].as_str().unwrap_or_default().into(), args(&item["arguments"])));
                    }
                    _ => {}
                }
            }
            match v["status"].as_str() {
                Some("incomplete") => Finish::Length,
                _ if calls.is_empty() => Finish::Stop,
                _ => Finish::Calls,
            }
        }
    };
    Got { text, calls, finish }
}

/// The answer a stream's events add up to (Responses: its final response, and the text its deltas sent).
fn streamed(api: Api, events: &[Value]) -> Got {
    let (mut text, mut names, mut args_text) = (String::new(), Vec::<String>::new(), Vec::<String>::new());
    let mut finish = Finish::Stop;
    for e in events {
        match api {
            Api::Chat => {
                let c = &e["choices"][0];
                text.push_str(c["delta"]["content"].as_str().unwrap_or_default());
                for t in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
                    if let Some(n) = t["function"]["name"].as_str() {
                        names.push(n.into());
                        args_text.push(String::new());
                    }
                    if let (Some(a), Some(last)) = (t["function"]["arguments"].as_str(), args_text.last_mut()) {
                        last.push_str(a);
                    }
                }
                match c["finish_reason"].as_str() {
                    Some("tool_calls") => finish = Finish::Calls,
                    Some("length") => finish = Finish::Length,
                    _ => {}
                }
            }
            Api::Messages => match e["type"].as_str() {
                Some("content_block_start") if e["content_block"]["type"] == "tool_use" => {
                    names.push(e["content_block"]["name"].as_str().unwrap_or_default().into());
                    args_text.push(String::new());
                }
                Some("content_block_delta") => {
                    text.push_str(e["delta"]["text"].as_str().unwrap_or_default());
                    if let (Some(a), Some(last)) = (e["delta"]["partial_json"].as_str(), args_text.last_mut()) {
                        last.push_str(a);
                    }
                }
                Some("message_delta") => {
                    finish = match e["delta"]["stop_reason"].as_str() {
                        Some("tool_use") => Finish::Calls,
                        Some("max_tokens") => Finish::Length,
                        _ => Finish::Stop,
                    }
                }
                _ => {}
            },
            Api::Responses => match e["type"].as_str() {
                Some("response.output_text.delta") => text.push_str(e["delta"].as_str().unwrap_or_default()),
                Some("response.completed" | "response.incomplete") => {
                    let mut got = whole(api, &e["response"]);
                    assert_eq!(got.text, text, "the final response's text is what the deltas sent");
                    got.text = text;
                    return got;
                }
                _ => {}
            },
        }
    }
    let calls =
        names.into_iter().zip(args_text.iter().map(|a| serde_json::from_str(a).unwrap_or(Value::Null))).collect();
    Got { text, calls, finish }
}

fn call(name: &str, location: &str) -> (String, Value) {
    (name.to_string(), json!({"location": location}))
}

/// The cases: a script, its length limit, and what every API answers for it.
fn cases(tok: &Tokenizer) -> Vec<(String, Option<usize>, Got)> {
    let paris = "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}";
    let tokyo = "{\"name\": \"get_time\", \"arguments\": {\"location\": \"Tokyo\"}}";
    let pretty =
        "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"location\": \"Paris\"\n  }\n}\n```";
    let got = |text: &str, calls: Vec<(String, Value)>, finish| Got { text: text.into(), calls, finish };
    let undeclared = "```json\n{\"name\": \"reverse_string\", \"arguments\": {\"s\": \"abc\"}}\n```";
    // A list the length limit cuts inside its second call.
    let list = format!("```json\n[{paris}, {tokyo}]\n```");
    let ids = tok.encode(&list, false).expect("tokens");
    let cut = (1..ids.len())
        .find(|&k| tok.decode(&ids[..k], false).contains("\"get_time\", \"argu"))
        .expect("a cut inside the second call");
    vec![
        (pretty.into(), None, got("", vec![call("get_weather", "Paris")], Finish::Calls)),
        (
            format!("I'll check the weather for you.\n{pretty}"),
            None,
            got("I'll check the weather for you.\n", vec![call("get_weather", "Paris")], Finish::Calls),
        ),
        (tokyo.into(), None, got("", vec![call("get_time", "Tokyo")], Finish::Calls)),
        (
            "Let me see. <function=get_time>{\"location\": \"Lima\"}</function>".into(),
            None,
            got("Let me see. ", vec![call("get_time", "Lima")], Finish::Calls),
        ),
        (
            "<tool_call>\n<function=get_time>\n<parameter=location>\nLima\n</parameter>\n</function>\n</tool_call>"
                .into(),
            None,
            got("", vec![call("get_time", "Lima")], Finish::Calls),
        ),
        (list.clone(), None, got("", vec![call("get_weather", "Paris"), call("get_time", "Tokyo")], Finish::Calls)),
        (undeclared.into(), None, got(undeclared, vec![], Finish::Stop)),
        (list, Some(cut), got("", vec![call("get_weather", "Paris")], Finish::Length)),
    ]
}

fn check(api: Api) {
    let (router, tok) = router();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    for (script, max_tokens, want) in cases(&tok) {
        for stream in [false, true] {
            let got = rt.block_on(ask(&router, api, &script, max_tokens, stream));
            assert_eq!(got, want, "{api:?} stream={stream} {script:?} max_tokens={max_tokens:?}");
        }
    }
}

#[test]
fn chat_completions() {
    check(Api::Chat);
}

#[test]
fn anthropic_messages() {
    check(Api::Messages);
}

#[test]
fn responses() {
    check(Api::Responses);
}
