//! hearth's CPU matmul for GGML-quantized weights: `y = x @ W^T`, x `(.., k)` f32, W `(n, k)` in GGML blocks.
//!
//! candle's CPU `QMatMul` has SIMD dot products for Q4_0, Q8_0 and the k-quants only; Q4_1 and Q5_0 (SmolLM2's
//! and Gemma 3's main weight types) run its scalar `vec_dot_unopt`. This module adds:
//!
//! * **int8 path** ("decode", every m): each row of x is quantized to 32-wide int8 blocks exactly as
//!   candle/ggml do (Q8_1 for Q4_1 weights, Q8_0 otherwise; bit-identical scales and values). Weight rows are
//!   taken 8 at a time, unpacked to bytes and transposed so that each vector lane is one weight row
//!   (`x86::pack`); then every activation row (1-3 straight from the weights; 4 and more from the packed copy,
//!   4 or 8 per tile) runs 8 `vpdpbusd` per block (or `maddubs`+`madd` without VNNI, `x86::mac`) against the
//!   broadcast 4-byte groups of x. Q4_1×Q8_1 (`d_w·d_x·Σq·y + m_w·s_x`), Q5_0×Q8_0 (5th bit rebuilt, the `-16`
//!   offset folded in as an exact integer correction), Q8_0×Q8_0 (`blocks32`, `x86::blocks32`). Each block's sum
//!   is an exact i32 and each row's float steps are fixed, so a row's result is bit-identical at any m, whatever
//!   shares the call, and on every ISA: the serving engine's batch invariance at no cost. Output rows are split
//!   over the work pool (`crate::work_pool`). It beats dequantizing W to f32 for candle's f32 GEMM at every m measured.
//! * **k-quant path** (`kquant`, Q4_K/Q5_K/Q6_K, every m): x quantized per 256 values exactly as candle's Q8_K,
//!   exact integer sums per super-block: below 4 activation rows straight from the weights (scales applied with
//!   `vpmaddwd`), from 4 rows up from 8 weight rows packed lanes-are-rows as above
//!   (`vpdpbusd` per 4 values, `vpmulld` by the lane's scale per 16 or 32; 16 rows a vector with AVX-512 unless
//!   `HEARTH_AVX512=0`); mins and Q6_K's −32 folded in through
//!   the activation's 16-value sums. Both kernels take the same float steps per output on the same exact
//!   integers, so a row's result is bit-identical at any m and on every ISA. At prefill sizes the packed kernel is
//!   about even with candle's repacked kernels (which keep a second, repacked copy of the weights) and 3–4× the
//!   tile kernel; the point is also that a k-quant model's matmuls all run on hearth's work pool
//!   (`HEARTH_K_QUANT=0`: candle's). Q4_K weights are repacked once at load into that lanes-are-rows layout at 4
//!   bits a value (`kquant::prepacked`, `HEARTH_KQ_PREPACK`): one kernel below 16 rows, the packed kernels on
//!   expanded groups from there, bit-identical to the rest.
//!
//! Everything else (Q4_0, Q2_K, ...) falls back to candle's `QMatMul`, which is also the reference in the
//! tests. Non-CPU tensors, non-f32 activations and CPUs without AVX2+FMA+F16C always use candle.
//!
//! Environment:
//! * `HEARTH_FAST_QUANT=0` (or `off`/`false`) disables the whole module: every matmul uses candle's `QMatMul`.
//! * `HEARTH_FAST_QUANT=avx2` keeps the module but does not use AVX-VNNI instructions.
//!
//! Both are read once, on first use.

mod blocks32;
mod frame;
mod kquant;
mod quant;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;

use crate::levers::FastQuant;
use crate::work_pool::KernelPool;
use crate::Result;
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use std::cell::Cell;
use std::sync::{Arc, OnceLock};

/// Instruction set a kernel runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// AVX2 + FMA + F16C: `vpmaddubsw` + `vpmaddwd` per block.
    Avx2,
    /// AVX2 + FMA + F16C + AVX-VNNI (256-bit VEX `vpdpbusd`: Intel Alder Lake / Sapphire Rapids on, AMD Zen 5).
    AvxVnni,
    /// AVX2 + FMA + F16C + AVX512-VNNI + AVX512-VL: the same 256-bit `vpdpbusd`, EVEX-encoded (AMD Zen 4 and
    /// Intel Ice Lake / Cascade Lake servers, which lack the VEX form).
    Avx512Vnni,
}

impl Isa {
    /// Every ISA, in order of preference where several are supported (the VNNI forms compute the same).
    pub const ALL: [Isa; 3] = [Isa::AvxVnni, Isa::Avx512Vnni, Isa::Avx2];

    /// The best this CPU supports (ignoring the environment).
    pub fn detect() -> Option<Isa> {
        Isa::ALL.into_iter().find(|&i| isa_supported(i))
    }

    /// Whether it has int8 dot-product instructions.
    pub fn vnni(self) -> bool {
        self != Isa::Avx2
    }
}

/// Whether this CPU can run kernels built for `isa`.
pub fn isa_supported(isa: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let base =
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
        base && match isa {
            Isa::Avx2 => true,
            Isa::AvxVnni => is_x86_feature_detected!("avxvnni"),
            Isa::Avx512Vnni => is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl"),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        false
    }
}

/// The ISA a `HEARTH_FAST_QUANT` setting allows on a CPU that detected `detected`: `None` = module disabled.
pub fn isa_for(setting: FastQuant, detected: Option<Isa>) -> Option<Isa> {
    let detected = detected?;
    match setting {
        FastQuant::Off => None,
        FastQuant::Avx2 => Some(Isa::Avx2),
        FastQuant::On => Some(detected),
    }
}

/// [`isa_for`] of a raw `HEARTH_FAST_QUANT` value (None: unset), parsed by the lever registry; a malformed value
/// counts as unset, as `levers::get` does.
pub fn isa_from_setting(setting: Option<&str>, detected: Option<Isa>) -> Option<Isa> {
    let levers = crate::levers::Levers::from_lookup(|name| {
        (name == "HEARTH_FAST_QUANT").then(|| setting.map(str::to_string)).flatten()
    });
    isa_for(levers.map_or(FastQuant::On, |l| l.fast_quant), detected)
}

/// The ISA in use, or `None` when the module is off (kill switch or no AVX2).
pub fn active_isa() -> Option<Isa> {
    static ISA: OnceLock<Option<Isa>> = OnceLock::new();
    *ISA.get_or_init(|| isa_for(crate::levers::get().fast_quant, Isa::detect()))
}

/// Which implementation serves one matmul.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    /// int8 dot products on quantized activations (this module).
    Decode,
    /// candle's `QMatMul`.
    Candle,
}

/// Per-type choice of path by the number of activation rows `m`.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Decode path for `m < decode_below` (0: never).
    pub decode_below: usize,
}

impl Plan {
    /// The int8 path at every m for the types it handles, candle for the rest (`examples/qmatmul_bench.rs`). For
    /// Q4_1/Q5_0/Q8_0 it beats candle's kernels and a dequantize + f32 GEMM at every m measured. For the k-quants
    /// candle's repacked kernels (a second copy of the weights) are faster at 4-32 rows and about even at prefill
    /// sizes, but they run on candle's pool (a model whose matmuls switch pools has both spinning on the same
    /// cores), and the row-independent int8 path is what the serving engine's batch invariance needs.
    pub fn for_weight(dtype: GgmlDType) -> Plan {
        Plan { decode_below: if decode_supported(dtype) { usize::MAX } else { 0 } }
    }

    pub fn path(&self, m: usize) -> Path {
        if m < self.decode_below {
            Path::Decode
        } else {
            Path::Candle
        }
    }
}

/// Weight types the decode kernels handle (the k-quants unless `HEARTH_K_QUANT=0`).
pub fn decode_supported(dtype: GgmlDType) -> bool {
    match dtype {
        GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q8_0 => true,
        GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q6K => crate::levers::get().k_quant,
        _ => false,
    }
}

/// A quantized CPU weight served by this module where it is faster, by candle's `QMatMul` elsewhere.
#[derive(Clone)]
pub struct FastQMatMul {
    /// The weight in GGML's layout and candle's path over it; None once its rows are repacked (`packed`).
    ggml: Option<(Arc<QTensor>, QMatMul)>,
    dtype: GgmlDType,
    isa: Isa,
    plan: Plan,
    n: usize,
    k: usize,
    /// Q4_K rows repacked at load (`HEARTH_KQ_PREPACK`): the weight's only copy.
    #[cfg(target_arch = "x86_64")]
    packed: Option<Arc<kquant::prepacked::Packed>>,
}

impl std::fmt::Debug for FastQMatMul {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FastQMatMul({:?}, {}x{}, {:?}, {:?})", self.dtype, self.n, self.k, self.isa, self.plan)
    }
}

impl FastQMatMul {
    /// `Some` when the module is on and `w` is a 2-D CPU `QMatMul::QTensor` of a type the int8 path handles;
    /// `None` means: keep using candle's `QMatMul`.
    pub fn new(w: &QMatMul) -> Option<Self> {
        let QMatMul::QTensor(q) = w else { return None };
        let isa = active_isa()?;
        Self::with_plan(q.clone(), isa, Plan::for_weight(q.dtype()))
    }

    /// Like `new`, with an explicit ISA and plan (tests, benchmarks).
    pub fn with_plan(w: Arc<QTensor>, isa: Isa, plan: Plan) -> Option<Self> {
        if !matches!(w.device(), Device::Cpu) || !isa_supported(isa) {
            return None;
        }
        let (n, k) = w.shape().dims2().ok()?;
        let dtype = w.dtype();
        let plan = Plan { decode_below: if decode_supported(dtype) { plan.decode_below } else { 0 } };
        if plan.decode_below == 0 {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        let packed = Self::repack(&w, n, k);
        #[cfg(target_arch = "x86_64")]
        let ggml = packed.is_none().then(|| (w.clone(), QMatMul::QTensor(w)));
        #[cfg(not(target_arch = "x86_64"))]
        let ggml = Some((w.clone(), QMatMul::QTensor(w)));
        Some(Self {
            ggml,
            dtype,
            isa,
            plan,
            n,
            k,
            #[cfg(target_arch = "x86_64")]
            packed,
        })
    }

    /// A Q4_K weight's repacked rows, under `HEARTH_KQ_PREPACK`.
    #[cfg(target_arch = "x86_64")]
    fn repack(w: &QTensor, n: usize, k: usize) -> Option<Arc<kquant::prepacked::Packed>> {
        let dtype = w.dtype();
        if dtype != GgmlDType::Q4K || !crate::levers::get().kq_prepack || !k.is_multiple_of(quant::QK_K) || n == 0 {
            return None;
        }
        let data = w.data().ok()?;
        if data.len() != n * (k / quant::QK_K) * kquant::block_bytes(dtype) {
            return None;
        }
        // SAFETY: every ISA this module runs on has AVX2 and F16C (`isa_supported`), and the size is checked.
        unsafe { kquant::prepacked::Packed::new(dtype, &data, n, k / quant::QK_K) }.map(Arc::new)
    }

    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// The weight's rows (the output width).
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Whether this holds the weight's only copy (repacked): the caller may drop its own.
    pub fn owns_weights(&self) -> bool {
        self.ggml.is_none()
    }

    /// candle's path over the GGML layout (an error for a repacked weight, which has none).
    fn fallback(&self, x: &Tensor) -> Result<Tensor> {
        match &self.ggml {
            Some((_, f)) => Ok(f.forward(x)?),
            None => Err(crate::Error::Unsupported(format!(
                "a {:?} weight repacked at load multiplies f32 CPU input of {} columns only, got {:?} {:?} \
                 (HEARTH_KQ_PREPACK=0 keeps GGML's layout)",
                self.dtype,
                self.k,
                x.dtype(),
                x.dims()
            ))),
        }
    }

    /// The path `forward` takes for an input with `m` rows.
    pub fn path(&self, m: usize) -> Path {
        self.plan.path(m)
    }

    /// x: (.., k) -> (.., n).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims();
        let Some((&k, lead)) = dims.split_last() else {
            return self.fallback(x);
        };
        if k != self.k || x.dtype() != DType::F32 || !x.device().is_cpu() {
            return self.fallback(x);
        }
        let m: usize = lead.iter().product();
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().unwrap() = self.n;
        match self.path(m) {
            Path::Candle => self.fallback(x),
            Path::Decode => {
                let x = x.contiguous()?;
                let mut out = vec![0f32; m * self.n];
                {
                    let (storage, layout) = x.storage_and_layout();
                    let candle_core::Storage::Cpu(cpu) = &*storage else { unreachable!("checked is_cpu") };
                    let xs = &cpu.as_slice::<f32>()?[layout.start_offset()..layout.start_offset() + m * k];
                    #[cfg(target_arch = "x86_64")]
                    if let Some(p) = &self.packed {
                        kquant::prepacked_matmul(p, self.isa, xs, m, &mut out)?;
                        return Ok(Tensor::from_vec(out, out_dims, &Device::Cpu)?);
                    }
                    let Some((w, _)) = &self.ggml else { return self.fallback(x.as_ref()) };
                    decode_matmul(w, self.isa, xs, m, &mut out)?;
                }
                Ok(Tensor::from_vec(out, out_dims, &Device::Cpu)?)
            }
        }
    }
}

/// Decode path: `out (m, n) = x (m, k) @ W^T` with int8 activations. `w` must be a 2-D CPU tensor of a
/// `decode_supported` type.
pub fn decode_matmul(w: &QTensor, isa: Isa, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
    let (n, k) = w.shape().dims2()?;
    if x.len() != m * k || out.len() != m * n {
        return Err(crate::Error::InvalidRequest(format!(
            "decode_matmul: x has {} values, out {}, for m={m} n={n} k={k}",
            x.len(),
            out.len()
        )));
    }
    if !isa_supported(isa) {
        return Err(crate::Error::Unsupported(format!("this CPU lacks {isa:?}")));
    }
    let data = w.data()?;
    match w.dtype() {
        dtype @ (GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q6K) => {
            kquant::decode_matmul(dtype, isa, &data, n, k, x, m, out)
        }
        dtype => blocks32::decode_matmul(dtype, isa, &data, n, k, x, m, out),
    }
}

/// Whether `w` is a quantized CPU weight of a type the decode kernels do not handle: candle's quantized kernels
/// decode it, on candle's thread pool.
pub fn decodes_with_candle(w: &QMatMul) -> bool {
    matches!(w, QMatMul::QTensor(q) if q.device().is_cpu() && !decode_supported(q.dtype()))
}

/// Note a weight of a model being loaded: one that candle's kernels decode puts the model's CPU kernels on
/// candle's pool (see `crate::work_pool`).
pub fn note_weight(pool: &Cell<KernelPool>, w: &QMatMul) {
    if decodes_with_candle(w) {
        pool.set(KernelPool::Candle);
    }
}
