//! Harmony answers (gpt-oss) through the chat API, whole and streamed: a scripted model writes exactly the text a
//! test puts between `<<<` and `>>>` in the user's message, behind a real engine, SmolLM2's tokenizer (which spells
//! harmony's markers as text: the split reads the decoded text either way) and a template that speaks harmony.

mod served;

use axum::body::{to_bytes, Body};
use axum::http::{Method, Request};
use axum::Router;
use hearth_engine::attention::BatchContext;
use serde_json::{json, Value};
use served::{FnModel, Template};
use std::collections::HashMap;
use std::sync::Mutex;
use tower::ServiceExt;

/// The shape of gpt-oss's template: messages with channels, the generation prompt `<|start|>assistant`.
const HARMONY: &str = r#"{%- for message in messages %}<|start|>{{ message.role }}
{%- if message.role == "assistant" %}<|channel|>final{% endif %}<|message|>{{ message.content }}<|end|>{% endfor %}
{%- if add_generation_prompt %}<|start|>assistant{% endif %}"#;

fn router() -> Router {
    served::ready_router("smollm2-135m", Template::Source(HARMONY), 512, |cfg, t| {
        let (t, rows) = (t.clone(), Mutex::new(HashMap::new()));
        let logits = move |toks: &[u32], ctx: &BatchContext, vocab| served::scripted(&t, &rows, toks, ctx, vocab);
        Box::new(FnModel { cfg, max_positions: 4096, logits })
    })
    .0
}

async fn post(router: &Router, body: Value) -> (u16, String) {
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let resp = router.clone().oneshot(req).await.expect("answer");
    let status = resp.status().as_u16();
    let raw = to_bytes(resp.into_body(), 1 << 22).await.expect("body");
    (status, String::from_utf8_lossy(&raw).into_owned())
}

fn chat(script: &str, stream: bool) -> Value {
    json!({"messages": [{"role": "user", "content": format!("<<<{script}>>>")}], "stream": stream, "max_tokens": 200,
           "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})
}

/// (reasoning, content, calls as (name, arguments)) of a whole answer or of a stream's deltas.
fn parts(text: &str, stream: bool) -> (String, Option<String>, Vec<(String, Value)>) {
    let mut calls: Vec<(String, String)> = Vec::new();
    let (mut reasoning, mut content) = (String::new(), None::<String>);
    let messages: Vec<Value> = if stream {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str::<Value>(d).expect("an event")["choices"][0]["delta"].clone())
            .collect()
    } else {
        vec![serde_json::from_str::<Value>(text).expect("JSON")["choices"][0]["message"].clone()]
    };
    for m in messages {
        reasoning.push_str(m["reasoning_content"].as_str().unwrap_or_default());
        if let Some(c) = m["content"].as_str() {
            content.get_or_insert_with(String::new).push_str(c);
        }
        for t in m["tool_calls"].as_array().into_iter().flatten() {
            let i = t["index"].as_u64().unwrap_or(calls.len() as u64) as usize;
            if calls.len() <= i {
                calls.push((String::new(), String::new()));
            }
            calls[i].0.push_str(t["function"]["name"].as_str().unwrap_or_default());
            calls[i].1.push_str(t["function"]["arguments"].as_str().unwrap_or_default());
        }
    }
    let calls = calls
        .into_iter()
        .map(|(n, a)| (n, serde_json::from_str(&a).unwrap_or_else(|e| panic!("arguments {a:?} ({e}) in {text}"))))
        .collect();
    (reasoning, content.filter(|c| !c.is_empty()), calls)
}

#[tokio::test]
async fn channels_become_reasoning_content_and_tool_calls() {
    let router = router();
    let think = "<|channel|>analysis<|message|>The user wants the weather.<|end|>";
    let call = format!(
        "{think}<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>\
         {{\"location\": \"Paris\"}}<|call|> "
    );
    let answer = format!("{think}<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|> ");
    for stream in [false, true] {
        let (status, text) = post(&router, chat(&call, stream)).await;
        assert_eq!(status, 200, "{text}");
        let (r, c, calls) = parts(&text, stream);
        assert_eq!(r, "The user wants the weather.", "stream={stream}");
        assert_eq!(c, None, "stream={stream}: only a call");
        assert_eq!(calls, vec![("get_weather".to_string(), json!({"location": "Paris"}))], "stream={stream}");
        let (status, text) = post(&router, chat(&answer, stream)).await;
        assert_eq!(status, 200, "{text}");
        let (r, c, calls) = parts(&text, stream);
        assert_eq!((r.as_str(), c.as_deref(), calls.len()), ("The user wants the weather.", Some("It is sunny."), 0));
    }
}

/// `tool_choice` `required` and a named function are enforced in harmony's channels (the grammar's own tests are
/// in tool_grammar.rs): a scripted call passes through it whole; a constraint on the whole answer is refused by
/// name.
#[tokio::test]
async fn enforced_calls_pass_and_whole_answer_constraints_are_refused_by_name() {
    let router = router();
    let call = "<|channel|>analysis<|message|>Weather.<|end|><|start|>assistant<|channel|>commentary \
                to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"Paris\"}<|call|>";
    for choice in [json!("required"), json!({"type": "function", "function": {"name": "get_weather"}})] {
        for stream in [false, true] {
            let mut b = chat(call, stream);
            b["tool_choice"] = choice.clone();
            let (status, text) = post(&router, b).await;
            assert_eq!(status, 200, "{text}");
            let (r, c, calls) = parts(&text, stream);
            assert_eq!((r.as_str(), c), ("Weather.", None), "{choice} stream={stream}");
            assert_eq!(calls, vec![("get_weather".to_string(), json!({"location": "Paris"}))], "{choice}");
        }
    }
    let mut b = chat("hi", false);
    b["response_format"] = json!({"type": "json_object"});
    let (status, text) = post(&router, b).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("response_format") && text.contains("harmony"), "{text}");
}
