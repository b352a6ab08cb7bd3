//! Where a vision tower's weights are: the model's Hugging Face checkpoint, or llama.cpp's `mmproj` GGUF beside a
//! GGUF model (`--mmproj`). Each tower maps its Hugging Face names to the mmproj's.

use super::layers::Loader;
use crate::vision::VisionSpec;
use crate::weights::{GgufFile, HfWeights, Weights};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};

/// A vision tower's weights.
#[derive(Clone, Copy)]
pub enum VisionWeights<'a> {
    Hf(&'a HfWeights),
    Mmproj(&'a GgufFile),
}

impl VisionWeights<'_> {
    /// The first of `names` a Hugging Face checkpoint stores, in f32 (`what` names the tensor in the error).
    pub fn hf_first(hf: &HfWeights, names: &[String], what: &str, device: &Device) -> Result<Tensor> {
        for n in names {
            if let Some(t) = hf.stored_tensor(n, DType::F32, device)? {
                return Ok(t);
            }
        }
        Err(Error::InvalidModel(format!("the vision tower lacks `{what}`")))
    }

    /// An mmproj tensor by its GGUF name, in f32.
    pub fn mmproj(g: &GgufFile, name: &str, device: &Device) -> Result<Tensor> {
        if !g.has_tensor(name) {
            return Err(Error::InvalidModel(format!("the mmproj file lacks `{name}`")));
        }
        g.tensor_f32(name, device)
    }
}

/// The model's vision spec and its tower's weights: its Hugging Face directory's, or its `--mmproj` file's beside a
/// GGUF; None for a text model.
pub fn vision_source<'a>(l: &Loader<'a>) -> Result<Option<(VisionSpec, VisionWeights<'a>)>> {
    Ok(match (l.weights, l.mmproj) {
        (Weights::Hf(hf), _) => VisionSpec::from_hf_dir(&hf.dir)?.map(|spec| (spec, VisionWeights::Hf(hf))),
        (Weights::Gguf(text), Some((mm, path))) => {
            Some((VisionSpec::from_gguf(text, mm, path)?, VisionWeights::Mmproj(mm)))
        }
        (Weights::Gguf(_), None) => None,
    })
}
