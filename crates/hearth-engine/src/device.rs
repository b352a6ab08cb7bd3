//! Device selection: `cpu`, `cuda[:N]`, or `auto` (the GPU when the build has CUDA and one is present).

use crate::{Error, Result};
use candle_core::Device;

/// Parse a `--device` value into a candle device.
pub fn select_device(spec: &str) -> Result<Device> {
    let spec = spec.trim().to_ascii_lowercase();
    match spec.as_str() {
        "cpu" => Ok(Device::Cpu),
        "auto" => {
            if candle_core::utils::cuda_is_available() {
                let d = Device::new_cuda(0).unwrap_or(Device::Cpu);
                tune_cuda(&d);
                Ok(d)
            } else {
                Ok(Device::Cpu)
            }
        }
        s if s == "cuda" || s.starts_with("cuda:") => {
            let ordinal = match s.strip_prefix("cuda:") {
                None => 0,
                Some(n) => n.parse::<usize>().map_err(|_| {
                    Error::InvalidRequest(format!("bad device `{spec}`: expected cuda:N with N a GPU index"))
                })?,
            };
            if !candle_core::utils::cuda_is_available() {
                return Err(Error::Unsupported(
                    "this hearth build has no CUDA support; rebuild with `--features cuda` (scripts/build-cuda) or use --device cpu"
                        .into(),
                ));
            }
            let d = Device::new_cuda(ordinal)?;
            tune_cuda(&d);
            Ok(d)
        }
        other => {
            Err(Error::InvalidRequest(format!("unknown device `{other}`: expected one of auto, cpu, cuda, cuda:N")))
        }
    }
}

/// A short human description of a device for banners and logs.
pub fn describe(device: &Device) -> String {
    match device {
        Device::Cpu => format!(
            "cpu ({} threads{})",
            candle_core::utils::get_num_threads(),
            if candle_core::utils::with_avx() { ", avx" } else { "" }
        ),
        Device::Cuda(_) => "cuda".to_string(),
        Device::Metal(_) => "metal".to_string(),
    }
}

/// Free memory of a GPU device in bytes (None on the CPU, or when the driver cannot tell).
pub fn gpu_free_memory(device: &Device) -> Option<u64> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => d.cuda_stream().context().mem_get_info().ok().map(|(free, _)| free as u64),
        _ => None,
    }
}

/// Settings for a fresh CUDA device: candle's per-tensor CUDA event tracking is off whenever PDL launches are on
/// (`HEARTH_CUDA_PDL`, compute capability 9.0+: `gpu::launch`), which need consecutive kernels with no event
/// records between them. Without PDL it stays on, and freed memory is not kept in the driver's pool: neither
/// gains anything there (docs/benchmarks.md).
#[allow(unused_variables)]
pub fn tune_cuda(device: &Device) {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = device {
        if crate::gpu::launch::pdl_on(&d.cuda_stream()) {
            // SAFETY: hearth issues all work for a device on that device's one stream (candle's default).
            unsafe { d.disable_event_tracking() };
        }
    }
}

/// Fix the CPU thread count of candle's and rayon's pools before either starts: `threads` (`--threads`), or candle's
/// own default (the physical cores), worked out once. Without `RAYON_NUM_THREADS` set, candle works its default out
/// again on every call that asks for it, which reads `/proc/cpuinfo` (about 30 times per decode step of SmolLM2).
/// An explicit `RAYON_NUM_THREADS` in the environment is kept when `threads` is not given.
pub fn set_cpu_threads(threads: Option<usize>) -> Result<usize> {
    if threads == Some(0) {
        return Err(crate::Error::Unsupported("--threads must be at least 1".into()));
    }
    let n = match threads {
        Some(n) => n,
        None => candle_core::utils::get_num_threads(),
    };
    // Read once by rayon's and candle's pools when they start; nothing has started them yet.
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    Ok(n)
}
