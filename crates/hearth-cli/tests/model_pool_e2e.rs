//! A model pool: `hearth serve -m smollm2-135m -m gemma3-270m --model-pool 1`, the real binary with both reachable
//! models. A request's `model` picks the engine; one engine is resident at a time.

mod support;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::*;

/// `/v1/models`' `loaded` flag per model id.
fn loaded(s: &Server) -> Vec<(String, bool)> {
    let v = s.get("/v1/models").json();
    let data = v["data"].as_array().unwrap_or_else(|| panic!("no data: {v}")).clone();
    data.iter().map(|m| (m["id"].as_str().unwrap_or("").to_string(), m["loaded"] == json!(true))).collect()
}

/// Wait until exactly `model` is resident (an evicted engine leaves in the background).
fn wait_resident(s: &Server, model: &str) {
    let t0 = Instant::now();
    loop {
        let l = loaded(s);
        if l.iter().all(|(id, up)| *up == (id == model)) {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "not only {model} resident: {l:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn complete(s: &Server, model: Option<&str>) -> Value {
    let mut body = json!({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0});
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    let r = s.post("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn a_request_picks_its_model_and_one_engine_is_resident() {
    let s = Server::start(&["-m", "smollm2-135m", "-m", "gemma3-270m", "--model-pool", "1"], &[]);
    // Both listed; the first is up.
    assert_eq!(loaded(&s), vec![("smollm2-135m".into(), true), ("gemma3-270m".into(), false)]);
    let first = complete(&s, None);
    assert_eq!(first["model"], "smollm2-135m");

    // The other model: its engine starts, the first one's is evicted.
    let g = complete(&s, Some("gemma3-270m"));
    assert_eq!(g["model"], "gemma3-270m");
    wait_resident(&s, "gemma3-270m");
    let e = s.get("/engine").json();
    let pool = e["pool"].as_array().unwrap_or_else(|| panic!("no pool: {e}"));
    assert_eq!(pool.len(), 2, "{e}");
    assert_eq!(pool[1]["loaded"], true, "{e}");
    assert_eq!(pool[0]["state"], "not_loaded", "{e}");

    // Back: the same greedy answer as before, from a fresh engine.
    let again = complete(&s, Some("smollm2-135m"));
    assert_eq!(again["choices"][0]["text"], first["choices"][0]["text"]);
    wait_resident(&s, "smollm2-135m");

    // A model the server does not have.
    let r = s.post("/v1/completions", &json!({"model": "gpt-4o", "prompt": "hi", "max_tokens": 1}));
    assert_eq!(r.status, 404, "{}", r.text());
    let err = error_of(&r);
    assert_eq!(err["code"], "model_not_found", "{err}");
    assert!(err["message"].as_str().is_some_and(|m| m.contains("gemma3-270m")), "{err}");
}
