//! A fake model behind a real engine: logits are a hash of (last token, position). Sometimes EOS wins, so greedy
//! and sampled requests alike stop after a few tokens; the tiny context bounds the rest.

use super::rng::mix;
use axum::Router;
use candle_core::{DType, Device, Tensor};
use hearth_engine::attention::{BatchContext, KvStore};
use hearth_engine::engine::EngineConfig;
use hearth_engine::models::Model;
use hearth_engine::tokenizer::{ChatTemplate, Tokenizer};
use hearth_engine::weights::resolve::{resolve, ModelLocation};
use hearth_engine::weights::{GgufFile, ModelConfig};
use hearth_server::{AppState, Ready, SamplingDefaults, ServerConfig};
use std::sync::Arc;
use std::time::Duration;

pub struct FakeModel {
    cfg: ModelConfig,
    max_positions: usize,
    eos: u32,
}

impl Model for FakeModel {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    fn dtype(&self) -> DType {
        DType::F32
    }

    fn kv_dtype(&self) -> DType {
        DType::F32
    }

    fn max_positions(&self) -> usize {
        self.max_positions
    }

    fn forward(&self, tokens: &Tensor, ctx: &BatchContext, _kv: &mut dyn KvStore) -> hearth_engine::Result<Tensor> {
        let toks: Vec<u32> = tokens.to_vec1()?;
        let vocab = self.cfg.vocab_size;
        let mut picks = Vec::new();
        for row in &ctx.rows {
            let positions: Vec<usize> = if ctx.all_logits { (0..row.len).collect() } else { vec![row.len - 1] };
            for i in positions {
                picks.push((toks[row.start + i], row.pos0 + i));
            }
        }
        let mut out = vec![0f32; picks.len() * vocab];
        for (r, &(tok, pos)) in picks.iter().enumerate() {
            let h = mix(tok as u64, pos as u64);
            let logits = &mut out[r * vocab..(r + 1) * vocab];
            logits[(h % vocab as u64) as usize] = 14.0;
            logits[((h >> 24) % vocab as u64) as usize] = 13.0;
            if h.is_multiple_of(2) {
                logits[self.eos as usize] = 40.0;
            }
        }
        Ok(Tensor::from_vec(out, (picks.len(), vocab), &Device::Cpu)?)
    }
}

/// A chat template other than the model's own.
pub enum Template {
    Own,
    None,
    Source(&'static str),
}

/// Chat templates modelled on real ones (tools, reasoning, `raise_exception` on bad role orders).
pub const QWEN3_LIKE: &str = include_str!("../../../../tools/oracle/templates/qwen3_like.jinja");
pub const LLAMA31_LIKE: &str = include_str!("../../../../tools/oracle/templates/llama31_like.jinja");
pub const MISTRAL_LIKE: &str = include_str!("../../../../tools/oracle/templates/mistral_like.jinja");

/// A router whose model is ready: the real tokenizer of `alias` with `template`, the fake model's engine.
pub fn ready_router(alias: &str, template: Template) -> (Router, usize) {
    let cfg = ServerConfig { keepalive: Duration::from_millis(50), ..Default::default() };
    ready_router_with(alias, template, cfg)
}

/// [`ready_router`] with this configuration.
pub fn ready_router_with(alias: &str, template: Template, server: ServerConfig) -> (Router, usize) {
    let loc = resolve(alias).unwrap_or_else(|e| {
        panic!("fuzz_requests needs the model `{alias}` for its tokenizer: {e} (run scripts/fetch-models)")
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
    let vocab = tokenizer.vocab_size().max(real.vocab_size);
    let eos = tokenizer.eos_ids().to_vec();
    let mut cfg = real.clone();
    cfg.vocab_size = vocab;
    cfg.num_layers = 1;
    cfg.num_heads = 1;
    cfg.num_kv_heads = 1;
    cfg.head_dim = 2;
    cfg.layer_window = vec![None];
    let model = FakeModel { cfg, max_positions: 160, eos: eos.first().copied().unwrap_or(0) };
    let ecfg = EngineConfig {
        max_batch: 8,
        kv_block_size: 16,
        kv_blocks: 64,
        step_tokens: 256,
        step_tokens_decoding: 64,
        max_prefill_rows: 0,
        max_queue: 64,
        cache: Default::default(),
    };
    let engine = hearth_engine::engine::start(Box::new(model), Device::Cpu, ecfg, eos).expect("starting the engine");
    let state = AppState::new(server);
    let tokenizer = Arc::new(tokenizer);
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
    };
    assert!(state.set_ready(ready));
    (hearth_server::router(state), vocab)
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
