//! `hearth kv-quality`: what a KV-cache encoding costs in quality. Each document is scored teacher-forced (its own
//! tokens as the context, in forward passes of `--chunk` tokens) with the cache in f32, the reference, and in each
//! encoding asked for; per token the KL divergence of the encoding's next-token distribution from the reference's,
//! and each one's log-likelihood of the document's next token. Reported per encoding: mean, p99 and largest KL, the
//! share of tokens whose top choice agrees with the reference's, and perplexity beside the reference's.

use crate::ModelArgs;
use clap::Args;
use hearth_engine::generate::{forward_one, single_sequence_kv_in};
use hearth_engine::kv::KvEncoding;
use std::path::PathBuf;

#[derive(Args)]
pub struct KvQualityArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Text files, one document each.
    #[arg(required = true)]
    pub docs: Vec<PathBuf>,
    /// Encodings scored against the f32 cache, comma-separated (f16, bf16, q8_0, q4_0, turbo:kXvY).
    #[arg(long, default_value = "f16,q8_0", value_delimiter = ',')]
    pub encodings: Vec<String>,
    /// Tokens of each document scored (its first ones; all of a shorter one).
    #[arg(long, default_value_t = 1024)]
    pub ctx: usize,
    /// Tokens per forward pass.
    #[arg(long, default_value_t = 256)]
    pub chunk: usize,
    /// Print one JSON object per encoding instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One encoding's sums over every scored token.
#[derive(Default)]
struct Score {
    kl: Vec<f64>,
    nll: f64,
    agree: usize,
}

pub fn run(a: KvQualityArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.ctx >= 2 && a.chunk >= 1, "--ctx must be at least 2 and --chunk at least 1");
    let mut encodings = Vec::new();
    for e in &a.encodings {
        let enc = KvEncoding::parse(e).map_err(anyhow::Error::msg)?;
        encodings.push(enc.ok_or_else(|| anyhow::anyhow!("--encodings names encodings; `auto` is not one"))?);
    }
    let m = a.model.load()?;
    let model = m.model.as_ref();
    let mut reference = Score::default();
    let mut scores: Vec<Score> = encodings.iter().map(|_| Score::default()).collect();
    for (i, path) in a.docs.iter().enumerate() {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let mut ids = m.tokenizer.encode(&text, true)?;
        ids.truncate(a.ctx.min(model.max_positions()));
        if ids.len() < 2 {
            eprintln!("hearth: {}: fewer than 2 tokens, skipped", path.display());
            continue;
        }
        let mut ref_kv = single_sequence_kv_in(&m, ids.len(), KvEncoding::F32)?;
        let mut kvs = Vec::new();
        for &enc in &encodings {
            kvs.push(single_sequence_kv_in(&m, ids.len(), enc)?);
        }
        let mut pos = 0;
        while pos + 1 < ids.len() {
            let end = (pos + a.chunk).min(ids.len() - 1);
            let piece = &ids[pos..end];
            let want = forward_one(model, ref_kv.as_mut(), 0, piece, pos, true, &m.device)?;
            let want: Vec<Vec<f64>> = want.iter().map(|r| log_softmax(r)).collect();
            for (r, p) in want.iter().enumerate() {
                reference.nll -= p[ids[pos + r + 1] as usize];
            }
            for (kv, score) in kvs.iter_mut().zip(&mut scores) {
                let got = forward_one(model, kv.as_mut(), 0, piece, pos, true, &m.device)?;
                for (r, (p, q)) in want.iter().zip(&got).enumerate() {
                    let q = log_softmax(q);
                    score.kl.push(p.iter().zip(&q).map(|(lp, lq)| lp.exp() * (lp - lq)).sum::<f64>().max(0.0));
                    score.nll -= q[ids[pos + r + 1] as usize];
                    score.agree += usize::from(argmax(p) == argmax(&q));
                }
            }
            pos = end;
        }
        eprintln!("hearth: {}/{} {} ({} tokens)", i + 1, a.docs.len(), path.display(), ids.len());
    }
    let tokens = scores.first().map_or(0, |s| s.kl.len());
    anyhow::ensure!(tokens > 0 || encodings.is_empty(), "no document had 2 tokens to score");
    let ref_ppl = (reference.nll / tokens.max(1) as f64).exp();
    if !a.json {
        println!(
            "{:<8} {:>8} {:>11} {:>11} {:>11} {:>8} {:>9}",
            "cache", "tokens", "mean KL", "p99 KL", "max KL", "top-1", "ppl"
        );
        println!("{:<8} {:>8} {:>11} {:>11} {:>11} {:>8} {:>9.4}", "f32", tokens, "-", "-", "-", "-", ref_ppl);
    }
    for (enc, s) in encodings.iter().zip(&mut scores) {
        s.kl.sort_by(f64::total_cmp);
        let n = s.kl.len().max(1);
        let mean = s.kl.iter().sum::<f64>() / n as f64;
        let p99 = s.kl.get((n * 99).div_ceil(100).saturating_sub(1)).copied().unwrap_or(0.0);
        let max = s.kl.last().copied().unwrap_or(0.0);
        let agree = s.agree as f64 / n as f64;
        let ppl = (s.nll / n as f64).exp();
        if a.json {
            let row = serde_json::json!({"model": a.model.spec(), "cache": enc.name(), "tokens": s.kl.len(),
                "docs": a.docs.len(), "ctx": a.ctx, "mean_kl": mean, "p99_kl": p99, "max_kl": max, "top1": agree,
                "ppl": ppl, "ref_ppl": ref_ppl});
            println!("{row}");
        } else {
            println!(
                "{:<8} {:>8} {:>11.6} {:>11.6} {:>11.6} {:>7.2}% {:>9.4}",
                enc.name(),
                s.kl.len(),
                mean,
                p99,
                max,
                100.0 * agree,
                ppl
            );
        }
    }
    Ok(())
}

/// log softmax of one row of logits, in f64.
fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln() + max;
    row.iter().map(|&x| x as f64 - lse).collect()
}

fn argmax(x: &[f64]) -> usize {
    x.iter().enumerate().fold((0, f64::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b }).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_normalises_and_argmax_takes_the_first_largest() {
        let p = log_softmax(&[1.0, 3.0, 3.0, -2.0]);
        assert!((p.iter().map(|x| x.exp()).sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(argmax(&p), 1);
    }
}
