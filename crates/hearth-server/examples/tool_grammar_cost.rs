//! What a request's tool grammar costs: compiling it (time to first token) and a mask per token while the answer
//! is free text (`auto`, every loose opener watching) or inside a call, for 1-30 offered tools shaped as a coding
//! agent's, on a real model's vocabulary (the template's format is Hermes, as Qwen's and SmolLM2's).
//!
//! `TOOLS=1,10,30 MODEL=qwen2.5-coder-0.5b ROUNDS=5 cargo run --release --example tool_grammar_cost -p hearth-server`
//!
//! Prints one line per tool count and choice: medians over ROUNDS of the compile time (the first mask included)
//! and of the mean mask time per token over 72 tokens of prose and over a 47-token call (Qwen's tokenizer).

use hearth_engine::sampling::grammar::{Constraint, Grammars};
use hearth_engine::tokenizer::Tokenizer;
use hearth_engine::weights::resolve::{resolve, ModelLocation};
use hearth_engine::weights::{GgufFile, ModelConfig};
use hearth_server::chat::tools::Tools;
use hearth_server::chat::FieldNames;
use hearth_server::wire::chat::Conversation;
use hearth_server::wire::RequestBody;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

/// A free-text answer (what most tokens of an agent's turn are).
const PROSE: &str = "I looked at the failing test. The function `parse_range` returns an inclusive end, but the \
caller in `lib.rs` expects an exclusive one, so the last element is counted twice. I will change the comparison \
from `<=` to `<` and run the tests again; if they pass, the fix is complete and nothing else needs to change.";

/// A call in Hermes' form (compact JSON, as the grammar of the format's own calls has it), the answer's other kind
/// of token.
const CALL: &str = "<tool_call>\n{\"name\":\"tool_0\",\"arguments\":{\"path\":\"src/lib.rs\",\"content\":\
\"fn main() {\\n    println!(\\\"hello\\\");\\n}\\n\",\"line\":12,\"dry_run\":false}}\n</tool_call>";

fn env_list(name: &str, default: &str) -> Vec<usize> {
    let v = std::env::var(name).unwrap_or_else(|_| default.to_string());
    v.split(',').filter_map(|s| s.trim().parse().ok()).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `n` tools whose parameters are a coding agent's: a path, a text, an integer, a flag, an enum.
fn tools(n: usize, choice: &str) -> Value {
    let list: Vec<Value> = (0..n)
        .map(|i| {
            json!({"type": "function", "function": {"name": format!("tool_{i}"), "description": "Edit a file.",
                "parameters": {"type": "object", "properties": {
                    "path": {"type": "string"}, "content": {"type": "string"}, "line": {"type": "integer"},
                    "dry_run": {"type": "boolean"}, "mode": {"enum": ["replace", "append"]}},
                "required": ["path", "content"], "additionalProperties": false}}})
        })
        .collect();
    json!({"messages": [{"role": "user", "content": "hi"}], "tools": list, "tool_choice": choice})
}

/// Mean milliseconds of a mask per token over `text`'s tokens.
fn mask_ms(c: &mut Constraint, ids: &[u32]) -> f64 {
    let mut total = 0.0;
    for &id in ids {
        total += c.prepare().expect("mask");
        c.commit(id).expect("the text fits the grammar");
    }
    total / ids.len() as f64
}

fn main() {
    let model = std::env::var("MODEL").unwrap_or_else(|_| "qwen2.5-coder-0.5b".into());
    let rounds = env_list("ROUNDS", "5").first().copied().unwrap_or(5).max(1);
    let loc = resolve(&model).expect("the model (scripts/fetch-models)");
    let ModelLocation::Gguf(path) = &loc else { panic!("expected a GGUF file") };
    let cfg = ModelConfig::from_gguf(&GgufFile::open(path).expect("gguf")).expect("config");
    let tok = Arc::new(Tokenizer::load(&loc, &cfg).expect("tokenizer"));
    let g = Grammars::new(tok.clone(), cfg.vocab_size.max(tok.vocab_size()));
    let t0 = Instant::now();
    g.warm();
    println!("{model}: vocabulary index {:.0} ms", t0.elapsed().as_secs_f64() * 1e3);
    let prose = tok.encode(PROSE, false).expect("tokens");
    let call = tok.encode(CALL, false).expect("tokens");
    println!("{} tokens of prose, {} of a call", prose.len(), call.len());
    for n in env_list("TOOLS", "1,10,30") {
        for choice in ["auto", "required"] {
            let body = tools(n, choice);
            let conv = Conversation::from_body(&body).expect("body");
            let t = Tools::resolve(&conv, "{{ '<tool_call>' }}", &FieldNames::CHAT).expect("tools").expect("some");
            let spec = t.constraint(&tok).expect("a grammar");
            let (mut compile, mut free, mut inside) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..rounds {
                let t0 = Instant::now();
                let mut c = g.compile(&spec).expect("compiles");
                compile.push(t0.elapsed().as_secs_f64() * 1e3);
                if choice == "auto" {
                    free.push(mask_ms(&mut c, &prose) * 1e3);
                }
                inside.push(mask_ms(&mut c, &call) * 1e3);
            }
            let free = if free.is_empty() { "-".to_string() } else { format!("{:.1}", median(free)) };
            println!(
                "tools={n:<3} {choice:<8} compile {:>7.1} ms  mask in text {free:>6} us/token  in a call {:>6.1} \
                 us/token",
                median(compile),
                median(inside)
            );
        }
    }
}
