//! Loading a model by name: resolve `--model` to files, open the weights and configuration (reading
//! `generation_config.json` once), build the tokenizer and chat template, and build the model on a device.

use crate::models::{load_model, LoadOptions, Model};
use crate::tokenizer::{ChatTemplate, Tokenizer};
use crate::weights::config::IdOrIds;
use crate::weights::resolve::{resolve, ModelLocation};
use crate::weights::{GgufFile, HfWeights, ModelConfig, Weights};
use crate::{Error, Result};
use candle_core::Device;
use std::path::Path;
use std::time::{Duration, Instant};

pub struct LoadedModel {
    pub model: Box<dyn Model>,
    pub tokenizer: Tokenizer,
    pub location: ModelLocation,
    pub device: Device,
    /// The model's `generation_config.json` (Hugging Face directories), for sampling defaults.
    pub generation_config: Option<serde_json::Value>,
    /// Names this model's KV: weights (sampled), configuration, tokenizer and load options. The prompt cache's
    /// block addresses and SSD files are shared only under an equal fingerprint.
    pub fingerprint: u128,
    pub load_time: Duration,
}

/// Resolve `spec`, load weights, tokenizer and chat template (`chat_template` overrides the model's own).
pub fn load(spec: &str, device: &Device, chat_template: Option<&Path>) -> Result<LoadedModel> {
    load_with(spec, device, chat_template, &LoadOptions::default())
}

/// A model's text side without its weights: what a server whose engine runs in another process needs.
pub struct TextSide {
    pub tokenizer: Tokenizer,
    pub config: ModelConfig,
    pub location: ModelLocation,
    pub generation_config: Option<serde_json::Value>,
}

/// Resolve `spec` and load its tokenizer and chat template (`chat_template` overrides the model's own), reading the
/// weights' metadata but not the weights.
pub fn load_text_side(spec: &str, chat_template: Option<&Path>) -> Result<TextSide> {
    let location = resolve(spec)?;
    let (_, config, side) = open_text_side(location, chat_template)?;
    Ok(TextSide { config, ..side })
}

/// Open the weights and build the text side on them.
fn open_text_side(location: ModelLocation, chat_template: Option<&Path>) -> Result<(Weights, ModelConfig, TextSide)> {
    let (weights, mut cfg) = open_weights(&location)?;
    let generation_config = read_generation_config(&location);
    if let Some(g) = &generation_config {
        merge_generation_config_eos(g, &mut cfg);
    }
    let mut tokenizer = Tokenizer::load(&location, &cfg)?;
    if tokenizer.vocab_size() > cfg.vocab_size {
        return Err(Error::InvalidModel(format!(
            "tokenizer has {} tokens but the model's vocabulary is {}",
            tokenizer.vocab_size(),
            cfg.vocab_size
        )));
    }
    if let Some(path) = chat_template {
        tokenizer.chat_template = Some(ChatTemplate::from_file(path, &tokenizer.bos_token(), &tokenizer.eos_token())?);
    }
    let side = TextSide { tokenizer, config: cfg.clone(), location, generation_config };
    Ok((weights, cfg, side))
}

pub fn load_with(spec: &str, device: &Device, chat_template: Option<&Path>, opts: &LoadOptions) -> Result<LoadedModel> {
    let t0 = Instant::now();
    let (weights, cfg, side) = open_text_side(resolve(spec)?, chat_template)?;
    let TextSide { tokenizer, location, generation_config, .. } = side;
    let what = format!("{}'s weights ({})", location.path().display(), describe_weights(&weights, opts));
    crate::sizing::admit(
        &what,
        crate::sizing::weights_bytes(&weights, device, opts),
        crate::sizing::available_memory(device),
        "free memory, or pick a smaller model or quantization",
    )
    .map_err(Error::OutOfMemory)?;
    let model = load_model(&weights, &cfg, device, opts)?;
    drop(weights);
    crate::malloc::release_free();
    let fingerprint = fingerprint(&location, &tokenizer, &format!("{cfg:?}/{opts:?}"))?;
    Ok(LoadedModel {
        model,
        tokenizer,
        location,
        device: device.clone(),
        generation_config,
        fingerprint,
        load_time: t0.elapsed(),
    })
}

/// How the weights will be held, for messages: GGUF's stored types, or the dtype they are converted to.
fn describe_weights(w: &Weights, opts: &LoadOptions) -> String {
    match w {
        Weights::Gguf(_) if opts.dequantize => "GGUF, dequantized to f32".into(),
        Weights::Gguf(_) => "GGUF, as stored".into(),
        Weights::Hf(_) => "safetensors, in the compute dtype".into(),
    }
}

/// Open the weights at a resolved location and read their configuration.
pub fn open_weights(loc: &ModelLocation) -> Result<(Weights, ModelConfig)> {
    match loc {
        ModelLocation::Gguf(p) => {
            let g = GgufFile::open(p)?;
            let cfg = ModelConfig::from_gguf(&g)?;
            Ok((Weights::Gguf(g), cfg))
        }
        ModelLocation::HfDir(d) => {
            let path = d.join("config.json");
            let text =
                std::fs::read_to_string(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            let cfg = ModelConfig::from_hf_json(&text)?;
            Ok((Weights::Hf(HfWeights::open(d)?), cfg))
        }
    }
}

/// A Hugging Face directory's `generation_config.json`, if it has a readable one (a malformed file is logged and
/// ignored: it only refines defaults).
fn read_generation_config(loc: &ModelLocation) -> Option<serde_json::Value> {
    let ModelLocation::HfDir(d) = loc else { return None };
    let path = d.join("generation_config.json");
    let text = std::fs::read_to_string(&path).ok()?;
    match serde_json::from_str(&text) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!("ignoring {}: {e}", path.display());
            None
        }
    }
}

/// `generation_config.json` may name more EOS ids than config.json (Llama 3 instruct does).
fn merge_generation_config_eos(g: &serde_json::Value, cfg: &mut ModelConfig) {
    let Some(e) = g.get("eos_token_id").cloned() else { return };
    if let Ok(ids) = serde_json::from_value::<IdOrIds>(e) {
        for id in ids.ids() {
            if !cfg.eos_token_ids.contains(&id) {
                cfg.eos_token_ids.push(id);
            }
        }
    }
}

/// A draft model must tokenize as its target does (speculation hands token ids between them): the same
/// vocabulary, token for token, and the same end-of-sequence ids.
pub fn check_same_vocabulary(target: &Tokenizer, draft: &Tokenizer) -> Result<()> {
    let mismatch = |what: String| {
        Err(Error::InvalidModel(format!("the draft model's tokenizer differs from the model's: {what}")))
    };
    if target.vocab_size() != draft.vocab_size() {
        return mismatch(format!("{} tokens against {}", draft.vocab_size(), target.vocab_size()));
    }
    if let Some(id) = (0..target.vocab_size() as u32).find(|&id| target.token_bytes(id) != draft.token_bytes(id)) {
        let show = |t: &Tokenizer| String::from_utf8_lossy(t.token_bytes(id)).into_owned();
        return mismatch(format!(
            "token {id} is {:?} in the draft model and {:?} in the model",
            show(draft),
            show(target)
        ));
    }
    if target.eos_ids() != draft.eos_ids() {
        return mismatch(format!("end-of-sequence ids {:?} against {:?}", draft.eos_ids(), target.eos_ids()));
    }
    Ok(())
}

/// A fingerprint of the model's files (each one's name, size and its first and last MiB: cheap for any size,
/// and any re-quantization or fine-tune changes them), the tokenizer's vocabulary, and `extra` (configuration and
/// load options).
pub fn fingerprint(loc: &ModelLocation, tokenizer: &Tokenizer, extra: &str) -> Result<u128> {
    use std::io::{Read, Seek, SeekFrom};
    const SAMPLE: u64 = 1 << 20;
    let mut files: Vec<std::path::PathBuf> = match loc {
        ModelLocation::Gguf(p) => vec![p.clone()],
        ModelLocation::HfDir(d) => std::fs::read_dir(d)
            .map_err(|e| Error::io(format!("listing {}", d.display()), e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect(),
    };
    files.sort();
    let mut buf = Vec::new();
    for f in &files {
        let io = |e| Error::io(format!("reading {}", f.display()), e);
        let mut file = std::fs::File::open(f).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        buf.extend_from_slice(f.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default());
        buf.extend_from_slice(&len.to_le_bytes());
        let mut head = Vec::new();
        file.by_ref().take(SAMPLE).read_to_end(&mut head).map_err(io)?;
        buf.extend_from_slice(&head);
        if len > 2 * SAMPLE {
            file.seek(SeekFrom::Start(len - SAMPLE)).map_err(io)?;
            let mut tail = Vec::new();
            file.take(SAMPLE).read_to_end(&mut tail).map_err(io)?;
            buf.extend_from_slice(&tail);
        }
    }
    for id in 0..tokenizer.vocab_size() as u32 {
        buf.extend_from_slice(tokenizer.token_bytes(id));
        buf.push(0);
    }
    buf.extend_from_slice(extra.as_bytes());
    Ok(xxhash_rust::xxh3::xxh3_128(&buf))
}
