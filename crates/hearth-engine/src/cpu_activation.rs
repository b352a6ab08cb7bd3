//! The gated activation of a fused gate|up output on the CPU: `out[r] = act(gu[r, :I]) * gu[r, I:]`, rows split
//! over the work pool, AVX2 + FMA with a vectorized `exp` where the CPU has them.
//!
//! Both activations are `x / (1 + exp(-z))`: SiLU with z = x, and the tanh approximation of GELU with
//! z = 2·√(2/π)·(x + 0.044715·x³), since 0.5·x·(1 + tanh(u)) = x·sigmoid(2u). candle computes the same
//! functions with libm's `expf`/`tanhf` one value at a time; results agree to a few ulp.

use crate::cpu_matmul::{isa_supported, Isa};
use crate::weights::config::Activation;
use crate::work_pool::par_chunks;
use crate::Result;
use candle_core::{DType, Device, Tensor};

/// √(2/π)
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_CUBIC: f32 = 0.044_715;

/// `act(gu[.., :I]) * gu[.., I:]` of a fused gate|up output `gu (.., 2I)`: f32 on the CPU, rows over the work pool,
/// vectorized where AVX2 + FMA are. None for other tensors (the caller uses candle's ops).
pub fn act_mul(gu: &Tensor, act: Activation) -> Result<Option<Tensor>> {
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
        act_mul_rows(xs, rows, i, act, isa_supported(Isa::Avx2), &mut out);
    }
    let out_dims: Vec<usize> = lead.iter().copied().chain([i]).collect();
    Ok(Some(Tensor::from_vec(out, out_dims, &Device::Cpu)?))
}

/// `out (rows, i) = act(gu[.., :i]) * gu[.., i..]` for `gu (rows, 2i)`.
pub fn act_mul_rows(gu: &[f32], rows: usize, i: usize, act: Activation, simd: bool, out: &mut [f32]) {
    assert_eq!(gu.len(), rows * 2 * i);
    assert_eq!(out.len(), rows * i);
    let out_ptr = out.as_mut_ptr() as usize;
    par_chunks(rows, (16 * 1024 / (i * 8).max(1)).max(1), |range| {
        for r in range {
            let (g, u) = gu[r * 2 * i..(r + 1) * 2 * i].split_at(i);
            // SAFETY: each row of `out` is written by exactly one chunk.
            let o = unsafe { std::slice::from_raw_parts_mut((out_ptr as *mut f32).add(r * i), i) };
            #[cfg(target_arch = "x86_64")]
            if simd {
                // SAFETY: callers pass simd = true only where AVX2 + FMA were detected.
                unsafe { x86::row(g, u, act, o) };
                continue;
            }
            let _ = simd;
            row_scalar(g, u, act, o);
        }
    });
}

/// z of `x / (1 + exp(-z))`.
#[inline(always)]
fn z_of(x: f32, act: Activation) -> f32 {
    match act {
        Activation::Silu => x,
        Activation::GeluTanh => 2.0 * SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x),
        Activation::SwigluOai { alpha, .. } => alpha * x,
    }
}

/// The gate and up values the activation takes: gpt-oss's clamped SwiGLU clamps both and adds 1 to up.
#[inline(always)]
fn clamped(x: f32, u: f32, act: Activation) -> (f32, f32) {
    match act {
        Activation::SwigluOai { limit, .. } => (x.min(limit), u.clamp(-limit, limit) + 1.0),
        _ => (x, u),
    }
}

fn row_scalar(g: &[f32], u: &[f32], act: Activation, out: &mut [f32]) {
    for ((o, &x), &u) in out.iter_mut().zip(g).zip(u) {
        let (x, u) = clamped(x, u, act);
        *o = x / (1.0 + (-z_of(x, act)).exp()) * u;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use crate::cpu_simd::exp8;
    use core::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn row(g: &[f32], u: &[f32], act: Activation, out: &mut [f32]) {
        let n = g.len();
        let one = _mm256_set1_ps(1.0);
        let c1 = _mm256_set1_ps(-2.0 * SQRT_2_OVER_PI);
        let c3 = _mm256_set1_ps(GELU_CUBIC);
        let (neg_alpha, limit) = match act {
            Activation::SwigluOai { alpha, limit } => (_mm256_set1_ps(-alpha), _mm256_set1_ps(limit)),
            _ => (one, one),
        };
        let mut j = 0;
        while j + 8 <= n {
            let mut x = _mm256_loadu_ps(g.as_ptr().add(j));
            let mut uv = _mm256_loadu_ps(u.as_ptr().add(j));
            let neg_z = match act {
                Activation::Silu => _mm256_sub_ps(_mm256_setzero_ps(), x),
                // -2·√(2/π)·(x + c·x³) = c1·x·(1 + c·x²)
                Activation::GeluTanh => {
                    _mm256_mul_ps(_mm256_mul_ps(c1, x), _mm256_fmadd_ps(c3, _mm256_mul_ps(x, x), one))
                }
                Activation::SwigluOai { .. } => {
                    // min(x, limit) and clamp(u, -limit, limit) + 1, as `clamped`
                    x = _mm256_min_ps(x, limit);
                    let neg_limit = _mm256_sub_ps(_mm256_setzero_ps(), limit);
                    uv = _mm256_add_ps(_mm256_min_ps(_mm256_max_ps(uv, neg_limit), limit), one);
                    _mm256_mul_ps(neg_alpha, x)
                }
            };
            let s = _mm256_div_ps(x, _mm256_add_ps(one, exp8(neg_z)));
            _mm256_storeu_ps(out.as_mut_ptr().add(j), _mm256_mul_ps(s, uv));
            j += 8;
        }
        row_scalar(&g[j..], &u[j..], act, &mut out[j..]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact functions, in f64.
    fn reference(x: f32, u: f32, act: Activation) -> f64 {
        let (x, u) = (x as f64, u as f64);
        let (x, u) = match act {
            Activation::SwigluOai { limit, .. } => (x.min(limit as f64), u.clamp(-limit as f64, limit as f64) + 1.0),
            _ => (x, u),
        };
        let a = match act {
            Activation::Silu => x / (1.0 + (-x).exp()),
            Activation::SwigluOai { alpha, .. } => x / (1.0 + (-(alpha as f64) * x).exp()),
            // 0.5·x·(1 + tanh(v)) as x·sigmoid(2v), which does not cancel where tanh(v) is near -1
            Activation::GeluTanh => {
                x / (1.0 + (-2.0 * (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).exp())
            }
        };
        a * u
    }

    #[test]
    fn matches_the_exact_functions_and_candle() {
        let (rows, i) = (5, 203); // a tail after the 8-wide loop
        let gu: Vec<f32> = (0..rows * 2 * i).map(|k| ((k * 7919) % 2001) as f32 / 100.0 - 10.0).collect();
        let t = Tensor::from_vec(gu.clone(), (rows, 2 * i), &Device::Cpu).unwrap();
        let (g, u) = (t.narrow(1, 0, i).unwrap(), t.narrow(1, i, i).unwrap());
        // gate and up values span -10..10: gpt-oss's limit of 7 clamps some of both
        for act in [Activation::Silu, Activation::GeluTanh, Activation::SwigluOai { alpha: 1.702, limit: 7.0 }] {
            let candle = crate::models::mlp::gated(&g, &u, act).unwrap();
            let candle: Vec<f32> = candle.flatten_all().unwrap().to_vec1().unwrap();
            let scale = candle.iter().fold(0f32, |m, v| m.max(v.abs()));
            for simd in [false, isa_supported(Isa::Avx2)] {
                let mut out = vec![f32::NAN; rows * i];
                act_mul_rows(&gu, rows, i, act, simd, &mut out);
                for (k, (o, c)) in out.iter().zip(&candle).enumerate() {
                    let (r, c0) = (k / i, k % i);
                    let want = reference(gu[r * 2 * i + c0], gu[r * 2 * i + i + c0], act);
                    // f32 rounding of the exact value: exp(z) carries |z|·ε relative error, |z| up to ~90
                    let err = (*o as f64 - want).abs();
                    assert!(err <= 1e-5 * want.abs() + 1e-37, "{act:?} simd={simd} value {k}: {o} vs exact {want}");
                    // candle's 0.5·x·(1 + tanh(u)) cancels where tanh(u) is near -1: compare on the output's scale
                    assert!((o - c).abs() <= 1e-6 * scale, "{act:?} simd={simd} value {k}: {o} vs candle {c}");
                }
            }
        }
    }
}
