//! `hearth serve`'s argument checks: each flag's range, told before anything loads.

use crate::serve::ServeArgs;

pub fn check(a: &ServeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.batch >= 1, "--batch must be at least 1");
    anyhow::ensure!(a.kv_block_size >= 1, "--kv-block-size must be at least 1");
    anyhow::ensure!(a.prefill_chunk.is_none_or(|c| c >= 1), "--prefill-chunk must be at least 1");
    anyhow::ensure!(a.prefill_chunk_decoding.is_none_or(|c| c >= 1), "--prefill-chunk-decoding must be at least 1");
    anyhow::ensure!(
        a.kv_budget.is_none_or(|g| g.is_finite() && g > 0.0),
        "--kv-budget must be a positive number of GiB"
    );
    anyhow::ensure!(
        a.prompt_cache_state.is_finite() && a.prompt_cache_state >= 0.0,
        "--prompt-cache-state must be a number of GiB, 0 or more"
    );
    anyhow::ensure!(
        a.prompt_cache.is_none_or(|g| g.is_finite() && g >= 0.0),
        "--prompt-cache must be a number of GiB >= 0 (0 disables it)"
    );
    anyhow::ensure!(
        a.ssd_cache_max.is_finite() && a.ssd_cache_max > 0.0,
        "--ssd-cache-max must be a positive number of GiB"
    );
    anyhow::ensure!(a.temperature.is_none_or(|t| t.is_finite() && t >= 0.0), "--temperature must be >= 0");
    anyhow::ensure!(a.top_p.is_none_or(|p| p > 0.0 && p <= 1.0), "--top-p must be in (0, 1]");
    anyhow::ensure!(a.max_tokens.is_none_or(|m| m >= 1), "--max-tokens must be at least 1");
    anyhow::ensure!(a.timeout >= 1, "--timeout must be at least 1 second");
    anyhow::ensure!(a.header_timeout >= 1, "--header-timeout must be at least 1 second");
    anyhow::ensure!(a.max_connections.is_none_or(|m| m >= 1), "--max-connections must be at least 1");
    anyhow::ensure!(a.api_key.as_deref().is_none_or(|k| !k.trim().is_empty()), "--api-key must not be empty");
    anyhow::ensure!(
        a.isolate_backoff_max.is_finite() && (0.0..=3600.0).contains(&a.isolate_backoff_max),
        "--isolate-backoff-max must be a number of seconds from 0 to 3600"
    );
    anyhow::ensure!(a.model_pool >= 1, "--model-pool must be at least 1");
    anyhow::ensure!(
        a.served_model_name.as_deref().is_none_or(|n| !n.trim().is_empty()),
        "--served-model-name must not be empty"
    );
    anyhow::ensure!(
        a.served_model_name.is_none() || a.model.model.len() <= 1,
        "--served-model-name names one model; a model pool's models are named by their --model"
    );
    crate::draft::check(a.draft_model.as_deref(), a.model.model.len(), a.speculative)?;
    let mut seen = std::collections::HashSet::new();
    for m in &a.model.model {
        anyhow::ensure!(seen.insert(m.as_str()), "--model {m} is given twice");
    }
    Ok(())
}
