//! Fast CPU matmul for GGML-quantized weights: `y = x @ W^T`, x `(.., k)` f32, W `(n, k)` in GGML blocks.
//!
//! candle 0.11.1's CPU `QMatMul` has SIMD dot products for Q4_0, Q8_0 and the k-quants only; Q4_1 and Q5_0
//! (SmolLM2's and Gemma 3's main weight types) run its scalar `vec_dot_unopt`. This module adds:
//!
//! * **int8 path** ("decode"; every m up to a per-type crossover, 96-256 rows): each row of x is quantized to
//!   32-wide int8 blocks exactly as candle/ggml do (Q8_1 for Q4_1 weights, Q8_0 otherwise; bit-identical
//!   scales and values), then AVX2 dot products per block (`maddubs`+`madd`, or `vpdpbusd` where the CPU has
//!   AVX-VNNI): Q4_1×Q8_1 (`d_w·d_x·Σq·y + m_w·s_x`), Q5_0×Q8_0 (5th bit rebuilt, the `-16` offset folded
//!   in as an exact integer correction), Q8_0×Q8_0. Every block sum is an exact i32, so results equal
//!   candle's up to f32 accumulation order. Output rows are split over candle's CPU worker pool (the threads
//!   its own quantized matmul uses; rayon's pool measured 2-3x slower at m = 1).
//! * **Dequant+f32 path** (prefill, m at or above the crossover): W is dequantized to f32 once per call
//!   (parallel over rows, into a reused per-thread buffer) and multiplied with candle's f32 `matmul` (the
//!   `gemm` crate); the dequantization runs on rayon's pool like the gemm. x is first rounded to the same
//!   8-bit block values (and Q4_1's min term uses the same f16 block sums), so this path computes the int8
//!   path's math up to f32 rounding: a row's result does not depend on how many rows share the call
//!   (chunked prefill, batching) and stays comparable to llama.cpp.
//!
//! * **k-quant path** (`kquant`, Q4_K/Q5_K/Q6_K, every m): x quantized per 256 values exactly as candle's Q8_K,
//!   exact integer sums per super-block (scales applied with `vpmaddwd`, mins and Q6_K's −32 folded in through
//!   the activation's 16-value sums; with VNNI the scale step is one `vpdpwssd`, bit-identical to AVX2's, ~1.3x
//!   faster per matmul at m >= 4). Per matmul about even with candle's repacked kernels at m = 1; the point
//!   is that a k-quant model's matmuls all run on hearth's work pool (`HEARTH_K_QUANT=0`: candle's).
//!
//! Which path serves which `(type, m)` is decided by [`Plan`], from measurements on a 2-core AMD EPYC with
//! AVX-512/AVX-VNNI (see `examples/qmatmul_bench.rs`); everything else (Q4_0, Q2_K, ...) falls back to
//! candle's `QMatMul`, which is also the reference in the tests. Non-CPU tensors, non-f32 activations and
//! CPUs without AVX2+FMA+F16C always use candle.
//!
//! Environment:
//! * `HEARTH_FAST_QUANT=0` (or `off`/`false`) disables the whole module: every matmul uses candle's `QMatMul`.
//! * `HEARTH_FAST_QUANT=avx2` keeps the module but does not use AVX-VNNI instructions.
//!
//! Both are read once, on first use.

mod act;
pub(crate) mod cpu;
mod dequant;
mod kquant;
mod pool;
mod quant;

#[cfg(test)]
mod tests;

use crate::levers::FastQuant;
use crate::Result;
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
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
    /// Dequantize W to f32, then candle's f32 matmul.
    DequantF32,
    /// candle's `QMatMul`.
    Candle,
}

/// Per-type choice of path by the number of activation rows `m`.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Decode path for `m < decode_below` (0: never).
    pub decode_below: usize,
    /// Dequant+f32 path for `m >= dequant_from` (`usize::MAX`: never).
    pub dequant_from: usize,
}

/// The k-quants take the int8 path at every m: candle's repacked tiles are up to ~1.3x faster per matmul at
/// m >= 4 (`examples/qmatmul_bench.rs`), but they run on candle's pool, and a model whose matmuls switch
/// between two pools has both spinning on the same cores; the row-independent int8 path is also what the
/// serving engine's batch invariance needs.
pub const K_QUANT_CROSSOVER: usize = usize::MAX;

/// Largest weight (elements) the dequant+f32 path materializes: 8M f32 = 32 MiB of per-thread scratch. Bigger
/// matrices (a vocabulary head) always take the int8 path.
pub const DEQUANT_MAX_ELEMS: usize = 8 << 20;

impl Plan {
    /// Measured policy for a `(n, k)` weight of `dtype` run with `isa` (`examples/qmatmul_bench.rs`, 2 threads).
    /// The int8 kernels beat candle at every m for Q4_1/Q5_0/Q8_0; the dequant+f32 path overtakes them at
    /// m ≈ 64..128 (Q4_1, Q5_0; later with VNNI) and m ≈ 256+ (Q8_0). Around the crossover the two are within
    /// ~10% and compute the same math, so the exact point is not critical. candle's k-quant kernels (repacked)
    /// beat dequant+f32 at every m measured, so those stay with candle.
    pub fn for_weight(dtype: GgmlDType, isa: Isa, n: usize, k: usize) -> Plan {
        let vnni = isa.vnni();
        let crossover = match dtype {
            GgmlDType::Q4_1 | GgmlDType::Q5_0 => {
                if vnni {
                    128
                } else {
                    96
                }
            }
            GgmlDType::Q8_0 => {
                if vnni {
                    256
                } else {
                    192
                }
            }
            // k-quants: candle's repacked tiles win from here on (dequant+f32 never does)
            GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q6K => {
                return Plan { decode_below: K_QUANT_CROSSOVER, dequant_from: usize::MAX };
            }
            _ => return Plan { decode_below: 0, dequant_from: usize::MAX },
        };
        if n * k > DEQUANT_MAX_ELEMS {
            // e.g. a vocabulary head: dequantizing it per call costs far more than it saves
            return Plan { decode_below: usize::MAX, dequant_from: usize::MAX };
        }
        Plan { decode_below: crossover, dequant_from: crossover }
    }

    pub fn path(&self, m: usize) -> Path {
        if m < self.decode_below {
            Path::Decode
        } else if m >= self.dequant_from {
            Path::DequantF32
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

/// Weight types whose dequant+f32 path first rounds x to the int8 path's 32-value blocks (the k-quants' int8 path
/// quantizes x per 256 values instead; their dequant+f32 path multiplies x as is).
pub fn rounds_x(dtype: GgmlDType) -> bool {
    cpu::block_bytes(dtype) != 0
}

/// Weight types the dequant+f32 path handles.
pub fn dequant_supported(dtype: GgmlDType) -> bool {
    matches!(
        dtype,
        GgmlDType::Q4_1
            | GgmlDType::Q5_0
            | GgmlDType::Q8_0
            | GgmlDType::Q4_0
            | GgmlDType::Q5_1
            | GgmlDType::Q2K
            | GgmlDType::Q3K
            | GgmlDType::Q4K
            | GgmlDType::Q5K
            | GgmlDType::Q6K
    )
}

/// A quantized CPU weight served by this module where it is faster, by candle's `QMatMul` elsewhere.
#[derive(Clone)]
pub struct FastQMatMul {
    w: Arc<QTensor>,
    fallback: QMatMul,
    isa: Isa,
    plan: Plan,
    n: usize,
    k: usize,
}

impl std::fmt::Debug for FastQMatMul {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FastQMatMul({:?}, {}x{}, {:?}, {:?})", self.w.dtype(), self.n, self.k, self.isa, self.plan)
    }
}

impl FastQMatMul {
    /// `Some` when the module is on and `w` is a 2-D CPU `QMatMul::QTensor` of a type some path here
    /// accelerates; `None` means: keep using candle's `QMatMul`. `row_invariant`: every input size takes the int8
    /// path when the type has one, whose output rows are computed independently and bit-exactly whatever else
    /// shares the call (the serving engine's batch invariance; it gives up the dequant+f32 prefill path, ~1.2x
    /// slower prefill at m = 512).
    pub fn new(w: &QMatMul, row_invariant: bool) -> Option<Self> {
        let QMatMul::QTensor(q) = w else { return None };
        let isa = active_isa()?;
        let (n, k) = q.shape().dims2().ok()?;
        let plan = Plan::for_weight(q.dtype(), isa, n, k);
        let plan =
            if row_invariant && decode_supported(q.dtype()) { Plan { decode_below: usize::MAX, ..plan } } else { plan };
        Self::with_plan(q.clone(), isa, plan)
    }

    /// Like `new`, with an explicit ISA and plan (tests, benchmarks).
    pub fn with_plan(w: Arc<QTensor>, isa: Isa, plan: Plan) -> Option<Self> {
        if !matches!(w.device(), Device::Cpu) || !isa_supported(isa) {
            return None;
        }
        let (n, k) = w.shape().dims2().ok()?;
        let dtype = w.dtype();
        let plan = Plan {
            decode_below: if decode_supported(dtype) { plan.decode_below } else { 0 },
            dequant_from: if dequant_supported(dtype) { plan.dequant_from } else { usize::MAX },
        };
        if plan.decode_below == 0 && plan.dequant_from == usize::MAX {
            return None;
        }
        let fallback = QMatMul::QTensor(w.clone());
        Some(Self { w, fallback, isa, plan, n, k })
    }

    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// The path `forward` takes for an input with `m` rows.
    pub fn path(&self, m: usize) -> Path {
        self.plan.path(m)
    }

    /// x: (.., k) -> (.., n).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims();
        let Some((&k, lead)) = dims.split_last() else {
            return Ok(self.fallback.forward(x)?);
        };
        if k != self.k || x.dtype() != DType::F32 || !x.device().is_cpu() {
            return Ok(self.fallback.forward(x)?);
        }
        let m: usize = lead.iter().product();
        let mut out_dims = dims.to_vec();
        *out_dims.last_mut().unwrap() = self.n;
        match self.path(m) {
            Path::Candle => Ok(self.fallback.forward(x)?),
            Path::Decode => {
                let x = x.contiguous()?;
                let mut out = vec![0f32; m * self.n];
                {
                    let (storage, layout) = x.storage_and_layout();
                    let candle_core::Storage::Cpu(cpu) = &*storage else { unreachable!("checked is_cpu") };
                    let xs = &cpu.as_slice::<f32>()?[layout.start_offset()..layout.start_offset() + m * k];
                    decode_matmul(&self.w, self.isa, xs, m, &mut out)?;
                }
                Ok(Tensor::from_vec(out, out_dims, &Device::Cpu)?)
            }
            Path::DequantF32 => {
                let x2 = x.reshape((m, k))?;
                let y = dequant_matmul(&self.w, self.isa, &x2)?;
                Ok(y.reshape(out_dims)?)
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
        dtype => cpu::decode_matmul(dtype, isa, &data, n, k, x, m, out),
    }
}

/// Prefill path: dequantize W (once, in parallel) and run candle's f32 matmul. x: (m, k) f32 on the CPU.
///
/// For the types with 32-value int8 kernels (Q4_1, Q5_0, Q8_0) x is first rounded to its 8-bit block values (the same
/// quantization as the decode path and candle: `q·d`, exact in f32), and for Q4_1 the block-minimum term uses
/// the same f16 block sums `s` (as an extra `k/32` columns of x and W). The result is then the decode path's
/// (and candle's) up to f32 rounding, so a row's output does not depend on how many rows share the call
/// (chunked prefill, batching). Other types multiply the f32 x as is.
pub fn dequant_matmul(w: &QTensor, isa: Isa, x: &Tensor) -> Result<Tensor> {
    let (n, k) = w.shape().dims2()?;
    let (m, xk) = x.dims2()?;
    if xk != k || x.dtype() != DType::F32 || !x.device().is_cpu() {
        return Err(crate::Error::InvalidRequest(format!("dequant_matmul: x {:?} for a {n}x{k} weight", x.shape())));
    }
    if !isa_supported(isa) {
        return Err(crate::Error::Unsupported(format!("this CPU lacks {isa:?}")));
    }
    let dtype = w.dtype();
    let split_min = dtype == GgmlDType::Q4_1;
    let ks = dequant::row_len(k, split_min);
    let data = w.data()?;
    let x = x.contiguous()?;
    // The buffers stay out of their thread-local slots until the matmul is done: a re-entrant call on this
    // thread (rayon may run another task here while gemm waits) then allocates its own instead of
    // overwriting ours mid-use.
    let w_buf = take_scratch(&W_SCRATCH, n * ks)?;
    let x_buf = if rounds_x(dtype) { Some(take_scratch(&X_SCRATCH, m * ks)?) } else { None };
    let run = || -> Result<Tensor> {
        let wt = fill_view(&w_buf, n * ks, (n, ks), &|out| {
            dequant::dequantize_into(dtype, isa, &data, n, k, split_min, out)
        })?;
        let Some(x_buf) = &x_buf else {
            return Ok(x.matmul(&wt.t()?)?);
        };
        let (storage, layout) = x.storage_and_layout();
        let candle_core::Storage::Cpu(cpu) = &*storage else { unreachable!("checked is_cpu") };
        let xs = &cpu.as_slice::<f32>()?[layout.start_offset()..layout.start_offset() + m * k];
        let xq = fill_view(x_buf, m * ks, (m, ks), &|out| {
            quant::round_rows_into(xs, m, k, split_min, out);
            Ok(())
        })?;
        drop(storage);
        Ok(xq.matmul(&wt.t()?)?)
    };
    let y = run();
    put_back_scratch(&W_SCRATCH, w_buf);
    if let Some(b) = x_buf {
        put_back_scratch(&X_SCRATCH, b);
    }
    y
}

type ScratchSlot = std::thread::LocalKey<std::cell::Cell<Option<Tensor>>>;

thread_local! {
    /// Dequantized W of the last prefill matmul on this thread (grown to the largest seen).
    static W_SCRATCH: std::cell::Cell<Option<Tensor>> = const { std::cell::Cell::new(None) };
    /// Rounded activations of the last prefill matmul on this thread.
    static X_SCRATCH: std::cell::Cell<Option<Tensor>> = const { std::cell::Cell::new(None) };
}

/// A reusable f32 CPU buffer of at least `len` values. Fresh multi-MiB allocations per call cost page
/// faults that measured up to +50% on the prefill path; this keeps one buffer per thread and role.
fn take_scratch(slot: &'static ScratchSlot, len: usize) -> Result<Tensor> {
    Ok(match slot.with(|c| c.take()) {
        Some(t) if t.elem_count() >= len => t,
        _ => Tensor::zeros(len, DType::F32, &Device::Cpu)?,
    })
}

fn put_back_scratch(slot: &'static ScratchSlot, t: Tensor) {
    // Only matrices the plan would dequantize are worth keeping a buffer for.
    if t.elem_count() > DEQUANT_MAX_ELEMS + DEQUANT_MAX_ELEMS / 32 {
        return;
    }
    slot.with(|c| {
        let keep = match c.take() {
            Some(other) if other.elem_count() > t.elem_count() => other,
            _ => t,
        };
        c.set(Some(keep));
    })
}

/// Fill the first `len` values of `buf` and return them as a `shape` view (no copy).
fn fill_view(
    buf: &Tensor,
    len: usize,
    shape: (usize, usize),
    fill: &dyn Fn(&mut [f32]) -> Result<()>,
) -> Result<Tensor> {
    buf.inplace_op1(&Fill { len, fill })?;
    Ok(buf.narrow(0, 0, len)?.reshape(shape)?)
}

struct Fill<'a> {
    len: usize,
    fill: &'a dyn Fn(&mut [f32]) -> Result<()>,
}

impl candle_core::InplaceOp1 for Fill<'_> {
    fn name(&self) -> &'static str {
        "hearth-kernels-fill"
    }

    fn cpu_fwd(&self, storage: &mut candle_core::CpuStorage, layout: &candle_core::Layout) -> candle_core::Result<()> {
        let candle_core::CpuStorage::F32(v) = storage else { candle_core::bail!("scratch buffer is not f32") };
        let start = layout.start_offset();
        (self.fill)(&mut v[start..start + self.len]).map_err(|e| candle_core::Error::Msg(e.to_string()))
    }
}

/// W (n, k) as f32, row-major, computed in parallel over rows; bit-identical to candle's `dequantize`.
pub fn dequantize(w: &QTensor, isa: Isa) -> Result<Vec<f32>> {
    let (n, k) = w.shape().dims2()?;
    if !isa_supported(isa) {
        return Err(crate::Error::Unsupported(format!("this CPU lacks {isa:?}")));
    }
    let data = w.data()?;
    dequant::dequantize(w.dtype(), isa, &data, n, k, false)
}

/// `act(gu[.., :I]) * gu[.., I:]` of a fused gate|up output `gu (.., 2I)`: f32 on the CPU, rows over the work pool,
/// vectorized where AVX2 + FMA are (see `act.rs`). None for other tensors (the caller uses candle's ops).
pub fn act_mul(gu: &Tensor, act: crate::weights::config::Activation) -> Result<Option<Tensor>> {
    if !gu.device().is_cpu() || gu.dtype() != DType::F32 {
        return Ok(None);
    }
    let dims = gu.dims().to_vec();
    let Some((&two_i, lead)) = dims.split_last() else { return Ok(None) };
    let (i, rows) = (two_i / 2, lead.iter().product::<usize>());
    let gu = gu.contiguous()?;
    let mut out = vec![0f32; rows * i];
    {
        let (storage, layout) = gu.storage_and_layout();
        let candle_core::Storage::Cpu(cpu) = &*storage else { return Ok(None) };
        let xs = &cpu.as_slice::<f32>()?[layout.start_offset()..layout.start_offset() + rows * two_i];
        act::act_mul(xs, rows, i, act, isa_supported(Isa::Avx2), &mut out);
    }
    let out_dims: Vec<usize> = lead.iter().copied().chain([i]).collect();
    Ok(Some(Tensor::from_vec(out, out_dims, &Device::Cpu)?))
}

/// Some loaded CPU weight decodes with candle's quantized kernels, which run on candle's barrier pool: hearth's
/// kernels then share that pool instead of running a second one beside it (two pools spinning on the same cores
/// fight: Gemma 3 270M decode went from 51 to 33 tok/s with both).
static CANDLE_DECODES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Note a loaded weight (every `Linear` does): a quantized CPU weight of a type the decode kernels do not handle
/// keeps hearth's kernels on candle's pool.
pub fn note_weight(w: &QMatMul) {
    if let QMatMul::QTensor(q) = w {
        if q.device().is_cpu() && !decode_supported(q.dtype()) {
            CANDLE_DECODES.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// hearth's work pool (`HEARTH_WORK_POOL`), as many threads as candle's pools.
fn work_pool() -> &'static pool::WorkPool {
    static POOL: std::sync::OnceLock<pool::WorkPool> = std::sync::OnceLock::new();
    POOL.get_or_init(|| pool::WorkPool::new(candle_core::utils::get_num_threads()))
}

/// Which threads run a parallel loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pool {
    /// candle's barrier pool: the threads candle's own quantized matmul uses. Lowest hand-out latency, which
    /// the short decode matmuls need.
    Candle,
    /// rayon's global pool: the threads candle's f32 `matmul` (gemm) uses. For the dequant+f32 path, so that
    /// the dequantization and the gemm right after it run on the same threads (candle's pool spins for a
    /// while after each job and would compete with gemm for the cores).
    Rayon,
}

/// Split `n_items` over `pool` in chunks of at least `grain` items.
pub(crate) fn par_chunks(pool: Pool, n_items: usize, grain: usize, f: impl Fn(std::ops::Range<usize>) + Sync) {
    if n_items == 0 {
        return;
    }
    let own = pool == Pool::Candle
        && crate::levers::get().work_pool
        && !CANDLE_DECODES.load(std::sync::atomic::Ordering::Relaxed);
    let threads = match pool {
        Pool::Candle if own => work_pool().threads(),
        Pool::Candle => candle_core::utils::barrier_pool().n_workers() + 1,
        Pool::Rayon => rayon::current_num_threads(),
    };
    if threads <= 1 || n_items <= grain {
        f(0..n_items);
        return;
    }
    let units = n_items.div_ceil(grain);
    let per_unit = n_items.div_ceil(units);
    let unit = |u: std::ops::Range<usize>| {
        let lo = u.start * per_unit;
        let hi = (u.end * per_unit).min(n_items);
        if lo < hi {
            f(lo..hi)
        }
    };
    match pool {
        // Units from a shared cursor; the caller waits only for claimed ones (see `pool`).
        Pool::Candle if own => work_pool().run(units, &unit),
        // execute_chunked hands out ~8 chunks per thread from a shared cursor.
        Pool::Candle => candle_core::utils::barrier_pool().execute_chunked(units, unit),
        Pool::Rayon => {
            use rayon::prelude::*;
            (0..units).into_par_iter().for_each(|u| unit(u..u + 1));
        }
    }
}
