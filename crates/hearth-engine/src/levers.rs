//! Every runtime lever (`HEARTH_*` environment variable) declared once: its name, kind, default, one-line doc and
//! whether only CUDA builds read it. The process parses them once into a [`Levers`] snapshot ([`init`] at start,
//! else the first [`get`]); code reads `crate::levers::get().field`, never the environment. vLLM's `envs.py` is
//! the model. A lever that loses its A/B is deleted here together with its code (docs/benchmarks.md keeps the row).
//!
//! Not levers: paths such as `HEARTH_MODELS`, and the command-line flags' environment variables (hearth-cli).

use std::fmt;
use std::sync::OnceLock;

/// What a lever is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// On or off: a kill switch of a default-on feature, or an opt-in one.
    Switch,
    /// A number or one of a few named values.
    Value,
    /// A measuring aid: never a serving mode.
    Diagnostic,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Switch => "switch",
            Kind::Value => "value",
            Kind::Diagnostic => "diagnostic",
        })
    }
}

/// One lever's declaration, for docs and `--help`-like listings.
#[derive(Clone, Copy, Debug)]
pub struct LeverDoc {
    pub name: &'static str,
    pub kind: Kind,
    /// The default as a value of the variable would spell it.
    pub default: &'static str,
    pub doc: &'static str,
    /// Only builds with the `cuda` feature read it.
    pub cuda_only: bool,
}

/// `HEARTH_FAST_QUANT`: hearth's own CPU quantized matmul kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FastQuant {
    /// The best instruction set the CPU has.
    On,
    /// candle's kernels instead.
    Off,
    /// AVX2 kernels even where AVX-VNNI exists.
    Avx2,
}

/// `HEARTH_CUDA_PROFILE=ROWS:STEPS` or `prefill:STEPS`: the Nsight Compute window (`gpu::profile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileSpec {
    /// Open the window at the first step that decodes exactly this many rows; 0: at the first step carrying at
    /// least 1024 prompt tokens (`prefill`).
    pub rows: usize,
    /// Steps the window stays open (> 0).
    pub steps: usize,
}

/// One malformed variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadValue {
    pub name: &'static str,
    pub value: String,
    /// The values the lever accepts, in words.
    pub accepts: &'static str,
}

/// Malformed lever values: each names its variable and what it accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(|b| format!("{}={:?} is not valid: expected {}", b.name, b.value, b.accepts)).collect::<Vec<_>>().join("; "))]
pub struct LeverError(pub Vec<BadValue>);

/// Parsers: the value, or what the lever accepts.
type Parsed<T> = Result<T, &'static str>;

fn switch(s: &str) -> Parsed<bool> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Ok(true),
        "0" | "off" | "false" | "no" => Ok(false),
        _ => Err("1, 0, on, off, true, false, yes or no"),
    }
}

fn count(s: &str) -> Parsed<usize> {
    s.parse().map_err(|_| "a whole number (0 or more)")
}

fn positive(s: &str) -> Parsed<usize> {
    s.parse().ok().filter(|&n| n > 0).ok_or("a whole number above 0")
}

fn fast_quant(s: &str) -> Parsed<FastQuant> {
    match s.to_ascii_lowercase().as_str() {
        "avx2" => Ok(FastQuant::Avx2),
        other => {
            switch(other).map(|on| if on { FastQuant::On } else { FastQuant::Off }).map_err(|_| "on, 1, 0, off or avx2")
        }
    }
}

fn profile(s: &str) -> Parsed<Option<ProfileSpec>> {
    const ACCEPTS: &str = "ROWS:STEPS or prefill:STEPS (counts above 0), or off";
    if switch(s) == Ok(false) {
        return Ok(None);
    }
    let (rows, steps) = s.split_once(':').ok_or(ACCEPTS)?;
    let rows = if rows.eq_ignore_ascii_case("prefill") { 0 } else { positive(rows).map_err(|_| ACCEPTS)? };
    Ok(Some(ProfileSpec { rows, steps: positive(steps).map_err(|_| ACCEPTS)? }))
}

/// A value as the variable would spell it (the table's default column, [`Levers::effective`]).
trait Show {
    fn show(&self) -> String;
}

impl Show for bool {
    fn show(&self) -> String {
        if *self { "on" } else { "off" }.into()
    }
}

impl Show for usize {
    fn show(&self) -> String {
        self.to_string()
    }
}

impl Show for FastQuant {
    fn show(&self) -> String {
        match self {
            FastQuant::On => "on",
            FastQuant::Off => "off",
            FastQuant::Avx2 => "avx2",
        }
        .into()
    }
}

impl Show for Option<ProfileSpec> {
    fn show(&self) -> String {
        match self {
            None => "off".into(),
            Some(ProfileSpec { rows: 0, steps }) => format!("prefill:{steps}"),
            Some(p) => format!("{}:{}", p.rows, p.steps),
        }
    }
}

/// One lever's value from `lookup`: unset or empty gives the default; a malformed value is recorded in `bad` and
/// the default used.
fn read<T>(
    lookup: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    default: &'static str,
    parse: fn(&str) -> Parsed<T>,
    bad: &mut Vec<BadValue>,
) -> T {
    let set = lookup(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    if let Some(v) = set {
        match parse(&v) {
            Ok(x) => return x,
            Err(accepts) => bad.push(BadValue { name, value: v, accepts }),
        }
    }
    // The defaults are constants of the table below; the unit tests parse every one.
    parse(default).unwrap_or_else(|e| panic!("lever {name}: default {default:?} does not parse ({e})"))
}

/// Declares every lever once: `field: type = parser, NAME, kind, cuda_only, "default", "doc";`.
macro_rules! levers {
    ($($field:ident: $ty:ty = $parse:ident, $name:literal, $kind:ident, $cuda:literal, $default:literal, $doc:literal;)*) => {
        /// The process's runtime levers, one typed field each (see the module docs).
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct Levers {
            $(#[doc = concat!("`", $name, "` (default ", $default, "): ", $doc)] pub $field: $ty,)*
        }

        const TABLE: &[LeverDoc] = &[$(LeverDoc { name: $name, kind: Kind::$kind, default: $default, doc: $doc, cuda_only: $cuda },)*];

        impl Levers {
            /// Every lever from `lookup`, defaults for the malformed ones, and the malformed ones.
            fn parse_lenient(lookup: &dyn Fn(&str) -> Option<String>) -> (Levers, Vec<BadValue>) {
                let mut bad = Vec::new();
                let levers = Levers { $($field: read(lookup, $name, $default, $parse, &mut bad),)* };
                (levers, bad)
            }

            /// (name, value) of every lever, in table order, values spelled as the variables take them.
            pub fn effective(&self) -> Vec<(&'static str, String)> {
                vec![$(($name, Show::show(&self.$field)),)*]
            }
        }
    };
}

levers! {
    fast_quant: FastQuant = fast_quant, "HEARTH_FAST_QUANT", Value, false, "on", "hearth's CPU quantized matmul kernels: off uses candle's, avx2 skips AVX-VNNI";
    cpu_attn: bool = switch, "HEARTH_CPU_ATTN", Switch, false, "on", "CPU attention reads the paged KV blocks in place, one fixed-order pass per token (off: gather each row's K/V and attend with candle's matmul and softmax)";
    cpu_kv_f16: bool = switch, "HEARTH_CPU_KV_F16", Switch, false, "on", "the CPU keeps the paged KV cache in f16, half the memory and the bytes a step reads of f32's, as llama.cpp does by default; attention still computes in f32 (needs HEARTH_CPU_ATTN; off: f32)";
    work_pool: bool = switch, "HEARTH_WORK_POOL", Switch, false, "on", "the CPU decode matmuls and attention run on hearth's work pool, whose caller never waits for a worker that has not started (off: candle's barrier pool, which on a busy machine waits a time slice per job for a descheduled worker)";
    avx512: bool = switch, "HEARTH_AVX512", Switch, false, "on", "the CPU k-quant matmuls at 4 or more activation rows use 512-bit vectors (16 weight rows a vector) where the CPU has AVX-512 F/BW/VL/VNNI and HEARTH_FAST_QUANT allows VNNI (off: 256-bit)";
    k_quant: bool = switch, "HEARTH_K_QUANT", Switch, false, "on", "hearth's int8 kernels for Q4_K, Q5_K and Q6_K weights (off: candle's, on candle's thread pool, which then keeps that model's kernels off hearth's work pool)";
    kq_prepack: bool = switch, "HEARTH_KQ_PREPACK", Switch, false, "on", "the CPU repacks Q4_K weights at load into 8-row groups whose vector lanes are rows (4 bits a value, the only copy, 5.5% larger): no per-call packing, and the lanes-are-rows kernel at every number of activation rows (off: GGML's layout, the tile kernel below 4 rows)";
    mxfp4_q5: bool = switch, "HEARTH_MXFP4_Q5", Switch, false, "on", "CPU: MXFP4 experts (gpt-oss) held as Q5_0 blocks of the same values (5.5 bits a value) instead of Q8_0 (8.5)";
    cpu_fused: bool = switch, "HEARTH_CPU_FUSED", Switch, false, "on", "CPU: q|k|v and gate|up projections quantized in one type run as one matmul each (one activation quantization, one hand-out to the thread pool)";
    cpu_f16_weights: bool = switch, "HEARTH_CPU_F16_WEIGHTS", Switch, false, "off", "opt-in, CPU: a GGUF's F16 matrices stay f16 (candle's f16 matmul, activations rounded to f16 as llama.cpp does) instead of being widened to f32 at load: half the weights' memory and faster one-stream decode, slower prefill";
    q8_row_pairs: bool = switch, "HEARTH_Q8_ROW_PAIRS", Switch, false, "on", "CPU: one-row matmuls over Q8_0 weights read two weight rows at a time front to back at every matrix size (off: the 8-row kernel below 64 MiB, as Q4_1 and Q5_0 do)";
    moe_grouped: bool = switch, "HEARTH_MOE_GROUPED", Switch, false, "on", "CPU: a step's routed experts with few rows each run one expert per thread in one hand-out to the work pool (off: one hand-out per expert matmul)";
    malloc_keep: bool = switch, "HEARTH_MALLOC_KEEP", Switch, false, "on", "glibc malloc keeps large freed buffers (mmap threshold 512 MiB, trim threshold 1 GiB) instead of mapping and zeroing fresh pages for every step's temporaries";
    cuda_paged_attn: bool = switch, "HEARTH_CUDA_PAGED_ATTN", Switch, true, "on", "paged-attention kernels reading the KV blocks in place (off: gather-then-attend)";
    gpu_fused: bool = switch, "HEARTH_GPU_FUSED", Switch, true, "on", "fused per-layer kernels of dense models (q|k|v, gate|up, rope into the cache, add + RMSNorm, act x up)";
    cuda_pdl: bool = switch, "HEARTH_CUDA_PDL", Switch, true, "on", "programmatic dependent launch of hearth's kernels (compute capability 9.0+)";
    cuda_split_kv: bool = switch, "HEARTH_CUDA_SPLIT_KV", Switch, true, "on", "split a token's keys over several attention blocks when a step has too few blocks to fill the GPU";
    cuda_split_fill: usize = positive, "HEARTH_CUDA_SPLIT_FILL", Value, true, "256", "steps with at least this many (token, kv head) attention blocks do not split their keys";
    cuda_decode_cluster: usize = count, "HEARTH_CUDA_DECODE_CLUSTER", Value, true, "64", "decode-only steps of at most this many tokens take the cluster decode kernel (0: none)";
    cuda_decode_pv32: bool = switch, "HEARTH_CUDA_DECODE_PV32", Switch, true, "on", "one-wave cluster decode launches load a tile's 32 value rows in one batch";
    cuda_pv_batch: bool = switch, "HEARTH_CUDA_PV_BATCH", Switch, true, "on", "the decode attention's PV loop loads 8 value rows at a time";
    cuda_tc_prefill: bool = switch, "HEARTH_CUDA_TC_PREFILL", Switch, true, "on", "prompt pieces attend on the tensor cores (16-bit caches)";
    cuda_tc_split: bool = switch, "HEARTH_CUDA_TC_SPLIT", Switch, true, "on", "short prompt pieces over long contexts split their keys over several tensor-core blocks";
    gpu_argmax: bool = switch, "HEARTH_GPU_ARGMAX", Switch, true, "on", "greedy steps (plain, or under a grammar's mask) copy only the chosen token to the host";
    gpu_gemv: bool = switch, "HEARTH_GPU_GEMV", Switch, true, "on", "one-row dense matmuls take hearth's persistent kernel instead of cuBLAS";
    gpu_gemv_split: bool = switch, "HEARTH_GPU_GEMV_SPLIT", Switch, true, "on", "one-row matmuls with K up to 4x the one-warp row split each column over 2 or 4 warps";
    gpu_gemv_norm: bool = switch, "HEARTH_GPU_GEMV_NORM", Switch, true, "on", "the residual add + RMSNorm run inside the one-row matmul after it";
    gpu_gemv_gated: bool = switch, "HEARTH_GPU_GEMV_GATED", Switch, true, "on", "SiLU/GELU x up runs in the one-row gate|up matmul's epilogue";
    gpu_qgemv: bool = switch, "HEARTH_GPU_QGEMV", Switch, true, "on", "quantized GGUF matmuls of up to 8 rows take hearth's kernels (q|k|v and gate|up stacked, add+norm and activation fused) instead of candle's";
    gpu_gemv_pdl: bool = switch, "HEARTH_GPU_GEMV_PDL", Switch, true, "on", "the skinny matmuls are launched with PDL like the other kernels";
    cuda_graphs: bool = switch, "HEARTH_CUDA_GRAPHS", Switch, true, "off", "opt-in: decode-only steps of dense models (up to 64 rows) are captured once per (rows, context bucket) as a CUDA graph and replayed from fixed metadata buffers: one launch a step instead of hundreds";
    cuda_step_timing: bool = switch, "HEARTH_CUDA_STEP_TIMING", Diagnostic, true, "off", "CUDA events around every step: device time and inter-step gaps in /stats";
    cuda_diag_skip_attn: bool = switch, "HEARTH_CUDA_DIAG_SKIP_ATTN", Diagnostic, true, "off", "paged attention returns zeros without launching (outputs are wrong): what attention costs in a step";
    cuda_profile: Option<ProfileSpec> = profile, "HEARTH_CUDA_PROFILE", Diagnostic, true, "off", "ROWS:STEPS or prefill:STEPS: cuProfilerStart/Stop around those steps, for ncu";
    fault_panic_at_token: usize = count, "HEARTH_FAULT_PANIC_AT_TOKEN", Diagnostic, false, "0", "fault injection for tests: one panic inside the engine step in which a running row first holds this many generated tokens (0: never)";
}

impl Default for Levers {
    fn default() -> Self {
        Levers::parse_lenient(&|_| None).0
    }
}

impl Levers {
    /// Every lever from `lookup` (a variable's value, None when unset); unset or empty values take the default. Any
    /// malformed value is an error naming the variable and what it accepts.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Levers, LeverError> {
        match Levers::parse_lenient(&lookup) {
            (levers, bad) if bad.is_empty() => Ok(levers),
            (_, bad) => Err(LeverError(bad)),
        }
    }

    /// Every lever from the process environment.
    pub fn from_env() -> Result<Levers, LeverError> {
        Levers::from_lookup(env_lookup)
    }
}

fn env_lookup(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// Every lever's declaration, in one order (docs/cli.md's table follows it).
pub fn table() -> &'static [LeverDoc] {
    TABLE
}

static SNAPSHOT: OnceLock<Levers> = OnceLock::new();

/// Set the process's levers (at start, before any [`get`]). Gives them back when the snapshot was already taken.
pub fn init(levers: Levers) -> Result<(), Levers> {
    let mut fresh = false;
    SNAPSHOT.get_or_init(|| {
        fresh = true;
        announce(&levers);
        levers.clone()
    });
    if fresh {
        Ok(())
    } else {
        Err(levers)
    }
}

/// The process's levers: those given to [`init`], else the environment's, parsed at the first call. A malformed
/// value is logged as a warning and that lever keeps its default.
pub fn get() -> &'static Levers {
    SNAPSHOT.get_or_init(|| {
        let (levers, bad) = Levers::parse_lenient(&env_lookup);
        if !bad.is_empty() {
            tracing::warn!("{}; using the default for each", LeverError(bad));
        }
        announce(&levers);
        levers
    })
}

/// Log the levers that differ from their defaults, and warn of a measuring aid that changes outputs.
fn announce(levers: &Levers) {
    let defaults = Levers::default().effective();
    let changed: Vec<String> = levers
        .effective()
        .into_iter()
        .zip(defaults)
        .filter(|(a, b)| a.1 != b.1)
        .map(|((n, v), _)| format!("{n}={v}"))
        .collect();
    if !changed.is_empty() {
        tracing::info!("runtime levers: {}", changed.join(" "));
    }
    if levers.cuda_diag_skip_attn {
        tracing::warn!(
            "HEARTH_CUDA_DIAG_SKIP_ATTN=1: the paged attention returns zeros (a measuring aid; outputs are wrong)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> Result<Levers, LeverError> {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Levers::from_lookup(move |n| m.get(n).cloned())
    }

    #[test]
    fn defaults() {
        let l = with(&[]).expect("no variables");
        assert_eq!(l, Levers::default());
        assert_eq!(l.fast_quant, FastQuant::On);
        assert!(l.cuda_paged_attn && l.gpu_fused && l.cuda_pdl && l.gpu_gemv_pdl);
        assert_eq!((l.cuda_split_fill, l.cuda_decode_cluster), (256, 64));
        assert!(!l.cuda_step_timing && !l.cuda_diag_skip_attn && l.cuda_profile.is_none());
        // Every default parses, and shows as the table spells it.
        for ((name, shown), doc) in l.effective().into_iter().zip(table()) {
            assert_eq!((name, shown.as_str()), (doc.name, doc.default));
        }
    }

    #[test]
    fn parses_values() {
        let l = with(&[
            ("HEARTH_GPU_FUSED", "0"),
            ("HEARTH_CUDA_PDL", "Off"),
            ("HEARTH_CUDA_STEP_TIMING", "yes"),
            ("HEARTH_CUDA_DIAG_SKIP_ATTN", " true "),
            ("HEARTH_GPU_ARGMAX", "no"),
            ("HEARTH_CUDA_SPLIT_FILL", "128"),
            ("HEARTH_CUDA_DECODE_CLUSTER", "0"),
            ("HEARTH_FAST_QUANT", "avx2"),
            ("HEARTH_CUDA_PROFILE", "32:3"),
            ("HEARTH_CUDA_TC_PREFILL", ""),
        ])
        .expect("all valid");
        assert!(!l.gpu_fused && !l.cuda_pdl && l.cuda_step_timing && l.cuda_diag_skip_attn && !l.gpu_argmax);
        assert_eq!((l.cuda_split_fill, l.cuda_decode_cluster, l.fast_quant), (128, 0, FastQuant::Avx2));
        assert_eq!(l.cuda_profile, Some(ProfileSpec { rows: 32, steps: 3 }));
        assert!(l.cuda_tc_prefill, "an empty value is unset");
        let shown: HashMap<_, _> = l.effective().into_iter().collect();
        assert_eq!((shown["HEARTH_GPU_FUSED"].as_str(), shown["HEARTH_CUDA_PROFILE"].as_str()), ("off", "32:3"));
        assert_eq!(with(&[("HEARTH_FAST_QUANT", "0")]).map(|l| l.fast_quant), Ok(FastQuant::Off));
        assert_eq!(with(&[("HEARTH_FAST_QUANT", "1")]).map(|l| l.fast_quant), Ok(FastQuant::On));
        let p = with(&[("HEARTH_CUDA_PROFILE", "prefill:1")]).map(|l| l.cuda_profile.show());
        assert_eq!(p.as_deref(), Ok("prefill:1"));
        assert_eq!(with(&[("HEARTH_CUDA_PROFILE", "0")]).map(|l| l.cuda_profile), Ok(None));
    }

    #[test]
    fn rejects_malformed_values() {
        let e = with(&[("HEARTH_CUDA_SPLIT_FILL", "abc")]).expect_err("not a number");
        assert_eq!(e.0.len(), 1);
        let msg = e.to_string();
        assert!(msg.contains("HEARTH_CUDA_SPLIT_FILL") && msg.contains("\"abc\"") && msg.contains("above 0"), "{msg}");
        let msg = with(&[("HEARTH_GPU_FUSED", "maybe")]).expect_err("not a switch").to_string();
        assert!(msg.contains("HEARTH_GPU_FUSED") && msg.contains("on, off"), "{msg}");
        for (name, value) in [
            ("HEARTH_CUDA_SPLIT_FILL", "0"),
            ("HEARTH_CUDA_DECODE_CLUSTER", "-1"),
            ("HEARTH_FAST_QUANT", "avx512"),
            ("HEARTH_CUDA_PROFILE", "32"),
            ("HEARTH_CUDA_PROFILE", "0:3"),
            ("HEARTH_CUDA_PROFILE", "decode:0"),
        ] {
            assert!(with(&[(name, value)]).is_err(), "{name}={value} must be rejected");
        }
        // Every malformed value is reported, not only the first; the lenient parse keeps the valid ones.
        let vars = [("HEARTH_GPU_FUSED", "maybe"), ("HEARTH_CUDA_PDL", "0"), ("HEARTH_GPU_GEMV", "2")];
        assert_eq!(with(&vars).expect_err("two bad").0.len(), 2);
        let m: HashMap<&str, &str> = vars.into_iter().collect();
        let (l, bad) = Levers::parse_lenient(&|n| m.get(n).map(|v| v.to_string()));
        assert_eq!((l.gpu_fused, l.cuda_pdl, l.gpu_gemv, bad.len()), (true, false, true, 2));
    }

    #[test]
    fn every_lever_appears_once() {
        let names: Vec<&str> = table().iter().map(|d| d.name).collect();
        let unique: std::collections::HashSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "a lever is declared twice");
        assert_eq!(Levers::default().effective().len(), names.len());
        for d in table() {
            assert!(d.name.starts_with("HEARTH_") && !d.doc.is_empty(), "{d:?}");
            assert!(d.name.starts_with("HEARTH_CUDA_") || d.name.starts_with("HEARTH_GPU_") || !d.cuda_only, "{d:?}");
        }
        // The models directory is a path setting of the CLI, not a lever.
        assert!(!names.contains(&"HEARTH_MODELS"));
    }
}
