//! The gated DeltaNet linear-attention layer (Qwen3.5's `linear_attn`): q|k|v, z, a and b projections, the
//! causal convolution and the gated delta rule over each sequence's recurrent state (`crate::recurrent`, run on
//! the host in f32), then an RMSNorm of each value head gated by SiLU(z), and the output projection.

use super::layers::{Linear, Loader};
use crate::attention::{BatchContext, KvStore};
use crate::recurrent::delta::{DeltaWeights, RowInputs};
use crate::weights::config::LinearAttnConfig;
use crate::{Error, Result};
use candle_core::{DType, Tensor};

pub struct GatedDeltaNet {
    in_proj_qkv: Linear,
    in_proj_z: Linear,
    in_proj_b: Linear,
    in_proj_a: Linear,
    out_proj: Linear,
    cfg: LinearAttnConfig,
    /// conv_dim × kernel.
    conv: Vec<f32>,
    /// exp(A_log) per value head.
    decay_rate: Vec<f32>,
    dt_bias: Vec<f32>,
    /// The gated norm's weight (value_dim; multiplied as stored, not 1 + w).
    norm: Vec<f32>,
    eps: f32,
    /// This layer's index among the linear-attention layers.
    ordinal: usize,
}

impl GatedDeltaNet {
    pub fn load(l: &Loader, p: &str, cfg: &LinearAttnConfig, ordinal: usize) -> Result<Self> {
        let a_log = l.vector_f32(&format!("{p}.A_log"), cfg.v_heads)?;
        let proj = |n: &str| l.linear(&format!("{p}.in_proj_{n}"), false);
        let has = |n: &str| l.weights.contains(&format!("{p}.in_proj_{n}.weight"));
        let [in_proj_qkv, in_proj_z, in_proj_b, in_proj_a] = match (has("qkvz"), has("ba")) {
            (true, _) => regrouped(l, p, cfg)?,
            // llama.cpp's Qwen3-Next: q|k|v and z apart, b and a still fused per key head
            (false, true) => {
                let [b, a] = split_ba(l, p, cfg)?;
                [proj("qkv")?, proj("z")?, b, a]
            }
            (false, false) => [proj("qkv")?, proj("z")?, proj("b")?, proj("a")?],
        };
        // the host code slices the projections' outputs by these widths: a file that disagrees is refused here
        for (what, l, want) in [
            ("in_proj_qkv", &in_proj_qkv, cfg.conv_dim()),
            ("in_proj_z", &in_proj_z, cfg.v_heads * cfg.value_dim),
            ("in_proj_b", &in_proj_b, cfg.v_heads),
            ("in_proj_a", &in_proj_a, cfg.v_heads),
        ] {
            if let Some(got) = l.out_features().filter(|&n| n != want) {
                return Err(Error::InvalidModel(format!("{p}.{what} has {got} outputs; the config implies {want}")));
            }
        }
        Ok(Self {
            in_proj_qkv,
            in_proj_z,
            in_proj_b,
            in_proj_a,
            out_proj: l.linear(&format!("{p}.out_proj"), false)?,
            conv: l.vector_f32(&format!("{p}.conv1d.weight"), cfg.conv_dim() * cfg.conv_kernel)?,
            // a GGUF keeps -exp(A_log) (llama.cpp's ssm_a)
            decay_rate: match l.weights {
                crate::weights::Weights::Gguf(_) => a_log.iter().map(|a| -a).collect(),
                _ => a_log.iter().map(|a| a.exp()).collect(),
            },
            dt_bias: l.vector_f32(&format!("{p}.dt_bias"), cfg.v_heads)?,
            norm: l.vector_f32(&format!("{p}.norm.weight"), cfg.value_dim)?,
            eps: l.cfg.rms_norm_eps as f32,
            cfg: cfg.clone(),
            ordinal,
        })
    }

    /// x: (T, hidden), the normed input of every packed token. Returns (T, hidden).
    pub fn forward(&self, x: &Tensor, ctx: &BatchContext, kv: &mut dyn KvStore) -> Result<Tensor> {
        let c = &self.cfg;
        let (hv, dv, cd) = (c.v_heads, c.value_dim, c.conv_dim());
        let host = |t: Tensor| -> Result<Vec<f32>> { Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?) };
        let mixed = host(self.in_proj_qkv.forward(x)?)?;
        let z = host(self.in_proj_z.forward(x)?)?;
        let b = host(self.in_proj_b.forward(x)?)?;
        let a = host(self.in_proj_a.forward(x)?)?;
        let n = x.dim(0)?;
        let mut out = vec![0.0f32; n * hv * dv];
        let states = kv.recurrent().ok_or_else(|| {
            Error::Unsupported("this KV store keeps no recurrent state (a linear-attention model)".into())
        })?;
        let w = DeltaWeights { conv: &self.conv, decay_rate: &self.decay_rate, dt_bias: &self.dt_bias };
        for r in &ctx.rows {
            let (s, e) = (r.start, r.start + r.len);
            let inputs = RowInputs { mixed: &mixed[s * cd..e * cd], a: &a[s * hv..e * hv], b: &b[s * hv..e * hv] };
            let o = &mut out[s * hv * dv..e * hv * dv];
            // a decoding row with drafted tokens to verify keeps what taking them back needs
            let speculative = !r.prompt && r.logits > 1;
            states.run_row(self.ordinal, c, &w, r.slot, r.pos0, &inputs, o, speculative)?;
        }
        // RMSNorm of each value head, times SiLU(z) (transformers' Qwen3_5RMSNormGated, in f32)
        for (o, zh) in out.chunks_exact_mut(dv).zip(z.chunks_exact(dv)) {
            let inv = 1.0 / (o.iter().map(|v| v * v).sum::<f32>() / dv as f32 + self.eps).sqrt();
            for ((v, &wt), &g) in o.iter_mut().zip(&self.norm).zip(zh) {
                *v = *v * inv * wt * (g / (1.0 + (-g).exp()));
            }
        }
        let y = Tensor::from_vec(out, (n, hv * dv), x.device())?.to_dtype(x.dtype())?;
        self.out_proj.forward(&y)
    }
}

/// Qwen3-Next's fused projections as Qwen3.5's four: `in_proj_qkvz` holds, per key head, [q (key_dim), k (key_dim),
/// v (rep × value_dim), z (rep × value_dim)] with rep value heads per key head, and `in_proj_ba` per key head
/// [b (rep), a (rep)]; their rows are gathered into q|k|v, z, b and a.
fn regrouped(l: &Loader, p: &str, c: &LinearAttnConfig) -> Result<[Linear; 4]> {
    let (hk, dk, dv) = (c.k_heads, c.key_dim, c.value_dim);
    let rep = c.v_heads / hk;
    let group = 2 * dk + 2 * rep * dv;
    let span = |g: usize, from: usize, n: usize| (g * group + from..g * group + from + n).map(|r| r as u32);
    let (mut qkv, mut z) = (Vec::new(), Vec::new());
    for part in [(0, dk), (dk, dk), (2 * dk, rep * dv)] {
        qkv.extend((0..hk).flat_map(|g| span(g, part.0, part.1)));
    }
    z.extend((0..hk).flat_map(|g| span(g, 2 * dk + rep * dv, rep * dv)));
    let qkvz = format!("{p}.in_proj_qkvz");
    let [b, a] = split_ba(l, p, c)?;
    Ok([linear_rows(l, &qkvz, &qkv)?, linear_rows(l, &qkvz, &z)?, b, a])
}

/// Qwen3-Next's fused `in_proj_ba` (per key head [b (rep), a (rep)]) as b and a.
fn split_ba(l: &Loader, p: &str, c: &LinearAttnConfig) -> Result<[Linear; 2]> {
    let (hk, rep) = (c.k_heads, c.v_heads / c.k_heads);
    let rows = |first: usize| -> Vec<u32> {
        (0..hk).flat_map(|g| (g * 2 * rep + first..g * 2 * rep + first + rep).map(|r| r as u32)).collect()
    };
    let fused = format!("{p}.in_proj_ba");
    Ok([linear_rows(l, &fused, &rows(0))?, linear_rows(l, &fused, &rows(rep))?])
}

/// A linear layer over the rows `rows` (in that order) of `prefix`'s weight, dense in the activation dtype.
fn linear_rows(l: &Loader, prefix: &str, rows: &[u32]) -> Result<Linear> {
    let w = l.weights.vector(&format!("{prefix}.weight"), l.dtype, l.device)?;
    let idx = Tensor::from_slice(rows, rows.len(), l.device)?;
    Ok(l.new_linear(candle_core::quantized::QMatMul::Tensor(w.index_select(&idx, 0)?), None))
}
