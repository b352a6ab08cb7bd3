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
    /// The row computes prompt tokens (not one decoded token): a batch-invariant backend attends a piece that
    /// starts off the [`super::PIECE_ALIGN`] grid (after a prompt-cache hit) as if it started on the grid.
    pub prompt: bool,
    /// Its last tokens whose logits the model returns (1; more for a speculating row's drafted positions).
    pub logits: usize,
}

#[derive(Debug, Clone)]
pub struct BatchContext {
    pub rows: Vec<RowSpan>,
    /// Position of every packed token, (T,) u32.
    pub positions: Tensor,
    /// Return logits for every token (true) or only for each row's last token (false).
    pub all_logits: bool,
    /// Images in the batch (multimodal models): their embeddings and 3D rope positions.
    pub media: Option<BatchMedia>,
    /// The step's attention metadata already on the device in fixed buffers (a decode step a CUDA graph replays:
    /// `gpu::graphs`); None: the KV store's backend builds and uploads its own.
    pub fixed: Option<FixedMeta>,
}

/// A decode step's attention metadata in fixed device buffers, which the CUDA paged backend reads instead of
/// uploading its own: every replay of a captured step reads the same addresses, refilled before it.
#[derive(Debug, Clone)]
pub struct FixedMeta {
    /// Cache row of every packed token, (T,) u32.
    pub slots: Tensor,
    /// Batch row of every packed token, (T,) u32.
    pub tok_row: Tensor,
    /// Block tables, (R, max_blocks) u32.
    pub tables: Tensor,
    pub max_blocks: usize,
    /// The most keys a token of any step this metadata serves sees (the launch shapes depend on it).
    pub max_keys: usize,
}

/// What a multimodal batch adds to its tokens.
#[derive(Debug, Clone, Default)]
pub struct BatchMedia {
    /// M-RoPE positions of every packed token, (3, T) u32: (temporal, height, width); a text token's three are
    /// equal. Rope reads these instead of `positions`; the KV cache still indexes by `positions`.
    pub rope_positions: Option<Tensor>,
    /// Embeddings that replace the token embeddings of placeholder tokens: (first packed index, (n, hidden)).
    pub embeds: Vec<(usize, Tensor)>,
    /// Runs of positions whose tokens attend each other both ways (Gemma 3's images): (slot, first position, end
    /// position). A run is computed whole in one step.
    pub both_ways: Vec<(usize, usize, usize)>,
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
            spans.push(RowSpan { slot, start, len, pos0, prompt: false, logits: 1 });
            positions.extend((pos0..pos0 + len).map(|p| p as u32));
            start += len;
        }
        let n = positions.len();
        Ok(Self {
            rows: spans,
            positions: Tensor::from_vec(positions, n, device)?,
            all_logits,
            media: None,
            fixed: None,
        })
    }

    /// Mark which rows compute prompt tokens (in packing order); rows are decode rows until marked.
    pub fn mark_prompt(&mut self, prompt: impl IntoIterator<Item = bool>) {
        for (r, p) in self.rows.iter_mut().zip(prompt) {
            r.prompt = p;
        }
    }

    /// Set how many trailing positions of each row return logits (in packing order; each at least 1 and at most
    /// the row's tokens).
    pub fn set_logits(&mut self, logits: impl IntoIterator<Item = usize>) {
        for (r, n) in self.rows.iter_mut().zip(logits) {
            r.logits = n.clamp(1, r.len);
        }
    }

    /// The runs of positions of `slot`'s row whose tokens attend each other both ways, as (first, end).
    pub fn both_ways(&self, slot: usize) -> Vec<(usize, usize)> {
        let runs = self.media.iter().flat_map(|m| m.both_ways.iter());
        runs.filter(|r| r.0 == slot).map(|r| (r.1, r.2)).collect()
    }

    /// Whether any row has runs that attend both ways.
    pub fn has_both_ways(&self) -> bool {
        self.media.as_ref().is_some_and(|m| !m.both_ways.is_empty())
    }

    /// Total packed tokens.
    pub fn num_tokens(&self) -> usize {
        self.rows.last().map(|r| r.start + r.len).unwrap_or(0)
    }

    /// Query tiles for a kernel that attends `bq` consecutive tokens of one row at a time: rows with at least
    /// half a tile (and 2) of new tokens are cut into tiles, flattened as [first packed index, token count]; the
    /// other rows' tokens are listed one by one. Every packed token is in exactly one of the two.
    pub fn query_tiles(&self, bq: usize) -> (Vec<u32>, Vec<u32>) {
        let min = (bq / 2).max(2);
        let (mut tiles, mut rest) = (Vec::new(), Vec::new());
        for r in &self.rows {
            if r.len >= min {
                for i in (0..r.len).step_by(bq.max(1)) {
                    tiles.push((r.start + i) as u32);
                    tiles.push(bq.min(r.len - i) as u32);
                }
            } else {
                rest.extend((r.start..r.start + r.len).map(|t| t as u32));
            }
        }
        (tiles, rest)
    }

    /// Indices of the tokens whose logits the model returns.
    pub fn logit_indices(&self) -> Vec<u32> {
        if self.all_logits {
            (0..self.num_tokens() as u32).collect()
        } else {
            self.rows.iter().flat_map(|r| (r.start + r.len - r.logits..r.start + r.len).map(|t| t as u32)).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_tiles_cover_every_token_once() {
        // bq 16: a 37-token piece -> 16 + 16 + 5; a decode token and a 6-token piece are listed; 8 tokens -> a tile.
        let ctx = BatchContext::new(&[(0, 0, 37), (1, 90, 1), (2, 40, 6), (3, 0, 8)], false, &Device::Cpu).unwrap();
        let (tiles, rest) = ctx.query_tiles(16);
        assert_eq!(tiles, vec![0, 16, 16, 16, 32, 5, 44, 8]);
        assert_eq!(rest, (37..44).collect::<Vec<u32>>());
        let mut all = rest.clone();
        for t in tiles.chunks(2) {
            all.extend(t[0]..t[0] + t[1]);
        }
        all.sort();
        assert_eq!(all, (0..52).collect::<Vec<u32>>());
        // Decode-only steps have no tiles.
        let ctx = BatchContext::new(&[(0, 5, 1), (1, 9, 1)], false, &Device::Cpu).unwrap();
        assert_eq!(ctx.query_tiles(16), (vec![], vec![0, 1]));
    }
}
