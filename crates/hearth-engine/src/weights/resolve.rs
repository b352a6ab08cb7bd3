//! Resolving `--model`: a `.gguf` path, a Hugging Face directory, a Hugging Face id in the local HF cache, or an
//! alias of a model fetched by `scripts/fetch-models`.

use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// Aliases of the models `scripts/fetch-models` puts in the model cache: (alias, name in the cache). The name is a
/// `.gguf` file or a Hugging Face directory (the sentence-transformers embedding model).
pub const ALIASES: &[(&str, &str)] = &[
    ("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("gemma3-270m", "gemma-3-270m-q4_k_m.gguf"),
    ("all-minilm-l6-v2", "all-minilm-l6-v2"),
    ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
    ("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
];

/// The default model: SmolLM2-135M-Instruct.
pub const DEFAULT_MODEL: &str = "smollm2-135m";

#[derive(Debug, Clone, PartialEq)]
pub enum ModelLocation {
    Gguf(PathBuf),
    HfDir(PathBuf),
}

impl ModelLocation {
    pub fn path(&self) -> &Path {
        match self {
            ModelLocation::Gguf(p) | ModelLocation::HfDir(p) => p,
        }
    }
}

/// hearth's model cache: `$HEARTH_MODELS`, else `~/.cache/hearth/models`.
pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("HEARTH_MODELS").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    home().join(".cache").join("hearth").join("models")
}

fn home() -> PathBuf {
    std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."))
}

/// The Hugging Face hub cache: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`.
pub fn hf_hub_cache() -> PathBuf {
    if let Some(d) = std::env::var_os("HF_HUB_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("HF_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("hub");
    }
    home().join(".cache").join("huggingface").join("hub")
}

/// The `refs/main` snapshot of `org/name` in the HF cache, if present.
pub fn hf_cache_snapshot(id: &str) -> Option<PathBuf> {
    let repo = hf_hub_cache().join(format!("models--{}", id.replace('/', "--")));
    let rev = std::fs::read_to_string(repo.join("refs").join("main")).ok()?;
    let snap = repo.join("snapshots").join(rev.trim());
    snap.is_dir().then_some(snap)
}

fn looks_like_hf_id(s: &str) -> bool {
    let mut parts = s.split('/');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| {
            !p.is_empty() && p != "." && p != ".." && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
    };
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
}

fn classify_dir(dir: &Path) -> Result<ModelLocation> {
    if dir.join("config.json").is_file() {
        return Ok(ModelLocation::HfDir(dir.to_path_buf()));
    }
    let ggufs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    match ggufs.as_slice() {
        [one] => Ok(ModelLocation::Gguf(one.clone())),
        [] => Err(Error::ModelNotFound(format!(
            "{}: a model directory needs config.json + *.safetensors, or exactly one .gguf file",
            dir.display()
        ))),
        _ => Err(Error::ModelNotFound(format!(
            "{}: holds several .gguf files; pass the one you want as --model PATH.gguf",
            dir.display()
        ))),
    }
}

/// An alias's entry in the model cache, if fetched: a `.gguf` file or a directory with `config.json`.
fn fetched(p: &Path) -> Option<ModelLocation> {
    if p.is_file() {
        Some(ModelLocation::Gguf(p.to_path_buf()))
    } else if p.join("config.json").is_file() {
        Some(ModelLocation::HfDir(p.to_path_buf()))
    } else {
        None
    }
}

/// Resolve `--model` to a location on disk, or say exactly what was tried.
pub fn resolve(spec: &str) -> Result<ModelLocation> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err(Error::ModelNotFound("--model is empty".into()));
    }
    let path = Path::new(spec);
    if path.is_file() {
        return if path.extension().is_some_and(|x| x.eq_ignore_ascii_case("gguf")) {
            Ok(ModelLocation::Gguf(path.to_path_buf()))
        } else {
            Err(Error::Unsupported(format!(
                "{spec}: a model file must be .gguf; for safetensors pass the directory holding config.json"
            )))
        };
    }
    if path.is_dir() {
        return classify_dir(path);
    }
    if let Some((_, name)) = ALIASES.iter().find(|(a, _)| a.eq_ignore_ascii_case(spec)) {
        let p = models_dir().join(name);
        return match fetched(&p) {
            Some(loc) => Ok(loc),
            None => Err(Error::ModelNotFound(format!(
                "model `{spec}` is not fetched yet ({} missing); run scripts/fetch-models {}",
                p.display(),
                spec.to_ascii_lowercase()
            ))),
        };
    }
    if looks_like_hf_id(spec) {
        if let Some(snap) = hf_cache_snapshot(spec) {
            return classify_dir(&snap);
        }
    }
    let aliases: Vec<&str> = ALIASES.iter().map(|(a, _)| *a).collect();
    Err(Error::ModelNotFound(format!(
        "model `{spec}` not found: not a file or directory, not an alias ({}), and not in the Hugging Face cache ({}); \
         `hearth models` lists what is available",
        aliases.join(", "),
        hf_hub_cache().display()
    )))
}

/// One entry of `hearth models`.
#[derive(Debug, Clone)]
pub struct ListedModel {
    pub name: String,
    pub location: Option<ModelLocation>,
    pub note: String,
}

/// Everything `--model` can resolve without a path: aliases (fetched or not) and HF cache entries.
pub fn list_models() -> Vec<ListedModel> {
    let mut out = Vec::new();
    for (alias, name) in ALIASES {
        if let Some(loc) = fetched(&models_dir().join(name)) {
            out.push(ListedModel { name: alias.to_string(), location: Some(loc), note: String::new() });
        } else {
            out.push(ListedModel {
                name: alias.to_string(),
                location: None,
                note: format!("not fetched: run scripts/fetch-models {alias}"),
            });
        }
    }
    if let Ok(rd) = std::fs::read_dir(hf_hub_cache()) {
        let mut ids: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                e.file_name().to_str().and_then(|n| n.strip_prefix("models--")).map(|n| n.replacen("--", "/", 1))
            })
            .collect();
        ids.sort();
        for id in ids {
            match hf_cache_snapshot(&id).map(|s| classify_dir(&s)) {
                Some(Ok(loc)) => out.push(ListedModel { name: id, location: Some(loc), note: String::new() }),
                Some(Err(e)) => out.push(ListedModel { name: id, location: None, note: e.to_string() }),
                None => out.push(ListedModel { name: id, location: None, note: "no refs/main snapshot".into() }),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_id_shape() {
        assert!(looks_like_hf_id("HuggingFaceTB/SmolLM2-135M-Instruct"));
        assert!(!looks_like_hf_id("a/b/c"));
        assert!(!looks_like_hf_id("../x"));
        assert!(!looks_like_hf_id("plain"));
    }

    #[test]
    fn unknown_model_names_what_was_tried() {
        let e = resolve("no-such-model-xyz").unwrap_err().to_string();
        assert!(e.contains("not an alias") && e.contains("smollm2-135m"), "{e}");
    }

    #[test]
    fn non_gguf_file_is_refused() {
        let e = resolve("Cargo.toml").unwrap_err().to_string();
        assert!(e.contains(".gguf"), "{e}");
    }
}
