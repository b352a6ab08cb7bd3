//! hearth-server: the HTTP side. Routes and wire types over `hearth_engine::engine`; no tensor code.
//!
//! The modules are layers, each importing only layers below it (docs/design/0014-server-layers.md):
//!
//! 1. [`ids`], [`shutdown`], [`config`], [`origin`] (the origin policy) and [`wire`] (the bodies, and their shape
//!    errors): nothing of the runtime;
//! 2. [`error`]: the one error type and its one mapping to HTTP;
//! 3. [`model`]: the served models, their engines (in process or isolated) and the model pool;
//! 4. [`chat`] (the protocol-neutral chat core: a typed `ChatRequest` to a queued engine request) and [`output`]
//!    (what a request yields: generation, text, answers split into thought, text and tool calls, SSE);
//! 5. [`state`]: the app container;
//! 6. [`http`]: connections, the layers every route shares, the body extractor, the web chat;
//! 7. [`api`]: the handlers of each API (`openai`, `anthropic`, `responses`, `admin`), peers that import none of
//!    each other;
//! 8. this file: the router.
//!
//! `run` binds the port first, loads the model in a blocking task (`/health` says `loading` meanwhile), then
//! serves until SIGINT / SIGTERM (`http::conns` holds the accept loop and the shutdown's phases, `shutdown` the
//! signals).

pub mod api;
pub mod chat;
pub mod config;
pub mod error;
pub mod http;
pub mod ids;
pub mod model;
pub mod origin;
pub mod output;
pub mod shutdown;
pub mod state;
pub mod wire;

pub use config::{DefaultOverrides, SamplingDefaults, ServerConfig};
pub use model::{Embedding, Ready};
pub use state::AppState;

/// What loading produced: a generative model, an embedding model, or both.
pub struct Loaded {
    pub ready: Option<Ready>,
    pub embedding: Option<Embedding>,
    /// A model pool (several `--model`s), instead of `ready`.
    pub pool: Option<Arc<ModelPool>>,
}

use anyhow::Context;
use api::{admin, anthropic, openai, responses};
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use http::{compress, conns, guard, middleware, ui};
use model::pool::ModelPool;
use std::sync::Arc;
use tower::ServiceBuilder;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};

/// Every route, behind these layers (outermost first): request id, tracing span, the browser edge (`http::guard::edge`:
/// one Host, no CORS headers for refused origins, no framing), CORS, gzip, JSON errors, the browser guard
/// (`http::guard`: Host, Origin, Content-Type), API key, body limit, body read deadline. The
/// fallback serves the web chat (`http::ui`) where it applies, else a JSON 404.
pub fn router(state: AppState) -> Router {
    let max_body = state.cfg.max_body;
    let routes = Router::new()
        .route("/v1/chat/completions", post(openai::chat::handler))
        .route("/v1/completions", post(openai::completions::handler))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/embeddings", post(openai::embeddings::handler))
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/{id}", get(responses::get).delete(responses::delete))
        .route("/v1/models", get(openai::models::list))
        .route("/v1/models/{*id}", get(openai::models::get))
        .route("/v1", get(admin::index))
        .route("/metrics", get(admin::metrics::handler))
        .route("/health", get(admin::status::health))
        .route("/stats", get(admin::status::stats))
        .route("/engine", get(admin::status::engine))
        .route("/admin/cache/flush", post(admin::cache::cache_flush))
        .route("/admin/drain", post(admin::drain::drain))
        .route("/admin/undrain", post(admin::drain::undrain))
        .route("/tokenize", post(admin::tokens::tokenize))
        .route("/detokenize", post(admin::tokens::detokenize))
        .route("/apply-template", post(admin::tokens::apply_template))
        .fallback(ui::fallback)
        // Each `Router::layer` wraps what is already there, so these calls read innermost first (the
        // `ServiceBuilder` in the last one reads outermost first).
        // The body arrives whole within `--timeout` (408), before any handler runs.
        .layer(axum::middleware::from_fn_with_state(state.clone(), middleware::read_body))
        // The limit (413 on a too-large Content-Length, or once a streamed body passes it) replaces axum's own.
        .layer(RequestBodyLimitLayer::new(max_body))
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(state.clone(), middleware::require_api_key))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard::guard))
        .layer(axum::middleware::from_fn(middleware::json_errors));
    compress::gzip(routes)
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::new(middleware::REQUEST_ID, MakeRequestUuid))
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(middleware::RequestSpan)
                        .on_response(
                            DefaultOnResponse::new()
                                .level(tracing::Level::INFO)
                                .latency_unit(tower_http::LatencyUnit::Millis),
                        )
                        .on_failure(middleware::log_failure),
                )
                .layer(PropagateRequestIdLayer::new(middleware::REQUEST_ID))
                .layer(axum::middleware::from_fn_with_state(state.clone(), guard::edge))
                .layer(middleware::cors(state.cfg.allowed_origins.clone())),
        )
        .with_state(state)
}

/// Serve on an already-bound listener until SIGINT / SIGTERM, then shut down gracefully (`http::conns::serve`).
pub async fn serve(listener: tokio::net::TcpListener, state: AppState) -> anyhow::Result<()> {
    let cfg = &state.cfg;
    let limits = conns::Limits {
        header_timeout: cfg.header_timeout,
        max_connections: cfg.max_connections.unwrap_or_else(conns::default_max_connections),
        grace: cfg.shutdown_grace,
    };
    conns::serve(listener, router(state), limits, shutdown::signal()).await;
    Ok(())
}

/// Bind, load the models with `load` on a blocking thread, print the ready banner, call `on_ready` with the web
/// chat's URL (when it is served), serve.
pub async fn run<F, R>(cfg: ServerConfig, load: F, on_ready: R) -> anyhow::Result<()>
where
    F: FnOnce() -> anyhow::Result<Loaded> + Send + 'static,
    R: FnOnce(&str),
{
    let addr = format!("{}:{}", cfg.host, cfg.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("could not listen on {addr} (is another server using the port? try --port)"))?;
    let local = listener.local_addr().ok();
    let url = match local {
        Some(a) => format!("http://{a}"),
        None => format!("http://{addr}"),
    };
    let ui = cfg.ui && ui::assets::has_app();
    eprintln!("hearth: listening on {url}, loading the model...");
    let state = AppState::new(cfg);
    let server = tokio::spawn(serve(listener, state.clone()));
    let loaded = tokio::task::spawn_blocking(load).await.context("the model loading task panicked")??;
    let mut banner = format!("hearth: ready on {url}");
    if let Some(p) = &loaded.pool {
        let ids: Vec<String> = p.states().into_iter().map(|s| s.model).collect();
        banner += &format!(" | model pool {} (the first is up)", ids.join(", "));
    }
    if let Some(r) = &loaded.ready {
        banner += &format!(
            " | model {} | device {} | KV cache {} tokens ({}, {}) | batch {}",
            r.model_id,
            r.device,
            r.engine.info().kv_capacity_tokens,
            hearth_engine::sizing::gib(r.engine.info().kv_capacity_bytes),
            r.engine.info().kv_cache_dtype,
            r.engine.info().max_batch
        );
    }
    if let Some(e) = loaded.embedding {
        let i = e.handle.info();
        banner += &format!(" | embeddings {} ({} dimensions, {} tokens)", e.model_id, i.dimensions, i.max_input_tokens);
        state.set_embedding(e);
    }
    if let Some(p) = loaded.pool {
        state.set_pool(p);
    }
    match loaded.ready {
        Some(r) => {
            state.set_ready(r);
        }
        None => state.finish_loading(),
    }
    eprintln!("{banner}");
    if ui {
        let chat = match local {
            Some(a) => chat_url(a),
            None => format!("{url}/"),
        };
        eprintln!("hearth: web chat on {chat}");
        on_ready(&chat);
    }
    let served = server.await.context("the HTTP server task panicked")?;
    if let Some(r) = state.get() {
        flush_on_exit(&r.engine).await;
    }
    served
}

/// The web chat's URL for a browser on this machine: an unspecified listen address (`0.0.0.0`, `::`) is reached
/// through loopback.
pub fn chat_url(addr: std::net::SocketAddr) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}/", std::net::SocketAddr::new(ip, addr.port()))
}

/// Most time a shutdown waits for the prompt cache to reach the SSD tier.
const EXIT_FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// On shutdown, write the cached KV blocks to the SSD tier (when there is one) so a restart finds them.
async fn flush_on_exit(engine: &model::Engine) {
    if engine.stats().ssd_cache.is_none() || !engine.is_alive() {
        return;
    }
    eprintln!("hearth: writing the prompt cache to the SSD tier...");
    match tokio::time::timeout(EXIT_FLUSH_TIMEOUT, engine.flush()).await {
        Ok(Ok(_)) => {
            let s = engine.stats().ssd_cache.unwrap_or_default();
            eprintln!("hearth: SSD tier holds {} blocks ({:.1} MiB)", s.files, s.bytes as f64 / (1 << 20) as f64);
        }
        Ok(Err(e)) => eprintln!("hearth: writing the prompt cache failed: {e}"),
        Err(_) => eprintln!("hearth: gave up waiting for the SSD tier; some cached blocks were not written"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn chat_url_reaches_unspecified_addresses_through_loopback() {
        let url = |a: &str| super::chat_url(a.parse().expect("socket address"));
        assert_eq!(url("127.0.0.1:8080"), "http://127.0.0.1:8080/");
        assert_eq!(url("0.0.0.0:9000"), "http://127.0.0.1:9000/");
        assert_eq!(url("[::]:80"), "http://[::1]:80/");
        assert_eq!(url("192.168.1.5:8080"), "http://192.168.1.5:8080/");
    }
}
