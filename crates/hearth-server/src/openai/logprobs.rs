//! Log-probabilities in OpenAI's two wire shapes.

use crate::generation::TokenLogprob;
use hearth_engine::tokenizer::Tokenizer;
use serde_json::{json, Map, Value};

fn token_text(tok: &Tokenizer, id: u32) -> String {
    String::from_utf8_lossy(tok.token_bytes(id)).into_owned()
}

/// Chat: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}`.
pub fn chat(tok: &Tokenizer, lps: &[TokenLogprob]) -> Value {
    let entry = |id: u32, lp: f32| {
        let bytes = tok.token_bytes(id);
        json!({"token": token_text(tok, id), "logprob": lp, "bytes": bytes})
    };
    let content: Vec<Value> = lps
        .iter()
        .map(|t| {
            let mut e = entry(t.id, t.logprob);
            e["top_logprobs"] = t.top.iter().map(|x| entry(x.id, x.logprob)).collect();
            e
        })
        .collect();
    json!({"content": content, "refusal": null})
}

/// Completions: `{"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}`;
/// `offset` shifts text offsets (an echoed prompt comes first).
pub fn completion(tok: &Tokenizer, lps: &[TokenLogprob], offset: usize) -> Value {
    let tokens: Vec<String> = lps.iter().map(|t| token_text(tok, t.id)).collect();
    let token_logprobs: Vec<f32> = lps.iter().map(|t| t.logprob).collect();
    let top: Vec<Value> = lps
        .iter()
        .map(|t| {
            let mut m = Map::new();
            for x in &t.top {
                m.entry(token_text(tok, x.id)).or_insert_with(|| json!(x.logprob));
            }
            // With `logprobs: 0` the chosen token stands alone, as OpenAI returns it.
            if t.top.is_empty() {
                m.insert(token_text(tok, t.id), json!(t.logprob));
            }
            Value::Object(m)
        })
        .collect();
    let text_offset: Vec<usize> = lps.iter().map(|t| t.text_offset + offset).collect();
    json!({"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": text_offset})
}
