//! `hearth quantize`: a GGUF rewritten with its matrices in another GGML type (`weights::quantize`).

use clap::Args;
use hearth_engine::weights::quantize::{quantize, Scheme};
use hearth_engine::weights::resolve::{resolve, ModelLocation};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args)]
pub struct QuantizeArgs {
    /// The GGUF to read: a path or an alias (`hearth models`).
    pub input: String,
    /// The GGUF to write (written beside as OUTPUT.part, renamed when complete; an existing file is replaced).
    pub output: PathBuf,
    /// q4_0, q4_1, q5_0, q8_0, q4_k, q5_k, q6_k, or llama.cpp's mixes q4_k_m and q5_k_m.
    #[arg(long = "type", short = 't')]
    pub scheme: Scheme,
    /// Threads quantizing tensors side by side (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn run(a: QuantizeArgs) -> anyhow::Result<()> {
    let input = match resolve(&a.input)? {
        ModelLocation::Gguf(p) => p,
        other => anyhow::bail!(
            "{}: `hearth quantize` reads a GGUF file; convert a Hugging Face directory with llama.cpp's \
             convert_hf_to_gguf.py first",
            other.path().display()
        ),
    };
    if input.canonicalize().ok() == a.output.canonicalize().ok() {
        anyhow::bail!("the output would overwrite the input {}", input.display());
    }
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let t0 = Instant::now();
    let last = std::sync::Mutex::new(Instant::now());
    let progress = |done: usize, total: usize, name: &str| {
        let Ok(mut last) = last.lock() else { return };
        if done == total || last.elapsed().as_secs_f32() >= 1.0 {
            *last = Instant::now();
            eprintln!("quantize: {done}/{total} tensors ({name}), {:.0}s", t0.elapsed().as_secs_f32());
        }
    };
    let r = quantize(&input, &a.output, a.scheme, threads, &progress)?;
    let types: Vec<String> = r.by_type.iter().map(|(t, n)| format!("{t} {n}")).collect();
    eprintln!(
        "quantize: {} -> {} in {:.1}s: {} tensors ({} requantized; {}), {:.1} MB -> {:.1} MB",
        input.display(),
        a.output.display(),
        t0.elapsed().as_secs_f32(),
        r.tensors,
        r.requantized,
        types.join(", "),
        r.bytes_in as f64 / 1e6,
        r.bytes_out as f64 / 1e6
    );
    Ok(())
}
