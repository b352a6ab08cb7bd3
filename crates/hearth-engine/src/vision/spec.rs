//! What serving a model's images needs to know, read from its Hugging Face directory (`config.json`,
//! `preprocessor_config.json`) or from a GGUF and llama.cpp's `mmproj` file beside it: its image processor and
//! placeholder tokens. The server reads it to prepare
//! requests (an isolated server's parent has no model loaded), the model to encode.

use super::gemma3::Gemma3Processor;
use super::qwen2_vl::Qwen2VlProcessor;
use super::Image;
use crate::{Error, Result};
use std::path::Path;

/// A vision-language model's image interface.
#[derive(Clone, Debug, PartialEq)]
pub struct VisionSpec {
    /// The architecture (`qwen2_5_vl`, `gemma3`).
    pub arch: String,
    pub processor: ImageProcessor,
    /// The placeholder an image's tokens are written as (`<|image_pad|>`, `<image_soft_token>`), one per LLM
    /// token after expansion.
    pub image_token: u32,
    /// The raw `vision_config` (the tower's shape).
    pub vision_config: serde_json::Value,
}

/// A model family's image processor, and how its prompts hold an image.
#[derive(Clone, Debug, PartialEq)]
pub enum ImageProcessor {
    /// Qwen2-VL / Qwen2.5-VL: the template writes one `image_token` per image, which becomes the image's run of
    /// them (one per 28x28 pixels), placed with 3D rope positions.
    Qwen2Vl(Qwen2VlProcessor),
    /// Gemma 3: the template writes `boi` (`<start_of_image>`), which the processor's text replaces with
    /// `\n\n<start_of_image>`, the image's `image_token`s, `<end_of_image>\n\n`; an image's tokens attend each
    /// other both ways.
    Gemma3 { processor: Gemma3Processor, boi: u32, eoi: u32 },
}

impl ImageProcessor {
    /// The image resized as the processor resizes it (what a request carries to the engine).
    pub fn resize(&self, img: &Image) -> Result<Image> {
        match self {
            ImageProcessor::Qwen2Vl(p) => p.resize(img),
            ImageProcessor::Gemma3 { processor, .. } => processor.resize(img),
        }
    }

    /// The LLM tokens an image of `width x height` becomes.
    pub fn tokens_for(&self, width: usize, height: usize) -> Result<usize> {
        match self {
            ImageProcessor::Qwen2Vl(p) => p.tokens_for(width, height),
            ImageProcessor::Gemma3 { processor, .. } => Ok(processor.tokens),
        }
    }

    /// The Qwen2-VL processor, where this is one (its images take 3D rope positions).
    pub fn qwen2_vl(&self) -> Option<&Qwen2VlProcessor> {
        match self {
            ImageProcessor::Qwen2Vl(p) => Some(p),
            ImageProcessor::Gemma3 { .. } => None,
        }
    }

    /// Whether an image's tokens attend each other both ways (its whole run is computed in one prompt piece).
    pub fn bidirectional(&self) -> bool {
        matches!(self, ImageProcessor::Gemma3 { .. })
    }
}

/// Architectures whose images hearth encodes.
pub const IMAGE_ARCHS: &[&str] = &["qwen2_5_vl", "gemma3"];

impl VisionSpec {
    /// The spec of the model in `dir`, or None for a model without images (no `vision_config`, or an
    /// architecture whose vision tower hearth does not run: it is served as its text model).
    pub fn from_hf_dir(dir: &Path) -> Result<Option<Self>> {
        let read = |name: &str| -> Result<Option<serde_json::Value>> {
            let path = dir.join(name);
            if !path.exists() {
                return Ok(None);
            }
            let text =
                std::fs::read_to_string(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            serde_json::from_str(&text).map(Some).map_err(|e| Error::InvalidModel(format!("{}: {e}", path.display())))
        };
        let Some(cfg) = read("config.json")? else { return Ok(None) };
        let arch = cfg.get("model_type").and_then(|v| v.as_str()).unwrap_or("").to_string();
        let Some(vision_config) = cfg.get("vision_config").filter(|v| v.is_object()).cloned() else { return Ok(None) };
        if !IMAGE_ARCHS.contains(&arch.as_str()) {
            tracing::warn!(arch, "the model has a vision tower hearth does not run: it serves text only");
            return Ok(None);
        }
        let id = |keys: &[&str]| keys.iter().find_map(|k| cfg.get(*k).and_then(|v| v.as_u64())).map(|v| v as u32);
        let image_token = id(&["image_token_id", "image_token_index"])
            .ok_or_else(|| Error::InvalidModel("config.json has a vision_config but no image_token_id".into()))?;
        let pre = read("preprocessor_config.json")?.unwrap_or(serde_json::Value::Null);
        let processor = if arch == "gemma3" {
            let tokens = cfg.get("mm_tokens_per_image").and_then(|v| v.as_u64()).unwrap_or(256) as usize;
            let (boi, eoi) = (id(&["boi_token_index", "boi_token_id"]), id(&["eoi_token_index", "eoi_token_id"]));
            let (Some(boi), Some(eoi)) = (boi, eoi) else {
                return Err(Error::InvalidModel("a Gemma 3 config.json without boi/eoi_token_index".into()));
            };
            ImageProcessor::Gemma3 { processor: Gemma3Processor::from_config(&pre, tokens)?, boi, eoi }
        } else {
            let mut p = Qwen2VlProcessor::from_config(&pre);
            // The tower's own patch and merge sizes win over a processor file that disagrees or is missing.
            let num = |k: &str| vision_config.get(k).and_then(|v| v.as_u64()).map(|v| v as usize);
            p.patch = num("patch_size").unwrap_or(p.patch);
            p.merge = num("spatial_merge_size").unwrap_or(p.merge);
            p.temporal = num("temporal_patch_size").unwrap_or(p.temporal);
            ImageProcessor::Qwen2Vl(p)
        };
        Ok(Some(VisionSpec { arch, processor, image_token, vision_config }))
    }
}
