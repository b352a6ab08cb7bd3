//! [`Embedder`]: a sentence-embedding model loaded from a sentence-transformers directory (encoder, tokenizer,
//! pooling, normalization) that turns token-id inputs into vectors, in padded batches of bounded size.

use super::batch::{plan, BatchLimits};
use super::decoder::{DecoderEncoder, DECODER_TYPES};
use super::pooling::{l2_normalize, Pooling, SentenceConfig};
use crate::models::bert::{Bert, BertConfig};
use crate::models::Encoder;
use crate::tokenizer::Tokenizer;
use crate::weights::resolve::{resolve, ModelLocation};
use crate::weights::{HfWeights, Weights};
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use std::path::{Path, PathBuf};

/// How to build an embedder.
#[derive(Debug, Clone)]
pub struct EmbedderOptions {
    /// Activation dtype: f32 by default on every device (embedding models are small and parity is checked in
    /// f32); bf16/f16 only on a GPU.
    pub dtype: DType,
    /// Limits of one forward pass; the worker also gathers queued requests up to `limits.max_rows` inputs.
    pub limits: BatchLimits,
    /// Inputs waiting for the worker before submissions are refused (`EmbedError::QueueFull`).
    pub max_queued_inputs: usize,
}

impl Default for EmbedderOptions {
    fn default() -> Self {
        Self { dtype: DType::F32, limits: BatchLimits::default(), max_queued_inputs: 4096 }
    }
}

/// What a server reports about the model and checks requests against.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedderInfo {
    /// The model directory.
    pub dir: PathBuf,
    /// Length of every vector.
    pub dimensions: usize,
    /// The most tokens one input may have, the post-processor's special tokens included: sentence-transformers'
    /// `max_seq_length`, capped by the model's position table. A longer input is an error, never cut.
    pub max_input_tokens: usize,
    /// Token ids must be below this.
    pub vocab_size: usize,
    pub pooling: Pooling,
    /// Vectors have unit L2 norm (the directory has a `Normalize` module).
    pub normalized: bool,
    /// Whether a request may ask for fewer dimensions (Matryoshka-trained models keep meaning in a prefix of the
    /// vector). A sentence-transformers directory does not declare it, so this is false for every model hearth
    /// loads today: a request for other than `dimensions` dimensions is the caller's 400.
    pub supports_dimensions: bool,
}

pub struct Embedder {
    model: Box<dyn Encoder>,
    tokenizer: Tokenizer,
    info: EmbedderInfo,
    device: Device,
    lowercase: bool,
    pub(super) opts: EmbedderOptions,
}

impl Embedder {
    /// Resolve `spec` like `--model` (path, alias, Hugging Face id) and load the embedder.
    pub fn load(spec: &str, device: &Device, opts: &EmbedderOptions) -> Result<Self> {
        match resolve(spec)? {
            ModelLocation::HfDir(dir) => Self::from_dir(&dir, device, opts),
            ModelLocation::Gguf(p) => Err(Error::Unsupported(format!(
                "{}: embedding models load from a sentence-transformers directory (config.json, model.safetensors, \
                 modules.json), not GGUF",
                p.display()
            ))),
        }
    }

    /// Load from a sentence-transformers directory (a BERT or causal-decoder transformer), or a plain BERT one.
    pub fn from_dir(dir: &Path, device: &Device, opts: &EmbedderOptions) -> Result<Self> {
        if opts.dtype != DType::F32 && (device.is_cpu() || !matches!(opts.dtype, DType::BF16 | DType::F16)) {
            return Err(Error::Unsupported(format!(
                "embedding dtype {:?} here: the CPU computes in f32; GPUs take f32, bf16 or f16",
                opts.dtype
            )));
        }
        let st = SentenceConfig::read(dir)?;
        let tdir = &st.transformer_dir;
        let model = load_encoder(tdir, st.declared, device, opts.dtype)?;
        if let Some(d) = st.dimension.filter(|&d| d != model.hidden_size()) {
            return Err(Error::InvalidModel(format!(
                "the pooling config says {d} dimensions but the model's hidden size is {}",
                model.hidden_size()
            )));
        }
        if !st.declared {
            tracing::warn!("{}: no modules.json; embedding with mean pooling, unnormalized", dir.display());
        }
        let tokenizer = Tokenizer::from_hf_dir(tdir)?;
        if tokenizer.vocab_size() > model.vocab_size() {
            return Err(Error::InvalidModel(format!(
                "tokenizer has {} tokens but the model's vocabulary is {}",
                tokenizer.vocab_size(),
                model.vocab_size()
            )));
        }
        let max_positions = model.max_positions();
        let info = EmbedderInfo {
            dir: dir.to_path_buf(),
            dimensions: model.hidden_size(),
            max_input_tokens: st.max_seq_length.map_or(max_positions, |n| n.min(max_positions)),
            vocab_size: model.vocab_size(),
            pooling: st.pooling,
            normalized: st.normalize,
            supports_dimensions: false,
        };
        Ok(Self { model, tokenizer, info, device: device.clone(), lowercase: st.lowercase, opts: opts.clone() })
    }

    pub fn info(&self) -> &EmbedderInfo {
        &self.info
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Token ids of one input text as the model expects them: special tokens added by the tokenizer's
    /// post-processor (BERT: `[CLS] ... [SEP]`; Qwen3-Embedding: a trailing `<|endoftext|>`), lowercased first where
    /// the directory asks for it.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        if self.lowercase {
            return self.tokenizer.encode(&text.to_lowercase(), true);
        }
        self.tokenizer.encode(text, true)
    }

    /// Why input `index` cannot be embedded, if it cannot: empty, longer than `max_input_tokens`, or holding an
    /// id outside the vocabulary.
    pub fn check_input(&self, index: usize, ids: &[u32]) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidRequest(format!("input {index}: {m}")));
        if ids.is_empty() {
            return bad("no tokens".into());
        }
        if ids.len() > self.info.max_input_tokens {
            return bad(format!(
                "{} tokens; this model takes at most {} per input",
                ids.len(),
                self.info.max_input_tokens
            ));
        }
        if let Some(id) = ids.iter().find(|&&id| id as usize >= self.info.vocab_size) {
            return bad(format!("token id {id} is outside the vocabulary (size {})", self.info.vocab_size));
        }
        Ok(())
    }

    /// One vector per input, in input order. Inputs are checked first ([`Embedder::check_input`]; an invalid
    /// one fails the whole call before any compute), then run in padded batches within the load options' limits.
    pub fn embed<T: AsRef<[u32]>>(&self, inputs: &[T]) -> Result<Vec<Vec<f32>>> {
        for (i, ids) in inputs.iter().enumerate() {
            self.check_input(i, ids.as_ref())?;
        }
        let lens: Vec<usize> = inputs.iter().map(|ids| ids.as_ref().len()).collect();
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); inputs.len()];
        for batch in plan(&lens, self.opts.limits) {
            let rows: Vec<&[u32]> = batch.iter().map(|&i| inputs[i].as_ref()).collect();
            for (i, v) in batch.into_iter().zip(self.embed_batch(&rows)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// One forward pass over right-padded rows.
    fn embed_batch(&self, rows: &[&[u32]]) -> Result<Vec<Vec<f32>>> {
        let lens: Vec<usize> = rows.iter().map(|r| r.len()).collect();
        let l = lens.iter().copied().max().unwrap_or(0);
        let (mut ids, mut mask) = (vec![0u32; rows.len() * l], vec![0f32; rows.len() * l]);
        for (i, r) in rows.iter().enumerate() {
            ids[i * l..i * l + r.len()].copy_from_slice(r);
            mask[i * l..i * l + r.len()].fill(1.0);
        }
        let ids = Tensor::from_vec(ids, (rows.len(), l), &self.device)?;
        let mask = Tensor::from_vec(mask, (rows.len(), l), &self.device)?;
        let hidden = self.model.forward(&ids, &mask)?;
        let mut v = self.info.pooling.apply(&hidden, &mask, &lens)?;
        if self.info.normalized {
            v = l2_normalize(&v)?;
        }
        Ok(v.to_vec2::<f32>()?)
    }
}

/// The transformer of `dir`, by its `config.json`'s `model_type`: BERT, or a causal decoder of the Llama family.
/// A decoder needs the directory's sentence-transformers files (`declared`): without them it is a generative
/// model, and no pooling default would make it an embedding model.
fn load_encoder(dir: &Path, declared: bool, device: &Device, dtype: DType) -> Result<Box<dyn Encoder>> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let cfg: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::InvalidModel(format!("{}: {e}", path.display())))?;
    let model_type = cfg.get("model_type").and_then(|t| t.as_str()).unwrap_or_default();
    if model_type == "bert" {
        let cfg = BertConfig::from_json(&text)?;
        let weights = Weights::Hf(HfWeights::open(dir)?);
        return Ok(Box::new(Bert::load(&weights, &cfg, device, dtype)?));
    }
    if DECODER_TYPES.contains(&model_type) {
        if !declared {
            return Err(Error::Unsupported(format!(
                "{}: a generative `{model_type}` model without modules.json; a decoder embeds only as a \
                 sentence-transformers model that declares its pooling (modules.json, 1_Pooling/config.json)",
                dir.display()
            )));
        }
        return Ok(Box::new(DecoderEncoder::load(dir, &text, device, dtype)?));
    }
    let archs = cfg.get("architectures").map(|a| a.to_string()).unwrap_or_default();
    Err(Error::Unsupported(format!(
        "{}: embedding model type `{model_type}` {archs}; hearth embeds with BERT (`bert`) or a causal decoder ({})",
        path.display(),
        DECODER_TYPES.join(", ")
    )))
}
