//! A coding agent's tool loop on a real model, through the official clients: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M,
//! `scripts/fetch-models`) gets a tiny Python project whose test fails, three tools (read_file, write_file,
//! run_tests) with `tool_choice: auto`, greedy decoding, and up to 8 steps, once on each of Chat Completions and
//! Responses (`openai`) and Messages (`anthropic`). `tests/agent_loop.py` runs the loops and prints one JSON line;
//! this test asserts that every step is a call of a declared tool with arguments that fit its schema, or the final
//! answer (a turn the model ends normally, without calls), that the agent ran the tests, and that it finished
//! within the steps. The final answer may be empty: after the passing test run this model ends its turn at once
//! (its first token is the end of the turn: `completion_tokens` 0). Whether it fixed the bug is the model's skill,
//! not hearth's, and is reported (`tests_pass`) rather than asserted.
//!
//! The interpreter is `.venv-test/bin/python` (scripts/setup-test-python). Without it, or without the model, this
//! test fails; it never skips.

mod support;

use serde_json::Value;
use support::python::{no_exception, run_client, venv_python};
use support::Server;

const MODEL: &str = "qwen2.5-coder-1.5b";

fn check_loop(r: &Value, api: &str) {
    no_exception(r, api);
    let steps = r["steps"].as_array().unwrap_or_else(|| panic!("{api}: no steps: {r}"));
    let (last, calls) = steps.split_last().unwrap_or_else(|| panic!("{api}: no steps: {r}"));
    for (i, s) in calls.iter().enumerate() {
        let made = s["calls"].as_array().unwrap_or_else(|| panic!("{api} step {i}: {s}"));
        assert!(!made.is_empty(), "{api} step {i}: neither a call nor the last step: {s}");
        for c in made {
            assert_eq!(
                c["fits"], true,
                "{api} step {i}: a call that names no declared tool or misfits its schema: {c}"
            );
        }
    }
    assert_eq!(last["calls"].as_array().map(Vec::len), Some(0), "{api}: still calling after 8 steps: {last}");
    let ended = [&last["finish_reason"], &last["status"], &last["stop_reason"]];
    assert!(
        ended.iter().any(|v| matches!(v.as_str(), Some("stop" | "completed" | "end_turn"))),
        "{api}: the last turn did not end normally: {last}"
    );
    let names: Vec<&str> = calls
        .iter()
        .flat_map(|s| s["calls"].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(names.contains(&"run_tests"), "{api}: the agent never ran the tests: {names:?}");
    eprintln!("{api}: {} steps, calls {names:?}, the tests pass at the end: {}", steps.len(), r["tests_pass"]);
}

#[test]
fn coding_agent_loops_on_qwen_coder_through_the_official_clients() {
    let python = venv_python();
    let server = Server::start(&["-m", MODEL, "--batch", "2"], &[]);
    let base = format!("http://127.0.0.1:{}", server.port);
    let r = run_client("agent_loop.py", &base, MODEL);
    eprintln!("agent loops ({}): {r}", python.display());
    for api in ["chat", "responses", "messages"] {
        check_loop(&r[api], api);
    }
}
