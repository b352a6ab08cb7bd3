//! A linear layer: its weight dense or quantized, on hearth's CPU kernels, hearth's skinny GPU kernels for decode
//! rows (dense `gpu::gemv`, quantized `gpu::qgemv`) or candle's matmuls.

use super::norm::RmsNorm;
use crate::cpu_matmul::FastQMatMul;
use crate::Result;
use candle_core::quantized::QMatMul;
use candle_core::{Module, Tensor};

#[derive(Clone)]
pub struct Linear {
    /// None where `fast` holds the weight's only copy (repacked at load).
    w: Option<QMatMul>,
    /// Set for CPU weights whose type `crate::cpu_matmul` accelerates; it falls back to `w`'s candle path itself.
    fast: Option<FastQMatMul>,
    pub(super) b: Option<Tensor>,
}

impl Linear {
    /// A linear layer over `w` (a model's loader notes `w` in its kernel pool: [`Loader::kernel_pool`]).
    pub fn new(w: QMatMul, b: Option<Tensor>) -> Self {
        let fast = FastQMatMul::new(&w);
        let w = (!fast.as_ref().is_some_and(FastQMatMul::owns_weights)).then_some(w);
        Self { w, fast, b }
    }

    /// Its output width (the weight's rows).
    pub fn out_features(&self) -> Option<usize> {
        match (&self.fast, &self.w) {
            (Some(f), _) => Some(f.rows()),
            (None, Some(QMatMul::QTensor(q))) => q.shape().dims2().ok().map(|d| d.0),
            (None, Some(QMatMul::Tensor(t) | QMatMul::TensorF16(t))) => t.dims2().ok().map(|d| d.0),
            (None, None) => None,
        }
    }

    /// Whether this layer multiplies on hearth's CPU kernels (which split their work with
    /// `crate::work_pool::par_chunks`, and so run on one thread inside `work_pool::serial`).
    pub fn on_work_pool(&self) -> bool {
        self.fast.is_some()
    }

    /// x: (T, in) -> (T, out)
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match &self.fast {
            Some(f) => f.forward(x)?,
            None => self.dense_forward(x)?,
        };
        self.add_bias(y)
    }
}

impl Linear {
    /// hearth's skinny GPU kernels for decode rows (`gpu::gemv` for a dense matrix and one row, `gpu::qgemv` for a
    /// quantized one and up to 8 rows), else candle's matmul.
    fn dense_forward(&self, x: &Tensor) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        match &self.w {
            Some(QMatMul::Tensor(w)) => {
                if let Some(y) = crate::gpu::gemv::matmul_if_on(x, w)? {
                    return Ok(y);
                }
            }
            Some(QMatMul::QTensor(w)) if crate::gpu::qgemv::on() => {
                if let Some(y) = crate::gpu::qgemv::matmul(x, w)? {
                    return Ok(y);
                }
            }
            _ => {}
        }
        match &self.w {
            Some(w) => Ok(w.forward(x)?),
            None => Err(crate::Error::Unsupported("a repacked weight has no dense path".into())),
        }
    }

    /// This layer applied to rmsnorm(h + a) (to rmsnorm(h) without `a`): (h + a, y). On the GPU one kernel does
    /// the add, the norm and the matmul for a one-row input and a dense matrix (`gpu::gemv::matmul_add_norm`), and
    /// for up to 8 rows and a quantized one (`gpu::qgemv::matmul_add_norm`); anything else runs the norm (with its
    /// fused add where there is one), then this layer.
    pub fn forward_add_norm(&self, h: &Tensor, a: Option<&Tensor>, norm: &RmsNorm) -> Result<(Tensor, Tensor)> {
        #[cfg(feature = "cuda")]
        if let Some(wn) = norm.w_act.as_ref() {
            let fused = match &self.w {
                Some(QMatMul::Tensor(w)) => crate::gpu::gemv::matmul_add_norm(h, a, wn, norm.eps, w)?,
                Some(QMatMul::QTensor(w)) if crate::gpu::qgemv::on() => {
                    crate::gpu::qgemv::matmul_add_norm(h, a, wn, norm.eps, w, None)?
                }
                _ => None,
            };
            if let Some((h, y)) = fused {
                return Ok((h, self.add_bias(y)?));
            }
        }
        let (h, x) = norm.forward_opt_add(h, a)?;
        Ok((h, self.forward(&x)?))
    }

    /// [`Linear::forward_add_norm`] for a fused gate|up matrix with the gated activation in the same GPU kernel:
    /// (h + a, act(gate) * up). None where that kernel does not apply (not a decode input on the GPU, a bias,
    /// `HEARTH_GPU_GEMV_GATED=0`): the caller runs the separate kernels.
    #[cfg(feature = "cuda")]
    pub fn forward_add_norm_gated(
        &self,
        h: &Tensor,
        a: Option<&Tensor>,
        norm: &RmsNorm,
        act: crate::gpu::fused::Act,
    ) -> Result<Option<(Tensor, Tensor)>> {
        match (&self.w, &self.b, norm.w_act.as_ref()) {
            (Some(QMatMul::Tensor(w)), None, Some(wn)) => {
                crate::gpu::gemv::matmul_add_norm_gated(h, a, wn, norm.eps, w, act)
            }
            (Some(QMatMul::QTensor(w)), None, Some(wn))
                if crate::gpu::qgemv::on() && crate::levers::get().gpu_gemv_gated =>
            {
                crate::gpu::qgemv::matmul_add_norm(h, a, wn, norm.eps, w, Some(act))
            }
            _ => Ok(None),
        }
    }

    fn add_bias(&self, y: Tensor) -> Result<Tensor> {
        Ok(match &self.b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}
