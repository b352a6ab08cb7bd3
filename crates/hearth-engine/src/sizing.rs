//! The engine's sizing policy: the KV cache and step budgets an engine gets on a device when its caller
//! (`hearth serve`'s flags) does not set them. [`EngineConfig::defaults_for`] reads the device's memory now; the
//! policy itself is a pure function of what it read ([`SizingDefaults::for_memory`]). The step budgets are the
//! measured defaults per device class (docs/benchmarks.md).
//!
//! Admission at start ([`admit`]): weights that cannot fit in the device's memory, or a KV cache asked for
//! (`--kv-budget`) that cannot fit beside them, are refused with the sizes named, before anything is allocated,
//! instead of being killed by the kernel's OOM killer or left swapping.

use crate::models::{LoadOptions, Model};
use crate::types::EngineConfig;
use crate::weights::Weights;
use candle_core::Device;

/// The share (percent) of a GPU's memory left free by the weights that the KV cache takes; the rest is for
/// activations and cuBLAS workspaces.
const GPU_KV_PERCENT: u64 = 80;
/// On the CPU the KV cache takes a quarter of the available memory (the weights, activations and the rest of
/// the machine keep the remainder).
const CPU_KV_DIVISOR: u64 = 4;
/// The CPU's KV cache when its available memory cannot be read.
const CPU_KV_FALLBACK_BYTES: u64 = 2 << 30;

/// What the sizing policy reads of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    /// The device is a GPU (not the CPU).
    pub gpu: bool,
    /// Free GPU memory in bytes, after the weights loaded (None: the CPU, or the driver cannot tell).
    pub gpu_free: Option<u64>,
    /// The host's available memory in bytes (`MemAvailable`; None where it cannot be read).
    pub host_available: Option<u64>,
}

impl DeviceMemory {
    /// `device`'s memory, read now.
    pub fn of(device: &Device) -> Self {
        Self {
            gpu: !device.is_cpu(),
            gpu_free: crate::device::gpu_free_memory(device),
            host_available: mem_available(),
        }
    }
}

/// The sizing an engine gets on a device unless its caller says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizingDefaults {
    /// Bytes of KV cache (before the cap of [`kv_blocks`]).
    pub kv_budget_bytes: u64,
    /// [`EngineConfig::step_tokens`].
    pub step_tokens: usize,
    /// [`EngineConfig::step_tokens_decoding`].
    pub step_tokens_decoding: usize,
    /// [`EngineConfig::max_prefill_rows`] (0: no limit).
    pub max_prefill_rows: usize,
}

impl SizingDefaults {
    /// The policy: the KV cache takes most of a GPU's free memory, else a quarter of the host's available memory;
    /// a GPU computes large prompt pieces and any number of prompts per step, the CPU small pieces of at most two
    /// prompts (a CPU step's latency grows with every prompt token it computes).
    pub fn for_memory(m: DeviceMemory) -> Self {
        let kv_budget_bytes = match m.gpu_free {
            Some(free) => free / 100 * GPU_KV_PERCENT,
            None => m.host_available.map_or(CPU_KV_FALLBACK_BYTES, |b| b / CPU_KV_DIVISOR),
        };
        let (step_tokens, step_tokens_decoding, max_prefill_rows) = if m.gpu { (8192, 2048, 0) } else { (256, 32, 2) };
        Self { kv_budget_bytes, step_tokens, step_tokens_decoding, max_prefill_rows }
    }
}

impl EngineConfig {
    /// The sizing defaults on `device`, its free memory read now (after the model's weights loaded).
    pub fn defaults_for(device: &Device) -> SizingDefaults {
        SizingDefaults::for_memory(DeviceMemory::of(device))
    }
}

/// KV blocks of `block_size` tokens for `model` in `budget_bytes`, at most what `max_batch` full contexts can use.
pub fn kv_blocks(model: &dyn Model, budget_bytes: u64, max_batch: usize, block_size: usize) -> usize {
    let fit = blocks_for_budget(model, budget_bytes, block_size);
    fit.min(context_cap(model.max_positions(), max_batch, block_size))
}

/// Choose the number of KV blocks for a byte budget.
pub fn blocks_for_budget(model: &dyn Model, budget_bytes: u64, block_size: usize) -> usize {
    (budget_bytes / kv_bytes(model, 1, block_size).max(1)) as usize
}

/// The bytes of `blocks` KV blocks of `block_size` tokens for `model`.
pub fn kv_bytes(model: &dyn Model, blocks: usize, block_size: usize) -> u64 {
    let c = model.config();
    let per_token = crate::kv::PagedKv::bytes_per_token(c.kv_layers(), c.num_kv_heads, c.head_dim, model.kv_encoding());
    per_token as u64 * block_size as u64 * blocks as u64
}

/// The host memory a hybrid model's recurrent state takes with `sequences` rows running (each row's every
/// linear-attention layer, chunk buffers included, in engines of `block_size`-token blocks); 0 for other models.
/// It lives on the host whatever the device.
pub fn recurrent_bytes(model: &dyn Model, sequences: usize, block_size: usize) -> u64 {
    let c = model.config();
    let Some(lin) = &c.linear_attn else { return 0 };
    let chunk = crate::recurrent::chunk_for_block(block_size);
    let per_layer = crate::recurrent::delta::LayerState::new(lin, chunk).bytes() as u64;
    sequences as u64 * lin.linear_layers() as u64 * per_layer
}

/// Refuses a hybrid model whose running rows' state (`--batch` of them) and snapshot budget (`snapshots` bytes)
/// do not fit the host's available memory; None for other models, else the state's bytes (for the log).
pub fn admit_recurrent(
    model: &dyn Model,
    batch: usize,
    block_size: usize,
    snapshots: u64,
) -> Result<Option<u64>, String> {
    let live = recurrent_bytes(model, batch, block_size);
    if live == 0 {
        return Ok(None);
    }
    let what = format!("the linear-attention state of {batch} running sequences and the snapshots' budget");
    let host = mem_available().map(|b| (b, "available host memory (MemAvailable)"));
    admit(&what, live + snapshots, host, "lower --batch or --prompt-cache-state").map(|_| Some(live))
}

/// The most KV blocks `max_batch` contexts of `max_positions` tokens can ever hold (one more block each for the
/// token being decoded past a full block).
fn context_cap(max_positions: usize, max_batch: usize, block_size: usize) -> usize {
    max_batch * (max_positions.div_ceil(block_size.max(1)) + 1)
}

/// The least the weights take on `device` once loaded: GGUF tensors as stored (quantized matrices stay quantized)
/// or as f32 where they are dequantized (`--dequantize`); safetensors in the compute dtype (f32 on the CPU, the
/// chosen or default dtype on a GPU).
pub fn weights_bytes(w: &Weights, device: &Device, opts: &LoadOptions) -> u64 {
    let (elements, stored) = w.sizes();
    // an mmproj's vision tower is held in f32
    let tower =
        opts.mmproj.as_deref().and_then(|p| crate::weights::GgufFile::open(p).ok()).map_or(0, |g| g.sizes().0 * 4);
    tower
        + match w {
            Weights::Gguf(_) if opts.dequantize => elements * 4,
            Weights::Gguf(_) => stored,
            Weights::Hf(_) => {
                let dtype = opts.dtype.unwrap_or_else(|| crate::models::activation_dtype(w, device));
                elements * dtype.size_in_bytes() as u64
            }
        }
}

/// The memory a model can take on `device` now, and where it was read: a GPU's free memory, or the host's
/// `MemAvailable` (None where neither can be read: admission then lets everything through).
pub fn available_memory(device: &Device) -> Option<(u64, &'static str)> {
    if device.is_cpu() {
        mem_available().map(|b| (b, "available memory (MemAvailable)"))
    } else {
        crate::device::gpu_free_memory(device).map(|b| (b, "free GPU memory"))
    }
}

/// Refuses `need` bytes of `what` when `available` is known and smaller, naming both and what to do.
pub fn admit(what: &str, need: u64, available: Option<(u64, &str)>, remedy: &str) -> Result<(), String> {
    match available {
        Some((have, source)) if need > have => {
            Err(format!("{what} needs {} but only {} is left ({source}); {remedy}", gib(need), gib(have)))
        }
        _ => Ok(()),
    }
}

/// `bytes` in GiB, two decimals.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// `MemAvailable` from /proc/meminfo, in bytes.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_refuses_what_cannot_fit_and_names_the_sizes() {
        let have = Some((3 * GIB / 2, "available memory (MemAvailable)"));
        assert_eq!(admit("the weights", GIB, have, "-"), Ok(()));
        assert_eq!(admit("the weights", 2 * GIB, None, "-"), Ok(()), "unknown memory: no refusal");
        let e = admit("model m's weights (q4_k)", 2 * GIB, have, "pick a smaller model").unwrap_err();
        assert_eq!(
            e,
            "model m's weights (q4_k) needs 2.00 GiB but only 1.50 GiB is left (available memory (MemAvailable)); \
             pick a smaller model"
        );
    }

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_gpu_gives_most_of_its_free_memory_and_large_steps() {
        let d = SizingDefaults::for_memory(DeviceMemory { gpu: true, gpu_free: Some(10 * GIB), host_available: None });
        assert_eq!(d.kv_budget_bytes, 10 * GIB / 100 * 80);
        assert_eq!((d.step_tokens, d.step_tokens_decoding, d.max_prefill_rows), (8192, 2048, 0));
    }

    #[test]
    fn the_cpu_gives_a_quarter_of_the_available_memory_and_small_steps() {
        let d = SizingDefaults::for_memory(DeviceMemory { gpu: false, gpu_free: None, host_available: Some(16 * GIB) });
        assert_eq!(d.kv_budget_bytes, 4 * GIB);
        assert_eq!((d.step_tokens, d.step_tokens_decoding, d.max_prefill_rows), (256, 32, 2));
        let unknown = SizingDefaults::for_memory(DeviceMemory { gpu: false, gpu_free: None, host_available: None });
        assert_eq!(unknown.kv_budget_bytes, 2 * GIB);
    }

    #[test]
    fn a_gpu_that_cannot_tell_its_free_memory_sizes_from_the_host_but_steps_as_a_gpu() {
        let d = SizingDefaults::for_memory(DeviceMemory { gpu: true, gpu_free: None, host_available: Some(8 * GIB) });
        assert_eq!(d.kv_budget_bytes, 2 * GIB);
        assert_eq!(d.step_tokens, 8192);
    }

    #[test]
    fn the_cache_holds_at_most_a_full_context_per_batch_row() {
        assert_eq!(context_cap(2048, 8, 16), 8 * (128 + 1));
        assert_eq!(context_cap(2049, 1, 16), 129 + 1);
    }

    #[test]
    fn the_cpu_reads_its_available_memory() {
        let d = EngineConfig::defaults_for(&Device::Cpu);
        assert_eq!(d.step_tokens, 256);
        assert!(d.kv_budget_bytes > 0);
    }
}
