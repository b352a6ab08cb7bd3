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
                Ok(Device::new_cuda(0).unwrap_or(Device::Cpu))
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
            Ok(Device::new_cuda(ordinal)?)
        }
        other => Err(Error::InvalidRequest(format!(
            "unknown device `{other}`: expected one of auto, cpu, cuda, cuda:N"
        ))),
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
