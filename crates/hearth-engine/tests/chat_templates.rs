//! Chat templates render byte-equal to transformers' apply_chat_template (tools/oracle/chat_goldens.py).

mod common;
use common::*;
use hearth_engine::tokenizer::chat_template::{ChatTemplate, RenderOptions};

#[test]
fn templates_render_like_transformers() {
    let g = golden("chat_templates.json");
    let templates = g["templates"].as_object().unwrap();
    let mut checked = 0;
    for (i, case) in g["cases"].as_array().unwrap().iter().enumerate() {
        let name = case["template"].as_str().unwrap();
        let src = templates[name].as_str().unwrap();
        let t =
            ChatTemplate::new(src, case["bos_token"].as_str().unwrap_or(""), case["eos_token"].as_str().unwrap_or(""))
                .unwrap_or_else(|e| panic!("case {i} ({name}): {e}"));
        let tools = case.get("tools").filter(|t| !t.is_null());
        let opts = RenderOptions {
            tools,
            add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap_or(false),
            extra: case.get("kwargs").and_then(|k| k.as_object()),
        };
        let got = t.render(&case["messages"], &opts);
        if let Some(err) = case.get("error_contains").and_then(|e| e.as_str()) {
            let e = got.expect_err(&format!("case {i} ({name}) should fail"));
            assert!(e.to_string().contains(err), "case {i} ({name}): error {e} lacks {err:?}");
        } else {
            let mut got = got.unwrap_or_else(|e| panic!("case {i} ({name}): {e}"));
            // A template that renders today's date (strftime_now): the golden holds a placeholder there.
            if let Some(today) = case.get("today").and_then(|t| t.as_str()) {
                got = got.replace(&chrono::Local::now().format("%Y-%m-%d").to_string(), today);
            }
            assert_eq!(got, case["rendered"].as_str().unwrap(), "case {i} ({name})");
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} cases");
}

#[test]
fn gemma_base_has_no_template_and_says_so() {
    let m = real_model("gemma3-270m");
    assert!(m.tokenizer.chat_template.is_none());
}
