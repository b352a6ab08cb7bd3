//! Log-probabilities in OpenAI's two wire shapes.

use crate::output::generation::{PromptScores, TokenLogprob};
use crate::wire::chat::{ChatLogprobs, ChatTokenLogprob, ChatTopLogprob};
use crate::wire::completions::{CompletionLogprobs, TopLogprobs};
use hearth_engine::sampling::TopLogprob;
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
        out.token_logprobs.push(Some(t.logprob));
        out.top_logprobs.push(Some(top_of(tok, t.id, t.logprob, &t.top)));
        out.text_offset.push(t.text_offset + offset);
    }
    out
}

/// `{token: logprob}` of the alternatives; with `logprobs: 0` the chosen token stands alone, as OpenAI returns it.
fn top_of(tok: &Tokenizer, id: u32, logprob: f32, alternatives: &[TopLogprob]) -> TopLogprobs {
    let mut top = TopLogprobs::default();
    for x in alternatives {
        top.push(token_text(tok, x.id), x.logprob);
    }
    if alternatives.is_empty() {
        top.push(token_text(tok, id), logprob);
    }
    top
}

/// An echoed prompt's entries (`echo` with `logprobs`): every prompt token, its log-probability under the tokens
/// before it (`null` for the first) and its alternatives; text offsets count the characters of the tokens before.
pub fn prompt(tok: &Tokenizer, ids: &[u32], scores: &PromptScores) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    let mut offset = 0;
    for (i, &id) in ids.iter().enumerate() {
        let text = token_text(tok, id);
        let scored = i.checked_sub(1).and_then(|j| Some((*scores.logprobs.get(j)?, scores.top.get(j)?)));
        out.token_logprobs.push(scored.map(|(lp, _)| lp));
        out.top_logprobs.push(scored.map(|(lp, top)| top_of(tok, id, lp, top)));
        out.text_offset.push(offset);
        offset += text.chars().count();
        out.tokens.push(text);
    }
    out
}
