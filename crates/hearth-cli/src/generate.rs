//! `hearth generate`: one prompt, streamed to stdout.

use crate::ModelArgs;
use anyhow::Context;
use clap::Args;
use hearth_engine::generate::{generate, GenerateRequest};
use hearth_engine::sampling::SamplingParams;
use hearth_engine::tokenizer::chat_template::RenderOptions;
use hearth_engine::tokenizer::StreamDecoder;
use std::io::Write;

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt; `-` reads it from stdin.
    pub prompt: Option<String>,
    /// Read the prompt from a file instead.
    #[arg(long, conflicts_with = "prompt")]
    pub prompt_file: Option<std::path::PathBuf>,
    /// Do not apply the chat template: the prompt is raw text.
    #[arg(long)]
    pub raw: bool,
    /// A system message (chat mode only).
    #[arg(long, conflicts_with = "raw")]
    pub system: Option<String>,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// 0 = off.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep generating past end-of-sequence tokens (benchmarks).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Prompt tokens per forward pass during prefill.
    #[arg(long, env = "HEARTH_PREFILL_CHUNK", default_value_t = 512)]
    pub prefill_chunk: usize,
    /// Print one JSON object {prompt_ids, ids, text, finish_reason, timings} instead of streaming text.
    #[arg(long)]
    pub json: bool,
}

fn read_prompt(a: &GenerateArgs) -> anyhow::Result<String> {
    if let Some(f) = &a.prompt_file {
        return std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()));
    }
    match a.prompt.as_deref() {
        Some("-") => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
            Ok(s)
        }
        Some(p) => Ok(p.to_string()),
        None => anyhow::bail!("give a prompt: hearth generate \"PROMPT\" (or --prompt-file FILE, or - for stdin)"),
    }
}

pub fn run(a: GenerateArgs) -> anyhow::Result<()> {
    let prompt = read_prompt(&a)?;
    let m = a.model.load()?;
    let tok = &m.tokenizer;
    let prompt_ids = if a.raw {
        tok.encode(&prompt, true)?
    } else {
        let tmpl = tok.chat_template.as_ref().ok_or_else(|| {
            anyhow::anyhow!("this model has no chat template; pass --raw for plain text, or --chat-template FILE")
        })?;
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(serde_json::json!({"role": "system", "content": s}));
        }
        msgs.push(serde_json::json!({"role": "user", "content": prompt}));
        let rendered = tmpl.render(
            &serde_json::Value::Array(msgs),
            &RenderOptions { add_generation_prompt: true, ..Default::default() },
        )?;
        tok.encode_chat(&rendered)?
    };
    let req = GenerateRequest {
        prompt_ids: prompt_ids.clone(),
        max_tokens: a.max_tokens,
        sampling: SamplingParams {
            temperature: a.temperature,
            top_p: a.top_p,
            top_k: a.top_k,
            min_p: a.min_p,
            repetition_penalty: a.repetition_penalty,
            seed: a.seed,
            ..Default::default()
        },
        ignore_eos: a.ignore_eos,
        prefill_chunk: a.prefill_chunk,
    };
    // Chat answers drop the first leading space (mlx_lm.server's rule); raw continuations keep it.
    let mut dec = StreamDecoder::new(tok, !a.raw);
    let mut text = String::new();
    let stdout = std::io::stdout();
    let out = generate(&m, &req, |s| {
        let piece = dec.push(s.id);
        if a.json {
            text.push_str(&piece);
        } else if !piece.is_empty() {
            let mut lock = stdout.lock();
            // A closed stdout (a pipe to `head`) stops generation instead of erroring.
            return lock.write_all(piece.as_bytes()).and_then(|_| lock.flush()).is_ok();
        }
        true
    })?;
    let tail = dec.finish();
    let prefill_tps = prompt_ids.len() as f64 / out.prefill_time.as_secs_f64().max(1e-9);
    let decode_tps = out.ids.len() as f64 / out.decode_time.as_secs_f64().max(1e-9);
    if a.json {
        text.push_str(&tail);
        let v = serde_json::json!({
            "prompt_ids": prompt_ids,
            "ids": out.ids,
            "text": text,
            "finish_reason": out.finish_reason.as_str(),
            "timings": {
                "prompt_tokens": prompt_ids.len(),
                "prefill_ms": out.prefill_time.as_secs_f64() * 1e3,
                "prefill_tok_s": prefill_tps,
                "generated_tokens": out.ids.len(),
                "decode_ms": out.decode_time.as_secs_f64() * 1e3,
                "decode_tok_s": decode_tps,
            }
        });
        println!("{v}");
    } else {
        print!("{tail}");
        println!();
    }
    eprintln!(
        "prefill: {} tokens, {:.1} tok/s | decode: {} tokens, {:.1} tok/s | finish: {}",
        prompt_ids.len(),
        prefill_tps,
        out.ids.len(),
        decode_tps,
        out.finish_reason.as_str()
    );
    Ok(())
}
