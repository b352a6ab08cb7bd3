//! A fake model behind a real engine: logits are a hash of (last token, position). Sometimes EOS wins, so greedy
//! and sampled requests alike stop after a few tokens; the tiny context bounds the rest.

use super::rng::mix;
pub use crate::served::Template;
use crate::served::{wanted, FnModel};
use axum::Router;
use hearth_engine::attention::BatchContext;
use hearth_server::ServerConfig;

/// The fake model's logits: a hash of each wanted position's token and position picks two tokens; EOS wins for
/// half of them.
fn fake_logits(toks: &[u32], ctx: &BatchContext, vocab: usize, eos: u32) -> Vec<f32> {
    let picks: Vec<(u32, usize)> = wanted(ctx).map(|(row, i)| (toks[row.start + i], row.pos0 + i)).collect();
    let mut out = vec![0f32; picks.len() * vocab];
    for (r, &(tok, pos)) in picks.iter().enumerate() {
        let h = mix(tok as u64, pos as u64);
        let logits = &mut out[r * vocab..(r + 1) * vocab];
        logits[(h % vocab as u64) as usize] = 14.0;
        logits[((h >> 24) % vocab as u64) as usize] = 13.0;
        if h.is_multiple_of(2) {
            logits[eos as usize] = 40.0;
        }
    }
    out
}

/// Chat templates modelled on real ones (tools, reasoning, `raise_exception` on bad role orders).
pub const QWEN3_LIKE: &str = include_str!("../../../../tools/oracle/templates/qwen3_like.jinja");
pub const LLAMA31_LIKE: &str = include_str!("../../../../tools/oracle/templates/llama31_like.jinja");
pub const MISTRAL_LIKE: &str = include_str!("../../../../tools/oracle/templates/mistral_like.jinja");

/// A router whose model is ready: the real tokenizer of `alias` with `template`, the fake model's engine.
pub fn ready_router(alias: &str, template: Template) -> (Router, usize) {
    ready_router_with(alias, template, crate::served::test_server_config())
}

/// [`ready_router`] with this server configuration.
pub fn ready_router_with(alias: &str, template: Template, server: ServerConfig) -> (Router, usize) {
    crate::served::ready_router_with(alias, template, 64, server, |cfg, tok| {
        let eos = tok.eos_ids().first().copied().unwrap_or(0);
        Box::new(FnModel {
            cfg,
            max_positions: 160,
            logits: move |t: &[u32], c: &BatchContext, v| fake_logits(t, c, v, eos),
        })
    })
}

/// The servers a case may go to: (alias, template, share of the cases in percent).
/// A model alias, its chat template, and its share of the cases in percent.
pub type ServerSpec = (&'static str, fn() -> Template, u64);

pub const SERVERS: &[ServerSpec] = &[
    ("smollm2-135m", || Template::Own, 55),
    ("smollm2-135m", || Template::Source(MISTRAL_LIKE), 10),
    ("gemma3-270m", || Template::Source(QWEN3_LIKE), 15),
    ("gemma3-270m", || Template::Source(LLAMA31_LIKE), 10),
    ("gemma3-270m", || Template::None, 10),
];
