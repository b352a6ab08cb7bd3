//! A ready router over a real engine whose `Model` is a test's own (a fake): the real tokenizer of a fetched model,
//! its chat template or another, and the test's model built on a one-layer copy of that model's config.

#![allow(dead_code)]

use axum::Router;
use candle_core::{DType, Device, Tensor};
use hearth_engine::attention::{BatchContext, KvStore};
use hearth_engine::engine::EngineConfig;
use hearth_engine::models::Model;
use hearth_engine::tokenizer::{ChatTemplate, Tokenizer};
use hearth_engine::weights::resolve::{resolve, ModelLocation};
use hearth_engine::weights::{GgufFile, ModelConfig};
use hearth_server::{AppState, Ready, SamplingDefaults, ServerConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A chat template other than the model's own.
pub enum Template {
    Own,
    None,
    Source(&'static str),
}

/// The tokenizer of `alias` (a fetched model) with `template`, and the model's config.
pub fn tokenizer(alias: &str, template: Template) -> (Tokenizer, ModelConfig) {
    let loc = resolve(alias).unwrap_or_else(|e| {
        panic!("the tests need the model `{alias}` for its tokenizer: {e} (run scripts/fetch-models)")
    });
    let ModelLocation::Gguf(path) = &loc else { panic!("{alias}: expected a GGUF file") };
    let g = GgufFile::open(path).expect("opening the GGUF");
    let real = ModelConfig::from_gguf(&g).expect("reading the model config");
    let mut tokenizer = Tokenizer::load(&loc, &real).expect("loading the tokenizer");
    match template {
        Template::Own => {}
        Template::None => tokenizer.chat_template = None,
        Template::Source(src) => {
            tokenizer.chat_template = Some(
                ChatTemplate::new(src, &tokenizer.bos_token(), &tokenizer.eos_token()).expect("compiling the template"),
            )
        }
    }
    (tokenizer, real)
}

/// A router whose model is ready: `alias`'s tokenizer with `template`, and the model `make` builds from a
/// one-layer config of the tokenizer's vocabulary (and the tokenizer), behind a real engine with `kv_blocks` blocks
/// of 16 tokens. Also the vocabulary's size.
pub fn ready_router(
    alias: &str,
    template: Template,
    kv_blocks: usize,
    make: impl FnOnce(ModelConfig, &Arc<Tokenizer>) -> Box<dyn Model>,
) -> (Router, usize) {
    ready_router_with(alias, template, kv_blocks, test_server_config(), make)
}

/// The server configuration of [`ready_router`]: the defaults, with a short SSE keep-alive.
pub fn test_server_config() -> ServerConfig {
    ServerConfig { keepalive: Duration::from_millis(50), ..Default::default() }
}

/// [`ready_router`] with this server configuration.
pub fn ready_router_with(
    alias: &str,
    template: Template,
    kv_blocks: usize,
    server: ServerConfig,
    make: impl FnOnce(ModelConfig, &Arc<Tokenizer>) -> Box<dyn Model>,
) -> (Router, usize) {
    let (tokenizer, real) = tokenizer(alias, template);
    let vocab = tokenizer.vocab_size().max(real.vocab_size);
    let eos = tokenizer.eos_ids().to_vec();
    let mut cfg = real.clone();
    cfg.vocab_size = vocab;
    cfg.num_layers = 1;
    cfg.num_heads = 1;
    cfg.num_kv_heads = 1;
    cfg.head_dim = 2;
    cfg.layer_window = vec![None];
    let tokenizer = Arc::new(tokenizer);
    let model = make(cfg, &tokenizer);
    let ecfg = EngineConfig {
        max_batch: 8,
        kv_block_size: 16,
        kv_blocks,
        step_tokens: 256,
        step_tokens_decoding: 64,
        max_prefill_rows: 0,
        max_queue: 64,
        cache: Default::default(),
        spec: Default::default(),
    };
    let engine = hearth_engine::engine::start(model, Device::Cpu, ecfg, eos).expect("starting the engine");
    let state = AppState::new(server);
    let ready = Ready {
        engine: hearth_server::model::Engine::Local(Box::new(
            engine.with_grammars(Arc::new(hearth_engine::sampling::grammar::Grammars::new(tokenizer.clone(), vocab))),
        )),
        tokenizer,
        model_id: alias.to_string(),
        device: "fake".into(),
        defaults: SamplingDefaults::default(),
        reasoning: None,
        created: 1,
        images: Default::default(),
    };
    assert!(state.set_ready(ready));
    (hearth_server::router(state), vocab)
}

/// A test's model: `logits` gives, for a batch's tokens and rows, the logits of every position the engine asks for
/// (each row's last, or all with `all_logits`), one row of the vocabulary's width each.
pub struct FnModel<F> {
    pub cfg: ModelConfig,
    pub max_positions: usize,
    pub logits: F,
}

impl<F> Model for FnModel<F>
where
    F: Fn(&[u32], &BatchContext, usize) -> Vec<f32> + Send + Sync,
{
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn dtype(&self) -> DType {
        DType::F32
    }

    fn kv_encoding(&self) -> hearth_engine::kv::KvEncoding {
        hearth_engine::kv::KvEncoding::F32
    }

    fn max_positions(&self) -> usize {
        self.max_positions
    }

    fn forward(&self, tokens: &Tensor, ctx: &BatchContext, _kv: &mut dyn KvStore) -> hearth_engine::Result<Tensor> {
        let toks: Vec<u32> = tokens.to_vec1()?;
        let vocab = self.cfg.vocab_size;
        let out = (self.logits)(&toks, ctx, vocab);
        let n = out.len() / vocab;
        Ok(Tensor::from_vec(out, (n, vocab), &Device::Cpu)?)
    }
}

/// The positions of each row the engine wants logits for: (row, offset in the row).
pub fn wanted(ctx: &BatchContext) -> impl Iterator<Item = (&hearth_engine::attention::RowSpan, usize)> {
    ctx.rows.iter().flat_map(move |r| {
        let from = if ctx.all_logits { 0 } else { r.len - 1 };
        (from..r.len).map(move |i| (r, i))
    })
}

/// What the scripted model keeps of a sequence (by KV slot): its prompt, its script, how much it wrote.
#[derive(Default)]
pub struct Row {
    prompt: Vec<u32>,
    written: usize,
    script: Option<Vec<u32>>,
}

/// The scripted model's logits: each sequence writes its script — the text between `<<<` and `>>>` in its prompt,
/// as the tokenizer's tokens — then EOS.
pub fn scripted(
    tok: &Tokenizer,
    rows: &Mutex<HashMap<usize, Row>>,
    toks: &[u32],
    ctx: &BatchContext,
    vocab: usize,
) -> Vec<f32> {
    let mut rows = rows.lock().expect("rows");
    let mut out = Vec::new();
    for r in &ctx.rows {
        let row = rows.entry(r.slot).or_default();
        if r.prompt {
            if r.pos0 == 0 || row.written > 0 {
                *row = Row::default();
            }
            row.prompt.extend_from_slice(&toks[r.start..r.start + r.len]);
            row.script = None;
        } else {
            row.written += r.len;
        }
        let script = row.script.get_or_insert_with(|| {
            let text = tok.decode(&row.prompt, false);
            let inner = text.split_once("<<<").and_then(|(_, r)| r.split_once(">>>")).map_or("", |(s, _)| s);
            tok.encode(inner, false).unwrap_or_default()
        });
        let next = script.get(row.written).copied().unwrap_or(tok.eos_ids()[0]);
        for _ in wanted(ctx).filter(|(w, _)| w.slot == r.slot) {
            let mut logits = vec![0f32; vocab];
            logits[next as usize] = 10.0;
            out.extend(logits);
        }
    }
    out
}
