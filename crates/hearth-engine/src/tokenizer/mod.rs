//! Tokenization: a `tokenizers` tokenizer (from `tokenizer.json` or built from GGUF metadata) plus what hearth
//! needs around it: BOS handling, the EOS set, per-token bytes for streaming detokenization, and the chat template.

pub mod chat_template;
pub mod detok;
pub mod gguf_vocab;
mod hf;

use crate::weights::resolve::ModelLocation;
use crate::weights::{GgufFile, ModelConfig};
use crate::{Error, Result};
pub use chat_template::ChatTemplate;
pub use detok::StreamDecoder;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

/// Vocabulary facts gathered at load.
#[derive(Debug, Clone)]
pub struct VocabInfo {
    pub tokens: Vec<String>,
    pub kinds: Vec<TokenKind>,
    /// GPT-2 byte-to-unicode mapped pieces (byte-level BPE) vs SentencePiece pieces with `▁`.
    pub byte_level: bool,
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
    pub add_bos: bool,
    /// BOS is prepended by us (GGUF) rather than by the tokenizer's post-processor (tokenizer.json).
    pub manual_bos: bool,
    /// HF `clean_up_tokenization_spaces`.
    pub clean_up_spaces: bool,
}

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    info: VocabInfo,
    /// Raw bytes each token stands for.
    token_bytes: Vec<Vec<u8>>,
    pub chat_template: Option<ChatTemplate>,
}

/// GPT-2's byte <-> printable-unicode table, inverted: char -> byte.
fn gpt2_unicode_to_byte() -> std::collections::HashMap<char, u8> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..=255u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.into_iter().zip(cs).filter_map(|(b, c)| char::from_u32(c).map(|c| (c, b as u8))).collect()
}

fn token_bytes_table(info: &VocabInfo) -> Vec<Vec<u8>> {
    let map = if info.byte_level { Some(gpt2_unicode_to_byte()) } else { None };
    info.tokens
        .iter()
        .zip(&info.kinds)
        .map(|(t, k)| match k {
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown | TokenKind::Unused => {
                t.as_bytes().to_vec()
            }
            TokenKind::Byte => parse_byte_token(t).map(|b| vec![b]).unwrap_or_else(|| t.as_bytes().to_vec()),
            TokenKind::Normal => match &map {
                Some(m) => {
                    let mut out = Vec::with_capacity(t.len());
                    for c in t.chars() {
                        match m.get(&c) {
                            Some(b) => out.push(*b),
                            None => out.extend_from_slice(c.to_string().as_bytes()),
                        }
                    }
                    out
                }
                None => match parse_byte_token(t) {
                    Some(b) => vec![b],
                    None => t.replace('▁', " ").into_bytes(),
                },
            },
        })
        .collect()
}

/// `<0x0A>` -> 0x0A
fn parse_byte_token(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

impl Tokenizer {
    pub fn from_parts(inner: tokenizers::Tokenizer, info: VocabInfo, chat_template: Option<ChatTemplate>) -> Self {
        let token_bytes = token_bytes_table(&info);
        Self { inner, info, token_bytes, chat_template }
    }

    /// Load the tokenizer (and chat template) of a model; the EOS set also takes the model config's EOS ids.
    pub fn load(loc: &ModelLocation, cfg: &ModelConfig) -> Result<Self> {
        let mut t = match loc {
            ModelLocation::Gguf(p) => {
                let g = GgufFile::open(p)?;
                let (inner, info) = gguf_vocab::from_gguf(&g)?;
                let mut t = Self::from_parts(inner, info, None);
                if let Some(src) = g.get_str("tokenizer.chat_template") {
                    t.chat_template = Some(ChatTemplate::new(
                        src,
                        &t.special_text(t.info.bos_id),
                        &t.special_text(t.info.eos_ids.first().copied()),
                    )?);
                }
                t
            }
            ModelLocation::HfDir(d) => hf::load(d)?,
        };
        for &e in &cfg.eos_token_ids {
            if !t.info.eos_ids.contains(&e) && (e as usize) < t.info.tokens.len() {
                t.info.eos_ids.push(e);
            }
        }
        if t.info.bos_id.is_none() {
            t.info.bos_id = cfg.bos_token_id;
        }
        Ok(t)
    }

    /// The tokenizer of a Hugging Face directory alone (`tokenizer.json`), for models without a [`ModelConfig`]
    /// (the BERT encoders of `crate::embed`).
    pub fn from_hf_dir(dir: &std::path::Path) -> Result<Self> {
        hf::load(dir)
    }

    fn special_text(&self, id: Option<u32>) -> String {
        id.and_then(|i| self.info.tokens.get(i as usize)).cloned().unwrap_or_default()
    }

    pub fn info(&self) -> &VocabInfo {
        &self.info
    }

    pub fn vocab_size(&self) -> usize {
        self.info.tokens.len()
    }

    pub fn eos_ids(&self) -> &[u32] {
        &self.info.eos_ids
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.info.eos_ids.contains(&id)
    }

    pub fn bos_token(&self) -> String {
        self.special_text(self.info.bos_id)
    }

    pub fn eos_token(&self) -> String {
        self.special_text(self.info.eos_ids.first().copied())
    }

    /// Encode text; special tokens written in the text are parsed. `add_special` adds BOS when the model wants it.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let post = add_special && !self.info.manual_bos;
        let enc = self.inner.encode(text, post).map_err(|e| Error::Tokenizer(format!("encode: {e}")))?;
        let mut ids = enc.get_ids().to_vec();
        if add_special && self.info.manual_bos && self.info.add_bos {
            if let Some(b) = self.info.bos_id {
                ids.insert(0, b);
            }
        }
        Ok(ids)
    }

    /// Encode a rendered chat prompt: BOS is added only if the template did not already write it.
    pub fn encode_chat(&self, rendered: &str) -> Result<Vec<u32>> {
        let bos = self.bos_token();
        let add = !(self.info.add_bos && !bos.is_empty() && rendered.starts_with(&bos));
        self.encode(rendered, add)
    }

    /// Raw bytes of one token (empty for an out-of-range id).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes.get(id as usize).map(|b| b.as_slice()).unwrap_or(&[])
    }

    /// The id of the control token spelled `text` (`[TOOL_CALLS]`, `<|python_tag|>`), if the vocabulary has one.
    pub fn control_id(&self, text: &str) -> Option<u32> {
        let id = self.inner.token_to_id(text)?;
        (self.is_special(id) && self.info.tokens.get(id as usize).is_some_and(|t| t == text)).then_some(id)
    }

    pub fn is_special(&self, id: u32) -> bool {
        matches!(self.info.kinds.get(id as usize), Some(TokenKind::Control | TokenKind::Unknown | TokenKind::Unused))
    }

    /// Decode ids to text (invalid UTF-8 becomes U+FFFD); `skip_special` drops control tokens.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            if skip_special && self.is_special(id) {
                continue;
            }
            bytes.extend_from_slice(self.token_bytes(id));
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_byte_table_is_a_bijection() {
        let m = gpt2_unicode_to_byte();
        assert_eq!(m.len(), 256);
        assert_eq!(m[&'Ġ'], b' ');
        assert_eq!(m[&'Ċ'], b'\n');
        assert_eq!(m[&'a'], b'a');
    }

    #[test]
    fn byte_tokens_parse() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xZZ>"), None);
        assert_eq!(parse_byte_token("<0x0>"), None);
    }
}
