//! Gemma 3's image processor (`Gemma3ImageProcessorPil`, pan-and-scan off as published): the image resized to
//! the tower's square size with Pillow's bilinear filter, rescaled and normalized (mean and std 0.5), channels
//! first. Every image becomes the same number of LLM tokens (`mm_tokens_per_image`).

use super::resample::{resize_rgb, Filter};
use super::{rescale_normalize, Image};
use crate::{Error, Result};

/// The processor's settings (`preprocessor_config.json`) and the tokens an image becomes.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemma3Processor {
    pub height: usize,
    pub width: usize,
    pub mean: [f32; 3],
    pub std: [f32; 3],
    pub rescale: f64,
    pub filter: Filter,
    /// LLM tokens per image (`mm_tokens_per_image`).
    pub tokens: usize,
}

impl Gemma3Processor {
    /// Read from a `preprocessor_config.json` value (missing keys: Gemma 3's published 896x896, 0.5, bilinear)
    /// and the model's tokens per image.
    pub fn from_config(cfg: &serde_json::Value, tokens: usize) -> Result<Self> {
        let size = |k: &str| cfg.get("size").and_then(|s| s.get(k)).and_then(|v| v.as_u64()).map(|v| v as usize);
        let triple = |k: &str| -> Option<[f32; 3]> {
            let a = cfg.get(k)?.as_array()?;
            (a.len() == 3).then(|| [0, 1, 2].map(|i| a[i].as_f64().unwrap_or(0.0) as f32))
        };
        if cfg.get("do_pan_and_scan").and_then(|v| v.as_bool()) == Some(true) {
            return Err(Error::Unsupported("Gemma 3's pan-and-scan image crops (`do_pan_and_scan`)".into()));
        }
        let filter = match cfg.get("resample").and_then(|v| v.as_u64()) {
            None | Some(2) => Filter::Bilinear,
            Some(3) => Filter::Bicubic,
            Some(1) => Filter::Lanczos,
            Some(other) => {
                return Err(Error::Unsupported(format!("image resampling filter {other} (Pillow's numbering)")))
            }
        };
        let p = Gemma3Processor {
            height: size("height").unwrap_or(896),
            width: size("width").unwrap_or(896),
            mean: triple("image_mean").unwrap_or([0.5; 3]),
            std: triple("image_std").unwrap_or([0.5; 3]),
            rescale: cfg.get("rescale_factor").and_then(|v| v.as_f64()).unwrap_or(1.0 / 255.0),
            filter,
            tokens,
        };
        if p.height == 0 || p.width == 0 || p.tokens == 0 {
            return Err(Error::InvalidModel("Gemma 3 image processor: a zero size or token count".into()));
        }
        Ok(p)
    }

    /// The image resized as the processor resizes it.
    pub fn resize(&self, img: &Image) -> Result<Image> {
        Image::new(
            self.width,
            self.height,
            resize_rgb(&img.rgb, img.width, img.height, self.width, self.height, self.filter),
        )
    }

    /// The pixel values of an image already at the processor's size: (3, height, width), normalized.
    pub fn pixels(&self, img: &Image) -> Result<Vec<f32>> {
        if (img.width, img.height) != (self.width, self.height) {
            return Err(Error::InvalidRequest(format!(
                "an image of {}x{} is not at this processor's size {}x{}",
                img.width, img.height, self.width, self.height
            )));
        }
        let n = self.width * self.height;
        let mut out = vec![0f32; 3 * n];
        for (i, px) in img.rgb.chunks_exact(3).enumerate() {
            for c in 0..3 {
                out[c * n + i] = rescale_normalize(px[c], self.rescale, self.mean[c], self.std[c]);
            }
        }
        Ok(out)
    }
}
