//! Images for vision-language models, the engine's side: the model families' image processors (pixels to the
//! tensors their vision towers take, equal to transformers' processors with the Pillow backend) on top of
//! Pillow-exact resizing ([`resample`]). Fetching and decoding image bytes is the server's (`hearth-media`).

pub mod gemma3;
mod mmproj;
pub mod qwen2_vl;
pub mod request;
pub mod resample;
pub mod spec;

pub use request::{MropePositions, PromptImage, RequestMedia};
pub use spec::{ImageProcessor, VisionSpec};

use crate::{Error, Result};

/// A decoded image: 8-bit RGB, row-major, `width * height * 3` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub width: usize,
    pub height: usize,
    pub rgb: Vec<u8>,
}

impl Image {
    pub fn new(width: usize, height: usize, rgb: Vec<u8>) -> Result<Self> {
        if width == 0 || height == 0 || rgb.len() != width * height * 3 {
            return Err(Error::InvalidRequest(format!(
                "an image of {width}x{height} RGB pixels needs {} bytes, got {}",
                width * height * 3,
                rgb.len()
            )));
        }
        Ok(Image { width, height, rgb })
    }
}

/// transformers' `rescale` then `normalize` of one 8-bit value: the product in f64 cast to f32 (`np_rescale`),
/// then `(v - mean) / std` in f32 (`np_normalize`).
pub(crate) fn rescale_normalize(v: u8, rescale: f64, mean: f32, std: f32) -> f32 {
    ((v as f64 * rescale) as f32 - mean) / std
}

/// OpenAI CLIP's channel means and deviations (`OPENAI_CLIP_MEAN` / `OPENAI_CLIP_STD`).
pub const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
pub const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_6, 0.275_777_1];
