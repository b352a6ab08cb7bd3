//! The Qwen2-VL / Qwen2.5-VL image processor (`Qwen2VLImageProcessorPil`): the image resized (Pillow bicubic)
//! to the nearest size whose sides are multiples of `patch * merge` with its pixel count kept between
//! `min_pixels` and `max_pixels` (`smart_resize`), rescaled and normalized with CLIP's statistics, then cut into
//! `patch x patch` patches ordered by `merge x merge` groups, each patch repeated over the `temporal` frames.

use super::resample::{resize_rgb, Filter};
use super::{rescale_normalize, Image, CLIP_MEAN, CLIP_STD};
use crate::{Error, Result};

/// The processor's settings (`preprocessor_config.json`).
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen2VlProcessor {
    pub patch: usize,
    pub temporal: usize,
    pub merge: usize,
    pub min_pixels: usize,
    pub max_pixels: usize,
    pub mean: [f32; 3],
    pub std: [f32; 3],
    pub rescale: f64,
}

impl Default for Qwen2VlProcessor {
    fn default() -> Self {
        Qwen2VlProcessor {
            patch: 14,
            temporal: 2,
            merge: 2,
            min_pixels: 56 * 56,
            max_pixels: 28 * 28 * 1280,
            mean: CLIP_MEAN,
            std: CLIP_STD,
            rescale: 1.0 / 255.0,
        }
    }
}

/// One image's patches: `grid_h * grid_w` rows of `3 * temporal * patch * patch` values, and its grid
/// (`image_grid_thw` = [1, grid_h, grid_w]).
#[derive(Clone, Debug)]
pub struct Patches {
    pub values: Vec<f32>,
    pub grid: [usize; 3],
}

impl Patches {
    /// The LLM tokens the image becomes after the vision tower's `merge x merge` merger.
    pub fn tokens(&self, merge: usize) -> usize {
        self.grid[0] * self.grid[1] * self.grid[2] / (merge * merge)
    }
}

/// `smart_resize`: the (height, width) an image of `height x width` is resized to.
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Result<(usize, usize)> {
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    if h.max(w) / h.min(w) > 200.0 {
        return Err(Error::InvalidRequest(format!(
            "an image of {width}x{height} has an aspect ratio over 200, which this model's processor refuses"
        )));
    }
    // Python's round() rounds halves to even.
    let mut h_bar = (h / f).round_ties_even() * f;
    let mut w_bar = (w / f).round_ties_even() * f;
    if h_bar * w_bar > max_pixels as f64 {
        let beta = ((h * w) / max_pixels as f64).sqrt();
        h_bar = f.max((h / beta / f).floor() * f);
        w_bar = f.max((w / beta / f).floor() * f);
    } else if h_bar * w_bar < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        h_bar = (h * beta / f).ceil() * f;
        w_bar = (w * beta / f).ceil() * f;
    }
    Ok((h_bar as usize, w_bar as usize))
}

impl Qwen2VlProcessor {
    /// Read from a `preprocessor_config.json` value; missing keys keep the defaults.
    pub fn from_config(cfg: &serde_json::Value) -> Self {
        let mut p = Qwen2VlProcessor::default();
        let num = |k: &str| cfg.get(k).and_then(|v| v.as_u64()).map(|v| v as usize);
        let size = |k: &str| cfg.get("size").and_then(|s| s.get(k)).and_then(|v| v.as_u64()).map(|v| v as usize);
        p.patch = num("patch_size").unwrap_or(p.patch);
        p.temporal = num("temporal_patch_size").unwrap_or(p.temporal);
        p.merge = num("merge_size").unwrap_or(p.merge);
        p.min_pixels = num("min_pixels").or_else(|| size("shortest_edge")).unwrap_or(p.min_pixels);
        p.max_pixels = num("max_pixels").or_else(|| size("longest_edge")).unwrap_or(p.max_pixels);
        let triple = |k: &str| -> Option<[f32; 3]> {
            let a = cfg.get(k)?.as_array()?;
            (a.len() == 3).then(|| [0, 1, 2].map(|i| a[i].as_f64().unwrap_or(0.0) as f32))
        };
        p.mean = triple("image_mean").unwrap_or(p.mean);
        p.std = triple("image_std").unwrap_or(p.std);
        p.rescale = cfg.get("rescale_factor").and_then(|v| v.as_f64()).unwrap_or(p.rescale);
        p
    }

    /// The size an image is resized to.
    pub fn target_size(&self, img: &Image) -> Result<(usize, usize)> {
        smart_resize(img.height, img.width, self.patch * self.merge, self.min_pixels, self.max_pixels)
    }

    /// The image resized as the processor resizes it (Pillow bicubic to [`Self::target_size`]).
    pub fn resize(&self, img: &Image) -> Result<Image> {
        let (oh, ow) = self.target_size(img)?;
        Image::new(ow, oh, resize_rgb(&img.rgb, img.width, img.height, ow, oh, Filter::Bicubic))
    }

    /// The LLM tokens an image of `width x height` becomes.
    pub fn tokens_for(&self, width: usize, height: usize) -> Result<usize> {
        let (oh, ow) = smart_resize(height, width, self.patch * self.merge, self.min_pixels, self.max_pixels)?;
        Ok((oh / self.patch / self.merge) * (ow / self.patch / self.merge))
    }

    /// The image's patches.
    pub fn preprocess(&self, img: &Image) -> Result<Patches> {
        self.patchify(&self.resize(img)?)
    }

    /// The patches of an image already at its processor size (sides multiples of `patch * merge`).
    pub fn patchify(&self, img: &Image) -> Result<Patches> {
        let (oh, ow, rgb) = (img.height, img.width, &img.rgb);
        if oh % (self.patch * self.merge) != 0 || ow % (self.patch * self.merge) != 0 {
            return Err(Error::InvalidRequest(format!(
                "an image of {ow}x{oh} is not at this processor's size (sides multiples of {})",
                self.patch * self.merge
            )));
        }
        let (p, m, t) = (self.patch, self.merge, self.temporal);
        let (gh, gw) = (oh / p, ow / p);
        let per_patch = 3 * t * p * p;
        let mut values = vec![0f32; gh * gw * per_patch];
        // Patch order: (merge block row, merge block col, row in block, col in block); within a patch:
        // (channel, frame, y, x), the frames repeating the one image.
        let mut idx = 0;
        for by in 0..gh / m {
            for bx in 0..gw / m {
                for iy in 0..m {
                    for ix in 0..m {
                        let (py, px) = ((by * m + iy) * p, (bx * m + ix) * p);
                        let dst = &mut values[idx * per_patch..(idx + 1) * per_patch];
                        for c in 0..3 {
                            for y in 0..p {
                                for x in 0..p {
                                    let v = rgb[((py + y) * ow + px + x) * 3 + c];
                                    let n = rescale_normalize(v, self.rescale, self.mean[c], self.std[c]);
                                    for f in 0..t {
                                        dst[((c * t + f) * p + y) * p + x] = n;
                                    }
                                }
                            }
                        }
                        idx += 1;
                    }
                }
            }
        }
        Ok(Patches { values, grid: [1, gh, gw] })
    }
}

/// The 3D rope positions of a sequence whose images' placeholder tokens (`image_token`, each image's run of
/// `grid_h / merge * grid_w / merge` of them) follow `grids` in order (transformers' `get_rope_index`): a text
/// token's three components are its running position; an image's tokens are (start, start + row, start + col),
/// and the text after it resumes at start + max(rows, cols). Returns the (temporal, height, width) rows and the
/// offset of every later position from its index (`mrope_position_deltas`: max + 1 - len).
pub fn rope_positions(
    ids: &[u32],
    image_token: u32,
    grids: &[[usize; 3]],
    merge: usize,
) -> Result<([Vec<u32>; 3], i64)> {
    let mut pos: [Vec<u32>; 3] =
        [Vec::with_capacity(ids.len()), Vec::with_capacity(ids.len()), Vec::with_capacity(ids.len())];
    let mut cur = 0usize;
    let mut images = grids.iter();
    let mut i = 0;
    while i < ids.len() {
        if ids[i] != image_token {
            for p in pos.iter_mut() {
                p.push(cur as u32);
            }
            cur += 1;
            i += 1;
            continue;
        }
        let [_, gh, gw] =
            *images.next().ok_or_else(|| Error::InvalidRequest("more image placeholder runs than images".into()))?;
        let (lh, lw) = (gh / merge, gw / merge);
        if i + lh * lw > ids.len() || ids[i..i + lh * lw].iter().any(|&t| t != image_token) {
            return Err(Error::InvalidRequest(format!(
                "an image of {lh}x{lw} tokens does not match its run of placeholder tokens at {i}"
            )));
        }
        for y in 0..lh {
            for x in 0..lw {
                pos[0].push(cur as u32);
                pos[1].push((cur + y) as u32);
                pos[2].push((cur + x) as u32);
            }
        }
        cur += lh.max(lw);
        i += lh * lw;
    }
    if images.next().is_some() {
        return Err(Error::InvalidRequest("more images than placeholder runs".into()));
    }
    let max = pos.iter().flat_map(|p| p.iter().copied()).max().map_or(-1, |m| m as i64);
    Ok((pos, max + 1 - ids.len() as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smart_resize_follows_the_reference() {
        // Values from the reference function (transformers 5.24; Python's round takes halves to even).
        assert_eq!(smart_resize(75, 100, 28, 3136, 1003520).unwrap(), (84, 112));
        assert_eq!(smart_resize(42, 42, 28, 0, 1 << 30).unwrap(), (56, 56)); // 1.5 rounds to 2
        assert_eq!(smart_resize(70, 70, 28, 0, 1 << 30).unwrap(), (56, 56)); // 2.5 rounds to 2
        assert_eq!(smart_resize(10, 10, 28, 3136, 1003520).unwrap(), (56, 56));
        assert_eq!(smart_resize(4000, 3000, 28, 3136, 1003520).unwrap(), (1148, 840));
        assert!(smart_resize(1, 300, 28, 3136, 1003520).is_err());
    }
}
