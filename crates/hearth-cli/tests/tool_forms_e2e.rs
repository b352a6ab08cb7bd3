//! Tool calls as a real model writes them outside its template's format: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, in
//! hearth's model cache), whose template speaks Hermes' `<tool_call>`, answers a weather question with a bare JSON
//! call or a fenced, pretty-printed one; with `tool_choice: auto` and greedy decoding hearth returns them as
//! `tool_calls`, and a greeting stays text. Without the model this test fails; it never skips.

mod support;

use serde_json::{json, Value};
use support::Server;

#[test]
fn qwen_coder_calls_in_json_are_tool_calls() {
    let model = hearth_engine::weights::resolve::models_dir().join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    assert!(model.is_file(), "{} is missing (scripts/fetch-models)", model.display());
    let server = Server::start(&["-m", model.to_str().expect("a UTF-8 path"), "--batch", "1"], &[]);
    let tool = json!({"type": "function", "function": {"name": "get_weather",
        "description": "Get the current weather for a location", "parameters": {"type": "object",
        "properties": {"location": {"type": "string", "description": "City name"}}, "required": ["location"]}}});
    let ask = |prompt: &str| -> Value {
        let body = json!({"messages": [{"role": "user", "content": prompt}], "tools": [tool], "tool_choice": "auto",
            "temperature": 0, "max_tokens": 80});
        let r = server.post("/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["choices"][0].clone()
    };
    // The model writes a bare object for Paris and a ```json fence (London only) for London and Berlin.
    for (prompt, city) in
        [("What's the weather like in Paris?", "Paris"), ("Can you check the weather for London and Berlin?", "London")]
    {
        let c = ask(prompt);
        assert_eq!(c["finish_reason"], "tool_calls", "{prompt}: {c}");
        assert!(c["message"]["content"].is_null(), "{prompt}: {c}");
        let calls = c["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
        assert_eq!(calls.len(), 1, "{prompt}: {c}");
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        let args: Value =
            serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap_or("")).unwrap_or_default();
        assert_eq!(args, json!({"location": city}), "{prompt}: {c}");
    }
    let c = ask("Hi! How are you?");
    assert_eq!(c["finish_reason"], "stop", "{c}");
    assert!(
        c["message"]["tool_calls"].is_null() && c["message"]["content"].as_str().is_some_and(|t| !t.is_empty()),
        "{c}"
    );
}
