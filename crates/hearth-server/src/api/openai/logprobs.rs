//! Log-probabilities in OpenAI's two wire shapes.

use crate::output::generation::TokenLogprob;
use crate::wire::chat::{ChatLogprobs, ChatTokenLogprob, ChatTopLogprob};
use crate::wire::completions::{CompletionLogprobs, TopLogprobs};
use hearth_engine::tokenizer::Tokenizer;

fn token_text(tok: &Tokenizer, id: u32) -> String {
    String::from_utf8_lossy(tok.token_bytes(id)).into_owned()
}

/// Chat: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}`.
pub fn chat(tok: &Tokenizer, lps: &[TokenLogprob]) -> ChatLogprobs {
    let content = lps
        .iter()
        .map(|t| ChatTokenLogprob {
            token: token_text(tok, t.id),
            logprob: t.logprob,
            bytes: tok.token_bytes(t.id).to_vec(),
            top_logprobs: t
                .top
                .iter()
                .map(|x| ChatTopLogprob {
                    token: token_text(tok, x.id),
                    logprob: x.logprob,
                    bytes: tok.token_bytes(x.id).to_vec(),
                })
                .collect(),
        })
        .collect();
    ChatLogprobs { content, refusal: None }
}

/// Completions: `{"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}`;
/// `offset` shifts text offsets (an echoed prompt comes first).
pub fn completion(tok: &Tokenizer, lps: &[TokenLogprob], offset: usize) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for t in lps {
        out.tokens.push(token_text(tok, t.id));
        out.token_logprobs.push(t.logprob);
        let mut top = TopLogprobs::default();
        for x in &t.top {
            top.push(token_text(tok, x.id), x.logprob);
        }
        // With `logprobs: 0` the chosen token stands alone, as OpenAI returns it.
        if t.top.is_empty() {
            top.push(token_text(tok, t.id), t.logprob);
        }
        out.top_logprobs.push(top);
        out.text_offset.push(t.text_offset + offset);
    }
    out
}
