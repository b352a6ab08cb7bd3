//! hearth's own CUDA kernels (the `cuda` feature): the paged attention (`attention::cuda`), the fused per-layer
//! kernels of the dense decode path ([`fused`]), the skinny matmuls of decode steps ([`gemv`], and [`qgemv`] for GGUF's quantized matrices) and greedy sampling
//! on the device ([`argmax`]), launched with programmatic dependent launch on Hopper ([`launch`]). `build.rs`
//! compiles the `.cu` files to PTX with the CUDA toolchain's nvcc; candle loads each module once per device. Also
//! the prompt cache's spills off the decode path ([`spill`]), CUDA graphs of decode steps ([`graphs`]) and the step observer ([`profile`]: device timing
//! and the profiling window), whose CPU form, the only part built without the feature, observes the host only.

#[cfg(feature = "cuda")]
pub mod argmax;
#[cfg(feature = "cuda")]
pub mod fused;
#[cfg(feature = "cuda")]
pub mod gemv;
#[cfg(feature = "cuda")]
pub mod graphs;
#[cfg(feature = "cuda")]
pub mod launch;
pub mod profile;
#[cfg(feature = "cuda")]
pub mod qgemv;
#[cfg(feature = "cuda")]
pub mod spill;

/// `$launch!(T)` for the float element type of a CUDA storage (f32, bf16, f16); any other dtype fails naming `$op`.
#[cfg(feature = "cuda")]
macro_rules! by_float_dtype {
    ($storage:expr, $op:literal, $launch:ident) => {
        match &$storage.slice {
            candle_core::cuda_backend::CudaStorageSlice::F32(_) => $launch!(f32),
            candle_core::cuda_backend::CudaStorageSlice::BF16(_) => $launch!(half::bf16),
            candle_core::cuda_backend::CudaStorageSlice::F16(_) => $launch!(half::f16),
            _ => candle_core::bail!(concat!($op, ": unsupported dtype {:?}"), $storage.dtype()),
        }
    };
}
#[cfg(feature = "cuda")]
pub(crate) use by_float_dtype;

#[cfg(feature = "cuda")]
use crate::{Error, Result};
#[cfg(feature = "cuda")]
use candle_core::{CudaStorage, DType, Layout, Storage};

/// A CUDA driver call's failure as hearth's error, naming what failed.
#[cfg(feature = "cuda")]
pub(crate) fn driver_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Candle(candle_core::Error::Msg(format!("{what}: {e}")))
}

/// The kernel-name suffix for a dtype.
#[cfg(feature = "cuda")]
pub(crate) fn sfx(dtype: DType) -> Result<&'static str> {
    Ok(match dtype {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        d => return Err(Error::Unsupported(format!("hearth's CUDA kernels for {d:?}"))),
    })
}

/// `sfx` inside a candle op.
#[cfg(feature = "cuda")]
pub(crate) fn sfx_c(dtype: DType) -> candle_core::Result<&'static str> {
    sfx(dtype).map_err(|e| candle_core::Error::Msg(e.to_string()))
}

#[cfg(feature = "cuda")]
pub(crate) fn cuda_of(s: &Storage) -> candle_core::Result<&CudaStorage> {
    match s {
        Storage::Cuda(c) => Ok(c),
        _ => candle_core::bail!("hearth CUDA kernel: tensor is not on a CUDA device"),
    }
}

/// The contiguous element range of a layout, or an error naming `what`.
#[cfg(feature = "cuda")]
pub(crate) fn contiguous(l: &Layout, what: &str) -> candle_core::Result<(usize, usize)> {
    l.contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg(format!("hearth CUDA kernel: {what} must be contiguous")))
}

/// `HEARTH_GPU_FUSED=0` turns off the fused per-layer kernels (fused q|k|v and gate|up projections, rope into
/// the paged cache, residual add + RMSNorm, activation × up): models then run candle's separate ops.
#[cfg(feature = "cuda")]
pub fn fused_on() -> bool {
    crate::levers::get().gpu_fused
}
