//! Hugging Face model directories: `config.json` + `model.safetensors` or shards listed in
//! `model.safetensors.index.json`. Tensors are memory-mapped; bf16/f16/f32 are converted to the compute dtype.

use crate::{Error, Result};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use std::path::{Path, PathBuf};

pub struct HfWeights {
    pub dir: PathBuf,
    st: MmapedSafetensors,
    /// Where the text model's tensors sit: names asked as `model.X` are read as `X` in a bare base model
    /// (`embed_tokens.weight`, `layers.0...`, as Qwen3-Embedding saves its `Qwen3Model`), as
    /// `model.language_model.X` in a multimodal checkpoint that nests it (Qwen3.5, Gemma 3 as transformers 5 saves
    /// them; their vision tower and Qwen3.5's `mtp.*` head stay unread; `language_model.model.X` as Gemma 3 is
    /// published), and as themselves in a causal LM.
    prefix: &'static str,
}

impl HfWeights {
    pub fn open(dir: &Path) -> Result<Self> {
        let files = shard_files(dir)?;
        // SAFETY: read-only maps of files we do not modify.
        let st = unsafe { MmapedSafetensors::multi(&files) }
            .map_err(|e| Error::InvalidModel(format!("{}: unreadable safetensors: {e}", dir.display())))?;
        for (name, view) in st.tensors() {
            match view.dtype() {
                safetensors::Dtype::F32 | safetensors::Dtype::F16 | safetensors::Dtype::BF16 => {}
                // An integer buffer older BERT checkpoints save beside the weights; never loaded.
                safetensors::Dtype::I64 | safetensors::Dtype::I32 if name.ends_with("position_ids") => {}
                // MXFP4 weights (gpt-oss's experts): 4-bit codes and power-of-two scales (`super::mxfp4`)
                safetensors::Dtype::U8 if name.ends_with("_blocks") || name.ends_with("_scales") => {}
                other => {
                    return Err(Error::Unsupported(format!(
                        "tensor `{name}` has dtype {other:?}; hearth loads bf16, f16 and f32 safetensors"
                    )))
                }
            }
        }
        let has = |n: &str| st.get(n).is_ok();
        let prefix = if has("model.embed_tokens.weight") {
            "model."
        } else if has("model.language_model.embed_tokens.weight") {
            "model.language_model."
        } else if has("language_model.model.embed_tokens.weight") {
            "language_model.model."
        } else if has("embed_tokens.weight") {
            ""
        } else {
            "model."
        };
        Ok(Self { dir: dir.to_path_buf(), st, prefix })
    }

    /// The stored name of the tensor the model code calls `name`.
    fn stored<'a>(&self, name: &'a str) -> std::borrow::Cow<'a, str> {
        match name.strip_prefix("model.") {
            Some(rest) if self.prefix != "model." => format!("{}{rest}", self.prefix).into(),
            _ => name.into(),
        }
    }

    /// (elements, bytes as stored) over every tensor.
    pub fn sizes(&self) -> (u64, u64) {
        self.st.tensors().iter().fold((0, 0), |(n, b), (_, view)| {
            let elems: u64 = view.shape().iter().map(|&d| d as u64).product();
            (n + elems, b + view.data().len() as u64)
        })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.st.get(&self.stored(name)).is_ok()
    }

    /// A tensor by its stored name, whatever the text model's prefix (a vision tower's `visual.*` or
    /// `model.visual.*`), or None where there is none.
    pub fn stored_tensor(&self, name: &str, dtype: DType, device: &Device) -> Result<Option<Tensor>> {
        if self.st.get(name).is_err() {
            return Ok(None);
        }
        Ok(Some(self.st.load(name, device)?.to_dtype(dtype)?))
    }

    pub fn tensor(&self, name: &str, dtype: DType, device: &Device) -> Result<Tensor> {
        if !self.contains(name) {
            return Err(Error::InvalidModel(format!("{}: missing tensor `{name}`", self.dir.display())));
        }
        Ok(self.st.load(&self.stored(name), device)?.to_dtype(dtype)?)
    }
}

impl HfWeights {
    /// Index `index` of `name`'s first dimension (one expert of a stacked tensor), read alone.
    pub fn tensor_part(&self, name: &str, index: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        let (stored, shape, data) = self.raw_part(name, index)?;
        let stored = match stored {
            safetensors::Dtype::F32 => DType::F32,
            safetensors::Dtype::F16 => DType::F16,
            safetensors::Dtype::BF16 => DType::BF16,
            other => return Err(Error::Unsupported(format!("tensor `{name}` has dtype {other:?}"))),
        };
        Ok(Tensor::from_raw_buffer(data, stored, &shape, device)?.to_dtype(dtype)?)
    }

    /// The stored bytes of index `index` of `name`'s first dimension: (dtype, the part's shape, its bytes).
    pub fn raw_part(&self, name: &str, index: usize) -> Result<(safetensors::Dtype, Vec<usize>, &[u8])> {
        let view = self
            .st
            .get(&self.stored(name))
            .map_err(|_| Error::InvalidModel(format!("{}: missing tensor `{name}`", self.dir.display())))?;
        let shape = view.shape();
        let Some((&n, rest)) = shape.split_first() else {
            return Err(Error::InvalidModel(format!("tensor `{name}` is a scalar, not a stack")));
        };
        if index >= n {
            return Err(Error::InvalidModel(format!("tensor `{name}` has {n} entries, asked for index {index}")));
        }
        let bytes = rest.iter().product::<usize>() * view.dtype().bitsize() / 8;
        let data = view.data().get(index * bytes..(index + 1) * bytes).ok_or_else(|| {
            Error::InvalidModel(format!("tensor `{name}`: {} bytes for shape {shape:?}", view.data().len()))
        })?;
        Ok((view.dtype(), rest.to_vec(), data))
    }
}

/// The safetensors files of a directory: the shards named by the index, or the single `model.safetensors`.
pub fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| Error::io(format!("reading {}", index.display()), e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::InvalidModel(format!("{}: {e}", index.display())))?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| Error::InvalidModel(format!("{}: no `weight_map` object", index.display())))?;
        let mut files: Vec<PathBuf> = Vec::new();
        for f in map.values() {
            let f = f.as_str().ok_or_else(|| Error::InvalidModel(format!("{}: non-string shard", index.display())))?;
            if f.contains('/') || f.contains("..") {
                return Err(Error::InvalidModel(format!("{}: shard path `{f}` leaves the directory", index.display())));
            }
            let p = dir.join(f);
            if !files.contains(&p) {
                if !p.is_file() {
                    return Err(Error::InvalidModel(format!("missing shard {} (named by the index)", p.display())));
                }
                files.push(p);
            }
        }
        return Ok(files);
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    Err(Error::ModelNotFound(format!(
        "{}: no model.safetensors or model.safetensors.index.json (hearth loads safetensors or GGUF, not .bin)",
        dir.display()
    )))
}
