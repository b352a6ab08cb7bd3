//! Each chat API's errors name that API's own fields, also where the check is the shared chat core's: the length
//! limit (`max_tokens`, `max_completion_tokens`, `max_output_tokens`), the output format (`response_format`,
//! `text.format`, `output_config.format`), tool schemas (`tools[i].function.parameters`, `tools[i].parameters`,
//! `tools[i].input_schema`), stop strings (`stop`, `stop_sequences`), the conversation (`messages`, `input`) and `n`.
//! The requests go through the real router over a fake model (`fuzz::server`).

mod fuzz;
mod served;

use axum::body::{to_bytes, Body};
use axum::http::{header, Method, Request};
use axum::Router;
use fuzz::server::{ready_router, Template};
use serde_json::{json, Value};
use tower::ServiceExt;

/// (status, body) of one POST.
fn post(router: &Router, path: &str, body: Value) -> (u16, Value) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let req = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .expect("request");
        let resp = router.clone().oneshot(req).await.expect("answer");
        let status = resp.status().as_u16();
        let bytes = to_bytes(resp.into_body(), 1 << 20).await.expect("body");
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    })
}

/// A 400's (param, message) in OpenAI's shape.
fn openai_error(router: &Router, path: &str, body: Value) -> (String, String) {
    let (status, v) = post(router, path, body.clone());
    assert_eq!(status, 400, "{body} -> {v}");
    let e = &v["error"];
    (e["param"].as_str().unwrap_or("<null>").to_string(), e["message"].as_str().unwrap_or_default().to_string())
}

/// A 400's message in Anthropic's shape.
fn anthropic_error(router: &Router, body: Value) -> String {
    let (status, v) = post(router, "/v1/messages", body.clone());
    assert_eq!((status, &v["type"]), (400, &json!("error")), "{body} -> {v}");
    v["error"]["message"].as_str().unwrap_or_default().to_string()
}

/// `base` with the fields of `extra` set.
fn with(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().expect("fields") {
        base[k] = v.clone();
    }
    base
}

/// A JSON schema the output constraint compiler refuses (a reference to nothing).
fn broken_schema() -> Value {
    json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}, "required": ["a"]})
}

/// Assert that `message` names `field` and none of `foreign` (another API's names for it).
fn names(message: &str, field: &str, foreign: &[&str]) {
    assert!(message.contains(&format!("`{field}")), "should name `{field}`: {message}");
    for f in foreign {
        assert!(!message.contains(&format!("`{f}")), "names `{f}`, another API's field: {message}");
    }
}

#[test]
fn responses_errors_name_responses_fields() {
    let (router, _) = ready_router("smollm2-135m", Template::Own);
    let r = |body: Value| openai_error(&router, "/v1/responses", body);
    let (param, msg) = r(json!({"input": "hi", "max_output_tokens": -1}));
    assert_eq!(param, "max_output_tokens");
    names(&msg, "max_output_tokens", &["max_tokens"]);
    assert_eq!(r(json!({"input": "hi", "max_output_tokens": "9"})).0, "max_output_tokens");
    let (param, msg) = r(json!({"input": "hi", "max_output_tokens": 100_000}));
    assert_eq!(param, "max_output_tokens");
    names(&msg, "max_output_tokens", &["max_tokens"]);

    let (param, msg) = r(json!({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": 5}}}));
    assert_eq!(param, "text.format.schema");
    names(&msg, "text.format.schema", &["response_format"]);
    let format = json!({"format": {"type": "json_schema", "name": "x", "schema": broken_schema()}});
    let (param, msg) = r(json!({"input": "hi", "text": format}));
    assert_eq!(param, "text.format");
    names(&msg, "text.format", &["response_format"]);

    let (param, msg) = r(json!({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": 5}]}));
    assert_eq!(param, "tools[0].parameters");
    names(&msg, "tools[0].parameters", &["tools[0].function"]);
    let tool = json!({"type": "function", "name": "f", "parameters": broken_schema()});
    let (param, msg) = r(json!({"input": "hi", "tools": [tool], "tool_choice": "required"}));
    assert_eq!(param, "tools");
    names(&msg, "tools[].parameters", &["tools[].function", "tool_choice"]);
    let tool = json!({"type": "function", "name": "f", "parameters": {"type": "object"}});
    let both =
        json!({"input": "hi", "tools": [tool], "tool_choice": "required", "text": {"format": {"type": "json_object"}}});
    names(&r(both).1, "text.format", &["response_format"]);

    let (param, msg) = r(json!({"input": "long ".repeat(40_000)}));
    assert_eq!(param, "input");
    names(&msg, "input", &["messages"]);
}

#[test]
fn messages_errors_name_anthropic_fields() {
    let (router, _) = ready_router("smollm2-135m", Template::Own);
    let m = json!([{"role": "user", "content": "hi"}]);
    let a = |extra: Value| anthropic_error(&router, with(json!({"messages": m, "max_tokens": 5}), extra));
    names(&a(json!({"stop_sequences": vec!["a"; 17]})), "stop_sequences", &["stop`"]);
    names(&a(json!({"stop_sequences": [""]})), "stop_sequences", &["stop`"]);
    names(&a(json!({"max_tokens": 100_000})), "max_tokens", &["max_completion_tokens"]);
    let format = json!({"format": {"type": "json_schema", "schema": broken_schema()}});
    names(&a(json!({"output_config": format})), "output_config.format", &["response_format"]);
    let tool = json!({"name": "f", "input_schema": broken_schema()});
    let msg = a(json!({"tools": [tool], "tool_choice": {"type": "any"}}));
    names(&msg, "tools[].input_schema", &["tools[].function", "tool_choice"]);
    let tool = json!({"name": "f", "input_schema": {"type": "object"}});
    let format = json!({"format": {"type": "json_schema", "schema": {"type": "object"}}});
    let msg = a(json!({"tools": [tool], "tool_choice": {"type": "any"}, "output_config": format}));
    names(&msg, "output_config.format", &["response_format"]);
}

#[test]
fn chat_errors_name_chat_fields() {
    let (router, _) = ready_router("smollm2-135m", Template::Own);
    let m = json!([{"role": "user", "content": "hi"}]);
    let c = |extra: Value| openai_error(&router, "/v1/chat/completions", with(json!({"messages": m}), extra));
    // The fake engine's batch is 8 rows.
    let (param, msg) = c(json!({"n": 9}));
    assert_eq!(param, "n", "{msg}");
    names(&msg, "n", &[]);
    let (param, msg) = c(json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": 5}}]}));
    assert_eq!(param, "tools[0].function.parameters");
    names(&msg, "tools[0].function.parameters", &[]);
    let (param, msg) = c(json!({"max_completion_tokens": 100_000, "max_tokens": 5}));
    assert_eq!(param, "max_completion_tokens");
    names(&msg, "max_completion_tokens", &["max_tokens"]);
    assert_eq!(c(json!({"max_tokens": 100_000})).0, "max_tokens");
    let format = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": broken_schema()}});
    assert_eq!(c(json!({"response_format": format})).0, "response_format");
    let tool = json!({"type": "function", "function": {"name": "f", "parameters": broken_schema()}});
    let (param, msg) = c(json!({"tools": [tool], "tool_choice": "required"}));
    assert_eq!(param, "tools");
    names(&msg, "tools[].function.parameters", &["tool_choice"]);
    let (param, _) = openai_error(&router, "/v1/completions", json!({"prompt": "hi", "n": 9}));
    assert_eq!(param, "n");
}
