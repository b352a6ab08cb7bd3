//! The app container every handler gets: the configuration, the served models once loaded, the drain switch and
//! the Responses API's store. The port is bound before the model loads; until `set_ready`, every model route
//! answers 503 and `/health` says `loading`.

pub mod drain;
pub mod store;

use crate::config::ServerConfig;
use crate::error::{ApiError, ApiResult};
use crate::model::pool::ModelPool;
use crate::model::{Embedding, Ready};
use drain::{Admitted, Drain};
use std::sync::{Arc, OnceLock};
use store::ResponseStore;

#[derive(Clone)]
pub struct AppState {
    ready: Arc<OnceLock<Arc<Ready>>>,
    embedding: Arc<OnceLock<Arc<Embedding>>>,
    /// Loading finished (with or without a generative model).
    loaded: Arc<OnceLock<()>>,
    pub cfg: Arc<ServerConfig>,
    /// Stored responses of the Responses API.
    pub responses: Arc<ResponseStore>,
    /// `POST /admin/drain`'s switch.
    pub drain: Arc<Drain>,
    /// The model pool, when the server has several models.
    pool: Arc<OnceLock<Arc<ModelPool>>>,
}

impl AppState {
    pub fn new(cfg: ServerConfig) -> Self {
        let responses = Arc::new(ResponseStore::new(cfg.response_store_bytes, cfg.response_store_ttl));
        Self {
            ready: Arc::new(OnceLock::new()),
            embedding: Arc::new(OnceLock::new()),
            loaded: Arc::new(OnceLock::new()),
            cfg: Arc::new(cfg),
            responses,
            drain: Arc::new(Drain::default()),
            pool: Arc::new(OnceLock::new()),
        }
    }

    /// Install a model pool (once); loading is then finished.
    pub fn set_pool(&self, pool: Arc<ModelPool>) {
        let _ = self.pool.set(pool);
        self.finish_loading();
    }

    pub fn pool(&self) -> Option<&Arc<ModelPool>> {
        self.pool.get()
    }

    /// Install the loaded model (once; later calls are ignored); loading is then finished.
    pub fn set_ready(&self, mut ready: Ready) -> bool {
        // An engine that takes no images (Gemma 3's over an encoded KV cache) is not offered them: `/v1/models`
        // lists text only and image parts are refused before anything is fetched.
        if ready.images.vision.is_some() && !ready.engine.info().images {
            ready.images.vision = None;
        }
        let set = self.ready.set(Arc::new(ready)).is_ok();
        self.finish_loading();
        set
    }

    /// Install the embedding model (once).
    pub fn set_embedding(&self, e: Embedding) -> bool {
        self.embedding.set(Arc::new(e)).is_ok()
    }

    /// Loading is over: what is not installed by now is not served.
    pub fn finish_loading(&self) {
        let _ = self.loaded.set(());
    }

    pub fn is_loaded(&self) -> bool {
        self.loaded.get().is_some()
    }

    /// The generative model; with a model pool, its most recently used resident engine.
    pub fn get(&self) -> Option<Arc<Ready>> {
        match self.pool.get() {
            Some(p) => p.latest(),
            None => self.ready.get().cloned(),
        }
    }

    pub fn get_embedding(&self) -> Option<Arc<Embedding>> {
        self.embedding.get().cloned()
    }

    /// The loaded generative model, 503 while it loads, or a 400 when the server serves only embeddings.
    pub fn ready(&self) -> ApiResult<Arc<Ready>> {
        match (self.get(), self.get_embedding()) {
            (Some(r), _) => Ok(r),
            (None, Some(e)) if self.is_loaded() => Err(ApiError::bad_request(format!(
                "`{}` is an embedding model: this server answers /v1/embeddings only (serve a chat model with --model, and this one with --embedding-model, to have both)",
                e.model_id
            ))
            .with_code("model_not_generative")),
            _ => Err(ApiError::loading()),
        }
    }

    /// The generative model for a request that generates, with its admission (hold it until the request is
    /// queued in the engine); 503 `draining` after `POST /admin/drain`.
    pub fn generator(&self) -> ApiResult<(Arc<Ready>, Admitted)> {
        let ready = self.ready()?;
        let admitted = self.drain.admit().ok_or_else(ApiError::draining)?;
        Ok((ready, admitted))
    }

    /// [`generator`](Self::generator) for the request's `model`: with a model pool, that model's engine (started
    /// if it is not resident; an unknown model is a 404); without one, the server's model whatever the name.
    pub async fn generator_for(&self, model: Option<&str>) -> ApiResult<(Arc<Ready>, Admitted)> {
        let Some(pool) = self.pool.get() else { return self.generator() };
        let admitted = self.drain.admit().ok_or_else(ApiError::draining)?;
        let ready = pool.ready(model).await?;
        Ok((ready, admitted))
    }

    /// The embedding model, 503 while loading, or a 400 when the server has none.
    pub fn embedder(&self) -> ApiResult<Arc<Embedding>> {
        match (self.get_embedding(), self.get()) {
            (Some(e), _) => Ok(e),
            (None, Some(r)) if self.is_loaded() => Err(ApiError::bad_request(format!(
                "`{}` is a chat model and this server has no embedding model: start hearth with --embedding-model (e.g. all-minilm-l6-v2)",
                r.model_id
            ))
            .with_code("model_not_embedding")),
            _ => Err(ApiError::loading()),
        }
    }
}
