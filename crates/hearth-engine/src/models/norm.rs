//! RMSNorm: the norm of the Llama-family models, fused with the residual add before it on the GPU path.

use crate::Result;
use candle_core::{DType, Tensor};

/// RMSNorm computed in f32: y = x / sqrt(mean(x²) + eps) * w.
#[derive(Clone)]
pub struct RmsNorm {
    pub(super) w: Tensor,
    /// `w` in the activation dtype, for the fused GPU path (candle's CUDA kernel reduces in f32 itself).
    pub(super) w_act: Option<Tensor>,
    pub(super) eps: f32,
}

impl RmsNorm {
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        if let Some(w) = self.w_act.as_ref().filter(|w| w.dtype() == dtype) {
            return Ok(candle_nn::ops::rms_norm(&x.contiguous()?, w, self.eps)?);
        }
        let y = candle_nn::ops::rms_norm(&x.to_dtype(DType::F32)?.contiguous()?, &self.w, self.eps)?;
        Ok(y.to_dtype(dtype)?)
    }

    /// The residual add and this norm: (h + a, norm(h + a)), one fused kernel on the GPU path.
    pub fn forward_add(&self, h: &Tensor, a: &Tensor) -> Result<(Tensor, Tensor)> {
        #[cfg(feature = "cuda")]
        if let Some(w) = self.w_act.as_ref().filter(|w| w.dtype() == h.dtype() && h.device().is_cuda()) {
            return crate::gpu::fused::add_rms_norm(h, a, w, self.eps);
        }
        let h = (h + a)?;
        let y = self.forward(&h)?;
        Ok((h, y))
    }

    /// [`RmsNorm::forward_add`] when there is an addend, else (h, norm(h)).
    pub fn forward_opt_add(&self, h: &Tensor, a: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
        match a {
            Some(a) => self.forward_add(h, a),
            None => Ok((h.clone(), self.forward(h)?)),
        }
    }
}
