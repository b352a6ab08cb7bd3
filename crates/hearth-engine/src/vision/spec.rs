//! What serving a model's images needs to know, read from its Hugging Face directory (`config.json`,
//! `preprocessor_config.json`) or from a GGUF and llama.cpp's `mmproj` file beside it: its image processor and
//! placeholder tokens. The server reads it to prepare
//! requests (an isolated server's parent has no model loaded), the model to encode.

use super::gemma3::Gemma3Processor;
use super::qwen2_vl::Qwen2VlProcessor;
use super::Image;
use crate::weights::GgufFile;
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

/// llama.cpp's projector types hearth runs, and the architecture each is.
const MMPROJ_TYPES: &[(&str, &str)] = &[("qwen2.5vl_merger", "qwen2_5_vl")];

/// The published Qwen2.5-VL processor's pixel bounds (its `preprocessor_config.json`), for an mmproj file that
/// states none.
const QWEN25VL_MIN_PIXELS: usize = 3136;
const QWEN25VL_MAX_PIXELS: usize = 12_845_056;

impl VisionSpec {
    /// The spec of a GGUF text model (`text`) with llama.cpp's `mmproj` file for its vision tower. The tower's
    /// shape comes from the mmproj's `clip.vision.*` keys (a window of 112 pixels and a merge of 2 where it
    /// states none, as llama.cpp reads it), the placeholder from the text model's vocabulary (`<|image_pad|>`).
    pub fn from_gguf(text: &GgufFile, mmproj: &GgufFile, path: &Path) -> Result<Self> {
        let bad = |what: String| Error::InvalidModel(format!("{}: {what}", path.display()));
        if mmproj.get_str("general.architecture") != Some("clip")
            || mmproj.get_bool("clip.has_vision_encoder") != Some(true)
        {
            return Err(bad("not an mmproj file with a vision encoder (general.architecture `clip`)".into()));
        }
        let projector = mmproj.get_str("clip.vision.projector_type").or_else(|| mmproj.get_str("clip.projector_type"));
        let Some(&(_, arch)) = MMPROJ_TYPES.iter().find(|(p, _)| Some(*p) == projector) else {
            return Err(Error::Unsupported(format!(
                "{}: an mmproj of projector type `{}`; hearth runs {}",
                path.display(),
                projector.unwrap_or("(none)"),
                MMPROJ_TYPES.iter().map(|(p, a)| format!("{p} ({a})")).collect::<Vec<_>>().join(", ")
            )));
        };
        let text_arch = text.architecture()?;
        if text_arch != "qwen2vl" {
            return Err(Error::InvalidModel(format!(
                "{}'s vision tower ({arch}) goes with a `qwen2vl` text model, not `{text_arch}`",
                path.display()
            )));
        }
        let need = |k: &str| -> Result<usize> {
            mmproj
                .get_u64(&format!("clip.vision.{k}"))
                .map(|v| v as usize)
                .ok_or_else(|| bad(format!("no `clip.vision.{k}`")))
        };
        let opt = |k: &str, default: usize| mmproj.get_u64(&format!("clip.vision.{k}")).map_or(default, |v| v as usize);
        let depth = need("block_count")?;
        // Full-attention blocks: llama.cpp's `wa_layer_indexes` where given, else every `n_wa_pattern`-th block.
        let listed: Option<Vec<usize>> = mmproj
            .get("clip.vision.wa_layer_indexes")
            .and_then(|v| v.to_vec().ok())
            .map(|v| v.iter().filter_map(|x| x.to_i32().ok().map(|i| i.max(0) as usize)).collect());
        let fullatt: Vec<usize> = match (listed, mmproj.get_u64("clip.vision.n_wa_pattern")) {
            (Some(l), _) => l,
            (None, Some(n)) if n > 0 => (0..depth).filter(|i| (i + 1) % n as usize == 0).collect(),
            _ => return Err(bad("no window-attention pattern (`clip.vision.n_wa_pattern`)".into())),
        };
        let (patch, merge) = (need("patch_size")?, opt("spatial_merge_size", 2));
        let vision_config = serde_json::json!({
            "depth": depth,
            "hidden_size": need("embedding_length")?,
            "intermediate_size": need("feed_forward_length")?,
            "num_heads": need("attention.head_count")?,
            "patch_size": patch,
            "spatial_merge_size": merge,
            "temporal_patch_size": 2,
            "window_size": opt("window_size", 112),
            "out_hidden_size": need("projection_dim")?,
            "fullatt_block_indexes": fullatt,
            "hidden_act": "silu",
        });
        let triple = |k: &str| -> Result<[f32; 3]> {
            let v = mmproj.get(&format!("clip.vision.{k}")).and_then(|v| v.to_vec().ok()).cloned().unwrap_or_default();
            let f: Vec<f32> = v.iter().filter_map(|x| x.to_f32().ok()).collect();
            f.try_into().map_err(|_| bad(format!("`clip.vision.{k}` is not three numbers")))
        };
        let processor = Qwen2VlProcessor {
            patch,
            merge,
            temporal: 2,
            min_pixels: opt("image_min_pixels", QWEN25VL_MIN_PIXELS),
            max_pixels: opt("image_max_pixels", QWEN25VL_MAX_PIXELS),
            mean: triple("image_mean")?,
            std: triple("image_std")?,
            rescale: 1.0 / 255.0,
        };
        let image_token = gguf_token_id(text, "<|image_pad|>")
            .ok_or_else(|| Error::InvalidModel("the text model's vocabulary has no `<|image_pad|>`".into()))?;
        Ok(VisionSpec { arch: arch.into(), processor: ImageProcessor::Qwen2Vl(processor), image_token, vision_config })
    }
}

/// The id of the token spelled `text` in a GGUF's vocabulary (`tokenizer.ggml.tokens`).
fn gguf_token_id(g: &GgufFile, text: &str) -> Option<u32> {
    let tokens = g.get("tokenizer.ggml.tokens")?.to_vec().ok()?;
    tokens.iter().position(|t| t.to_string().ok().is_some_and(|s| s == text)).map(|i| i as u32)
}
