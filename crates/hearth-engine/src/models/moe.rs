//! A routed Mixture-of-Experts feed-forward (Qwen3-MoE's sparse block, as transformers' `Qwen3MoeSparseMoeBlock`
//! computes it): a linear router scores every expert for each token; the softmax of those scores (in f32) picks
//! the token's `top_k` experts, whose probabilities are renormalized to sum to 1 where the model says so; each
//! expert's gated MLP runs only on the tokens routed to it, and a token's output is the sum of its experts'
//! outputs times their probabilities, added in expert order.

use super::layers::{Linear, Loader, RmsNorm};
use super::mlp::Mlp;
use crate::weights::config::MoeConfig;
use crate::Result;
use candle_core::{DType, Tensor};

pub struct SparseMoe {
    /// hidden -> one score per expert.
    router: Linear,
    experts: Vec<Mlp>,
    top_k: usize,
    norm_topk_prob: bool,
}

impl SparseMoe {
    /// Layer `layer`'s block: `model.layers.L.mlp.gate` (the router) and its experts.
    pub fn load(l: &Loader, layer: usize, m: &MoeConfig) -> Result<Self> {
        let router = l.linear(&format!("model.layers.{layer}.mlp.gate"), false)?;
        let experts = (0..m.experts).map(|e| Mlp::load_expert(l, layer, e)).collect::<Result<Vec<_>>>()?;
        Ok(Self { router, experts, top_k: m.top_k, norm_topk_prob: m.norm_topk_prob })
    }

    /// The block over rmsnorm(h + a) (of rmsnorm(h) without `a`): (h + a, moe(..)).
    pub fn forward_add_norm(&self, h: &Tensor, a: Option<&Tensor>, norm: &RmsNorm) -> Result<(Tensor, Tensor)> {
        let (h, x) = norm.forward_opt_add(h, a)?;
        Ok((h, self.forward(&x)?))
    }

    /// x: (T, hidden) -> (T, hidden).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let scores = self.router.forward(x)?.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let t = scores.len();
        // Each expert's rows (in token order) and their weights.
        let mut buckets: Vec<(Vec<u32>, Vec<f32>)> = vec![(Vec::new(), Vec::new()); self.experts.len()];
        for (row, s) in scores.iter().enumerate() {
            for (e, w) in self.route(s) {
                buckets[e].0.push(row as u32);
                buckets[e].1.push(w);
            }
        }
        // The sum so far, in expert order (None: no expert has run yet).
        let mut out: Option<Tensor> = None;
        for (expert, (rows, weights)) in self.experts.iter().zip(buckets) {
            let n = rows.len();
            if n == 0 {
                continue;
            }
            let weights = Tensor::from_vec(weights, (n, 1), x.device())?.to_dtype(x.dtype())?;
            if n == t {
                // every row (one-token decode): no gather, no scatter
                let y = expert.forward(x)?.broadcast_mul(&weights)?;
                out = Some(match out {
                    Some(o) => (o + y)?,
                    None => y,
                });
                continue;
            }
            let rows = Tensor::from_vec(rows, n, x.device())?;
            let y = expert.forward(&x.index_select(&rows, 0)?)?.broadcast_mul(&weights)?;
            let base = match out {
                Some(o) => o,
                None => x.zeros_like()?,
            };
            out = Some(base.index_add(&rows, &y, 0)?);
        }
        match out {
            Some(o) => Ok(o),
            None => Ok(x.zeros_like()?),
        }
    }

    /// One token's experts from its router scores: the softmax's `top_k` largest (ties to the lower index), their
    /// probabilities renormalized where the model asks.
    fn route(&self, scores: &[f32]) -> Vec<(usize, f32)> {
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exp: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f32 = exp.iter().sum();
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&i, &j| exp[j].total_cmp(&exp[i]).then(i.cmp(&j)));
        let mut top: Vec<(usize, f32)> = order.into_iter().take(self.top_k).map(|e| (e, exp[e] / sum)).collect();
        if self.norm_topk_prob {
            let total: f32 = top.iter().map(|(_, p)| p).sum();
            top.iter_mut().for_each(|(_, p)| *p /= total);
        }
        top
    }
}

/// A layer's feed-forward: the dense gated MLP, or the routed experts.
pub enum FeedForward {
    Dense(Mlp),
    Moe(SparseMoe),
}

impl FeedForward {
    /// Layer `layer`'s feed-forward under `prefix` (`model.layers.L.mlp`): routed where the model's MoE config
    /// says this layer is sparse.
    pub fn load(l: &Loader, prefix: &str, layer: usize) -> Result<Self> {
        match &l.cfg.moe {
            Some(m) if m.sparse_layers.get(layer).copied().unwrap_or(false) => {
                Ok(Self::Moe(SparseMoe::load(l, layer, m)?))
            }
            _ => Ok(Self::Dense(Mlp::load(l, prefix)?)),
        }
    }

    /// (h + a, ffn(rmsnorm(h + a))).
    pub fn forward_add_norm(&self, h: &Tensor, a: Option<&Tensor>, norm: &RmsNorm) -> Result<(Tensor, Tensor)> {
        match self {
            Self::Dense(m) => m.forward_add_norm(h, a, norm),
            Self::Moe(m) => m.forward_add_norm(h, a, norm),
        }
    }
}
