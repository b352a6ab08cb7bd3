//! What serving a model's images needs to know, read from its Hugging Face directory (`config.json`,
//! `preprocessor_config.json`): its image processor and placeholder tokens. The server reads it to prepare
//! requests (an isolated server's parent has no model loaded), the model to encode.

use super::qwen2_vl::Qwen2VlProcessor;
use crate::{Error, Result};
use std::path::Path;

/// A vision-language model's image interface.
#[derive(Clone, Debug, PartialEq)]
pub struct VisionSpec {
    /// The architecture (`qwen2_5_vl`).
    pub arch: String,
    pub processor: Qwen2VlProcessor,
    /// The placeholder an image's tokens are written as (`<|image_pad|>`), one per LLM token after expansion.
    pub image_token: u32,
    /// The raw `vision_config` (the tower's shape).
    pub vision_config: serde_json::Value,
}

/// Architectures whose images hearth encodes.
pub const IMAGE_ARCHS: &[&str] = &["qwen2_5_vl"];

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
        let image_token = cfg
            .get("image_token_id")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| Error::InvalidModel("config.json has a vision_config but no image_token_id".into()))?
            as u32;
        let pre = read("preprocessor_config.json")?.unwrap_or(serde_json::Value::Null);
        let mut processor = Qwen2VlProcessor::from_config(&pre);
        // The tower's own patch and merge sizes win over a processor file that disagrees or is missing.
        let num = |k: &str| vision_config.get(k).and_then(|v| v.as_u64()).map(|v| v as usize);
        processor.patch = num("patch_size").unwrap_or(processor.patch);
        processor.merge = num("spatial_merge_size").unwrap_or(processor.merge);
        processor.temporal = num("temporal_patch_size").unwrap_or(processor.temporal);
        Ok(Some(VisionSpec { arch, processor, image_token, vision_config }))
    }
}
