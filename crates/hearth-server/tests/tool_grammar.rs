//! The Hermes `auto` tool grammar on SmolLM2's real vocabulary: text is free until the model writes `<tool_call>`,
//! then only a valid call of an offered function fits, and after `</tool_call>` text is free again.

use hearth_engine::sampling::grammar::{Constraint, Grammars};
use hearth_engine::tokenizer::Tokenizer;
use hearth_engine::weights::resolve::{resolve, ModelLocation};
use hearth_engine::weights::{GgufFile, ModelConfig};
use hearth_server::tools::{ToolChoice, Tools};
use hearth_server::wire::chat::Conversation;
use hearth_server::wire::RequestBody;
use serde_json::json;
use std::sync::Arc;

fn smollm2() -> Arc<Tokenizer> {
    let loc = resolve("smollm2-135m").expect("the default model (scripts/fetch-models)");
    let ModelLocation::Gguf(path) = &loc else { panic!("expected a GGUF file") };
    let cfg = ModelConfig::from_gguf(&GgufFile::open(path).unwrap()).unwrap();
    Arc::new(Tokenizer::load(&loc, &cfg).unwrap())
}

/// Commit `text`'s tokens (SmolLM2's own tokenization of it) one by one.
fn write(c: &mut Constraint, tok: &Tokenizer, text: &str) {
    for id in tok.encode(text, false).unwrap() {
        assert!(c.allows(id).unwrap(), "{text:?}: token {id} ({:?}) refused", tok.decode(&[id], false));
        c.commit(id).unwrap();
    }
}

#[test]
fn hermes_auto_guides_only_the_calls() {
    let tok = smollm2();
    let g = Grammars::new(tok.clone(), tok.vocab_size());
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"], "additionalProperties": false}}}]});
    let conv = Conversation::from_body(&body).unwrap();
    let tools = Tools::resolve(&conv, "{{ '<tool_call>' }}").unwrap().expect("tools");
    assert_eq!(tools.choice, ToolChoice::Auto);
    let spec = tools.constraint().expect("Hermes auto is guided");
    let mut c = g.compile(&spec).unwrap();
    let first = |t: &str| tok.encode(t, false).unwrap()[0];
    // Free text, anything.
    write(&mut c, &tok, "Let me check the weather for you! ");
    assert!(c.allows(first("Hello")).unwrap());
    // Inside a call only the function's JSON fits.
    write(&mut c, &tok, "<tool_call>\n");
    assert!(!c.allows(first("Hello")).unwrap(), "free text inside a call");
    assert!(c.allows(first("{")).unwrap());
    write(&mut c, &tok, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>");
    // Free again after the call.
    assert!(c.allows(first(" Done")).unwrap());
}
