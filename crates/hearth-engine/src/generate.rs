//! A single-sequence generation loop, used by `hearth generate` and the model tests. On the CPU it runs on the
//! serving engine's paged KV with the in-place attention kernel (one sequence, its blocks allocated up front), so
//! `hearth generate`'s timings are the server's per-token work; elsewhere (a GPU, `HEARTH_CPU_ATTN=0`) on a
//! contiguous KV cache. The serving engine batches many sequences through the same `Model::forward`.

use crate::attention::paged::cpu_inplace;
use crate::attention::{BatchContext, ContiguousKv, KvStore, PagedAttention};
use crate::loader::LoadedModel;
use crate::models::Model;
use crate::sampling::{Sampled, Sampler, SamplingParams};
use crate::types::{EngineInfo, FinishReason};
use crate::{Error, Result};
use candle_core::{Device, Tensor};
use std::time::{Duration, Instant};

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
pub fn forward_one(
    model: &dyn Model,
    kv: &mut dyn KvStore,
    slot: usize,
    tokens: &[u32],
    pos0: usize,
    all: bool,
    device: &Device,
) -> Result<Vec<Vec<f32>>> {
    let ctx = BatchContext::new(&[(slot, pos0, tokens.len())], all, device)?;
    let t = Tensor::new(tokens, device)?;
    let logits = model.forward(&t, &ctx, kv)?;
    Ok(logits.to_vec2::<f32>()?)
}

/// Generate for one prompt, calling `on_token` after each sampled token (return false to stop).
pub fn generate(
    m: &LoadedModel,
    req: &GenerateRequest,
    mut on_token: impl FnMut(&Sampled) -> bool,
) -> Result<GenerateOutput> {
    let cfg = m.model.config();
    let max_pos = m.model.max_positions();
    EngineInfo::unpooled(cfg.vocab_size, max_pos)
        .validate_prompt(&req.prompt_ids, &[], &req.sampling)
        .map_err(|e| Error::InvalidRequest(e.to_string()))?;
    let mut sampler = Sampler::new(req.sampling.clone());
    let mut kv = single_sequence_kv(m, req.prompt_ids.len() + req.max_tokens.min(max_pos))?;
    let kv = kv.as_mut();
    let chunk = req.prefill_chunk.max(1);

    // 1. prefill in chunks; only the last chunk's last logits matter
    let t0 = Instant::now();
    let mut last = Vec::new();
    let mut pos = 0;
    for piece in req.prompt_ids.chunks(chunk) {
        last = forward_one(m.model.as_ref(), kv, 0, piece, pos, false, &m.device)?.pop().unwrap_or_default();
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
        last = forward_one(m.model.as_ref(), kv, 0, &[s.id], pos, false, &m.device)?.pop().unwrap_or_default();
        pos += 1;
    };
    Ok(GenerateOutput { ids, finish_reason, prefill_time, decode_time: t1.elapsed() })
}

/// Block size of the single sequence's paged KV (the engine's default).
const GENERATE_BLOCK: usize = 16;

/// The KV store for one sequence of up to `tokens` tokens, as slot 0: paged with in-place attention on the CPU
/// (`HEARTH_CPU_ATTN` on; in the model's KV dtype), contiguous otherwise.
pub fn single_sequence_kv(m: &LoadedModel, tokens: usize) -> Result<Box<dyn KvStore>> {
    single_sequence_kv_in(m, tokens, m.model.kv_encoding())
}

/// [`single_sequence_kv`] with the cache kept in `dtype` (an encoding only the paged store reads is an error
/// where it would not be used).
pub fn single_sequence_kv_in(m: &LoadedModel, tokens: usize, dtype: crate::kv::KvEncoding) -> Result<Box<dyn KvStore>> {
    let c = m.model.config();
    let in_place = crate::levers::get().cpu_attn && cpu_inplace::supports(dtype.storage_dtype(), &m.device);
    if !in_place && !dtype.is_quantized() {
        return Ok(Box::new(ContiguousKv::new(c.kv_layers(), tokens)));
    }
    let blocks = tokens.max(1).div_ceil(GENERATE_BLOCK);
    let mut kv = PagedAttention::new(
        c.kv_layers(),
        blocks,
        GENERATE_BLOCK,
        c.num_heads,
        c.num_kv_heads,
        c.head_dim,
        dtype,
        &m.device,
    )?;
    let table: Vec<u32> = (0..blocks as u32).collect();
    kv.storage_mut().set_tables([(0, &table[..])]);
    Ok(Box::new(kv))
}
