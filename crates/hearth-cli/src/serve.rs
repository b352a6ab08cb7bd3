//! `hearth serve`: the HTTP server (OpenAI and Anthropic APIs, and the web chat at `/`).

use crate::parse::{parse_on_off, parse_size};
use crate::ModelArgs;
use anyhow::Context;
use clap::Args;
use hearth_engine::embed::{Embedder, EmbedderOptions};
use hearth_engine::engine::{CacheConfig, EngineConfig, SsdSettings};
use hearth_engine::models::Model;
use hearth_engine::sampling::grammar::Grammars;
use hearth_engine::sizing::blocks_for_budget;
use hearth_engine::weights::resolve::ModelLocation;
use hearth_server::ids::unix_now;
use hearth_server::model::isolate::{ChildCommand, Supervisor};
use hearth_server::model::pool::{ModelPool, PoolModel};
use hearth_server::model::Engine;
use hearth_server::origin::AllowList;
use hearth_server::{DefaultOverrides, Embedding, Loaded, Ready, SamplingDefaults, ServerConfig};
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The model's id in requests and responses (`model`, /v1/models). Default: a .gguf file's name without the
    /// extension, else the --model string as given (an alias, a directory, an HF id).
    #[arg(long, env = "HEARTH_SERVED_MODEL_NAME")]
    pub served_model_name: Option<String>,
    /// Address to listen on (0.0.0.0 for every interface).
    #[arg(long, env = "HEARTH_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 = any free port; the banner says which).
    #[arg(long, env = "HEARTH_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Most sequences decoding at once.
    #[arg(long, env = "HEARTH_BATCH", default_value_t = 8)]
    pub batch: usize,
    /// Tokens per KV cache block.
    #[arg(long, env = "HEARTH_KV_BLOCK_SIZE", default_value_t = 16)]
    pub kv_block_size: usize,
    /// KV cache size in GiB (default: 25% of available memory, at most what `--batch` full contexts need).
    #[arg(long, env = "HEARTH_KV_BUDGET")]
    pub kv_budget: Option<f64>,
    /// Most prompt tokens one engine step computes (default: 256 on the CPU, 8192 on a GPU).
    #[arg(long, env = "HEARTH_PREFILL_CHUNK")]
    pub prefill_chunk: Option<usize>,
    /// Most tokens of one prompt an engine step computes while streams are decoding: bounds their inter-token
    /// latency during a long prefill (default: 32 on the CPU, 2048 on a GPU).
    #[arg(long, env = "HEARTH_PREFILL_CHUNK_DECODING")]
    pub prefill_chunk_decoding: Option<usize>,
    /// Most prompts one engine step prefills (0: no limit; default: 2 on the CPU, no limit on a GPU).
    #[arg(long, env = "HEARTH_PREFILL_SEQS")]
    pub prefill_seqs: Option<usize>,
    /// Prompt cache: GiB of KV blocks kept for reuse after their requests end (0 disables prefix caching;
    /// default: the whole KV cache).
    #[arg(long, env = "HEARTH_PROMPT_CACHE")]
    pub prompt_cache: Option<f64>,
    /// Hybrid models (linear attention): GiB of recurrent-state snapshots the prompt cache keeps (a cached
    /// prefix resumes only where one was kept).
    #[arg(long, env = "HEARTH_PROMPT_CACHE_STATE", default_value_t = 1.0)]
    pub prompt_cache_state: f64,
    /// Directory of the SSD tier of the prompt cache: evicted and idle KV blocks are written there and restored
    /// on a later hit, across restarts.
    #[arg(long, env = "HEARTH_SSD_CACHE")]
    pub ssd_cache: Option<std::path::PathBuf>,
    /// Most GiB the SSD tier keeps (least recently used files go first).
    #[arg(long, env = "HEARTH_SSD_CACHE_MAX", default_value_t = 32.0)]
    pub ssd_cache_max: f64,
    /// Check every block's data against its hash when it is restored from the SSD tier (on), or trust the data
    /// (off: a damaged file may then change an answer). The header is always checked.
    #[arg(long, env = "HEARTH_SSD_CACHE_VERIFY", default_value = "on", value_parser = parse_on_off,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "on")]
    pub ssd_cache_verify: bool,
    /// With --ssd-cache: write cached blocks unused this many seconds to the SSD tier and free their KV memory
    /// (0: never).
    #[arg(long, env = "HEARTH_SSD_DEMOTE_IDLE", default_value_t = 300)]
    pub ssd_demote_idle: u64,
    /// Most requests waiting for a batch slot; more get HTTP 429.
    #[arg(long, env = "HEARTH_MAX_QUEUE", default_value_t = 64)]
    pub max_queue: usize,
    /// Speculative decoding's draft sources (a request's `prediction` in every mode but `off`): `auto` (prompt
    /// lookup in every row's own prompt and output, and the draft model where lookup finds no strong match),
    /// `ngram` (prompt lookup only), `draft` (the draft model only), `prediction` (only rows whose request has a
    /// `prediction`), `off`.
    #[arg(long, env = "HEARTH_SPECULATIVE", default_value = "auto",
          value_parser = hearth_engine::speculative::SpecMode::parse)]
    pub speculative: hearth_engine::speculative::SpecMode,
    /// A smaller model with the same tokenizer that drafts tokens for speculative decoding (a .gguf file, an HF
    /// directory or an alias): loaded on the same device, with its own KV cache.
    #[arg(long, env = "HEARTH_DRAFT_MODEL")]
    pub draft_model: Option<String>,
    /// Most drafted tokens a row verifies in one step (1-64): a row's drafts start at 8, grow by 2 while they are
    /// kept whole and shrink by 1 after a rejection.
    #[arg(long, env = "HEARTH_SPEC_TOKENS", default_value_t = hearth_engine::speculative::DEFAULT_DRAFT as u64,
          value_parser = clap::value_parser!(u64).range(1..=64))]
    pub spec_tokens: u64,
    /// Largest request body (bytes, or with a K/M/G suffix); larger bodies get HTTP 413.
    #[arg(long, env = "HEARTH_MAX_BODY", default_value = "4M", value_parser = parse_size)]
    pub max_body: usize,
    /// Most bytes of text one /tokenize or /detokenize request may hold (bytes, or with a K/M/G suffix); more get
    /// HTTP 413.
    #[arg(long, env = "HEARTH_MAX_TOKENIZE", default_value = "1M", value_parser = parse_size)]
    pub max_tokenize: usize,
    /// An embedding model served at /v1/embeddings beside the chat model (a sentence-transformers directory or its
    /// alias, e.g. all-minilm-l6-v2). A --model that is an embedding model serves embeddings alone.
    #[arg(long, env = "HEARTH_EMBEDDING_MODEL")]
    pub embedding_model: Option<String>,
    /// The Responses API's store of responses (for `previous_response_id` and GET /v1/responses/{id}): most bytes
    /// it keeps, with a K/M/G suffix (0: responses are not stored).
    #[arg(long, env = "HEARTH_RESPONSE_STORE", default_value = "64M", value_parser = parse_size)]
    pub response_store: usize,
    /// Seconds a stored response stays.
    #[arg(long, env = "HEARTH_RESPONSE_STORE_TTL", default_value_t = 3600)]
    pub response_store_ttl: u64,
    /// Require `Authorization: Bearer KEY` on every route but /health.
    #[arg(long, env = "HEARTH_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Default completion length (default: min(2048, what is left of the context)).
    #[arg(long, env = "HEARTH_MAX_TOKENS")]
    pub max_tokens: Option<usize>,
    /// Default temperature (default: the model's generation_config.json, else 0 = greedy).
    #[arg(long, env = "HEARTH_TEMPERATURE")]
    pub temperature: Option<f32>,
    /// Default top-p.
    #[arg(long, env = "HEARTH_TOP_P")]
    pub top_p: Option<f32>,
    /// Default top-k (0 = off).
    #[arg(long, env = "HEARTH_TOP_K")]
    pub top_k: Option<usize>,
    /// Default for thinking templates (`enable_thinking` for requests that do not set it in
    /// `chat_template_kwargs`): on or off; unset, the template's own default.
    #[arg(long, env = "HEARTH_REASONING", value_parser = parse_on_off)]
    pub reasoning: Option<bool>,
    /// Let image URLs reach private, loopback, link-local and CGNAT addresses (for images on your own network);
    /// by default the server fetches only from public addresses.
    #[arg(long, env = "HEARTH_ALLOW_PRIVATE_MEDIA")]
    pub allow_private_media: bool,
    /// Run the engine in a child process: a crash of the model (a kernel fault, out of memory) ends only the
    /// requests it was running (502 `engine_unavailable`), and the server respawns the engine with backoff while it
    /// keeps answering /health (`degraded`), /v1/models, /stats and the web chat.
    #[arg(long, env = "HEARTH_ISOLATE")]
    pub isolate: bool,
    /// With --isolate: the most seconds to wait before respawning a crashed engine (the wait starts at 0.1 s and
    /// doubles per crash in a row; a child that stayed up 30 s resets it).
    #[arg(long, env = "HEARTH_ISOLATE_BACKOFF_MAX", default_value_t = 10.0)]
    pub isolate_backoff_max: f64,
    /// With several --model: at most this many engines resident at once (each model's engine is a child process,
    /// as with --isolate); a request's `model` picks one, the least recently used is evicted.
    #[arg(long, env = "HEARTH_MODEL_POOL", default_value_t = 1)]
    pub model_pool: usize,
    /// Start a model's engine while the resident ones keep serving, then evict (on); or evict first (off: for a
    /// machine with no room for one more engine).
    #[arg(long, env = "HEARTH_MODEL_POOL_OVERLAP", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub model_pool_overlap: bool,
    /// Do not serve the web chat at / (the API alone).
    #[arg(long, env = "HEARTH_NO_UI")]
    pub no_ui: bool,
    /// Open the web chat in the browser once the model is ready ($BROWSER, else the system's opener).
    #[arg(long, env = "HEARTH_OPEN", conflicts_with = "no_ui")]
    pub open: bool,
    /// Seconds a request's body may take to arrive (408 after it).
    #[arg(long, env = "HEARTH_TIMEOUT", default_value_t = 600)]
    pub timeout: u64,
    /// Seconds a connection has to send a request's head; also how long an idle keep-alive connection stays open.
    #[arg(long, env = "HEARTH_HEADER_TIMEOUT", default_value_t = 20)]
    pub header_timeout: u64,
    /// On SIGTERM / SIGINT, seconds the requests in flight get to finish before they are ended (a stream with an
    /// error event); a second signal exits at once.
    #[arg(long, env = "HEARTH_SHUTDOWN_GRACE", default_value_t = 30)]
    pub shutdown_grace: u64,
    /// Most open connections; at the cap a new one replaces the oldest idle one, or gets 503 when every one is
    /// serving a request (default: the open-file limit less 128).
    #[arg(long, env = "HEARTH_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Web origins (comma-separated, e.g. `https://app.example`, or `*` for any) that may call the server from a
    /// browser, besides its own origin and loopback origins.
    #[arg(long, env = "HEARTH_ALLOWED_ORIGINS", default_value = "")]
    pub allowed_origins: String,
    /// Host names (comma-separated, or `*`) the server answers without --api-key, besides loopback names, IP
    /// addresses and --host: a guard against DNS rebinding.
    #[arg(long, env = "HEARTH_ALLOWED_HOSTS", default_value = "")]
    pub allowed_hosts: String,
    /// Milliseconds between SSE keep-alive comments while a stream waits for its first token.
    #[arg(long, env = "HEARTH_SSE_KEEPALIVE_MS", default_value_t = 1000, hide = true)]
    pub sse_keepalive_ms: u64,
}

const GIB: f64 = (1u64 << 30) as f64;

/// Serve (`a` checked by `serve_check::check`).
pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let cfg = ServerConfig {
        host: a.host.clone(),
        port: a.port,
        max_body: a.max_body,
        max_tokenize: a.max_tokenize,
        api_key: a.api_key.clone(),
        keepalive: Duration::from_millis(a.sse_keepalive_ms.max(1)),
        response_store_bytes: a.response_store,
        response_store_ttl: Duration::from_secs(a.response_store_ttl),
        ui: !a.no_ui,
        header_timeout: Duration::from_secs(a.header_timeout),
        timeout: Duration::from_secs(a.timeout),
        shutdown_grace: Duration::from_secs(a.shutdown_grace),
        max_connections: a.max_connections,
        allowed_origins: AllowList::parse(&a.allowed_origins),
        allowed_hosts: AllowList::parse(&a.allowed_hosts),
    };
    let open = a.open;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let on_ready = move |url: &str| {
        if open {
            crate::open::browser(url);
        }
    };
    let served = rt.block_on(hearth_server::run(cfg, move || load_all(&a), on_ready));
    // Work the shutdown left behind (a prompt still tokenizing on the blocking pool) does not hold the exit up.
    rt.shutdown_timeout(Duration::from_secs(1));
    served
}

/// The id a model is served under: a GGUF file's name without `.gguf`
/// (`SmolLM2-135M-Instruct.Q4_1` for `/models/SmolLM2-135M-Instruct.Q4_1.gguf`), else `spec` as given.
fn model_id(spec: &str) -> String {
    let path = std::path::Path::new(spec);
    let gguf = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    match path.file_stem().and_then(|s| s.to_str()) {
        Some(stem) if gguf && !stem.is_empty() => stem.to_string(),
        _ => spec.to_string(),
    }
}

/// The id of `--model`: `--served-model-name`, else [`model_id`].
fn served_id(a: &ServeArgs) -> String {
    a.served_model_name.clone().unwrap_or_else(|| model_id(a.model.spec()))
}

/// Whether `spec` names an embedding model (a sentence-transformers directory: it has `modules.json`).
fn is_embedding_model(spec: &str) -> bool {
    matches!(hearth_engine::weights::resolve::resolve(spec), Ok(ModelLocation::HfDir(d)) if d.join("modules.json").is_file())
}

/// The chat model (unless --model is an embedding model) and the embedding model (--embedding-model, or --model);
/// with several --model, a model pool.
fn load_all(a: &ServeArgs) -> anyhow::Result<Loaded> {
    if a.model.model.len() > 1 {
        anyhow::ensure!(a.model.mmproj.is_none(), "--mmproj goes with one --model, not a model pool");
        let embedding = a.embedding_model.as_deref().map(|spec| load_embedding(a, spec, model_id(spec))).transpose()?;
        return Ok(Loaded { ready: None, embedding, pool: Some(load_pool(a)?) });
    }
    let (ready, embedding_spec) = if is_embedding_model(a.model.spec()) {
        anyhow::ensure!(
            a.embedding_model.is_none(),
            "--model {} is an embedding model; give a chat model with --model to serve it beside --embedding-model",
            a.model.spec()
        );
        (None, Some((a.model.spec().to_string(), served_id(a))))
    } else {
        let ready = if a.isolate { load_isolated(a)? } else { load(a)? };
        (Some(ready), a.embedding_model.clone().map(|spec| (spec.clone(), model_id(&spec))))
    };
    let embedding = embedding_spec.map(|(spec, id)| load_embedding(a, &spec, id)).transpose()?;
    Ok(Loaded { ready, embedding, pool: None })
}

fn load_embedding(a: &ServeArgs, spec: &str, model_id: String) -> anyhow::Result<Embedding> {
    hearth_engine::device::set_cpu_threads(a.model.threads)?;
    let device = hearth_engine::device::select_device(&a.model.device)?;
    let opts = EmbedderOptions { max_queued_inputs: a.max_queue.max(1) * 64, ..EmbedderOptions::default() };
    let embedder =
        Embedder::load(spec, &device, &opts).with_context(|| format!("loading the embedding model {spec}"))?;
    let info = embedder.info();
    tracing::info!(model = %info.dir.display(), dimensions = info.dimensions, pooling = info.pooling.name(), "embedding model loaded");
    let handle = hearth_engine::embed::start(embedder).context("starting the embedding worker")?;
    Ok(Embedding { handle, model_id, created: unix_now() })
}

/// What cached KV is shared under: the model's fingerprint, the device kind and every lever's value (a kernel
/// lever can change the low bits of the KV, so blocks made under other settings are not reused).
fn cache_namespace(fingerprint: u128, device: &str) -> u128 {
    let levers: Vec<String> =
        hearth_engine::levers::get().effective().into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let key = format!("{fingerprint:032x}/{device}/{}", levers.join(","));
    hearth_engine::kv::BlockHash::root(key.as_bytes()).0
}

/// Load the model (and the draft model), size the KV cache, start the engine.
fn load(a: &ServeArgs) -> anyhow::Result<Ready> {
    let m = a.model.load()?;
    let images = crate::media::image_support(a.model.mmproj.as_deref(), a.allow_private_media, &m.location)?;
    let draft = crate::draft::load(a.draft_model.as_deref(), &a.model, &m)?;
    let bs = a.kv_block_size;
    // The engine's defaults on this device (its memory read after the weights loaded); flags override them.
    let sizing = EngineConfig::defaults_for(&m.device);
    let budget = a.kv_budget.map_or(sizing.kv_budget_bytes, |gib| (gib * GIB) as u64);
    // a hybrid model's running state lives in host memory: on the CPU the default KV share makes room for it
    let recurrent = hearth_engine::sizing::recurrent_bytes(m.model.as_ref(), a.batch, bs);
    let budget = if m.device.is_cpu() && a.kv_budget.is_none() { budget.saturating_sub(recurrent) } else { budget };
    let budget = crate::draft::target_share(m.model.as_ref(), draft.as_deref(), budget);
    let kv_blocks = hearth_engine::sizing::kv_blocks(m.model.as_ref(), budget, a.batch, bs);
    anyhow::ensure!(kv_blocks >= 2, "--kv-budget is too small to hold even one block of {bs} tokens; raise it");
    if a.kv_budget.is_some() {
        let what = format!("a KV cache of {} tokens (--kv-budget)", kv_blocks * bs);
        let kv_bytes = |model: &dyn Model| hearth_engine::sizing::kv_bytes(model, kv_blocks, bs);
        let bytes = kv_bytes(m.model.as_ref()) + draft.as_deref().map_or(0, kv_bytes);
        let free = hearth_engine::sizing::available_memory(&m.device);
        let remedy = "lower --kv-budget, or leave it out (the default takes a share of what is free)";
        hearth_engine::sizing::admit(&what, bytes, free, remedy).map_err(anyhow::Error::msg)?;
    }
    let snapshots = if a.prompt_cache == Some(0.0) { 0 } else { (a.prompt_cache_state * GIB) as u64 };
    if let Some(live) =
        hearth_engine::sizing::admit_recurrent(m.model.as_ref(), a.batch, bs, snapshots).map_err(anyhow::Error::msg)?
    {
        tracing::info!("linear-attention state: {} for {} sequences", hearth_engine::sizing::gib(live), a.batch);
    }
    let defaults = sampling_defaults(a, m.generation_config.as_ref());
    let device = hearth_engine::device::describe(&m.device);
    let eos = m.tokenizer.eos_ids().to_vec();
    let step_tokens = a.prefill_chunk.unwrap_or(sizing.step_tokens);
    let step_tokens_decoding = a.prefill_chunk_decoding.unwrap_or(sizing.step_tokens_decoding);
    let max_prefill_rows = a.prefill_seqs.unwrap_or(sizing.max_prefill_rows);
    let cache = CacheConfig {
        max_blocks: match a.prompt_cache {
            None => kv_blocks,
            Some(gib) => blocks_for_budget(m.model.as_ref(), (gib * GIB) as u64, bs).min(kv_blocks),
        },
        namespace: cache_namespace(m.fingerprint, if m.device.is_cpu() { "cpu" } else { "gpu" }),
        ssd: a.ssd_cache.as_ref().map(|dir| SsdSettings {
            dir: dir.clone(),
            max_bytes: (a.ssd_cache_max * GIB) as u64,
            verify: a.ssd_cache_verify,
            demote_idle: (a.ssd_demote_idle > 0).then(|| Duration::from_secs(a.ssd_demote_idle)),
        }),
        state_bytes: snapshots,
        ..Default::default()
    };
    if a.ssd_cache.is_some() && cache.max_blocks == 0 {
        tracing::warn!("--ssd-cache has no effect with --prompt-cache 0");
    }
    let ecfg = EngineConfig {
        max_batch: a.batch,
        kv_block_size: bs,
        kv_blocks,
        step_tokens,
        step_tokens_decoding,
        max_prefill_rows,
        max_queue: a.max_queue,
        cache,
        spec: hearth_engine::speculative::SpecConfig {
            mode: a.speculative,
            max_draft: a.spec_tokens as usize,
            ..Default::default()
        },
    };
    let width = m.model.config().vocab_size;
    let engine =
        hearth_engine::engine::start_with_draft(m.model, draft, m.device, ecfg, eos).context("starting the engine")?;
    let tokenizer = Arc::new(m.tokenizer);
    let engine = engine.with_grammars(warm_grammars(&tokenizer, width));
    Ok(Ready {
        engine: Engine::Local(Box::new(engine)),
        tokenizer,
        reasoning: a.reasoning,
        model_id: served_id(a),
        device,
        defaults,
        created: unix_now(),
        images,
    })
}

/// The server's sampling defaults: the flags over the model's generation config.
fn sampling_defaults(a: &ServeArgs, generation_config: Option<&serde_json::Value>) -> SamplingDefaults {
    let flags =
        DefaultOverrides { temperature: a.temperature, top_p: a.top_p, top_k: a.top_k, max_tokens: a.max_tokens };
    SamplingDefaults::resolve(generation_config, &flags)
}

/// The grammar compiler, its vocabulary index built on a thread of its own: 0.15 s (49k tokens) to 1.7 s (262k),
/// now rather than in the first request.
fn warm_grammars(tokenizer: &Arc<hearth_engine::tokenizer::Tokenizer>, width: usize) -> Arc<Grammars> {
    let grammars = Arc::new(Grammars::new(tokenizer.clone(), width));
    let g = grammars.clone();
    let _ = std::thread::Builder::new().name("hearth-grammars".into()).spawn(move || {
        g.warm();
        hearth_engine::malloc::release_free();
    });
    grammars
}

/// `--isolate`: this process keeps the tokenizer and chat template (requests are parsed and rendered here); the
/// engine, and with it the grammar compiler, runs in a supervised child, this binary's hidden `engine-child` subcommand with the same flags.
fn load_isolated(a: &ServeArgs) -> anyhow::Result<Ready> {
    let side = hearth_engine::loader::load_text_side(a.model.spec(), a.model.chat_template.as_deref())?;
    let program = std::env::current_exe().context("finding this program to start the engine process")?;
    let cmd = ChildCommand {
        program,
        args: child_args(std::env::args_os().skip(1)),
        backoff_max: Duration::from_secs_f64(a.isolate_backoff_max),
    };
    let sup = tokio::runtime::Handle::current()
        .block_on(Supervisor::start(cmd))
        .map_err(|e| anyhow::anyhow!("starting the engine process: {e}"))?;
    let tokenizer = Arc::new(side.tokenizer);
    Ok(Ready {
        device: format!("{} (isolated engine, pid {})", sup.device(), sup.status().pid.unwrap_or(0)),
        engine: Engine::Isolated(sup),
        tokenizer,
        reasoning: a.reasoning,
        model_id: served_id(a),
        defaults: sampling_defaults(a, side.generation_config.as_ref()),
        created: unix_now(),
        images: crate::media::image_support(a.model.mmproj.as_deref(), a.allow_private_media, &side.location)?,
    })
}

/// A model pool of every --model: their tokenizers and templates here, the first one's engine started.
fn load_pool(a: &ServeArgs) -> anyhow::Result<Arc<ModelPool>> {
    let program = std::env::current_exe().context("finding this program to start the engine processes")?;
    let mut models = Vec::new();
    for spec in &a.model.model {
        anyhow::ensure!(
            !is_embedding_model(spec),
            "--model {spec} is an embedding model: give it with --embedding-model"
        );
        let side = hearth_engine::loader::load_text_side(spec, a.model.chat_template.as_deref())
            .with_context(|| format!("loading the tokenizer of {spec}"))?;
        let tokenizer = Arc::new(side.tokenizer);
        models.push(PoolModel {
            id: model_id(spec),
            tokenizer,
            defaults: sampling_defaults(a, side.generation_config.as_ref()),
            reasoning: a.reasoning,
            max_positions: side.config.max_position_embeddings,
            images: crate::media::image_support(a.model.mmproj.as_deref(), a.allow_private_media, &side.location)?,
            cmd: ChildCommand {
                program: program.clone(),
                args: pool_child_args(std::env::args_os().skip(1), spec),
                backoff_max: Duration::from_secs_f64(a.isolate_backoff_max),
            },
        });
    }
    tokio::runtime::Handle::current()
        .block_on(ModelPool::start(models, a.model_pool, a.model_pool_overlap))
        .map_err(|e| anyhow::anyhow!("starting the first model's engine: {e}"))
}

/// A pool child's command line: [`child_args`] without the pool's models and flags, with `-m spec`.
fn pool_child_args(args: impl Iterator<Item = std::ffi::OsString>, spec: &str) -> Vec<std::ffi::OsString> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for arg in child_args(args) {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let s = arg.to_string_lossy();
        if ["-m", "--model", "--model-pool", "--model-pool-overlap"].contains(&s.as_ref()) {
            skip_value = true;
        } else if !["--model=", "-m=", "--model-pool=", "--model-pool-overlap="].iter().any(|p| s.starts_with(p)) {
            out.push(arg);
        }
    }
    out.extend(["-m".into(), spec.into()]);
    out
}

/// The child's command line: this one's, with `serve` replaced by the hidden subcommand and `--isolate` dropped.
fn child_args(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out = Vec::new();
    let mut replaced = false;
    for arg in args {
        if !replaced && arg == "serve" {
            out.push(ENGINE_CHILD.into());
            replaced = true;
        } else if arg != "--isolate" {
            out.push(arg);
        }
    }
    out
}

/// The hidden subcommand an isolated server starts its engine with.
pub const ENGINE_CHILD: &str = "engine-child";

#[derive(Args)]
pub struct EngineChildArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// The parent's UNIX socket.
    #[arg(long)]
    pub socket: std::path::PathBuf,
}

/// The engine child: load the model and engine as `serve` does, then serve the parent's connection; exit when it
/// closes, which is also what happens when the parent dies (the kernel closes its end). PR_SET_PDEATHSIG is not
/// used: it fires when the spawning *thread* ends, and the parent spawns from pooled threads.
pub fn run_engine_child(a: EngineChildArgs) -> anyhow::Result<()> {
    let ready = load(&a.serve)?;
    let Engine::Local(handle) = ready.engine else { anyhow::bail!("the engine child has no local engine") };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async {
        let stream = tokio::net::UnixStream::connect(&a.socket)
            .await
            .with_context(|| format!("connecting to the server at {}", a.socket.display()))?;
        hearth_server::model::isolate::child::serve(stream, *handle, ready.device).await?;
        anyhow::Ok(())
    })?;
    // The engine thread and its rows go with the process.
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use crate::parse::parse_size;

    #[test]
    fn pool_child_command_line() {
        let args = ["serve", "-m", "a", "--model=b", "--model-pool", "2", "--port", "0", "--model", "c"];
        let got = super::pool_child_args(args.map(std::ffi::OsString::from).into_iter(), "b");
        assert_eq!(got, ["engine-child", "--port", "0", "-m", "b"].map(std::ffi::OsString::from));
    }

    #[test]
    fn child_command_line() {
        let args = ["serve", "-m", "serve", "--isolate", "--port", "0"].map(std::ffi::OsString::from);
        let got = super::child_args(args.into_iter());
        assert_eq!(got, ["engine-child", "-m", "serve", "--port", "0"].map(std::ffi::OsString::from));
    }

    #[test]
    fn model_ids() {
        let id = super::model_id;
        assert_eq!(id("/models/SmolLM2-135M-Instruct.Q4_1.gguf"), "SmolLM2-135M-Instruct.Q4_1");
        assert_eq!(id("relative/Model.GGUF"), "Model");
        assert_eq!(id("smollm2-135m"), "smollm2-135m");
        assert_eq!(id("HuggingFaceTB/SmolLM2-135M-Instruct"), "HuggingFaceTB/SmolLM2-135M-Instruct");
        assert_eq!(id("/models/qwen3-dir"), "/models/qwen3-dir");
    }

    #[test]
    fn ssd_cache_verify_is_on_unless_turned_off() {
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            serve: super::ServeArgs,
        }
        let verify = |extra: &[&str]| {
            let argv = ["t", "-m", "smollm2-135m"].iter().chain(extra);
            <T as clap::Parser>::try_parse_from(argv).map(|t| t.serve.ssd_cache_verify).map_err(|e| e.to_string())
        };
        assert_eq!(verify(&[]), Ok(true));
        assert_eq!(verify(&["--ssd-cache-verify"]), Ok(true));
        assert_eq!(verify(&["--ssd-cache-verify", "--port", "0"]), Ok(true));
        assert_eq!(verify(&["--ssd-cache-verify", "off"]), Ok(false));
        assert_eq!(verify(&["--ssd-cache-verify=0"]), Ok(false));
        assert!(verify(&["--ssd-cache-verify", "maybe"]).is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("4MB"), Ok(4 << 20));
        assert_eq!(parse_size("1.5k"), Ok(1536));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
    }
}
