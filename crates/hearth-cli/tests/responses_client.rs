//! The official `openai` Python client's Responses API against the real `hearth serve` (default model
//! smollm2-135m): create, stream (the exact event order and consecutive sequence numbers), a function call and its
//! output sent back with `previous_response_id`, a streamed function call, `text.format` structured output, and the
//! store (retrieve, delete, `store: false`, 404s); and embeddings (`--embedding-model`: the client's default base64
//! decoding gives the float vector). `tests/responses_client.py` runs the calls and prints one JSON line; this test
//! asserts.

mod support;

use serde_json::Value;
use support::python::{no_exception, run_client, venv_python};
use support::Server;

fn check_response(r: &Value, model: &str, what: &str) {
    assert!(r["id"].as_str().is_some_and(|i| i.starts_with("resp_")), "{what}: {r}");
    assert_eq!((r["object"].as_str(), r["model"].as_str()), (Some("response"), Some(model)), "{what}: {r}");
    assert!(matches!(r["status"].as_str(), Some("completed" | "incomplete")), "{what}: {r}");
    let u = &r["usage"];
    let (i, o) = (u["input_tokens"].as_u64().unwrap_or(0), u["output_tokens"].as_u64().unwrap_or(0));
    assert!(i > 0 && o > 0 && u["total_tokens"].as_u64() == Some(i + o), "{what}: {r}");
}

/// Event types and sequence numbers: `response.created`, `response.in_progress`, then `middle` (with each run of a
/// `.delta` event collapsed to one), then `response.completed` or `response.incomplete`; sequence numbers count
/// from 0 without gaps.
fn check_events(e: &Value, middle: &[&str], what: &str) {
    let types: Vec<&str> = e["types"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let seqs: Vec<u64> = e["seqs"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
    assert_eq!(seqs, (0..types.len() as u64).collect::<Vec<_>>(), "{what}: {e}");
    assert!(types.len() > 3, "{what}: {types:?}");
    assert_eq!(&types[..2], ["response.created", "response.in_progress"], "{what}: {types:?}");
    assert!(matches!(types[types.len() - 1], "response.completed" | "response.incomplete"), "{what}: {types:?}");
    // The middle, with runs of deltas collapsed to one.
    let mut got: Vec<&str> = Vec::new();
    for t in &types[2..types.len() - 1] {
        if !(t.ends_with(".delta") && got.last() == Some(t)) {
            got.push(t);
        }
    }
    assert_eq!(got, middle, "{what}: {types:?}");
}

#[test]
fn official_openai_python_client_responses() {
    let python = venv_python();
    let server = Server::start(&["--embedding-model", "all-minilm-l6-v2"], &[]);
    let model = "smollm2-135m";
    let r = run_client("responses_client.py", &format!("http://127.0.0.1:{}/v1", server.port), model);
    eprintln!("client ({}) results: {r}", python.display());

    // Create: one message item; the echoed fields.
    let c = &r["create"];
    no_exception(c, "create");
    check_response(c, model, "create");
    let text = c["output_text"].as_str().unwrap_or("");
    assert!(!text.trim().is_empty(), "{c}");
    assert_eq!(
        (c["output"][0]["type"].as_str(), c["output"][0]["text"].as_str()),
        (Some("message"), Some(text)),
        "{c}"
    );
    assert!(c["output"][0]["id"].as_str().is_some_and(|i| i.starts_with("msg_")), "{c}");
    // An answer the length limit cut is an incomplete response whose last item is incomplete.
    let status = if c["status"] == "incomplete" { "incomplete" } else { "completed" };
    assert_eq!(c["output"][0]["status"], status, "{c}");
    assert_eq!(
        (c["instructions"].as_str(), c["max_output_tokens"].as_u64()),
        (Some("Answer briefly."), Some(16)),
        "{c}"
    );

    // Stream: the documented order, the same greedy text, the final response.
    let s = &r["stream"];
    no_exception(s, "stream");
    check_events(
        s,
        &[
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
        ],
        "stream",
    );
    assert_eq!(s["text"].as_str(), Some(text), "{s}");
    check_response(&s["final"], model, "stream final");
    assert_eq!(s["final"]["output_text"].as_str(), Some(text), "{s}");
    assert_eq!(s["final"]["status"], c["status"], "{s}");

    // A function call, and its output sent back on the stored conversation.
    let f = &r["function_call"];
    no_exception(f, "function_call");
    let first = &f["first"];
    check_response(first, model, "function call");
    let call = first["output"].as_array().into_iter().flatten().find(|i| i["type"] == "function_call").cloned();
    let call = call.unwrap_or_else(|| panic!("no function_call item: {first}"));
    assert!(call["id"].as_str().is_some_and(|i| i.starts_with("fc_")), "{call}");
    assert!(call["call_id"].as_str().is_some_and(|i| i.starts_with("call_")), "{call}");
    assert_eq!((call["name"].as_str(), call["status"].as_str()), (Some("get_weather"), Some("completed")), "{call}");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap_or("")).unwrap_or(Value::Null);
    assert!(args["city"].is_string(), "{call}");
    let second = &f["second"];
    check_response(second, model, "after the function output");
    assert_eq!(second["previous_response_id"], first["id"], "{second}");
    let tokens = |v: &Value| v["usage"]["input_tokens"].as_u64().unwrap_or(0);
    assert!(tokens(second) > tokens(first), "the continuation's prompt holds the first turn: {f}");

    // A streamed function call.
    let fs = &r["function_call_stream"];
    no_exception(fs, "function_call_stream");
    check_events(
        fs,
        &[
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
        ],
        "function_call_stream",
    );
    let streamed: Value = serde_json::from_str(fs["arguments"].as_str().unwrap_or("")).unwrap_or(Value::Null);
    assert!(streamed["city"].is_string(), "{fs}");
    let final_call = &fs["final"]["output"][0];
    assert_eq!(final_call["type"], "function_call", "{fs}");
    assert_eq!(
        serde_json::from_str::<Value>(final_call["arguments"].as_str().unwrap_or("")).ok(),
        Some(streamed),
        "{fs}"
    );

    // text.format: JSON of the schema.
    let j = &r["structured"];
    no_exception(j, "structured");
    let v: Value = serde_json::from_str(j["output_text"].as_str().unwrap_or("")).unwrap_or(Value::Null);
    assert!(v["city"].is_string() && v["country"].is_string(), "{j}");

    // The store: a continuation, retrieve, delete, and 404s after.
    let k = &r["conversation"];
    no_exception(k, "conversation");
    assert!(tokens(&k["second"]) > tokens(&k["first"]), "{k}");
    assert_eq!(k["second"]["previous_response_id"], k["first"]["id"], "{k}");
    assert_eq!(
        (&k["retrieved"]["id"], &k["retrieved"]["output_text"]),
        (&k["first"]["id"], &k["first"]["output_text"]),
        "{k}"
    );
    for (case, exception, status) in [
        ("after_delete", "NotFoundError", 404),
        ("continue_deleted", "NotFoundError", 404),
        ("unstored", "NotFoundError", 404),
        ("bad_tool", "BadRequestError", 400),
    ] {
        let x = &k[case];
        assert_eq!((x["raised"].as_str(), x["status"].as_u64()), (Some(exception), Some(status)), "{case}: {x}");
    }

    // Embeddings through the client: base64 (its default) and float agree.
    let e = &r["embeddings"];
    no_exception(e, "embeddings");
    assert_eq!((e["n"].as_u64(), e["model"].as_str()), (Some(2), Some("all-minilm-l6-v2")), "{e}");
    assert_eq!(e["dims"], serde_json::json!([384, 384]), "{e}");
    let v = |k: &str| e[k].as_array().into_iter().flatten().filter_map(Value::as_f64).collect::<Vec<_>>();
    let (b64, flt) = (v("first"), v("float"));
    assert!(b64.len() == 384 && b64.iter().zip(&flt).all(|(a, b)| (a - b).abs() < 1e-6), "{e}");
    let norm: f64 = flt.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "unit vectors: {norm}");
    assert!(e["prompt_tokens"].as_u64().is_some_and(|n| n > 4), "{e}");
}
