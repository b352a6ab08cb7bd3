//! `hearth serve --draft-model`: SmolLM2 drafting for itself serves the same answers as without speculation and
//! reports the drafts it kept; a prediction given as token ids (with the ids from `return_token_ids`) is kept;
//! a draft model with another tokenizer, or `--speculative draft` without one, stops the server at start with a
//! clear message; an encoded KV cache speculates the same way in an isolated engine.

mod support;

use serde_json::{json, Value};
use std::process::Command;
use support::*;

fn ok(r: Resp) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn details(v: &Value) -> (u64, u64) {
    let d = &v["usage"]["completion_tokens_details"];
    (d["accepted_prediction_tokens"].as_u64().unwrap_or(0), d["rejected_prediction_tokens"].as_u64().unwrap_or(0))
}

#[test]
fn a_draft_model_drafts_and_a_prediction_may_be_token_ids() {
    let s = Server::start(&["-m", "smollm2-135m", "--draft-model", "smollm2-135m", "--speculative", "draft"], &[]);
    let ask = |extra: Value| {
        let mut body = json!({"prompt": "Once upon a time, in a small village,", "max_tokens": 40,
            "temperature": 0, "ignore_eos": true});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        ok(s.post("/v1/completions", &body))
    };
    let plain = ask(json!({"speculative": false, "return_token_ids": true}));
    assert_eq!(details(&plain), (0, 0));
    let ids = plain["choices"][0]["token_ids"].as_array().cloned().unwrap_or_default();
    assert_eq!(ids.len(), 40, "{plain}");
    assert!(plain["choices"][0].get("logprobs").is_none_or(Value::is_null), "{plain}");
    let drafted = ask(json!({}));
    assert_eq!(drafted["choices"][0]["text"], plain["choices"][0]["text"]);
    let (kept, rejected) = details(&drafted);
    assert!(kept >= 20 && kept >= 4 * rejected, "{}", drafted["usage"]);
    // The answer's own ids as the prediction: kept as they stand.
    let predicted = ask(json!({"prediction": {"type": "content", "content": ids}}));
    assert_eq!(predicted["choices"][0]["text"], plain["choices"][0]["text"]);
    assert!(details(&predicted).0 >= 30, "{}", predicted["usage"]);
    // Ids outside the vocabulary, and token ids with streaming, are refused.
    for (body, param) in [
        (json!({"prompt": "x", "prediction": {"type": "content", "content": [1, 99999999]}}), "prediction"),
        (json!({"prompt": "x", "stream": true, "return_token_ids": true}), "return_token_ids"),
    ] {
        let r = s.post("/v1/completions", &body);
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(error_of(&r)["param"], param, "{}", r.text());
    }
}

/// An encoded KV cache (turbo:k8v3, for the target and the draft model) in an isolated engine: speculation keeps
/// nearly every drafted token and answers as the same engine does without it; `/stats` names the encoding.
#[test]
fn an_encoded_cache_speculates_in_an_isolated_engine() {
    let s = Server::start(
        &["--draft-model", "smollm2-135m", "--speculative", "draft", "--kv-cache-dtype", "turbo:k8v3", "--isolate"],
        &[],
    );
    let ask = |spec: bool| {
        let body = json!({"prompt": "Once upon a time, in a small village,", "max_tokens": 40, "temperature": 0,
            "ignore_eos": true, "speculative": spec});
        ok(s.post("/v1/completions", &body))
    };
    let (plain, drafted) = (ask(false), ask(true));
    assert_eq!(drafted["choices"][0]["text"], plain["choices"][0]["text"]);
    let (kept, rejected) = details(&drafted);
    assert!(kept >= 20 && kept >= 4 * rejected, "{}", drafted["usage"]);
    let stats = ok(s.get("/stats"));
    assert_eq!(stats["kv_cache_dtype"], "turbo:k8v3", "{stats}");
}

#[test]
fn a_draft_model_must_fit_its_model() {
    let serve = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(["serve", "--device", "cpu", "--port", "0", "-m", "smollm2-135m"])
            .args(args)
            .output()
            .expect("run hearth");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = serve(&["--draft-model", "gemma3-270m"]);
    assert!(err.contains("cannot draft for") && err.contains("tokenizer differs"), "{err}");
    let err = serve(&["--speculative", "draft"]);
    assert!(err.contains("--draft-model"), "{err}");
}
