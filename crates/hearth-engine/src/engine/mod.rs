//! The serving engine: [`start`] moves the model onto a dedicated OS thread running the [`core::EngineCore`] step
//! loop (`scheduler::Scheduler` plans, [`runner::ModelRunner`] executes, the core sends the events);
//! [`EngineHandle::submit`] validates a request, compiles its constraint, queues it and returns its event stream.
//! Nothing on the async side ever waits for a step. `docs/design/0003-engine.md` follows a request through it hop by
//! hop.

pub mod core;
pub mod handle;
pub mod media;
pub mod runner;

pub use crate::types::{
    CacheConfig, EngineConfig, EngineErrorKind, EngineEvent, EngineInfo, EngineRequest, EngineStats, FinishReason,
    RequestStream, SsdSettings, SubmitError, Usage,
};
pub use handle::EngineHandle;

use crate::kv::ssd::{BlockLayout, SsdConfig, SsdStore};
use crate::kv::BlockHash;
use crate::models::Model;
use crate::scheduler::Scheduler;
use crate::{Error, Result};
use candle_core::Device;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// Open the SSD tier for this model's KV layout. Its files live under a fingerprint of the cache namespace
/// (model + tokenizer), the KV layout and dtype, so another model or KV scheme never reads them.
fn open_ssd(model: &dyn Model, cfg: &EngineConfig, s: &SsdSettings) -> Arc<SsdStore> {
    let c = model.config();
    let enc = model.kv_encoding();
    let layout = BlockLayout {
        layers: c.kv_layers(),
        kv_heads: c.num_kv_heads,
        head_dim: c.head_dim,
        block_size: cfg.kv_block_size,
        dtype: enc.name(),
        dtype_size: enc.storage_dtype().size_in_bytes(),
    };
    // a hybrid model's snapshots have a store of their own: a quarter of --ssd-cache-max, the blocks the rest
    let max = if c.linear_attn.is_some() { s.max_bytes / 4 * 3 } else { s.max_bytes };
    open_tier(cfg, s, "", layout, max)
}

/// A hybrid model's recurrent-state snapshots on the SSD: a store of their own beside the KV blocks' (another
/// fingerprint directory under the same root, files shaped like [`crate::recurrent::RecurrentStates::tier_layout`]).
fn open_state_ssd(model: &dyn Model, cfg: &EngineConfig, s: &SsdSettings) -> Option<Arc<SsdStore>> {
    let lin = model.config().linear_attn.as_ref()?;
    let layout = crate::recurrent::RecurrentStates::tier_layout(lin);
    let chunk = crate::recurrent::chunk_for_block(cfg.kv_block_size);
    Some(open_tier(cfg, s, &format!("recurrent-state/chunk {chunk}/"), layout, s.max_bytes / 4))
}

fn open_tier(cfg: &EngineConfig, s: &SsdSettings, kind: &str, layout: BlockLayout, max_bytes: u64) -> Arc<SsdStore> {
    let key = format!("{:032x}/{kind}{layout:?}", cfg.cache.namespace);
    let fingerprint = BlockHash::root(key.as_bytes()).0;
    SsdStore::open(SsdConfig { dir: s.dir.clone(), max_bytes, verify: s.verify, fingerprint, layout })
}

/// A hybrid model (linear-attention layers with recurrent state): snapshots of its state within the prompt
/// cache's `state_bytes` (and on the SSD tier, where there is one). It speculates as any model does (a verifying
/// step keeps what taking rejected tokens back needs); a hybrid *draft* model is refused (its single-token steps
/// keep nothing to take back).
fn recurrent_settings(
    c: &crate::weights::ModelConfig,
    draft: Option<&crate::weights::ModelConfig>,
    cfg: &mut EngineConfig,
) -> Result<()> {
    if let Some(d) = draft.filter(|d| d.linear_attn.is_some()) {
        return Err(Error::Unsupported(format!(
            "{} as a draft model: a draft model's linear-attention state cannot be taken back yet (use a model of \
             attention layers only, or --speculative ngram)",
            d.arch_name
        )));
    }
    let Some(lin) = &c.linear_attn else { return Ok(()) };
    let per = crate::recurrent::snapshot_bytes(lin, cfg.kv_block_size) as u64;
    cfg.cache.recurrent = true;
    cfg.cache.state_snapshots =
        if cfg.cache.max_blocks == 0 { 0 } else { (cfg.cache.state_bytes / per.max(1)) as usize };
    tracing::info!(
        snapshots = cfg.cache.state_snapshots,
        bytes_each = per,
        "prompt cache: recurrent-state snapshots at block boundaries"
    );
    Ok(())
}

/// Start the engine thread for `model` on `device`; `eos` ends a choice (unless a request ignores it).
pub fn start(model: Box<dyn Model>, device: Device, cfg: EngineConfig, eos: Vec<u32>) -> Result<EngineHandle> {
    start_with_draft(model, None, device, cfg, eos)
}

/// [`start`] with a draft model for speculative decoding (`--draft-model`: the same tokenizer as `model`, which
/// the caller checked), on the same device, with KV for as many tokens as the target's.
pub fn start_with_draft(
    model: Box<dyn Model>,
    draft: Option<Box<dyn Model>>,
    device: Device,
    mut cfg: EngineConfig,
    eos: Vec<u32>,
) -> Result<EngineHandle> {
    cfg.spec.draft_model = draft.is_some();
    recurrent_settings(model.config(), draft.as_ref().map(|d| d.config()), &mut cfg)?;
    cfg.check().map_err(Error::InvalidRequest)?;
    let max_positions = model.max_positions();
    let model_both_ways = model.images_attend_both_ways();
    // images whose tokens attend both ways are attended by the portable kernels, which read float caches
    let images = model.takes_images() && !(model_both_ways && model.kv_encoding().is_quantized());
    if model.takes_images() && !images {
        tracing::warn!(
            kv_cache = %model.kv_encoding().name(),
            "images are off: this model's image tokens attend each other both ways, which the kernels for an \
             encoded KV cache do not do; serve it with the default --kv-cache-dtype to take images"
        );
    }
    let info = EngineInfo {
        kv_capacity_bytes: crate::sizing::kv_bytes(model.as_ref(), cfg.kv_blocks, cfg.kv_block_size),
        kv_cache_dtype: model.kv_encoding().name(),
        images,
        ..EngineInfo::new(model.config().vocab_size, max_positions, &cfg)
    };
    let ssd = cfg.cache.ssd.clone().filter(|_| cfg.cache.max_blocks > 0);
    let cold = ssd.as_ref().map(|s| open_ssd(model.as_ref(), &cfg, s));
    let vocab = model.config().vocab_size;
    let state_cold = ssd.as_ref().and_then(|s| open_state_ssd(model.as_ref(), &cfg, s));
    let mut runner = runner::ModelRunner::new(model, device.clone(), &cfg, cold.clone(), state_cold.clone())?;
    if let Some(d) = draft {
        let drafter = crate::speculative::drafter::Drafter::new(d, device, cfg.kv_blocks, cfg.kv_block_size, vocab)?;
        runner = runner.with_drafter(drafter);
    }
    let mut scheduler = Scheduler::new(cfg.clone(), eos, max_positions).with_whole_images(model_both_ways);
    if let Some(c) = cold.clone() {
        scheduler = scheduler.with_cold_tier(c);
    }
    if let Some(c) = state_cold {
        scheduler = scheduler.with_state_tier(c);
    }
    let mut core = core::EngineCore::new(scheduler, runner);
    let (tx, rx) = mpsc::channel();
    let stats = Arc::new(Mutex::new(core.stats()));
    let queued = Arc::new(AtomicUsize::new(0));
    let alive = Arc::new(AtomicBool::new(true));
    {
        let (stats, queued, alive) = (stats.clone(), queued.clone(), alive.clone());
        std::thread::Builder::new()
            .name("hearth-engine".into())
            .spawn(move || {
                core.run_loop(rx, &stats, &queued);
                alive.store(false, Ordering::Relaxed);
            })
            .map_err(|e| Error::io("spawning the engine thread", e))?;
    }
    let next_slot = Arc::new(AtomicU64::new(0));
    Ok(EngineHandle { tx, stats, queued, next_slot, alive, info, cfg, ssd: cold, grammars: None })
}
