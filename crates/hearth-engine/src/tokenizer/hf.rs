//! Tokenizers from Hugging Face directories: `tokenizer.json`, `tokenizer_config.json`, `chat_template.jinja`.

use super::{ChatTemplate, TokenKind, Tokenizer, VocabInfo};
use crate::{Error, Result};
use serde_json::Value;
use std::path::Path;

fn read_json(path: &Path) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    serde_json::from_str(&text).map(Some).map_err(|e| Error::InvalidModel(format!("{}: {e}", path.display())))
}

/// `"<s>"` or `{"content": "<s>", ...}`
fn token_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(|c| c.as_str()).map(str::to_string),
        _ => None,
    }
}

/// The chat template of a directory: `chat_template.jinja`, else `tokenizer_config.json`'s `chat_template`
/// (a string, or a list of named templates of which `default` is used).
fn chat_template_source(dir: &Path, cfg: Option<&Value>) -> Result<Option<String>> {
    let file = dir.join("chat_template.jinja");
    if file.is_file() {
        return std::fs::read_to_string(&file)
            .map(Some)
            .map_err(|e| Error::io(format!("reading {}", file.display()), e));
    }
    Ok(match cfg.and_then(|c| c.get("chat_template")) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|t| t.get("template").and_then(|s| s.as_str()))
            .map(str::to_string),
        _ => None,
    })
}

pub fn load(dir: &Path) -> Result<Tokenizer> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return Err(Error::ModelNotFound(format!(
            "{}: no tokenizer.json (hearth reads the fast-tokenizer file, not tokenizer.model)",
            dir.display()
        )));
    }
    let mut inner =
        tokenizers::Tokenizer::from_file(&path).map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
    // Padding and truncation saved in the file (sentence-transformers saves both) would pad every encoding to a
    // fixed length or cut it silently; hearth pads its batches and bounds lengths itself.
    inner.with_padding(None);
    inner.with_truncation(None).map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
    let raw = read_json(&path)?.unwrap_or(Value::Null);
    let cfg = read_json(&dir.join("tokenizer_config.json"))?;

    // Vocabulary in id order, with kinds.
    let n = inner.get_vocab_size(true);
    let mut tokens = vec![String::new(); n];
    for (t, id) in inner.get_vocab(true) {
        if let Some(slot) = tokens.get_mut(id as usize) {
            *slot = t;
        }
    }
    let byte_fallback = raw.pointer("/model/byte_fallback").and_then(|b| b.as_bool()).unwrap_or(false);
    let mut kinds: Vec<TokenKind> = tokens
        .iter()
        .map(
            |t| if byte_fallback && t.len() == 6 && t.starts_with("<0x") { TokenKind::Byte } else { TokenKind::Normal },
        )
        .collect();
    if let Some(added) = raw.get("added_tokens").and_then(|a| a.as_array()) {
        for a in added {
            let (Some(id), special) =
                (a.get("id").and_then(|i| i.as_u64()), a.get("special").and_then(|s| s.as_bool()))
            else {
                continue;
            };
            if let Some(k) = kinds.get_mut(id as usize) {
                *k = if special == Some(true) { TokenKind::Control } else { TokenKind::UserDefined };
            }
        }
    }
    let json_has = |ptr: &str, ty: &str| {
        let v = raw.pointer(ptr);
        let s = v.map(|v| v.to_string()).unwrap_or_default();
        s.contains(&format!("\"{ty}\""))
    };
    let byte_level = json_has("/decoder", "ByteLevel") || json_has("/pre_tokenizer", "ByteLevel");

    let id_of = |s: Option<String>| s.and_then(|s| inner.token_to_id(&s));
    let bos_id = id_of(token_string(cfg.as_ref().and_then(|c| c.get("bos_token"))));
    let eos_ids: Vec<u32> = id_of(token_string(cfg.as_ref().and_then(|c| c.get("eos_token")))).into_iter().collect();

    // Does the post-processor add exactly a leading BOS? Then we add it ourselves (so chat prompts that already
    // start with BOS do not get two); anything else the post-processor does is left to it.
    let probe = |add: bool| inner.encode("a", add).map(|e| e.get_ids().to_vec()).unwrap_or_default();
    let (with, without) = (probe(true), probe(false));
    let (add_bos, manual_bos) = if with == without {
        (false, true)
    } else if with.len() == without.len() + 1 && with[1..] == without[..] && Some(with[0]) == bos_id {
        (true, true)
    } else {
        (true, false)
    };
    let clean_up_spaces =
        cfg.as_ref().and_then(|c| c.get("clean_up_tokenization_spaces")).and_then(|b| b.as_bool()).unwrap_or(false);
    let info = VocabInfo { tokens, kinds, byte_level, bos_id, eos_ids, add_bos, manual_bos, clean_up_spaces };
    let mut tok = Tokenizer::from_parts(inner, info, None);
    if let Some(src) = chat_template_source(dir, cfg.as_ref())? {
        tok.chat_template = Some(ChatTemplate::new(&src, &tok.bos_token(), &tok.eos_token())?);
    }
    Ok(tok)
}
