//! The gated MLP: down(act(gate(x)) * up(x)), with the GPU's fused gate|up projection and activation kernels.

use super::layers::{Linear, Loader, RmsNorm};
use crate::weights::config::Activation;
use crate::Result;
use candle_core::Tensor;

/// Gated MLP: down(act(gate(x)) * up(x)). On the fused GPU path gate and up are one matmul and the activation
/// times up one kernel.
#[derive(Clone)]
pub struct Mlp {
    gate_up: GateUp,
    down: Linear,
    act: Activation,
}

#[derive(Clone)]
enum GateUp {
    Split { gate: Linear, up: Linear },
    Fused(Linear),
}

impl Mlp {
    pub fn load(l: &Loader, prefix: &str) -> Result<Self> {
        let fused = l.fused_linear(&[format!("{prefix}.gate_proj"), format!("{prefix}.up_proj")], false)?;
        Self::assemble(fused, |p| l.linear(&format!("{prefix}.{p}"), false), l.cfg.activation)
    }

    /// Expert `expert` of layer `layer`'s routed feed-forward: its gate and up matrices fused where the dense
    /// MLP's would be ([`Loader::fused_expert_gate_up`]).
    pub fn load_expert(l: &Loader, layer: usize, expert: usize) -> Result<Self> {
        let fused = l.fused_expert_gate_up(layer, expert)?;
        Self::assemble(fused, |p| l.expert_linear(layer, expert, p), l.cfg.activation)
    }

    /// The MLP from its fused gate|up layer (else `linear("gate_proj")` and `linear("up_proj")`) and
    /// `linear("down_proj")`.
    fn assemble(fused: Option<Linear>, linear: impl Fn(&str) -> Result<Linear>, act: Activation) -> Result<Self> {
        let gate_up = match fused {
            Some(f) => GateUp::Fused(f),
            None => GateUp::Split { gate: linear("gate_proj")?, up: linear("up_proj")? },
        };
        Ok(Self { gate_up, down: linear("down_proj")?, act })
    }

    /// Whether every matmul of it runs on hearth's CPU kernels ([`Linear::on_work_pool`]).
    pub fn on_work_pool(&self) -> bool {
        let gate_up = match &self.gate_up {
            GateUp::Split { gate, up } => gate.on_work_pool() && up.on_work_pool(),
            GateUp::Fused(f) => f.on_work_pool(),
        };
        gate_up && self.down.on_work_pool()
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = match &self.gate_up {
            GateUp::Split { gate, up } => gated(&gate.forward(x)?, &up.forward(x)?, self.act)?,
            GateUp::Fused(f) => return self.down_act(&f.forward(x)?),
        };
        self.down.forward(&h)
    }

    /// The MLP of rmsnorm(h + a) (of rmsnorm(h) without `a`): (h + a, mlp(..)), the add and the norm fused into the
    /// gate|up projection where the GPU can (`Linear::forward_add_norm`).
    pub fn forward_add_norm(&self, h: &Tensor, a: Option<&Tensor>, norm: &RmsNorm) -> Result<(Tensor, Tensor)> {
        match &self.gate_up {
            GateUp::Fused(f) => {
                #[cfg(feature = "cuda")]
                if let Some(act) = gpu_act(self.act) {
                    if let Some((h, x)) = f.forward_add_norm_gated(h, a, norm, act)? {
                        return Ok((h, self.down.forward(&x)?));
                    }
                }
                let (h, gu) = f.forward_add_norm(h, a, norm)?;
                Ok((h, self.down_act(&gu)?))
            }
            GateUp::Split { .. } => {
                let (h, x) = norm.forward_opt_add(h, a)?;
                Ok((h, self.forward(&x)?))
            }
        }
    }

    /// down(act(gu[.., :I]) * gu[.., I:]) of a fused gate|up output (the activation in its own fused kernel: the
    /// down projection computing it while loading its input lost, "levers tried and rejected" in docs/benchmarks.md).
    fn down_act(&self, gu: &Tensor) -> Result<Tensor> {
        self.down.forward(&fused_act_mul(gu, self.act)?)
    }
}

/// The GPU kernels' name for a gated activation (None: they have none; candle's ops compute it).
#[cfg(feature = "cuda")]
fn gpu_act(act: Activation) -> Option<crate::gpu::fused::Act> {
    use crate::gpu::fused::Act;
    match act {
        Activation::Silu => Some(Act::Silu),
        Activation::GeluTanh => Some(Act::GeluTanh),
        Activation::SwigluOai { .. } => None,
    }
}

#[cfg(feature = "cuda")]
fn fused_act_mul(gu: &Tensor, act: Activation) -> Result<Tensor> {
    match gpu_act(act) {
        Some(a) if !gu.device().is_cpu() => crate::gpu::fused::act_mul(gu, a),
        _ => cpu_act_mul(gu, act),
    }
}

#[cfg(not(feature = "cuda"))]
fn fused_act_mul(gu: &Tensor, act: Activation) -> Result<Tensor> {
    cpu_act_mul(gu, act)
}

/// act(gu[.., :I]) * gu[.., I:] on the CPU (the fused quantized gate|up of the CPU path): hearth's kernel, or
/// candle's ops where it does not apply.
fn cpu_act_mul(gu: &Tensor, act: Activation) -> Result<Tensor> {
    if let Some(y) = crate::cpu_activation::act_mul(gu, act)? {
        return Ok(y);
    }
    let last = gu.rank() - 1;
    let i = gu.dim(last)? / 2;
    gated(&gu.narrow(last, 0, i)?, &gu.narrow(last, i, i)?, act)
}

/// `act(g) * u` with candle's ops (any device, any dtype).
pub fn gated(g: &Tensor, u: &Tensor, act: Activation) -> Result<Tensor> {
    Ok(match act {
        Activation::Silu => (candle_nn::ops::silu(g)? * u)?,
        Activation::GeluTanh => (g.gelu()? * u)?,
        Activation::SwigluOai { alpha, limit } => {
            let (alpha, limit) = (alpha as f64, limit as f64);
            let g = g.minimum(limit)?;
            let glu = (&g * candle_nn::ops::sigmoid(&(&g * alpha)?)?)?;
            (glu * (u.clamp(-limit, limit)? + 1.0)?)?
        }
    })
}
