//! The per-step description of a packed batch: which slice of the packed tokens belongs to which sequence and at
//! which positions.

use crate::{Error, Result};
use candle_core::{Device, Tensor};

/// One row (sequence) in a packed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSpan {
    /// The KV slot (sequence) this row reads and appends to.
    pub slot: usize,
    /// Offset of the row's first new token in the packed batch.
    pub start: usize,
    /// Number of new tokens of this row in the batch.
    pub len: usize,
    /// Position of the row's first new token (= tokens already in its KV).
    pub pos0: usize,
}

#[derive(Debug, Clone)]
pub struct BatchContext {
    pub rows: Vec<RowSpan>,
    /// Position of every packed token, (T,) u32.
    pub positions: Tensor,
    /// Return logits for every token (true) or only for each row's last token (false).
    pub all_logits: bool,
}

impl BatchContext {
    /// Build from (slot, pos0, len) per row, packed in that order.
    pub fn new(rows: &[(usize, usize, usize)], all_logits: bool, device: &Device) -> Result<Self> {
        let mut spans = Vec::with_capacity(rows.len());
        let mut positions = Vec::new();
        let mut start = 0;
        for &(slot, pos0, len) in rows {
            if len == 0 {
                return Err(Error::InvalidRequest("a batch row must carry at least one token".into()));
            }
            if spans.iter().any(|s: &RowSpan| s.slot == slot) {
                return Err(Error::InvalidRequest(format!("slot {slot} appears twice in one batch")));
            }
            spans.push(RowSpan { slot, start, len, pos0 });
            positions.extend((pos0..pos0 + len).map(|p| p as u32));
            start += len;
        }
        let n = positions.len();
        Ok(Self { rows: spans, positions: Tensor::from_vec(positions, n, device)?, all_logits })
    }

    /// Total packed tokens.
    pub fn num_tokens(&self) -> usize {
        self.rows.last().map(|r| r.start + r.len).unwrap_or(0)
    }

    /// Indices of the tokens whose logits the model returns.
    pub fn logit_indices(&self) -> Vec<u32> {
        if self.all_logits {
            (0..self.num_tokens() as u32).collect()
        } else {
            self.rows.iter().map(|r| (r.start + r.len - 1) as u32).collect()
        }
    }
}
