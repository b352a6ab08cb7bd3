//! The metrics registry behind `GET /metrics` (`api::admin::metrics`): Prometheus text format, names in vLLM's style
//! under `hearth:`. The request-side series (latency histograms, finished requests by reason, token counters,
//! prompt-cache hits) are recorded by every API's `Generation` as its events pass, so they count Chat Completions,
//! Completions and Messages alike; the engine-side gauges (rows running and waiting, KV usage, preemptions) come from
//! the engine's stats when the scrape happens.

use hearth_engine::engine::EngineStats;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Bucket upper bounds in seconds.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];
const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];

/// How a request's choice ended, as `finished_reason` labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// The model stopped (EOS, a stop string or token, a completed grammar).
    Stop,
    /// The length limit.
    Length,
    /// The client left, or the request was cancelled, before it ended.
    Abort,
    /// The engine failed.
    Error,
}

const REASONS: [(Finished, &str); 4] =
    [(Finished::Stop, "stop"), (Finished::Length, "length"), (Finished::Abort, "abort"), (Finished::Error, "error")];

/// A histogram with fixed buckets; lock-free.
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (the last is +Inf), not cumulative.
    counts: Vec<AtomicU64>,
    /// The sum of observations, in microseconds.
    sum_us: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self { bounds, counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum_us: AtomicU64::new(0) }
    }

    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = self.bounds.iter().position(|&b| s <= b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            let le = self.bounds.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {seen}");
        }
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {seen}");
    }
}

/// The request-side series of this process.
pub struct Metrics {
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    finished: [AtomicU64; 4],
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    cached_tokens: AtomicU64,
}

/// The process's metrics.
pub fn global() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| Metrics {
        ttft: Histogram::new(TTFT_BUCKETS),
        itl: Histogram::new(ITL_BUCKETS),
        e2e: Histogram::new(E2E_BUCKETS),
        finished: Default::default(),
        prompt_tokens: AtomicU64::new(0),
        generation_tokens: AtomicU64::new(0),
        cached_tokens: AtomicU64::new(0),
    })
}

impl Metrics {
    pub fn finished(&self, how: Finished) {
        if let Some(i) = REASONS.iter().position(|(f, _)| *f == how) {
            self.finished[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request's tokens once it ends: its prompt's, of those the ones read from the prompt cache, and its answers'.
    pub fn tokens(&self, prompt: usize, cached: usize, generated: usize) {
        self.prompt_tokens.fetch_add(prompt as u64, Ordering::Relaxed);
        self.cached_tokens.fetch_add(cached as u64, Ordering::Relaxed);
        self.generation_tokens.fetch_add(generated as u64, Ordering::Relaxed);
    }

    /// The Prometheus text of these series and the gauges of the engine's stats (None: no model is loaded).
    pub fn render(&self, engine: Option<&EngineStats>) -> String {
        let mut out = String::new();
        let mut series = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        };
        series(
            "hearth:model_loaded",
            "gauge",
            "1 once the model is loaded and serving.",
            u8::from(engine.is_some()).to_string(),
        );
        if let Some(s) = engine {
            for ([name, kind, help], value) in ENGINE_SERIES.into_iter().zip(engine_values(s)) {
                series(name, kind, help, value);
            }
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (prompt, cached) = (load(&self.prompt_tokens), load(&self.cached_tokens));
        series("hearth:prompt_tokens_total", "counter", "Prompt tokens of finished requests.", prompt.to_string());
        series(
            "hearth:generation_tokens_total",
            "counter",
            "Generated tokens of finished requests.",
            load(&self.generation_tokens).to_string(),
        );
        series(
            "hearth:prefix_cache_queries_total",
            "counter",
            "Prompt tokens looked up in the prompt cache.",
            prompt.to_string(),
        );
        series(
            "hearth:prefix_cache_hits_total",
            "counter",
            "Prompt tokens read from the prompt cache (RAM or SSD tier).",
            cached.to_string(),
        );
        let ratio = if prompt == 0 { 0.0 } else { cached as f64 / prompt as f64 };
        series(
            "hearth:prefix_cache_hit_ratio",
            "gauge",
            "prefix_cache_hits_total / prefix_cache_queries_total.",
            ratio.to_string(),
        );
        let _ = writeln!(
            out,
            "# HELP hearth:request_success_total Finished sequences (choices) by how they ended.\n# TYPE hearth:request_success_total counter"
        );
        for (i, (_, label)) in REASONS.iter().enumerate() {
            let _ = writeln!(
                out,
                "hearth:request_success_total{{finished_reason=\"{label}\"}} {}",
                load(&self.finished[i])
            );
        }
        self.ttft.write(
            &mut out,
            "hearth:time_to_first_token_seconds",
            "Time from a request's acceptance to its first token.",
        );
        self.itl.write(&mut out, "hearth:inter_token_latency_seconds", "Time between a sequence's successive tokens.");
        self.e2e.write(&mut out, "hearth:e2e_request_latency_seconds", "Time from a request's acceptance to its end.");
        out
    }
}

/// The series of the engine's stats: name, kind and help, in the order of [`engine_values`].
const ENGINE_SERIES: [[&str; 3]; 7] = [
    ["hearth:num_requests_running", "gauge", "Sequences (choices) decoding or prefilling now."],
    ["hearth:num_requests_waiting", "gauge", "Sequences (choices) waiting for admission."],
    ["hearth:kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (1 = full)."],
    ["hearth:num_preemptions_total", "counter", "Sequences preempted for KV room (recomputed later)."],
    ["hearth:spec_decode_num_draft_tokens_total", "counter", "Drafted tokens speculative decoding verified."],
    ["hearth:spec_decode_num_accepted_tokens_total", "counter", "Drafted tokens speculative decoding kept."],
    ["hearth:prompt_cache_blocks", "gauge", "KV blocks held by the prompt cache."],
];

/// The values of [`ENGINE_SERIES`].
fn engine_values(s: &EngineStats) -> [String; 7] {
    let usage = if s.kv_blocks_total == 0 { 0.0 } else { s.kv_blocks_used as f64 / s.kv_blocks_total as f64 };
    [
        s.rows_running.to_string(),
        s.rows_waiting.to_string(),
        usage.to_string(),
        s.preemptions_total.to_string(),
        s.spec_drafted_total.to_string(),
        s.spec_accepted_total.to_string(),
        s.prompt_cache.blocks.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_with_an_inf_bucket() {
        let h = Histogram::new(&[0.1, 1.0]);
        for ms in [50, 500, 5000, 70] {
            h.observe(Duration::from_millis(ms));
        }
        let mut out = String::new();
        h.write(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"0.1\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"1\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_sum 5.62\nx_count 4\n"), "{out}");
    }
}
