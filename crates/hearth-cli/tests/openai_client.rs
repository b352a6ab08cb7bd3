//! The official `openai` Python client against the real `hearth serve` (default model smollm2-135m): chat, chat
//! streaming, completions (text and token prompts), models list / retrieve, a 400 raised as
//! `openai.BadRequestError`, and structured output (`response_format` json_schema / json_object, streamed and not;
//! regex, choice, Lark and GBNF constraints through `extra_body`; an invalid schema as a 400). `tests/openai_client.py` runs the calls and prints one JSON line; this test asserts.
//!
//! The interpreter is `.venv-test/bin/python`, made by `scripts/setup-test-python` (scripts/test runs it first).
//! Without it this test fails; it never skips.

mod support;

use serde_json::Value;
use support::python::{no_exception, run_client, venv_python};
use support::Server;

fn check_usage(u: &Value, what: &str) {
    let p = u["prompt_tokens"].as_u64().unwrap_or_else(|| panic!("{what}: usage {u}"));
    let c = u["completion_tokens"].as_u64().unwrap_or_else(|| panic!("{what}: usage {u}"));
    assert!(p > 0 && c > 0, "{what}: usage {u}");
    assert_eq!(u["total_tokens"].as_u64(), Some(p + c), "{what}: usage {u}");
}

fn check_finish(f: &Value, what: &str) {
    assert!(matches!(f.as_str(), Some("stop" | "length")), "{what}: finish_reason {f}");
}

#[test]
fn official_openai_python_client() {
    let python = venv_python(); // fail before the server starts if the venv is missing
    let server = Server::start(&[], &[]);
    let model = "smollm2-135m";
    let base = format!("http://127.0.0.1:{}/v1", server.port);
    let r = run_client("openai_client.py", &base, model);
    eprintln!("client ({}) results: {r}", python.display());
    assert!(r["openai_version"].as_str().is_some_and(|v| !v.is_empty()), "{r}");

    // Chat, non-streaming.
    let c = &r["chat"];
    no_exception(c, "chat");
    assert_eq!(c["object"], "chat.completion", "{c}");
    assert!(c["id"].as_str().is_some_and(|i| i.starts_with("chatcmpl-")), "{c}");
    assert_eq!(c["model"], model, "{c}");
    assert!(c["created"].as_u64().is_some_and(|t| t > 0), "{c}");
    assert_eq!((c["n_choices"].as_u64(), c["index"].as_u64()), (Some(1), Some(0)), "{c}");
    assert_eq!(c["role"], "assistant", "{c}");
    let chat_text = c["content"].as_str().unwrap_or("");
    assert!(!chat_text.trim().is_empty(), "empty chat content: {c}");
    check_finish(&c["finish_reason"], "chat");
    check_usage(&c["usage"], "chat");

    // Chat, streaming: the same greedy answer, one id, a role delta first, a finish reason, usage last.
    let s = &r["chat_stream"];
    no_exception(s, "chat_stream");
    assert!(s["chunks"].as_u64().is_some_and(|n| n >= 3), "{s}");
    assert_eq!(s["objects"], serde_json::json!(["chat.completion.chunk"]), "{s}");
    assert_eq!(s["ids"].as_array().map(Vec::len), Some(1), "one id across chunks: {s}");
    assert_eq!(s["roles"], serde_json::json!(["assistant"]), "{s}");
    assert!(s["deltas"].as_u64().is_some_and(|n| n >= 1), "{s}");
    assert_eq!(s["content"].as_str(), Some(chat_text), "streamed and non-streamed greedy answers differ: {s}");
    let finishes = s["finish_reasons"].as_array().cloned().unwrap_or_default();
    assert_eq!(finishes.len(), 1, "{s}");
    check_finish(&finishes[0], "chat_stream");
    assert_eq!(finishes[0], c["finish_reason"], "{s}");
    check_usage(&s["usage"], "chat_stream");

    // Completions: a string prompt and the same prompt as token ids give the same greedy text.
    let (ct, ci) = (&r["completion_text"], &r["completion_tokens"]);
    for (v, what) in [(ct, "completion_text"), (ci, "completion_tokens")] {
        no_exception(v, what);
        assert_eq!(v["object"], "text_completion", "{what}: {v}");
        assert!(v["id"].as_str().is_some_and(|i| i.starts_with("cmpl-")), "{what}: {v}");
        assert_eq!(v["model"], model, "{what}: {v}");
        assert_eq!((v["n_choices"].as_u64(), v["index"].as_u64()), (Some(1), Some(0)), "{what}: {v}");
        assert!(v["text"].as_str().is_some_and(|t| !t.is_empty()), "{what}: {v}");
        check_finish(&v["finish_reason"], what);
        check_usage(&v["usage"], what);
    }
    assert_eq!(ci["usage"]["prompt_tokens"], 5, "{ci}");
    assert_eq!(ct["text"], ci["text"], "the text prompt and its token ids should continue the same way");

    // Models.
    let l = &r["models_list"];
    no_exception(l, "models_list");
    assert_eq!(l["object"], "list", "{l}");
    assert!(l["ids"].as_array().is_some_and(|ids| ids.iter().any(|i| i == model)), "{l}");
    assert!(l["objects"].as_array().is_some_and(|o| o.iter().all(|x| x == "model")), "{l}");
    let m = &r["models_retrieve"];
    no_exception(m, "models_retrieve");
    assert_eq!((m["id"].as_str(), m["object"].as_str()), (Some(model), Some("model")), "{m}");
    assert!(m["created"].as_u64().is_some_and(|t| t > 0), "{m}");

    // Errors come back as the client's typed exceptions.
    let b = &r["bad_temperature"];
    no_exception(b, "bad_temperature");
    assert_eq!(b["raised"], "BadRequestError", "temperature=-1 must raise openai.BadRequestError: {b}");
    assert_eq!(b["status_code"], 400, "{b}");
    assert_eq!(b["param"], "temperature", "{b}");
    assert_eq!(b["type"], "invalid_request_error", "{b}");
    assert!(b["message"].as_str().is_some_and(|m| m.contains("temperature")), "{b}");
    let n = &r["unknown_model"];
    no_exception(n, "unknown_model");
    assert_eq!((n["raised"].as_str(), n["status_code"].as_u64()), (Some("NotFoundError"), Some(404)), "{n}");

    // Structured output: every constrained answer follows its schema, regex, choice or grammar.
    let person = |text: &str, what: &str| {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text:?}"));
        let keys: Vec<&String> = v.as_object().map(|o| o.keys().collect()).unwrap_or_default();
        assert_eq!(keys, ["name", "age"], "{what}: {text}");
        assert!(
            v["name"].as_str().is_some_and(|n| n.chars().count() <= 20) && v["age"].as_u64().is_some(),
            "{what}: {text}"
        );
    };
    let j = &r["json_schema"];
    no_exception(j, "json_schema");
    person(j["content"].as_str().unwrap_or(""), "json_schema");
    assert_eq!(j["finish_reason"], "stop", "{j}");
    let js = &r["json_schema_stream"];
    no_exception(js, "json_schema_stream");
    assert_eq!(js["content"], j["content"], "streamed and non-streamed constrained answers differ: {js}");
    assert_eq!(js["finish_reasons"], serde_json::json!(["stop"]), "{js}");
    let o = &r["json_object"];
    no_exception(o, "json_object");
    let text = o["content"].as_str().unwrap_or("");
    if o["finish_reason"] == "stop" {
        assert!(serde_json::from_str::<Value>(text).is_ok_and(|v| v.is_object()), "json_object: {text:?}");
    } else {
        assert!(text.starts_with('{'), "json_object: {text:?}");
    }
    let content = |k: &str| -> String {
        no_exception(&r[k], k);
        r[k]["content"].as_str().unwrap_or_else(|| panic!("{k}: {}", r[k])).to_string()
    };
    let re = content("regex");
    let rest = re.strip_prefix("yes. ").or_else(|| re.strip_prefix("no. ")).unwrap_or_else(|| panic!("regex: {re:?}"));
    assert!(rest.ends_with('.') && rest.starts_with(|c: char| c.is_ascii_uppercase()), "regex: {re:?}");
    assert!(["Paris", "London", "Berlin"].contains(&content("choice").as_str()), "choice: {}", r["choice"]);
    let lark = content("lark");
    let deg = lark.strip_prefix("It is ").and_then(|t| t.strip_suffix(" degrees."));
    assert!(
        deg.is_some_and(|d| !d.is_empty() && d.len() <= 2 && d.chars().all(|c| c.is_ascii_digit())),
        "lark: {lark:?}"
    );
    assert!(["Answer: A", "Answer: B", "Answer: C"].contains(&content("gbnf").as_str()), "gbnf: {}", r["gbnf"]);
    let cr = &r["completion_regex"];
    no_exception(cr, "completion_regex");
    let year = cr["text"].as_str().unwrap_or("");
    assert!(
        year.len() == 6
            && year.starts_with(' ')
            && year.ends_with('.')
            && year[1..5].chars().all(|c| c.is_ascii_digit()),
        "completion_regex: {cr}"
    );
    let b = &r["bad_schema"];
    no_exception(b, "bad_schema");
    assert_eq!((b["raised"].as_str(), b["status_code"].as_u64()), (Some("BadRequestError"), Some(400)), "{b}");
    assert_eq!(b["param"], "response_format", "{b}");
    assert!(b["message"].as_str().is_some_and(|m| m.contains("objekt")), "{b}");

    // Tool calling: `required` and a named function are enforced (valid calls even from a 135M model), parsed into
    // `tool_calls` with `finish_reason: "tool_calls"`, streamed as `delta.tool_calls`; a tool result round-trips.
    let t = &r["tools_required"];
    no_exception(t, "tools_required");
    assert_eq!(t["finish_reason"], "tool_calls", "{t}");
    let calls = t["calls"].as_array().cloned().unwrap_or_default();
    assert!(!calls.is_empty(), "{t}");
    for c in &calls {
        assert!(c["id"].as_str().is_some_and(|i| i.starts_with("call_")) && c["type"] == "function", "{t}");
        let args: Value = serde_json::from_str(c["arguments"].as_str().unwrap_or("")).expect("arguments are JSON");
        match c["name"].as_str() {
            Some("get_weather") => assert!(args["city"].as_str().is_some_and(|s| s.chars().count() <= 20), "{t}"),
            Some("get_time") => assert_eq!(args, serde_json::json!({}), "{t}"),
            other => panic!("tools_required: unknown function {other:?}: {t}"),
        }
    }
    let s = &r["tools_named_stream"];
    no_exception(s, "tools_named_stream");
    let calls = s["calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(calls.len(), 1, "one call with parallel_tool_calls false: {s}");
    assert_eq!((calls[0]["index"].as_u64(), calls[0]["name"].as_str()), (Some(0), Some("get_time")), "{s}");
    assert!(
        serde_json::from_str::<Value>(calls[0]["arguments"].as_str().unwrap_or("")).is_ok_and(|a| a.is_object()),
        "{s}"
    );
    assert_eq!(s["finish_reasons"], serde_json::json!(["tool_calls"]), "{s}");
    let rt = &r["tools_round_trip"];
    no_exception(rt, "tools_round_trip");
    assert!(matches!(rt["finish_reason"].as_str(), Some("stop" | "length" | "tool_calls")), "{rt}");
    let b = &r["bad_tool_choice"];
    no_exception(b, "bad_tool_choice");
    assert_eq!((b["status_code"].as_u64(), b["param"].as_str()), (Some(400), Some("tool_choice")), "{b}");
    drop(server);
}
