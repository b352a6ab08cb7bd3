//! A GGUF text model's images from llama.cpp's `mmproj` file beside it: the vision tower's shape and the
//! processor's settings from the mmproj's `clip.vision.*` keys (as llama.cpp reads them), the placeholder tokens
//! from the text model's vocabulary.

use super::gemma3::Gemma3Processor;
use super::qwen2_vl::Qwen2VlProcessor;
use super::resample::Filter;
use super::spec::{ImageProcessor, VisionSpec};
use crate::weights::GgufFile;
use crate::{Error, Result};
use std::path::Path;

/// llama.cpp's projector types hearth runs: (projector, architecture, the text model's GGUF architecture).
const MMPROJ_TYPES: &[(&str, &str, &str)] =
    &[("qwen2.5vl_merger", "qwen2_5_vl", "qwen2vl"), ("gemma3", "gemma3", "gemma3")];

/// The published Qwen2.5-VL processor's pixel bounds (its `preprocessor_config.json`), for an mmproj file that
/// states none.
const QWEN25VL_MIN_PIXELS: usize = 3136;
const QWEN25VL_MAX_PIXELS: usize = 12_845_056;

/// An mmproj file's `clip.vision.*` keys.
struct Keys<'a> {
    g: &'a GgufFile,
    path: &'a Path,
}

impl Keys<'_> {
    fn bad(&self, what: String) -> Error {
        Error::InvalidModel(format!("{}: {what}", self.path.display()))
    }

    fn need(&self, k: &str) -> Result<usize> {
        self.g
            .get_u64(&format!("clip.vision.{k}"))
            .map(|v| v as usize)
            .ok_or_else(|| self.bad(format!("no `clip.vision.{k}`")))
    }

    fn opt(&self, k: &str, default: usize) -> usize {
        self.g.get_u64(&format!("clip.vision.{k}")).map_or(default, |v| v as usize)
    }

    fn triple(&self, k: &str) -> Result<[f32; 3]> {
        let v = self.g.get(&format!("clip.vision.{k}")).and_then(|v| v.to_vec().ok()).cloned().unwrap_or_default();
        let f: Vec<f32> = v.iter().filter_map(|x| x.to_f32().ok()).collect();
        f.try_into().map_err(|_| self.bad(format!("`clip.vision.{k}` is not three numbers")))
    }
}

impl VisionSpec {
    /// The spec of a GGUF text model (`text`) with llama.cpp's `mmproj` file for its vision tower: Qwen2.5-VL's
    /// (`qwen2.5vl_merger`: a window of 112 pixels and a merge of 2 where the file states none, as llama.cpp
    /// reads it; the placeholder `<|image_pad|>`) or Gemma 3's (`gemma3`: pooled by
    /// `clip.vision.projector.scale_factor`, 4 where unstated; `<start_of_image>`, `<image_soft_token>`,
    /// `<end_of_image>`).
    pub fn from_gguf(text: &GgufFile, mmproj: &GgufFile, path: &Path) -> Result<Self> {
        let keys = Keys { g: mmproj, path };
        if mmproj.get_str("general.architecture") != Some("clip")
            || mmproj.get_bool("clip.has_vision_encoder") != Some(true)
        {
            return Err(keys.bad("not an mmproj file with a vision encoder (general.architecture `clip`)".into()));
        }
        let projector = mmproj.get_str("clip.vision.projector_type").or_else(|| mmproj.get_str("clip.projector_type"));
        let Some(&(_, arch, text_arch)) = MMPROJ_TYPES.iter().find(|(p, ..)| Some(*p) == projector) else {
            return Err(Error::Unsupported(format!(
                "{}: an mmproj of projector type `{}`; hearth runs {}",
                path.display(),
                projector.unwrap_or("(none)"),
                MMPROJ_TYPES.iter().map(|(p, a, _)| format!("{p} ({a})")).collect::<Vec<_>>().join(", ")
            )));
        };
        let found = text.architecture()?;
        if found != text_arch {
            return Err(Error::InvalidModel(format!(
                "{}'s vision tower ({arch}) goes with a `{text_arch}` text model, not `{found}`",
                path.display()
            )));
        }
        let token = |spelled: &str| {
            gguf_token_id(text, spelled)
                .ok_or_else(|| Error::InvalidModel(format!("the text model's vocabulary has no `{spelled}`")))
        };
        match arch {
            "gemma3" => gemma3(&keys, token),
            _ => qwen2_5_vl(&keys, token),
        }
    }
}

fn qwen2_5_vl(keys: &Keys, token: impl Fn(&str) -> Result<u32>) -> Result<VisionSpec> {
    let depth = keys.need("block_count")?;
    // Full-attention blocks: llama.cpp's `wa_layer_indexes` where given, else every `n_wa_pattern`-th block.
    let listed: Option<Vec<usize>> = keys
        .g
        .get("clip.vision.wa_layer_indexes")
        .and_then(|v| v.to_vec().ok())
        .map(|v| v.iter().filter_map(|x| x.to_i32().ok().map(|i| i.max(0) as usize)).collect());
    let fullatt: Vec<usize> = match (listed, keys.g.get_u64("clip.vision.n_wa_pattern")) {
        (Some(l), _) => l,
        (None, Some(n)) if n > 0 => (0..depth).filter(|i| (i + 1) % n as usize == 0).collect(),
        _ => return Err(keys.bad("no window-attention pattern (`clip.vision.n_wa_pattern`)".into())),
    };
    let (patch, merge) = (keys.need("patch_size")?, keys.opt("spatial_merge_size", 2));
    let vision_config = serde_json::json!({
        "depth": depth,
        "hidden_size": keys.need("embedding_length")?,
        "intermediate_size": keys.need("feed_forward_length")?,
        "num_heads": keys.need("attention.head_count")?,
        "patch_size": patch,
        "spatial_merge_size": merge,
        "temporal_patch_size": 2,
        "window_size": keys.opt("window_size", 112),
        "out_hidden_size": keys.need("projection_dim")?,
        "fullatt_block_indexes": fullatt,
        "hidden_act": "silu",
    });
    let processor = Qwen2VlProcessor {
        patch,
        merge,
        temporal: 2,
        min_pixels: keys.opt("image_min_pixels", QWEN25VL_MIN_PIXELS),
        max_pixels: keys.opt("image_max_pixels", QWEN25VL_MAX_PIXELS),
        mean: keys.triple("image_mean")?,
        std: keys.triple("image_std")?,
        rescale: 1.0 / 255.0,
    };
    Ok(VisionSpec {
        arch: "qwen2_5_vl".into(),
        processor: ImageProcessor::Qwen2Vl(processor),
        image_token: token("<|image_pad|>")?,
        vision_config,
    })
}

fn gemma3(keys: &Keys, token: impl Fn(&str) -> Result<u32>) -> Result<VisionSpec> {
    let (size, patch) = (keys.need("image_size")?, keys.need("patch_size")?);
    let scale = keys.g.get_u64("clip.vision.projector.scale_factor").map_or(4, |v| v as usize);
    let side = size.checked_div(patch).unwrap_or(0).checked_div(scale).unwrap_or(0);
    if side == 0 {
        return Err(keys.bad(format!("an image of {size} pixels in patches of {patch} pooled by {scale}")));
    }
    let vision_config = serde_json::json!({
        "hidden_size": keys.need("embedding_length")?,
        "intermediate_size": keys.need("feed_forward_length")?,
        "num_hidden_layers": keys.need("block_count")?,
        "num_attention_heads": keys.need("attention.head_count")?,
        "image_size": size,
        "patch_size": patch,
        "layer_norm_eps": keys.g.get_f64("clip.vision.attention.layer_norm_epsilon").unwrap_or(1e-6),
        "hidden_act": "gelu_pytorch_tanh",
    });
    let processor = Gemma3Processor {
        height: size,
        width: size,
        mean: keys.triple("image_mean")?,
        std: keys.triple("image_std")?,
        rescale: 1.0 / 255.0,
        filter: Filter::Bilinear,
        tokens: side * side,
    };
    Ok(VisionSpec {
        arch: "gemma3".into(),
        processor: ImageProcessor::Gemma3 { processor, boi: token("<start_of_image>")?, eoi: token("<end_of_image>")? },
        image_token: token("<image_soft_token>")?,
        vision_config,
    })
}

/// The id of the token spelled `text` in a GGUF's vocabulary (`tokenizer.ggml.tokens`).
fn gguf_token_id(g: &GgufFile, text: &str) -> Option<u32> {
    let tokens = g.get("tokenizer.ggml.tokens")?.to_vec().ok()?;
    tokens.iter().position(|t| t.to_string().ok().is_some_and(|s| s == text)).map(|i| i as u32)
}
