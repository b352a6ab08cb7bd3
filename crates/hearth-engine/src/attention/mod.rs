//! Attention over a KV view. Models compute q/k/v for the packed tokens of a batch and hand them to a
//! [`KvStore`], which appends k/v for each row and attends each row's queries to that row's keys. The model owns
//! no cache; the store decides the layout: contiguous per sequence ([`ContiguousKv`], `hearth generate` and model
//! tests) or paged blocks ([`PagedAttention`], the engine), whose backend (in place on the CPU, CUDA kernels, or the
//! portable gather) is chosen once when it is built.

pub mod context;
pub mod contiguous_kv;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod paged;
pub mod portable;
#[cfg(test)]
pub(crate) mod test_util;

pub use context::{BatchContext, BatchMedia, FixedMeta, RowSpan};
pub use contiguous_kv::ContiguousKv;
pub use paged::{kv_dtype, kv_encoding, PagedAttention};

use crate::Result;
use candle_core::Tensor;

/// Prompts are cut into pieces at multiples of this many positions, and the portable attention runs each piece
/// in sub-blocks aligned the same way: a query's arithmetic then never depends on how many tokens its step
/// carried (batch invariance with any per-step token budget).
pub const PIECE_ALIGN: usize = 32;

/// Per-layer attention parameters.
#[derive(Debug, Clone, Default)]
pub struct AttnParams {
    pub scale: f64,
    /// `Some(w)`: a query at position p sees keys at positions > p - w.
    pub window: Option<usize>,
    pub softcap: Option<f64>,
    /// One learned logit per query head that joins the softmax's denominator and weighs no value (gpt-oss's
    /// attention sinks): a head's output is Σ exp(s_j)·v_j / (Σ exp(s_j) + exp(sink)).
    pub sinks: Option<std::sync::Arc<[f32]>>,
}

impl AttnParams {
    /// The normalized output of one query head from its running softmax: `acc` = Σ exp(s − m)·v, `l` = Σ exp(s − m),
    /// with head `head`'s sink (if any) joining the denominator. Every backend finishes a row with this arithmetic.
    pub fn finish(&self, head: usize, m: f32, l: f32, acc: &[f32], out: &mut [f32]) {
        let (scale, inv) = match self.sinks.as_deref() {
            Some(s) => {
                let top = m.max(s[head]);
                let alpha = (m - top).exp();
                (alpha, 1.0 / (l * alpha + (s[head] - top).exp()))
            }
            None => (1.0, 1.0 / l),
        };
        for (o, &a) in out.iter_mut().zip(acc) {
            *o = a * scale * inv;
        }
    }
}

/// Rotary tables gathered at a batch's positions: (T, D/2) f32 cos and sin.
pub struct RopeTables<'a> {
    pub cos: &'a Tensor,
    pub sin: &'a Tensor,
    pub interleaved: bool,
}

/// Head counts of a fused q|k|v projection.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    pub q: usize,
    pub kv: usize,
    pub dim: usize,
}

pub trait KvStore {
    /// The fused path: `qkv` (T, (H + 2 KvH) * D) from one projection; rotate q and k, store k/v and attend in as
    /// few kernels as the store has. `Ok(None)`: this store cannot, the caller splits q/k/v and calls `attend`.
    fn attend_qkv(
        &mut self,
        _layer: usize,
        _qkv: &Tensor,
        _rope: &RopeTables,
        _heads: Heads,
        _ctx: &BatchContext,
        _params: &AttnParams,
    ) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// The recurrent state of linear-attention layers beside the KV (`crate::recurrent`); None where this store
    /// keeps none.
    fn recurrent(&mut self) -> Option<&mut crate::recurrent::RecurrentStates> {
        None
    }

    /// Append this step's k/v for every row of `ctx` at `layer`, then attend.
    /// `q`: (T, H, D), `k`/`v`: (T, KvH, D), all packed in `ctx` row order. Returns (T, H*D).
    fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        ctx: &BatchContext,
        params: &AttnParams,
    ) -> Result<Tensor>;
}
