//! Building a `tokenizers` tokenizer from GGUF metadata, the way llama.cpp reads it:
//! - `gpt2`: byte-level BPE; the pre-tokenizer is chosen from `tokenizer.ggml.pre` (an unknown `pre` is refused
//!   rather than guessed, because a wrong split silently changes every prompt);
//! - `llama`: SentencePiece BPE with scores (Gemma): merges are derived from the scores, as Hugging Face's
//!   SentencePiece converter does, with byte fallback.

use super::{TokenKind, VocabInfo};
use crate::weights::GgufFile;
use crate::{Error, Result};
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The `tokenizer.ggml.pre` values hearth knows, as llama.cpp defines them.
pub const KNOWN_PRE: &[&str] = &[
    "default",
    "gpt2",
    "gpt-2",
    "smollm",
    "starcoder",
    "refact",
    "codeshell",
    "llama3",
    "llama-bpe",
    "llama-v3",
    "qwen2",
    "deepseek-r1-qwen",
];

fn split(regex: &str) -> Result<PreTokenizerWrapper> {
    let s = Split::new(SplitPattern::Regex(regex.to_string()), SplitDelimiterBehavior::Isolated, false)
        .map_err(|e| Error::Tokenizer(format!("bad pre-tokenizer regex: {e}")))?;
    Ok(s.into())
}

/// The pre-tokenizer for a GGUF `pre` name.
pub fn pre_tokenizer(pre: &str) -> Result<PreTokenizerWrapper> {
    Ok(match pre {
        "default" | "gpt2" | "gpt-2" => ByteLevel::new(false, true, true).into(),
        // llama.cpp: { "\p{N}", gpt2 regex } -- each digit on its own, then GPT-2 splitting.
        "smollm" | "starcoder" | "refact" | "codeshell" => {
            Sequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, true, true).into()]).into()
        }
        "llama3" | "llama-bpe" | "llama-v3" => {
            Sequence::new(vec![split(LLAMA3_REGEX)?, ByteLevel::new(false, true, false).into()]).into()
        }
        "qwen2" | "deepseek-r1-qwen" => {
            Sequence::new(vec![split(QWEN2_REGEX)?, ByteLevel::new(false, true, false).into()]).into()
        }
        other => {
            return Err(Error::Unsupported(format!(
                "GGUF tokenizer pre-tokenizer `{other}`; hearth knows {} (refusing to guess: a wrong split changes every prompt)",
                KNOWN_PRE.join(", ")
            )))
        }
    })
}

fn strings(g: &GgufFile, key: &str) -> Result<Vec<String>> {
    let v = g.get(key).ok_or_else(|| Error::InvalidModel(format!("GGUF lacks `{key}`")))?;
    let arr = v.to_vec().map_err(|_| Error::InvalidModel(format!("`{key}` is not an array")))?;
    arr.iter()
        .map(|x| x.to_string().cloned().map_err(|_| Error::InvalidModel(format!("`{key}` holds a non-string"))))
        .collect()
}

fn numbers(g: &GgufFile, key: &str) -> Option<Vec<f64>> {
    use candle_core::quantized::gguf_file::Value::*;
    let arr = g.get(key)?.to_vec().ok()?;
    arr.iter()
        .map(|x| match x {
            F32(v) => Some(*v as f64),
            F64(v) => Some(*v),
            I8(v) => Some(*v as f64),
            U8(v) => Some(*v as f64),
            I16(v) => Some(*v as f64),
            U16(v) => Some(*v as f64),
            I32(v) => Some(*v as f64),
            U32(v) => Some(*v as f64),
            I64(v) => Some(*v as f64),
            U64(v) => Some(*v as f64),
            _ => None,
        })
        .collect()
}

/// llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
fn kind_of(t: i64) -> TokenKind {
    match t {
        2 => TokenKind::Unknown,
        3 => TokenKind::Control,
        4 => TokenKind::UserDefined,
        5 => TokenKind::Unused,
        6 => TokenKind::Byte,
        _ => TokenKind::Normal,
    }
}

pub fn from_gguf(g: &GgufFile) -> Result<(Tokenizer, VocabInfo)> {
    let model = g.get_str("tokenizer.ggml.model").unwrap_or("").to_string();
    let tokens = strings(g, "tokenizer.ggml.tokens")?;
    let types: Vec<TokenKind> = match numbers(g, "tokenizer.ggml.token_type") {
        Some(t) if t.len() == tokens.len() => t.into_iter().map(|x| kind_of(x as i64)).collect(),
        Some(_) => return Err(Error::InvalidModel("tokenizer.ggml.token_type length differs from tokens".into())),
        None => vec![TokenKind::Normal; tokens.len()],
    };
    let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    if vocab.len() != tokens.len() {
        return Err(Error::InvalidModel("tokenizer.ggml.tokens has duplicate entries".into()));
    }
    let id = |k: &str| g.get_u64(k).map(|v| v as u32).filter(|&v| (v as usize) < tokens.len());
    let unk = id("tokenizer.ggml.unknown_token_id");

    let (mut tok, byte_level) = match model.as_str() {
        "gpt2" => {
            let merges = strings(g, "tokenizer.ggml.merges")?
                .into_iter()
                .map(|m| {
                    m.split_once(' ')
                        .map(|(a, b)| (a.to_string(), b.to_string()))
                        .ok_or_else(|| Error::InvalidModel(format!("malformed merge `{m}`")))
                })
                .collect::<Result<Vec<_>>>()?;
            let bpe = BPE::builder()
                .vocab_and_merges(vocab, merges)
                .build()
                .map_err(|e| Error::Tokenizer(format!("building BPE: {e}")))?;
            let mut t = Tokenizer::new(bpe);
            let pre = g.get_str("tokenizer.ggml.pre").unwrap_or("default");
            t.with_pre_tokenizer(Some(pre_tokenizer(pre)?));
            (t, true)
        }
        "llama" => {
            let scores = numbers(g, "tokenizer.ggml.scores")
                .filter(|s| s.len() == tokens.len())
                .ok_or_else(|| Error::InvalidModel("SentencePiece GGUF lacks per-token scores".into()))?;
            let merges = spm_merges(&tokens, &types, &scores, &vocab);
            let mut b = BPE::builder().vocab_and_merges(vocab, merges).byte_fallback(true);
            if let Some(u) = unk {
                b = b.unk_token(tokens[u as usize].clone());
            }
            let bpe = b.build().map_err(|e| Error::Tokenizer(format!("building SentencePiece BPE: {e}")))?;
            let mut t = Tokenizer::new(bpe);
            let prefix = g.get_bool("tokenizer.ggml.add_space_prefix").unwrap_or(true);
            let mut norms: Vec<NormalizerWrapper> = Vec::new();
            if prefix {
                norms.push(Prepend::new("▁".into()).into());
            }
            norms.push(Replace::new(" ", "▁").map_err(|e| Error::Tokenizer(format!("normalizer: {e}")))?.into());
            t.with_normalizer(Some(tokenizers::normalizers::Sequence::new(norms)))
                .map_err(|e| Error::Tokenizer(format!("normalizer: {e}")))?;
            (t, false)
        }
        "" => return Err(Error::InvalidModel("GGUF has no tokenizer (tokenizer.ggml.model missing)".into())),
        other => {
            return Err(Error::Unsupported(format!(
                "GGUF tokenizer model `{other}`; hearth supports gpt2 (byte-level BPE) and llama (SentencePiece)"
            )))
        }
    };

    // Control tokens are special; user-defined tokens are matched in text but are not special (llama.cpp, HF).
    let mut added = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        match types[i] {
            TokenKind::Control | TokenKind::Unknown => added.push(AddedToken::from(t.clone(), true)),
            TokenKind::UserDefined => added.push(AddedToken::from(t.clone(), false).normalized(false)),
            _ => {}
        }
    }
    tok.add_tokens(added).map_err(|e| Error::Tokenizer(format!("added tokens: {e}")))?;

    let bos = id("tokenizer.ggml.bos_token_id");
    let mut eos: Vec<u32> = Vec::new();
    for k in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
        if let Some(e) = id(k) {
            if !eos.contains(&e) {
                eos.push(e);
            }
        }
    }
    let add_bos = g.get_bool("tokenizer.ggml.add_bos_token").unwrap_or(model == "llama");
    let info = VocabInfo {
        tokens,
        kinds: types,
        byte_level,
        bos_id: bos,
        eos_ids: eos,
        add_bos,
        manual_bos: true,
        clean_up_spaces: false,
    };
    Ok((tok, info))
}

/// Merges of a SentencePiece BPE vocabulary, ranked by the score of the merged piece (highest first), as Hugging
/// Face's `SentencePieceExtractor` derives them.
fn spm_merges(tokens: &[String], kinds: &[TokenKind], scores: &[f64], vocab: &Vocab) -> Vec<(String, String)> {
    let mut found: Vec<(f64, u32, u32, u32)> = Vec::new(); // (score, merged id, left id, right id)
    for (id, piece) in tokens.iter().enumerate() {
        if kinds[id] != TokenKind::Normal {
            continue;
        }
        let mut boundaries = piece.char_indices().map(|(i, _)| i).skip(1);
        for b in boundaries.by_ref() {
            let (l, r) = piece.split_at(b);
            if let (Some(&li), Some(&ri)) = (vocab.get(l), vocab.get(r)) {
                let ok = |i: u32| kinds[i as usize] == TokenKind::Normal;
                if ok(li) && ok(ri) {
                    found.push((scores[id], id as u32, li, ri));
                }
            }
        }
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.2.cmp(&b.2)).then(a.3.cmp(&b.3)));
    found.into_iter().map(|(_, _, l, r)| (tokens[l as usize].clone(), tokens[r as usize].clone())).collect()
}
