//! The images of a step: each planned row's image embeddings (from the encoder cache, or the model's encoder on a
//! miss) sliced to the placeholder tokens the step computes, and the M-RoPE positions of every packed token.

use crate::attention::BatchMedia;
use crate::models::Model;
use crate::scheduler::plan::StepPlan;
use crate::vision::PromptImage;
use crate::Result;
use candle_core::{Device, Tensor};
use std::collections::HashMap;

/// The most bytes of image embeddings the engine keeps (least recently used out first).
pub const ENCODER_CACHE_BYTES: usize = 512 << 20;

/// Image embeddings by the image's content hash: a conversation's later turns about an image encode nothing.
#[derive(Default)]
pub struct EncoderCache {
    map: HashMap<[u8; 32], (Tensor, u64)>,
    bytes: usize,
    tick: u64,
    hits: u64,
    misses: u64,
    encode_ms: f64,
}

impl EncoderCache {
    /// `img`'s embeddings, (tokens, hidden).
    pub fn embeddings(&mut self, model: &dyn Model, img: &PromptImage) -> Result<Tensor> {
        self.tick += 1;
        if let Some((t, used)) = self.map.get_mut(&img.hash) {
            *used = self.tick;
            self.hits += 1;
            return Ok(t.clone());
        }
        self.misses += 1;
        let t0 = std::time::Instant::now();
        let t = model.encode_image(img)?;
        // Host time; on a GPU the encoder's kernels may still run (the step waits for them with its logits).
        self.encode_ms += t0.elapsed().as_secs_f64() * 1e3;
        let size = t.elem_count() * t.dtype().size_in_bytes();
        while self.bytes + size > ENCODER_CACHE_BYTES && !self.map.is_empty() {
            let oldest = self.map.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| *k);
            if let Some((old, _)) = oldest.and_then(|k| self.map.remove(&k)) {
                self.bytes -= old.elem_count() * old.dtype().size_in_bytes();
            }
        }
        if size <= ENCODER_CACHE_BYTES {
            self.bytes += size;
            self.map.insert(img.hash, (t.clone(), self.tick));
        }
        Ok(t)
    }
}

impl EncoderCache {
    /// Its counters for `/stats`.
    pub fn stats(&self) -> crate::types::ImageStats {
        crate::types::ImageStats {
            encoded_total: self.misses,
            encode_ms_total: self.encode_ms,
            cache_hits_total: self.hits,
            cached: self.map.len(),
            cached_bytes: self.bytes as u64,
        }
    }
}

/// What the plan's rows add to their tokens, or None when no row carries images or 3D positions.
pub fn batch_media(
    plan: &StepPlan,
    model: &dyn Model,
    cache: &mut EncoderCache,
    device: &Device,
) -> Result<Option<BatchMedia>> {
    if plan.rows.iter().all(|r| r.media.is_none()) {
        return Ok(None);
    }
    let mrope = model.config().mrope_section.is_some();
    let both_ways = model.images_attend_both_ways();
    let mut rows3: [Vec<u32>; 3] = Default::default();
    let mut embeds = Vec::new();
    let mut runs = Vec::new();
    let mut start = 0;
    for r in &plan.rows {
        let (p0, n) = (r.pos0, r.tokens.len());
        let rope = r.media.as_ref().and_then(|m| m.rope.as_ref());
        for (axis, out) in rows3.iter_mut().enumerate() {
            out.extend((p0..p0 + n).map(|p| rope.map_or(p as u32, |m| m.at(axis, p))));
        }
        for img in r.media.iter().flat_map(|m| m.images.iter()) {
            let (a, b) = (img.start.max(p0), (img.start + img.tokens).min(p0 + n));
            if a < b {
                let e = cache.embeddings(model, img)?;
                embeds.push((start + a - p0, e.narrow(0, a - img.start, b - a)?));
                if both_ways {
                    runs.push((r.slot, img.start, img.start + img.tokens));
                }
            }
        }
        start += n;
    }
    let rope_positions = if mrope {
        let t = rows3[0].len();
        let flat: Vec<u32> = rows3.into_iter().flatten().collect();
        Some(Tensor::from_vec(flat, (3, t), device)?)
    } else {
        None
    };
    Ok(Some(BatchMedia { rope_positions, embeds, both_ways: runs }))
}
