//! `hearth serve --draft-model`: the flags' checks, loading the draft model beside the model, and the KV budget's
//! split between the two.

use crate::ModelArgs;
use anyhow::Context;
use hearth_engine::loader::LoadedModel;
use hearth_engine::models::Model;
use hearth_engine::speculative::SpecMode;

/// The draft model's flags (`--draft-model`, how many `--model`s, `--speculative`), as `serve` checks them before
/// loading anything.
pub fn check(draft: Option<&str>, models: usize, mode: SpecMode) -> anyhow::Result<()> {
    anyhow::ensure!(draft.is_none() || models <= 1, "--draft-model drafts for one model; a model pool has several");
    anyhow::ensure!(draft.is_none_or(|d| !d.trim().is_empty()), "--draft-model must not be empty");
    if draft.is_none() && mode == SpecMode::Draft {
        anyhow::bail!("--speculative draft needs a draft model (--draft-model)");
    }
    if draft.is_some() && !matches!(mode, SpecMode::Draft | SpecMode::Auto) {
        tracing::warn!("--draft-model is loaded but unused: --speculative {} does not draft with it", mode.as_str());
    }
    Ok(())
}

/// Load the draft model `spec` (`--draft-model`) on the model's device with the model's load options (`args`),
/// checked to tokenize as the model does.
pub fn load(spec: Option<&str>, args: &ModelArgs, m: &LoadedModel) -> anyhow::Result<Option<Box<dyn Model>>> {
    let Some(spec) = spec else { return Ok(None) };
    let opts = args.load_options()?;
    let d = hearth_engine::loader::load_with(spec, &m.device, None, &opts)
        .with_context(|| format!("loading the draft model {spec}"))?;
    hearth_engine::loader::check_same_vocabulary(&m.tokenizer, &d.tokenizer)
        .with_context(|| format!("--draft-model {spec} cannot draft for {}", args.spec()))?;
    tracing::info!(
        draft_model = %d.location.path().display(),
        config = %d.model.config().describe(),
        load_ms = d.load_time.as_millis() as u64,
        "draft model loaded"
    );
    Ok(Some(d.model))
}

/// The share of a KV budget the model's own KV gets when a draft model keeps KV for as many tokens beside it.
pub fn target_share(model: &dyn Model, draft: Option<&dyn Model>, budget: u64) -> u64 {
    let Some(d) = draft else { return budget };
    let per_token = |m: &dyn Model| hearth_engine::sizing::kv_bytes(m, 1, 1) as f64;
    (budget as f64 * per_token(model) / (per_token(model) + per_token(d))) as u64
}
