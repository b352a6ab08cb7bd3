//! The `hearth` binary.

mod draft;
mod generate;
mod kv_quality;
mod levers;
mod media;
mod models;
mod open;
mod parse;
mod quantize;
mod serve;
mod serve_check;
mod tokenize;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "hearth", version, about = "A local-first LLM inference server", propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options every model-loading command shares.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A .gguf file, a Hugging Face model directory, an HF id in the local HF cache, or an alias (`hearth models`).
    /// `serve` takes several (repeat the flag): a model pool, one engine process per model.
    #[arg(long, short = 'm', env = "HEARTH_MODEL", default_value = hearth_engine::weights::resolve::DEFAULT_MODEL,
          action = clap::ArgAction::Append)]
    pub model: Vec<String>,
    /// auto | cpu | cuda | cuda:N
    #[arg(long, env = "HEARTH_DEVICE", default_value = "auto")]
    pub device: String,
    /// CPU threads for the compute pool (default: all cores).
    #[arg(long, env = "HEARTH_THREADS")]
    pub threads: Option<usize>,
    /// A Jinja chat template file, overriding the model's own.
    #[arg(long, env = "HEARTH_CHAT_TEMPLATE")]
    pub chat_template: Option<std::path::PathBuf>,
    /// Dequantize GGUF matrices to f32 at load: transformers' exact math, several times the weight memory.
    #[arg(long, env = "HEARTH_DEQUANTIZE")]
    pub dequantize: bool,
    /// Activation and KV-cache dtype: auto (f32 on the CPU; on a GPU bf16 for safetensors, f32 for GGUF), f32,
    /// bf16, f16 (GPU only).
    #[arg(long, env = "HEARTH_DTYPE", default_value = "auto")]
    pub dtype: String,
    /// How the KV cache keeps keys and values: auto (f16 on the CPU, the model's dtype on a GPU), f32, f16, bf16
    /// (GPU); on the CPU also q8_0 (int8, 1.94x the tokens of f16 in the same memory), q4_0 (4-bit, 3.56x) or
    /// turbo:kXvY (X-bit keys, Y-bit values, rotated: 8 is q8_0, 4/3/2 a Lloyd-Max codebook; turbo:k8v3 2.81x).
    #[arg(long, env = "HEARTH_KV_CACHE_DTYPE", default_value = "auto")]
    pub kv_cache_dtype: String,
    /// llama.cpp's `mmproj` GGUF with the vision tower of a GGUF model (Qwen2.5-VL): the model then takes images.
    #[arg(long, env = "HEARTH_MMPROJ")]
    pub mmproj: Option<std::path::PathBuf>,
}

impl ModelArgs {
    /// The model (the first, where `serve` was given several).
    pub fn spec(&self) -> &str {
        self.model.first().map(String::as_str).unwrap_or(hearth_engine::weights::resolve::DEFAULT_MODEL)
    }

    /// `--kv-cache-dtype` (None: auto).
    pub fn kv_cache(&self) -> anyhow::Result<Option<hearth_engine::kv::KvEncoding>> {
        hearth_engine::kv::KvEncoding::parse(&self.kv_cache_dtype).map_err(|e| anyhow::anyhow!("--kv-cache-dtype: {e}"))
    }

    /// How the flags load a model's weights (a draft model's too: without the `--mmproj`, which is the model's).
    pub fn load_options(&self) -> anyhow::Result<hearth_engine::models::LoadOptions> {
        Ok(hearth_engine::models::LoadOptions {
            dequantize: self.dequantize,
            dtype: hearth_engine::models::parse_dtype(&self.dtype)?,
            kv_cache: self.kv_cache()?,
            mmproj: None,
        })
    }

    /// Load the model.
    pub fn load(&self) -> anyhow::Result<hearth_engine::loader::LoadedModel> {
        anyhow::ensure!(
            self.model.len() == 1,
            "--model is given {} times: only `hearth serve` takes several (a model pool)",
            self.model.len()
        );
        hearth_engine::device::set_cpu_threads(self.threads)?;
        let device = hearth_engine::device::select_device(&self.device)?;
        let opts = hearth_engine::models::LoadOptions { mmproj: self.mmproj.clone(), ..self.load_options()? };
        let m = hearth_engine::loader::load_with(self.spec(), &device, self.chat_template.as_deref(), &opts)?;
        tracing::info!(
            model = %m.location.path().display(),
            config = %m.model.config().describe(),
            device = %hearth_engine::device::describe(&device),
            load_ms = m.load_time.as_millis() as u64,
            "model loaded"
        );
        Ok(m)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Generate text for one prompt, streaming it to stdout (timings go to stderr).
    Generate(generate::GenerateArgs),
    /// Print the token ids of a text as a JSON array.
    Tokenize(tokenize::TokenizeArgs),
    /// Score KV-cache encodings against the f32 cache on documents (teacher-forced KL, top-1, perplexity).
    KvQuality(kv_quality::KvQualityArgs),
    /// List the models `--model` can name without a path.
    Models,
    /// Rewrite a GGUF with its matrices in another GGML type (q4_0 ... q6_k, q4_k_m, q5_k_m), as llama-quantize does.
    Quantize(quantize::QuantizeArgs),
    /// Print every runtime lever (`HEARTH_*` environment variable): its effective value, default and meaning.
    Levers(levers::LeversArgs),
    /// Serve the model over OpenAI- and Anthropic-compatible HTTP APIs, with a web chat at /.
    Serve(Box<serve::ServeArgs>),
    /// The engine process of `serve --isolate` (started by the server, not by hand).
    #[command(name = "engine-child", hide = true)]
    EngineChild(Box<serve::EngineChildArgs>),
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    // Every runtime lever is parsed once, here: a malformed value stops the program with a clear message.
    if let Err(e) = hearth_engine::levers::Levers::from_env().map(hearth_engine::levers::init) {
        eprintln!("hearth: error: {e}");
        std::process::exit(2);
    }
    hearth_engine::malloc::tune();
    let result = match cli.command {
        Command::Generate(a) => generate::run(a),
        Command::Tokenize(a) => tokenize::run(a),
        Command::KvQuality(a) => kv_quality::run(a),
        Command::Models => models::run(),
        Command::Quantize(a) => quantize::run(a),
        Command::Levers(a) => levers::run(a),
        Command::Serve(a) => serve_check::check(&a).and_then(|_| serve::run(*a)),
        Command::EngineChild(a) => serve_check::check(&a.serve).and_then(|_| serve::run_engine_child(*a)),
    };
    if let Err(e) = result {
        eprintln!("hearth: error: {e:#}");
        std::process::exit(1);
    }
}
