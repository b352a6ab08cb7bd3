//! The official `anthropic` Python client against the real `hearth serve --api-key` (default model smollm2-135m):
//! create, stream (the exact event sequence, and the SDK's stream helper), stop sequences, a tool-use round trip,
//! a streamed tool call, structured output (`output_config.format`), count_tokens, and errors raised as the SDK's exception types with Anthropic's error body.
//! `tests/anthropic_client.py` runs the calls and prints one JSON line; this test asserts.

mod support;

use serde_json::Value;
use support::python::{no_exception, run_client, venv_python};
use support::Server;

/// A whole message's common shape.
fn check_message(m: &Value, model: &str, what: &str) {
    assert!(m["id"].as_str().is_some_and(|i| i.starts_with("msg_")), "{what}: {m}");
    assert_eq!(
        (m["type"].as_str(), m["role"].as_str(), m["model"].as_str()),
        (Some("message"), Some("assistant"), Some(model)),
        "{what}: {m}"
    );
    assert!(m["usage"]["input_tokens"].as_u64().is_some_and(|n| n > 0), "{what}: {m}");
    assert!(m["usage"]["output_tokens"].as_u64().is_some_and(|n| n > 0), "{what}: {m}");
}

/// The text of a message's text blocks.
fn text_of(m: &Value) -> String {
    m["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// Event types: `message_start`, then blocks (`content_block_start`, deltas, `content_block_stop`),
/// `message_delta`, `message_stop`; returns each block's delta count. (The SDK drops `ping` events; serve_e2e checks
/// the raw stream's.)
fn check_events(events: &Value, what: &str) -> Vec<usize> {
    let ev: Vec<&str> = events.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(ev.len() >= 6, "{what}: {ev:?}");
    assert_eq!(&ev[..1], ["message_start"], "{what}: {ev:?}");
    assert_eq!(&ev[ev.len() - 2..], ["message_delta", "message_stop"], "{what}: {ev:?}");
    let mut deltas = Vec::new();
    let mut i = 1;
    while i < ev.len() - 2 {
        assert_eq!(ev[i], "content_block_start", "{what}: event {i} of {ev:?}");
        i += 1;
        let n = ev[i..].iter().take_while(|e| **e == "content_block_delta").count();
        i += n;
        assert_eq!(ev[i], "content_block_stop", "{what}: event {i} of {ev:?}");
        i += 1;
        deltas.push(n);
    }
    deltas
}

#[test]
fn official_anthropic_python_client() {
    let python = venv_python();
    let server = Server::start(&["--api-key", "test-key"], &[]);
    let model = "smollm2-135m";
    let r = run_client("anthropic_client.py", &format!("http://127.0.0.1:{}", server.port), model);
    eprintln!("client ({}) results: {r}", python.display());
    assert!(r["anthropic_version"].as_str().is_some_and(|v| !v.is_empty()), "{r}");

    // Create.
    let c = &r["create"];
    no_exception(c, "create");
    check_message(c, model, "create");
    let text = text_of(c);
    assert!(!text.trim().is_empty(), "{c}");
    assert!(matches!(c["stop_reason"].as_str(), Some("end_turn" | "max_tokens")), "{c}");
    assert_eq!(c["content"].as_array().map(Vec::len), Some(1), "one text block: {c}");

    // Stream: the exact event sequence, one text block, the same greedy text; the SDK's helper agrees.
    let s = &r["stream"];
    no_exception(s, "stream");
    let deltas = check_events(&s["events"], "stream");
    assert!(deltas.len() == 1 && deltas[0] >= 1, "{s}");
    assert_eq!(s["text"].as_str(), Some(text.as_str()), "streamed and whole greedy answers differ: {s}");
    assert_eq!(s["stop_reason"], c["stop_reason"], "{s}");
    assert_eq!(s["output_tokens"], c["usage"]["output_tokens"], "{s}");
    check_message(&s["final"], model, "stream final");
    assert_eq!(text_of(&s["final"]), text, "{s}");

    // A stop sequence ends the answer before it, and is named.
    let q = &r["stop_sequence"];
    no_exception(q, "stop_sequence");
    assert_eq!((q["stop_reason"].as_str(), q["stop_sequence"].as_str()), (Some("stop_sequence"), Some("5")), "{q}");
    assert!(!text_of(q).contains('5'), "{q}");

    // Tool use: `any` makes a valid call; its result goes back as a tool_result block.
    let t = &r["tool_round_trip"];
    no_exception(t, "tool_round_trip");
    let first = &t["first"];
    check_message(first, model, "tool call");
    assert_eq!(first["stop_reason"], "tool_use", "{first}");
    let call = first["content"].as_array().into_iter().flatten().find(|b| b["type"] == "tool_use").cloned();
    let call = call.unwrap_or_else(|| panic!("no tool_use block: {first}"));
    assert!(call["id"].as_str().is_some_and(|i| i.starts_with("toolu_")), "{call}");
    assert_eq!(call["name"], "get_weather", "{call}");
    assert!(call["input"]["city"].is_string(), "{call}");
    check_message(&t["second"], model, "after the tool result");
    assert!(matches!(t["second"]["stop_reason"].as_str(), Some("end_turn" | "max_tokens" | "tool_use")), "{t}");

    // A streamed tool call: one tool_use block whose input_json_delta fragments make the final input.
    let ts = &r["tool_stream"];
    no_exception(ts, "tool_stream");
    let deltas = check_events(&ts["events"], "tool_stream");
    assert!(deltas.len() == 1 && deltas[0] >= 1, "{ts}");
    let streamed: Value = serde_json::from_str(ts["partial_json"].as_str().unwrap_or("")).unwrap_or(Value::Null);
    assert!(streamed["city"].is_string(), "{ts}");
    assert_eq!(ts["stop_reason"], "tool_use", "{ts}");
    let final_call = &ts["final"]["content"][0];
    assert_eq!((final_call["type"].as_str(), &final_call["input"]), (Some("tool_use"), &streamed), "{ts}");

    // Structured output: `output_config.format` makes the answer JSON of the schema.
    let j = &r["structured"];
    no_exception(j, "structured");
    let v: Value = serde_json::from_str(&text_of(j)).unwrap_or_else(|e| panic!("not JSON ({e}): {j}"));
    assert!(v["city"].is_string() && v["country"].is_string(), "{v}");

    // count_tokens: the tools are part of the prompt.
    let n = &r["count_tokens"];
    no_exception(n, "count_tokens");
    let plain = n["plain"].as_u64().unwrap_or(0);
    assert!(plain > 0 && n["with_tools"].as_u64().unwrap_or(0) > plain, "{n}");

    // Errors: the SDK's exception types, Anthropic's error body.
    let e = &r["errors"];
    no_exception(e, "errors");
    for (case, exception, status, kind) in [
        ("empty_messages", "BadRequestError", 400, "invalid_request_error"),
        ("image", "BadRequestError", 400, "invalid_request_error"),
        ("bad_temperature", "BadRequestError", 400, "invalid_request_error"),
        ("bad_key", "AuthenticationError", 401, "authentication_error"),
    ] {
        let x = &e[case];
        assert_eq!((x["raised"].as_str(), x["status"].as_u64()), (Some(exception), Some(status)), "{case}: {x}");
        assert_eq!(x["body"]["type"], "error", "{case}: {x}");
        assert_eq!(x["body"]["error"]["type"], kind, "{case}: {x}");
        assert!(x["body"]["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{case}: {x}");
    }
    assert!(e["image"]["body"]["error"]["message"].as_str().is_some_and(|m| m.contains("image")), "{e}");
}
