//! Loading a model by name, and a single-sequence generation loop used by `hearth generate` and the model tests.
//! (The serving engine batches many sequences through the same `Model::forward`.)

use crate::attention::{BatchContext, ContiguousKv};
use crate::models::{load_model, open_weights, LoadOptions, Model};
use crate::sampling::{Sampled, Sampler, SamplingParams};
use crate::tokenizer::{ChatTemplate, Tokenizer};
use crate::weights::resolve::{resolve, ModelLocation};
use crate::{Error, Result};
use candle_core::{Device, Tensor};
use std::path::Path;
use std::time::{Duration, Instant};

pub struct LoadedModel {
    pub model: Box<dyn Model>,
    pub tokenizer: Tokenizer,
    pub location: ModelLocation,
    pub device: Device,
    pub load_time: Duration,
}

/// Resolve `spec`, load weights, tokenizer and chat template (`chat_template` overrides the model's own).
pub fn load(spec: &str, device: &Device, chat_template: Option<&Path>) -> Result<LoadedModel> {
    load_with(spec, device, chat_template, &LoadOptions::default())
}

pub fn load_with(spec: &str, device: &Device, chat_template: Option<&Path>, opts: &LoadOptions) -> Result<LoadedModel> {
    let t0 = Instant::now();
    let location = resolve(spec)?;
    let (weights, cfg) = open_weights(&location)?;
    let mut tokenizer = Tokenizer::load(&location, &cfg)?;
    if tokenizer.vocab_size() > cfg.vocab_size {
        return Err(Error::InvalidModel(format!(
            "tokenizer has {} tokens but the model's vocabulary is {}",
            tokenizer.vocab_size(),
            cfg.vocab_size
        )));
    }
    if let Some(path) = chat_template {
        tokenizer.chat_template = Some(ChatTemplate::from_file(path, &tokenizer.bos_token(), &tokenizer.eos_token())?);
    }
    let model = load_model(&weights, &cfg, device, opts)?;
    Ok(LoadedModel { model, tokenizer, location, device: device.clone(), load_time: t0.elapsed() })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An EOS token (not included in the output).
    Stop,
    /// `max_tokens` reached, or the context is full.
    Length,
    /// The caller's callback asked to stop.
    Cancelled,
}

impl FinishReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

pub struct GenerateRequest {
    pub prompt_ids: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Keep going past EOS (benchmarks).
    pub ignore_eos: bool,
    /// Prompt tokens per forward pass during prefill.
    pub prefill_chunk: usize,
}

#[derive(Debug)]
pub struct GenerateOutput {
    pub ids: Vec<u32>,
    pub finish_reason: FinishReason,
    pub prefill_time: Duration,
    pub decode_time: Duration,
}

/// Run one forward over `tokens` for one sequence at `pos0`; returns f32 logits (rows, vocab) as a Vec per row.
pub fn forward_one(model: &dyn Model, kv: &mut ContiguousKv, slot: usize, tokens: &[u32], pos0: usize, all: bool, device: &Device) -> Result<Vec<Vec<f32>>> {
    let ctx = BatchContext::new(&[(slot, pos0, tokens.len())], all, device)?;
    let t = Tensor::new(tokens, device)?;
    let logits = model.forward(&t, &ctx, kv)?;
    Ok(logits.to_vec2::<f32>()?)
}

/// Generate for one prompt, calling `on_token` after each sampled token (return false to stop).
pub fn generate(m: &LoadedModel, req: &GenerateRequest, mut on_token: impl FnMut(&Sampled) -> bool) -> Result<GenerateOutput> {
    let cfg = m.model.config();
    if req.prompt_ids.is_empty() {
        return Err(Error::InvalidRequest("the prompt is empty (no tokens)".into()));
    }
    if let Some(&bad) = req.prompt_ids.iter().find(|&&t| t as usize >= cfg.vocab_size) {
        return Err(Error::InvalidRequest(format!("token id {bad} is outside the vocabulary (size {})", cfg.vocab_size)));
    }
    let max_pos = m.model.max_positions();
    if req.prompt_ids.len() >= max_pos {
        return Err(Error::InvalidRequest(format!(
            "the prompt has {} tokens; the model's context is {max_pos}",
            req.prompt_ids.len()
        )));
    }
    req.sampling.validate(cfg.vocab_size)?;
    let mut sampler = Sampler::new(req.sampling.clone());
    let mut kv = ContiguousKv::new(cfg.num_layers, req.prompt_ids.len() + req.max_tokens.min(max_pos));
    let chunk = req.prefill_chunk.max(1);

    // 1. prefill in chunks; only the last chunk's last logits matter
    let t0 = Instant::now();
    let mut last = Vec::new();
    let mut pos = 0;
    for piece in req.prompt_ids.chunks(chunk) {
        last = forward_one(m.model.as_ref(), &mut kv, 0, piece, pos, false, &m.device)?.pop().unwrap_or_default();
        pos += piece.len();
    }
    let prefill_time = t0.elapsed();

    // 2. decode
    let t1 = Instant::now();
    let mut context = req.prompt_ids.clone();
    let mut ids = Vec::new();
    let finish_reason = loop {
        if ids.len() >= req.max_tokens {
            break FinishReason::Length;
        }
        let s = sampler.sample(&last, &context);
        if !req.ignore_eos && m.tokenizer.is_eos(s.id) {
            break FinishReason::Stop;
        }
        ids.push(s.id);
        context.push(s.id);
        if !on_token(&s) {
            break FinishReason::Cancelled;
        }
        if ids.len() >= req.max_tokens {
            break FinishReason::Length;
        }
        if pos + 1 >= max_pos {
            break FinishReason::Length;
        }
        last = forward_one(m.model.as_ref(), &mut kv, 0, &[s.id], pos, false, &m.device)?.pop().unwrap_or_default();
        pos += 1;
    };
    Ok(GenerateOutput { ids, finish_reason, prefill_time, decode_time: t1.elapsed() })
}
