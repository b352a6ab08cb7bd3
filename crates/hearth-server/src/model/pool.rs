//! A model pool (`serve -m A -m B ... --model-pool N`): each model's engine in its own child process, at most `N`
//! of them resident, the least recently used evicted first.
//!
//! A request's `model` picks the engine (none: the first model). A model that is not resident is started while the
//! resident ones go on serving (spawn-overlap; `overlap: false` evicts first, for machines without room for one
//! more); once it is up, the least recently used other engine is retired in the background: it takes no new
//! requests, finishes the ones it has (up to `RETIRE_GRACE`), writes its prompt cache to the SSD tier and exits.
//! Every model's tokenizer and chat template stay loaded in this process, so requests are parsed and rendered
//! whether or not their engine is resident.

use super::isolate::{ChildCommand, Supervisor};
use super::{Engine, Ready};
use crate::config::SamplingDefaults;
use crate::error::{ApiError, ApiResult};
use crate::ids::unix_now;
use hearth_engine::tokenizer::Tokenizer;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most time an evicted engine gets to finish its requests.
pub const RETIRE_GRACE: Duration = Duration::from_secs(30);

/// One model of the pool: what its requests need besides an engine, and how to start its engine.
pub struct PoolModel {
    /// The `--model` string, its id in requests and `/v1/models`.
    pub id: String,
    pub tokenizer: Arc<Tokenizer>,
    pub defaults: SamplingDefaults,
    pub reasoning: Option<bool>,
    /// The model's context (from its configuration), for `/v1/models` while it is not resident.
    pub max_positions: usize,
    pub cmd: ChildCommand,
    /// Its images and the media policy.
    pub images: crate::chat::images::ImageSupport,
}

struct Resident {
    index: usize,
    ready: Arc<Ready>,
    used: Instant,
}

pub struct ModelPool {
    models: Vec<PoolModel>,
    capacity: usize,
    overlap: bool,
    resident: Mutex<Vec<Resident>>,
    /// One load at a time per model (two requests for a model that is not resident start one engine).
    loading: Vec<tokio::sync::Mutex<()>>,
}

/// A pool entry for `GET /engine` and `/v1/models`.
pub struct PoolState {
    pub model: String,
    pub max_positions: usize,
    /// The model takes images.
    pub images: bool,
    pub ready: Option<Arc<Ready>>,
}

impl ModelPool {
    /// The pool, with its first model's engine started (an error if it does not load).
    pub async fn start(models: Vec<PoolModel>, capacity: usize, overlap: bool) -> Result<Arc<ModelPool>, String> {
        if models.is_empty() {
            return Err("a model pool needs at least one model".into());
        }
        let loading = models.iter().map(|_| tokio::sync::Mutex::new(())).collect();
        let pool = Arc::new(ModelPool {
            models,
            capacity: capacity.max(1),
            overlap,
            resident: Mutex::new(Vec::new()),
            loading,
        });
        let ready = pool.launch(0).await?;
        pool.lock().push(Resident { index: 0, ready, used: Instant::now() });
        Ok(pool)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Resident>> {
        self.resident.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every configured model, with its engine when resident.
    pub fn states(&self) -> Vec<PoolState> {
        let resident = self.lock();
        self.models
            .iter()
            .enumerate()
            .map(|(i, m)| PoolState {
                model: m.id.clone(),
                max_positions: m.max_positions,
                images: m.images.vision.is_some(),
                ready: resident.iter().find(|r| r.index == i).map(|r| r.ready.clone()),
            })
            .collect()
    }

    /// The most recently used resident engine (for the routes that serve no particular model: `/stats`,
    /// `/tokenize`, ...).
    pub fn latest(&self) -> Option<Arc<Ready>> {
        self.lock().iter().max_by_key(|r| r.used).map(|r| r.ready.clone())
    }

    /// The engine of `model` (None: the first model), started if it is not resident.
    pub async fn ready(&self, model: Option<&str>) -> ApiResult<Arc<Ready>> {
        let index = match model {
            None => 0,
            Some(m) => self.models.iter().position(|p| p.id == m).ok_or_else(|| {
                let ids: Vec<&str> = self.models.iter().map(|p| p.id.as_str()).collect();
                ApiError::new(
                    axum::http::StatusCode::NOT_FOUND,
                    "not_found_error",
                    format!("`{m}` is not a model of this server; it serves {}", ids.join(", ")),
                )
                .with_code("model_not_found")
            })?,
        };
        if let Some(r) = self.touch(index) {
            return Ok(r);
        }
        let _one = self.loading[index].lock().await;
        if let Some(r) = self.touch(index) {
            return Ok(r);
        }
        if !self.overlap {
            // Make room first: at most `capacity` engines at any time.
            while self.lock().len() >= self.capacity {
                let Some(victim) = self.evict(index) else { break };
                victim.retire(RETIRE_GRACE).await;
            }
        }
        let ready = self.launch(index).await.map_err(|e| {
            ApiError::from_status(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                format!("starting `{}`: {e}", self.models[index].id),
            )
            .with_code("engine_stopped")
        })?;
        self.lock().push(Resident { index, ready: ready.clone(), used: Instant::now() });
        while self.lock().len() > self.capacity {
            let Some(victim) = self.evict(index) else { break };
            tokio::spawn(async move {
                let cut = victim.retire(RETIRE_GRACE).await;
                tracing::info!(cut, "an engine left the model pool");
            });
        }
        Ok(ready)
    }

    /// The resident engine of model `index`, marked used now.
    fn touch(&self, index: usize) -> Option<Arc<Ready>> {
        let mut resident = self.lock();
        let r = resident.iter_mut().find(|r| r.index == index)?;
        r.used = Instant::now();
        Some(r.ready.clone())
    }

    /// Take the least recently used engine other than model `keep`'s out of the pool.
    fn evict(&self, keep: usize) -> Option<Arc<Supervisor>> {
        let mut resident = self.lock();
        let (pos, _) = resident.iter().enumerate().filter(|(_, r)| r.index != keep).min_by_key(|(_, r)| r.used)?;
        let gone = resident.remove(pos);
        tracing::info!(model = %self.models[gone.index].id, "evicting the least recently used engine");
        match &gone.ready.engine {
            Engine::Isolated(s) => Some(s.clone()),
            Engine::Local(_) => None,
        }
    }

    async fn launch(&self, index: usize) -> Result<Arc<Ready>, String> {
        let m = &self.models[index];
        let sup = Supervisor::start(m.cmd.clone()).await?;
        Ok(Arc::new(Ready {
            device: format!("{} (isolated engine, pid {})", sup.device(), sup.status().pid.unwrap_or(0)),
            engine: Engine::Isolated(sup),
            tokenizer: m.tokenizer.clone(),
            model_id: m.id.clone(),
            defaults: m.defaults.clone(),
            reasoning: m.reasoning,
            created: unix_now(),
            images: m.images.clone(),
        }))
    }
}
