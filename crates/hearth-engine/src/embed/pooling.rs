//! How token states become one vector: the pooling mode and normalization a sentence-transformers directory
//! declares in `modules.json`, `1_Pooling/config.json` and `sentence_bert_config.json`.

use crate::{Error, Result};
use candle_core::{DType, Tensor};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One vector per row from its real (unmasked) token states. A decoder embedder (causal attention) pools the
/// same way; its configuration names `LastToken`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Average of the real tokens' states.
    Mean,
    /// The first token's state (BERT's `[CLS]`).
    Cls,
    /// Element-wise maximum over the real tokens.
    Max,
    /// The last real token's state (decoder embedders, whose last token has seen the whole input).
    LastToken,
}

impl Pooling {
    /// The sentence-transformers name of the mode (its pooling config's `pooling_mode`).
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Max => "max",
            Pooling::LastToken => "lasttoken",
        }
    }

    /// hidden: (B, L, H); mask: (B, L), 1 for real tokens and 0 for padding; lens: real tokens per row (rows are
    /// right-padded). Returns (B, H) f32.
    pub fn apply(self, hidden: &Tensor, mask: &Tensor, lens: &[usize]) -> Result<Tensor> {
        let h = hidden.to_dtype(DType::F32)?;
        let (b, l, width) = h.dims3()?;
        if lens.len() != b || lens.iter().any(|&n| n == 0 || n > l) {
            return Err(Error::InvalidRequest(format!("pooling {b} rows of {l} positions with lengths {lens:?}")));
        }
        let mask = mask.to_dtype(DType::F32)?;
        let m3 = mask.unsqueeze(2)?;
        Ok(match self {
            Pooling::Mean => {
                // sentence-transformers clamps the count at 1e-9.
                let count = mask.sum_keepdim(1)?.clamp(1e-9f32, f32::MAX)?;
                h.broadcast_mul(&m3)?.sum(1)?.broadcast_div(&count)?
            }
            Pooling::Max => {
                // Padding set to -1e9 before the maximum, as sentence-transformers does.
                let pad = (m3.affine(1.0, -1.0)? * 1e9)?;
                h.broadcast_mul(&m3)?.broadcast_add(&pad)?.max(1)?
            }
            Pooling::Cls | Pooling::LastToken => {
                let rows: Vec<u32> = lens
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| (i * l + if self == Pooling::Cls { 0 } else { n - 1 }) as u32)
                    .collect();
                let idx = Tensor::new(rows.as_slice(), h.device())?;
                h.reshape((b * l, width))?.index_select(&idx, 0)?
            }
        })
    }
}

/// x / max(‖x‖₂, 1e-12) per row (torch's `F.normalize`). x: (B, H) f32.
pub fn l2_normalize(x: &Tensor) -> Result<Tensor> {
    let norm = x.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12f32, f32::MAX)?;
    Ok(x.broadcast_div(&norm)?)
}

/// What a sentence-transformers directory declares around its transformer.
#[derive(Debug, Clone, PartialEq)]
pub struct SentenceConfig {
    /// The transformer module's directory (config.json, weights, tokenizer.json): the model directory itself in
    /// current layouts, `0_Transformer/` in old ones.
    pub transformer_dir: PathBuf,
    pub pooling: Pooling,
    /// A `Normalize` module follows the pooling: vectors have unit L2 norm.
    pub normalize: bool,
    /// `sentence_bert_config.json`'s `max_seq_length`: sentence-transformers cuts inputs there.
    pub max_seq_length: Option<usize>,
    /// `sentence_bert_config.json`'s `do_lower_case`: text is lowercased before tokenization.
    pub lowercase: bool,
    /// The pooling config's `word_embedding_dimension`, checked against the model's hidden size.
    pub dimension: Option<usize>,
    /// The directory has `modules.json` (it is a sentence-transformers model); otherwise the defaults above.
    pub declared: bool,
}

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    idx: usize,
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

fn read_json(path: &Path) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    serde_json::from_str(&text).map(Some).map_err(|e| Error::InvalidModel(format!("{}: {e}", path.display())))
}

/// A module path from `modules.json`, kept inside the model directory.
fn module_dir(dir: &Path, path: &str) -> Result<PathBuf> {
    if Path::new(path).is_absolute() || path.split(['/', '\\']).any(|p| p == "..") {
        return Err(Error::InvalidModel(format!("modules.json: module path `{path}` leaves the model directory")));
    }
    Ok(dir.join(path))
}

impl SentenceConfig {
    /// Read the sentence-transformers files of `dir`. Without `modules.json` the directory is a plain transformer
    /// and gets sentence-transformers' own default: mean pooling, no normalization.
    pub fn read(dir: &Path) -> Result<Self> {
        let Some(modules) = read_json(&dir.join("modules.json"))? else {
            return Self::with_defaults(
                dir.to_path_buf(),
                Pooling::Mean,
                false,
                &dir.join("sentence_bert_config.json"),
            );
        };
        let mut modules: Vec<Module> = serde_json::from_value(modules)
            .map_err(|e| Error::InvalidModel(format!("{}: {e}", dir.join("modules.json").display())))?;
        modules.sort_by_key(|m| m.idx);
        let kind = |m: &Module| m.kind.rsplit('.').next().unwrap_or_default().to_string();
        let kinds: Vec<String> = modules.iter().map(kind).collect();
        let [first, second, rest @ ..] = kinds.as_slice() else {
            return Err(Error::Unsupported(format!(
                "modules.json lists {kinds:?}; hearth embeds with Transformer, Pooling and an optional Normalize"
            )));
        };
        let normalize = matches!(rest, [n] if n.as_str() == "Normalize");
        if first.as_str() != "Transformer" || second.as_str() != "Pooling" || (!rest.is_empty() && !normalize) {
            return Err(Error::Unsupported(format!(
                "modules.json lists {:?}; hearth embeds with Transformer, Pooling and an optional Normalize \
                 (no Dense or other modules)",
                modules.iter().map(|m| m.kind.as_str()).collect::<Vec<_>>()
            )));
        }
        let transformer_dir = module_dir(dir, &modules[0].path)?;
        let pooling_path = module_dir(dir, &modules[1].path)?.join("config.json");
        let pooling_cfg = read_json(&pooling_path)?
            .ok_or_else(|| Error::InvalidModel(format!("{} is missing", pooling_path.display())))?;
        let pooling = pooling_from_config(&pooling_cfg)
            .map_err(|e| Error::Unsupported(format!("{}: {e}", pooling_path.display())))?;
        let mut cfg = Self::with_defaults(
            transformer_dir.clone(),
            pooling,
            normalize,
            &transformer_dir.join("sentence_bert_config.json"),
        )?;
        cfg.dimension = dimension_from_config(&pooling_cfg);
        cfg.declared = true;
        Ok(cfg)
    }

    fn with_defaults(transformer_dir: PathBuf, pooling: Pooling, normalize: bool, sbert: &Path) -> Result<Self> {
        let sbert = read_json(sbert)?;
        let get = |k: &str| sbert.as_ref().and_then(|s| s.get(k));
        Ok(Self {
            transformer_dir,
            pooling,
            normalize,
            max_seq_length: get("max_seq_length").and_then(Value::as_u64).map(|n| n as usize),
            lowercase: get("do_lower_case").and_then(Value::as_bool).unwrap_or(false),
            dimension: None,
            declared: false,
        })
    }
}

/// The pooling config's mode names (`pooling_mode`) and the legacy boolean keys that stand for them.
const LEGACY_KEYS: [(&str, &str); 6] = [
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_lasttoken", "lasttoken"),
    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
    ("pooling_mode_weightedmean_tokens", "weightedmean"),
];

/// The one pooling mode a `1_Pooling/config.json` turns on: `pooling_mode` (a name or a list of names, as
/// sentence-transformers 6 saves it) or the legacy `pooling_mode_*_tokens` booleans; neither means mean pooling,
/// sentence-transformers' default.
pub fn pooling_from_config(cfg: &Value) -> std::result::Result<Pooling, String> {
    const KNOWN: [Pooling; 4] = [Pooling::Mean, Pooling::Cls, Pooling::Max, Pooling::LastToken];
    let obj = cfg.as_object().ok_or("the pooling config is not a JSON object")?;
    if obj.get("include_prompt").and_then(Value::as_bool) == Some(false) {
        return Err("include_prompt false (pooling that skips an instruction prefix) is not supported".into());
    }
    let on: Vec<String> = match obj.get("pooling_mode") {
        Some(Value::String(m)) => vec![m.clone()],
        Some(Value::Array(ms)) => ms.iter().map(|m| m.as_str().unwrap_or("?").to_string()).collect(),
        Some(other) => return Err(format!("pooling_mode {other} is neither a name nor a list of names")),
        None if !LEGACY_KEYS.iter().any(|(k, _)| obj.contains_key(*k)) => vec!["mean".into()],
        None => LEGACY_KEYS
            .iter()
            .filter(|(k, _)| obj.get(*k).and_then(Value::as_bool) == Some(true))
            .map(|(_, m)| m.to_string())
            .collect(),
    };
    let supported = "mean, cls, max or lasttoken";
    match on.as_slice() {
        [one] => KNOWN
            .into_iter()
            .find(|p| p.name() == one)
            .ok_or_else(|| format!("pooling mode `{one}` is not supported; hearth pools with one of {supported}")),
        [] => Err(format!("no pooling mode is on; hearth pools with one of {supported}")),
        many => Err(format!(
            "several pooling modes are on ({}): their vectors would be concatenated, which hearth does not do; \
             it pools with one of {supported}",
            many.join(", ")
        )),
    }
}

/// The pooling config's vector width (`embedding_dimension`, legacy `word_embedding_dimension`).
pub fn dimension_from_config(cfg: &Value) -> Option<usize> {
    ["embedding_dimension", "word_embedding_dimension"]
        .iter()
        .find_map(|k| cfg.get(*k).and_then(Value::as_u64))
        .map(|d| d as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use serde_json::json;

    #[test]
    fn pooling_config_picks_exactly_one_mode() {
        let cfg = |mean, cls, max| {
            json!({"word_embedding_dimension": 4, "pooling_mode_mean_tokens": mean, "pooling_mode_cls_token": cls,
                   "pooling_mode_max_tokens": max, "pooling_mode_mean_sqrt_len_tokens": false})
        };
        assert_eq!(pooling_from_config(&cfg(true, false, false)), Ok(Pooling::Mean));
        assert_eq!(pooling_from_config(&cfg(false, true, false)), Ok(Pooling::Cls));
        assert_eq!(pooling_from_config(&cfg(false, false, true)), Ok(Pooling::Max));
        assert_eq!(pooling_from_config(&json!({"pooling_mode_lasttoken": true})), Ok(Pooling::LastToken));
        assert!(pooling_from_config(&cfg(true, true, false)).unwrap_err().contains("several"));
        assert!(pooling_from_config(&cfg(false, false, false)).unwrap_err().contains("no pooling mode"));
        let e = pooling_from_config(&json!({"pooling_mode_weightedmean_tokens": true})).unwrap_err();
        assert!(e.contains("weightedmean") && e.contains("not supported"), "{e}");
        // sentence-transformers 6's layout, and its default.
        assert_eq!(pooling_from_config(&json!({"pooling_mode": "cls", "embedding_dimension": 4})), Ok(Pooling::Cls));
        assert_eq!(pooling_from_config(&json!({"pooling_mode": ["lasttoken"]})), Ok(Pooling::LastToken));
        assert!(pooling_from_config(&json!({"pooling_mode": ["mean", "max"]})).unwrap_err().contains("several"));
        assert_eq!(pooling_from_config(&json!({"embedding_dimension": 4})), Ok(Pooling::Mean));
        assert_eq!(dimension_from_config(&json!({"embedding_dimension": 4})), Some(4));
        assert_eq!(dimension_from_config(&cfg(true, false, false)), Some(4));
        let e = pooling_from_config(&json!({"pooling_mode_mean_tokens": true, "include_prompt": false})).unwrap_err();
        assert!(e.contains("include_prompt"), "{e}");
    }

    fn write(dir: &Path, name: &str, v: Value) {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v.to_string()).unwrap();
    }

    #[test]
    fn reads_a_sentence_transformers_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let t = "sentence_transformers.models.";
        write(
            d,
            "modules.json",
            json!([{"idx": 1, "name": "1", "path": "1_Pooling", "type": format!("{t}Pooling")},
                   {"idx": 0, "name": "0", "path": "", "type": format!("{t}Transformer")},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": format!("{t}Normalize")}]),
        );
        write(d, "1_Pooling/config.json", json!({"word_embedding_dimension": 384, "pooling_mode_cls_token": true}));
        write(d, "sentence_bert_config.json", json!({"max_seq_length": 256, "do_lower_case": false}));
        let c = SentenceConfig::read(d).unwrap();
        assert_eq!(
            c,
            SentenceConfig {
                transformer_dir: d.to_path_buf(),
                pooling: Pooling::Cls,
                normalize: true,
                max_seq_length: Some(256),
                lowercase: false,
                dimension: Some(384),
                declared: true,
            }
        );

        // A Dense module changes the vectors: refused, named.
        write(
            d,
            "modules.json",
            json!([{"idx": 0, "path": "", "type": format!("{t}Transformer")},
                   {"idx": 1, "path": "1_Pooling", "type": format!("{t}Pooling")},
                   {"idx": 2, "path": "2_Dense", "type": format!("{t}Dense")}]),
        );
        let e = SentenceConfig::read(d).unwrap_err().to_string();
        assert!(e.contains("Dense"), "{e}");

        // Module paths stay inside the directory.
        write(
            d,
            "modules.json",
            json!([{"idx": 0, "path": "../x", "type": format!("{t}Transformer")},
                   {"idx": 1, "path": "1_Pooling", "type": format!("{t}Pooling")}]),
        );
        assert!(SentenceConfig::read(d).unwrap_err().to_string().contains("leaves"));

        // No modules.json: sentence-transformers' default.
        std::fs::remove_file(d.join("modules.json")).unwrap();
        let c = SentenceConfig::read(d).unwrap();
        assert_eq!((c.pooling, c.normalize, c.max_seq_length, c.declared), (Pooling::Mean, false, Some(256), false));
    }

    #[test]
    fn pooling_ignores_padding() {
        let dev = Device::Cpu;
        // Row 0: 3 real tokens; row 1: 2 real tokens and one padding position holding large values.
        let h =
            Tensor::new(&[[[1f32, -2.0], [3.0, 0.0], [5.0, 4.0]], [[2f32, 1.0], [-4.0, 3.0], [100.0, 100.0]]], &dev)
                .unwrap();
        let mask = Tensor::new(&[[1f32, 1.0, 1.0], [1.0, 1.0, 0.0]], &dev).unwrap();
        let lens = [3, 2];
        let run = |p: Pooling| p.apply(&h, &mask, &lens).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(run(Pooling::Mean), vec![vec![3.0, 2.0 / 3.0], vec![-1.0, 2.0]]);
        assert_eq!(run(Pooling::Max), vec![vec![5.0, 4.0], vec![2.0, 3.0]]);
        assert_eq!(run(Pooling::Cls), vec![vec![1.0, -2.0], vec![2.0, 1.0]]);
        assert_eq!(run(Pooling::LastToken), vec![vec![5.0, 4.0], vec![-4.0, 3.0]]);
        let n = l2_normalize(&Tensor::new(&[[3f32, 4.0], [0.0, 0.0]], &dev).unwrap()).unwrap();
        assert_eq!(n.to_vec2::<f32>().unwrap(), vec![vec![0.6, 0.8], vec![0.0, 0.0]]);
    }
}
