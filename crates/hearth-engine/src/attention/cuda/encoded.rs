//! The CUDA kernels over an encoded KV cache (`--kv-cache-dtype q8_0 | q4_0 | turbo:k8vY`): `paged_encoded.cu`,
//! built once per (key code, value code) pair into a module of its own (build.rs), so that a process loads only
//! its encoding's kernels. The paged backend ([`super::paged`]) writes a step's rows with [`encode_kv`] (or, for a
//! decode-only step of few rows, the cluster kernel encodes its own rows) and attends with [`super::paged_attention`]
//! / [`super::decode`] given the encoding's [`Module`].
//!
//! Served here: keys of 8 bits (q8_0, turbo:k8v4, turbo:k8v3, turbo:k8v2) and q4_0, for models computing in bf16
//! or f16, head sizes 64, 128 and 256. The CPU's in-place attention reads every encoding; the rest (keys of 4 or 3
//! bits, which break models with attention biases) are an error at start on CUDA.

use super::contiguous_view;
use crate::gpu::launch::Launch;
use crate::gpu::{by_float_dtype, contiguous, sfx_c};
use crate::kv::{KvEncoding, RowCode};
use crate::Result;
use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::LaunchConfig;
use candle_core::cuda_backend::WrapErr;
use candle_core::{CudaStorage, DType, Layout, Tensor};

/// One encoding's kernels for one model dtype: its module name and PTX.
pub struct Module {
    pub name: &'static str,
    pub ptx: &'static str,
    key: RowCode,
    value: RowCode,
    /// The model dtype its kernels take q and write outputs in.
    pub dtype: DType,
}

macro_rules! module {
    ($file:literal, $key:expr, $value:expr) => {
        [
            Module {
                name: concat!("hearth_", $file, "_bf16"),
                ptx: include_str!(concat!(env!("OUT_DIR"), "/", $file, "_bf16.ptx")),
                key: $key,
                value: $value,
                dtype: DType::BF16,
            },
            Module {
                name: concat!("hearth_", $file, "_f16"),
                ptx: include_str!(concat!(env!("OUT_DIR"), "/", $file, "_f16.ptx")),
                key: $key,
                value: $value,
                dtype: DType::F16,
            },
        ]
    };
}

/// The pairs build.rs compiles (its `ENCODED` list names the same files), for bf16 and f16.
static MODULES: [[Module; 2]; 5] = [
    module!("paged_encoded_q8_q8", RowCode::Q8_0, RowCode::Q8_0),
    module!("paged_encoded_q8_lm4", RowCode::Q8_0, RowCode::LloydMax(4)),
    module!("paged_encoded_q8_lm3", RowCode::Q8_0, RowCode::LloydMax(3)),
    module!("paged_encoded_q8_lm2", RowCode::Q8_0, RowCode::LloydMax(2)),
    module!("paged_encoded_q4_q4", RowCode::Q4_0, RowCode::Q4_0),
];

/// Whether CUDA reads `enc` (for models computing in bf16 or f16): keys of 8 bits, or q4_0.
pub fn serves(enc: KvEncoding) -> bool {
    MODULES.iter().any(|m| m[0].key == enc.key && m[0].value == enc.value)
}

/// The kernels of `enc` for a model computing in `dtype`, or None where CUDA does not read it (a float encoding,
/// keys under 8 bits but q4_0, a dtype other than bf16 and f16).
pub fn module(enc: KvEncoding, dtype: DType) -> Option<&'static Module> {
    MODULES.iter().flatten().find(|m| m.key == enc.key && m.value == enc.value && m.dtype == dtype)
}

/// The encodings CUDA reads, in `--kv-cache-dtype`'s words.
pub fn served() -> String {
    MODULES.iter().map(|m| KvEncoding { key: m[0].key, value: m[0].value }.name()).collect::<Vec<_>>().join(", ")
}

/// Encode the step's new rows `k`, `v` ((T, KvH, D), the model's dtype) into the caches' rows `slots` (T,) u32:
/// one launch, rotated first where the code rotates.
pub fn encode_kv(m: &'static Module, kc: &Tensor, vc: &Tensor, k: &Tensor, v: &Tensor, slots: &Tensor) -> Result<()> {
    let (k, v) = (k.contiguous()?, v.contiguous()?);
    let op = EncodeKv { m, v, vc: vc.clone(), slots: slots.clone() };
    kc.inplace_op2(&k, &op)?;
    Ok(())
}

struct EncodeKv {
    m: &'static Module,
    v: Tensor,
    vc: Tensor,
    slots: Tensor,
}

impl candle_core::InplaceOp2 for EncodeKv {
    fn name(&self) -> &'static str {
        "hearth-kv-encode"
    }

    fn cpu_fwd(
        &self,
        _: &mut candle_core::CpuStorage,
        _: &Layout,
        _: &candle_core::CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<()> {
        candle_core::bail!("hearth-kv-encode runs on CUDA only")
    }

    fn cuda_fwd(&self, kc: &mut CudaStorage, kcl: &Layout, k: &CudaStorage, kl: &Layout) -> candle_core::Result<()> {
        let (t, kvh, d) = kl.shape().dims3()?;
        if t == 0 {
            return Ok(());
        }
        if self.v.dims() != kl.shape().dims() || !matches!(d, 64 | 128 | 256) || self.m.dtype != k.dtype() {
            candle_core::bail!("hearth-kv-encode: k {:?} / v {:?} ({:?})", kl.shape(), self.v.shape(), k.dtype());
        }
        let (c0, c1) = contiguous(kcl, "the K cache")?;
        let (k0, k1) = contiguous(kl, "new k")?;
        let guards = [&self.v, &self.vc, &self.slots].map(|x| x.storage_and_layout());
        let slots = contiguous_view::<u32, _>(&guards[2], "slots")?;
        let vcache = contiguous_view::<u8, _>(&guards[1], "the V cache")?;
        if slots.len() != t {
            candle_core::bail!("hearth-kv-encode: {} slots for {t} tokens", slots.len());
        }
        let dev = kc.device().clone();
        let func =
            dev.get_or_load_custom_func(&format!("kv_encode_{}_d{d}", sfx_c(k.dtype())?), self.m.name, self.m.ptx)?;
        let cfg = LaunchConfig { grid_dim: (t as u32, kvh as u32, 1), block_dim: (64, 1, 1), shared_mem_bytes: 0 };
        let kvh_i = kvh as i32;
        let kcache = kc.as_cuda_slice::<u8>()?.slice(c0..c1);
        macro_rules! launch {
            ($ty:ty) => {{
                let kn = k.as_cuda_slice::<$ty>()?.slice(k0..k1);
                let vn = contiguous_view::<$ty, _>(&guards[0], "new v")?;
                let stream = dev.cuda_stream();
                let mut b = Launch::new(&stream, &func);
                b.ptr(&kn).ptr(&vn).ptr(&kcache).ptr(&vcache).ptr(&slots).val(&kvh_i);
                // SAFETY: the kernel writes the encoded rows slots[t] * KvH + g of both caches (rows the scheduler
                // reserved); one stream orders the write before the attention that reads them.
                unsafe { b.launch(cfg) }.w()?;
            }};
        }
        by_float_dtype!(k, "hearth-kv-encode", launch);
        Ok(())
    }
}
