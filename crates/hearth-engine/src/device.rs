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

/// Optional host-overhead settings for a fresh CUDA device. Both are off by default: a paired A/B on the H200
/// (docs/benchmarks.md) showed no gain from either, so they stay opt-in levers:
/// * `HEARTH_CUDA_EVENTS=0` stops candle's per-tensor CUDA event tracking (which only matters with several
///   streams; hearth runs one stream per device). It is also off whenever PDL launches are on
///   (`HEARTH_CUDA_PDL`, compute capability 9.0+: `gpu::launch`).
/// * `HEARTH_CUDA_MEMPOOL=1` makes the driver's default memory pool keep freed memory (release threshold = max)
///   instead of returning it at every synchronization.
#[allow(unused_variables)]
pub fn tune_cuda(device: &Device) {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(d) = device {
        // PDL launches (gpu/launch.rs) need consecutive kernels with no event records between them.
        if crate::gpu::env_off("HEARTH_CUDA_EVENTS") || crate::gpu::launch::pdl_on(&d.cuda_stream()) {
            // SAFETY: hearth issues all work for a device on that device's one stream (candle's default).
            unsafe { d.disable_event_tracking() };
        }
        if crate::gpu::env_on("HEARTH_CUDA_MEMPOOL") {
            if let Err(e) = keep_pool_memory(d) {
                tracing::warn!("could not set the CUDA memory pool's release threshold: {e}");
            }
        }
    }
}

#[cfg(feature = "cuda")]
fn keep_pool_memory(d: &candle_core::CudaDevice) -> std::result::Result<(), String> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let ctx = d.cuda_stream().context().clone();
    ctx.bind_to_thread().map_err(|e| e.to_string())?;
    // SAFETY: plain driver calls on a bound context with valid out-pointers.
    unsafe {
        let mut pool = std::mem::MaybeUninit::<sys::CUmemoryPool>::uninit();
        let r = sys::cuDeviceGetDefaultMemPool(pool.as_mut_ptr(), ctx.cu_device());
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("cuDeviceGetDefaultMemPool: {r:?}"));
        }
        let mut threshold: u64 = u64::MAX;
        let r = sys::cuMemPoolSetAttribute(
            pool.assume_init(),
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut threshold as *mut u64 as *mut std::ffi::c_void,
        );
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(format!("cuMemPoolSetAttribute: {r:?}"));
        }
    }
    Ok(())
}
