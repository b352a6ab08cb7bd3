//! A routed Mixture-of-Experts feed-forward (Qwen3-MoE's sparse block, as transformers' `Qwen3MoeSparseMoeBlock`
//! computes it): a linear router scores every expert for each token; the softmax of those scores (in f32) picks
//! the token's `top_k` experts, whose probabilities are renormalized to sum to 1 where the model says so; each
//! expert's gated MLP runs only on the tokens routed to it, and a token's output is the sum of its experts'
//! outputs times their probabilities, added in expert order.

use super::layers::{Linear, Loader, RmsNorm};
use super::mlp::Mlp;
use crate::weights::config::{MoeConfig, Routing};
use crate::Result;
use candle_core::{DType, Tensor};

pub struct SparseMoe {
    /// hidden -> one score per expert.
    router: Linear,
    experts: Vec<Mlp>,
    top_k: usize,
    norm_topk_prob: bool,
    routing: Routing,
    /// Qwen3.5-MoE: an MLP on every token, weighed by sigmoid(gate(x)) (hidden -> 1).
    shared: Option<Box<(Mlp, Linear)>>,
}

impl SparseMoe {
    /// Layer `layer`'s block: its router (`model.layers.L.mlp.gate`, or gpt-oss's `mlp.router`, with a bias where
    /// the model's experts have them) and its experts.
    pub fn load(l: &Loader, layer: usize, m: &MoeConfig) -> Result<Self> {
        let gpt_oss_router = format!("model.layers.{layer}.mlp.router");
        let router = match l.weights.contains(&format!("{gpt_oss_router}.weight")) {
            true => l.linear(&gpt_oss_router, m.biases)?,
            false => l.linear(&format!("model.layers.{layer}.mlp.gate"), m.biases)?,
        };
        let scores = router.out_features();
        if scores != Some(m.experts) {
            return Err(crate::Error::InvalidModel(format!(
                "layer {layer}'s router scores {scores:?} experts; the model has {}",
                m.experts
            )));
        }
        let experts = (0..m.experts).map(|e| Mlp::load_expert(l, layer, e)).collect::<Result<Vec<_>>>()?;
        let shared = match m.shared_expert {
            Some(_) => {
                let p = format!("model.layers.{layer}.mlp");
                let gate = l.linear(&format!("{p}.shared_expert_gate"), false)?;
                Some(Box::new((Mlp::load(l, &format!("{p}.shared_expert"))?, gate)))
            }
            None => None,
        };
        Ok(Self { router, experts, top_k: m.top_k, norm_topk_prob: m.norm_topk_prob, routing: m.routing, shared })
    }

    /// The block over rmsnorm(h + a) (of rmsnorm(h) without `a`): (h + a, moe(..)).
    pub fn forward_add_norm(&self, h: &Tensor, a: Option<&Tensor>, norm: &RmsNorm) -> Result<(Tensor, Tensor)> {
        let (h, x) = norm.forward_opt_add(h, a)?;
        Ok((h, self.forward(&x)?))
    }

    /// x: (T, hidden) -> (T, hidden): the routed experts' sum, plus the gated shared expert where the model has one.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let routed = self.routed(x)?;
        let Some((mlp, gate)) = self.shared.as_deref() else { return Ok(routed) };
        let g = candle_nn::ops::sigmoid(&gate.forward(x)?.to_dtype(DType::F32)?)?.to_dtype(x.dtype())?;
        Ok((routed + mlp.forward(x)?.broadcast_mul(&g)?)?)
    }

    /// The routed experts' weighted sum.
    fn routed(&self, x: &Tensor) -> Result<Tensor> {
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
        let active: Vec<Routed> = buckets
            .into_iter()
            .enumerate()
            .filter(|(_, (rows, _))| !rows.is_empty())
            .map(|(expert, (rows, weights))| Routed { expert, rows, weights })
            .collect();
        let ys = if self.grouped(x, &active) {
            self.experts_grouped(x, &active)?
        } else {
            active.iter().map(|r| self.expert_out(x, r)).collect::<Result<Vec<_>>>()?
        };
        // The sum, in expert order (None: no expert has run yet).
        let mut out: Option<Tensor> = None;
        for (r, y) in active.iter().zip(ys) {
            out = Some(if r.rows.len() == t {
                // every row (one-token decode): no scatter
                match out {
                    Some(o) => (o + y)?,
                    None => y,
                }
            } else {
                let rows = Tensor::from_slice(&r.rows, r.rows.len(), x.device())?;
                let base = match out {
                    Some(o) => o,
                    None => x.zeros_like()?,
                };
                base.index_add(&rows, &y, 0)?
            });
        }
        match out {
            Some(o) => Ok(o),
            None => Ok(x.zeros_like()?),
        }
    }

    /// One expert's output on its rows of `x`, times their routing weights: (rows, hidden).
    fn expert_out(&self, x: &Tensor, r: &Routed) -> Result<Tensor> {
        let n = r.rows.len();
        let input =
            if n == x.dim(0)? { x.clone() } else { x.index_select(&Tensor::from_slice(&r.rows, n, x.device())?, 0)? };
        let y = self.experts[r.expert].forward(&input)?;
        if n == 1 {
            // one row (a decode step): a scalar, no weights tensor
            return Ok(y.affine(r.weights[0] as f64, 0.0)?);
        }
        let weights = Tensor::from_slice(&r.weights, (n, 1), x.device())?.to_dtype(x.dtype())?;
        Ok(y.broadcast_mul(&weights)?)
    }

    /// Whether this step's experts run one per thread ([`SparseMoe::experts_grouped`]): on the CPU with
    /// `HEARTH_MOE_GROUPED` on, every active expert on hearth's kernels, at least as many active experts as the
    /// work pool has threads, and few rows each (decode steps), where one hand-out per expert matmul costs more
    /// than the matmul.
    fn grouped(&self, x: &Tensor, active: &[Routed]) -> bool {
        let threads = crate::work_pool::current_threads();
        x.device().is_cpu()
            && crate::levers::get().moe_grouped
            && threads > 1
            && active.len() >= threads
            && active.iter().all(|r| r.rows.len() <= GROUPED_MAX_ROWS && self.experts[r.expert].on_work_pool())
    }

    /// Every active expert's output, the experts handed out to the work pool one per unit, each computed on its
    /// thread alone: the same kernels on the same rows as one at a time, so the same bits.
    fn experts_grouped(&self, x: &Tensor, active: &[Routed]) -> Result<Vec<Tensor>> {
        let slots: Vec<std::sync::OnceLock<Result<Tensor>>> = active.iter().map(|_| Default::default()).collect();
        crate::work_pool::par_chunks(active.len(), 1, |units| {
            for i in units {
                let _ = slots[i].set(crate::work_pool::serial(|| self.expert_out(x, &active[i])));
            }
        });
        // (every unit runs unless a thread panicked, which the pool passes on; computed here all the same)
        slots.into_iter().zip(active).map(|(s, r)| s.into_inner().unwrap_or_else(|| self.expert_out(x, r))).collect()
    }

    /// One token's experts from its router scores and their weights, as the model's [`Routing`] says (ties to the
    /// lower index).
    fn route(&self, scores: &[f32]) -> Vec<(usize, f32)> {
        if self.routing == Routing::TopKSoftmax {
            let mut order: Vec<usize> = (0..scores.len()).collect();
            order.sort_by(|&i, &j| scores[j].total_cmp(&scores[i]).then(i.cmp(&j)));
            order.truncate(self.top_k);
            let max = order.first().map_or(0.0, |&e| scores[e]);
            let exp: Vec<f32> = order.iter().map(|&e| (scores[e] - max).exp()).collect();
            let sum: f32 = exp.iter().sum();
            return order.into_iter().zip(exp).map(|(e, x)| (e, x / sum)).collect();
        }
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

/// Rows per expert up to which a step's experts may run one per thread (decode steps of up to a few streams).
const GROUPED_MAX_ROWS: usize = 8;

/// One expert's share of a step: its rows (in token order) and their routing weights.
struct Routed {
    expert: usize,
    rows: Vec<u32>,
    weights: Vec<f32>,
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

    /// ffn(x).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::Dense(m) => m.forward(x),
            Self::Moe(m) => m.forward(x),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::{config::ModelConfig, gguf::GgufFile, Weights};
    use candle_core::Device;

    /// The experts of a decode step run one per thread give the bits they give one at a time (the tiny Qwen3-MoE
    /// GGUF written by llama.cpp's converter: 8 Q8_0 experts, 2 per token).
    #[test]
    fn grouped_experts_equal_one_at_a_time() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-qwen3moe-q8_0.gguf");
        let weights = Weights::Gguf(GgufFile::open(&path).unwrap());
        let Weights::Gguf(g) = &weights else { unreachable!() };
        let cfg = ModelConfig::from_gguf(g).unwrap();
        let l = Loader::new(&weights, &cfg, &Device::Cpu, DType::F32, false);
        let moe = SparseMoe::load(&l, 0, cfg.moe.as_ref().unwrap()).unwrap();
        assert!(moe.experts.iter().all(Mlp::on_work_pool), "the fixture's experts run on hearth's kernels");
        for t in [1usize, 3] {
            let x = Tensor::randn(0f32, 1.0, (t, cfg.hidden_size), &Device::Cpu).unwrap();
            let routed: Vec<Routed> = (0..moe.experts.len())
                .map(|e| Routed { expert: e, rows: (0..t as u32).collect(), weights: vec![0.5; t] })
                .collect();
            let grouped = moe.experts_grouped(&x, &routed).unwrap();
            for (r, y) in routed.iter().zip(grouped) {
                let alone = moe.expert_out(&x, r).unwrap();
                assert_eq!(y.to_vec2::<f32>().unwrap(), alone.to_vec2::<f32>().unwrap(), "expert {}", r.expert);
            }
        }
    }
}
