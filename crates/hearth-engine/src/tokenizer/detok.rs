//! Streaming detokenization: token ids in, text out, never splitting a UTF-8 character.
//!
//! Space rules follow mlx_lm.server's streaming detokenizers: with `trim_leading_space`, the first text of the
//! stream drops one leading space (a chat answer starts " Paris" -> "Paris"); with `clean_up_spaces` (HF
//! `clean_up_tokenization_spaces`), a space before `.,!?` and English contractions is removed, so a token that is
//! a lone space is held until the next token shows whether it survives.

use super::Tokenizer;

pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    pending: Vec<u8>,
    emitted_any: bool,
    trim_leading_space: bool,
    skip_special: bool,
    /// A space held back until we see what follows it (only with clean-up).
    held_space: bool,
}

/// Length of the longest prefix of `b` that is valid UTF-8 or contains invalid bytes that can never complete.
/// Returns (complete_prefix_len). A trailing incomplete-but-possibly-valid sequence is excluded.
fn complete_prefix(b: &[u8]) -> usize {
    match std::str::from_utf8(b) {
        Ok(_) => b.len(),
        Err(e) => match e.error_len() {
            // An invalid byte in the middle: everything up to and including it is final (it becomes U+FFFD).
            Some(bad) => {
                let upto = e.valid_up_to() + bad;
                upto + complete_prefix(&b[upto..])
            }
            // An incomplete sequence at the end: hold it.
            None => e.valid_up_to(),
        },
    }
}

const CLEANUP_FOLLOWERS: &[&str] = &[".", "?", "!", ",", "'m", "'s", "'ve", "'re", "n't"];

impl<'a> StreamDecoder<'a> {
    pub fn new(tok: &'a Tokenizer, trim_leading_space: bool) -> Self {
        Self {
            tok,
            pending: Vec::new(),
            emitted_any: false,
            trim_leading_space,
            skip_special: false,
            held_space: false,
        }
    }

    /// Drop control tokens from the text (they are emitted by default, as mlx_lm does).
    pub fn skip_special(mut self, skip: bool) -> Self {
        self.skip_special = skip;
        self
    }

    fn clean_up(&self) -> bool {
        self.tok.info().clean_up_spaces
    }

    /// Feed one token; returns the text that is now final (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        if self.skip_special && self.tok.is_special(id) {
            return String::new();
        }
        self.pending.extend_from_slice(self.tok.token_bytes(id));
        let n = complete_prefix(&self.pending);
        if n == 0 {
            return String::new();
        }
        let rest = self.pending.split_off(n);
        let chunk = String::from_utf8_lossy(&std::mem::replace(&mut self.pending, rest)).into_owned();
        self.emit(chunk)
    }

    /// Flush whatever is held at the end of the stream (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        if self.held_space {
            self.held_space = false;
            out.push(' ');
        }
        if !self.pending.is_empty() {
            let chunk = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
            out.push_str(&chunk);
        }
        if out.is_empty() {
            return out;
        }
        // Leading-space trim applies to the very first text even when it only appears at the end.
        let held = std::mem::take(&mut out);
        self.emit_final(held)
    }

    fn emit_final(&mut self, mut text: String) -> String {
        if !self.emitted_any && self.trim_leading_space && text.starts_with(' ') {
            text.remove(0);
        }
        if !text.is_empty() {
            self.emitted_any = true;
        }
        text
    }

    fn emit(&mut self, mut text: String) -> String {
        if self.clean_up() {
            if self.held_space {
                self.held_space = false;
                if !CLEANUP_FOLLOWERS.iter().any(|f| text.starts_with(f)) {
                    text.insert(0, ' ');
                }
            }
            if text == " " {
                self.held_space = true;
                return String::new();
            }
            if let Some(stripped) = text.strip_prefix(' ') {
                if CLEANUP_FOLLOWERS.iter().any(|f| stripped.starts_with(f)) && self.emitted_any {
                    text = stripped.to_string();
                }
            }
        }
        self.emit_final(text)
    }
}

#[cfg(test)]
mod tests {
    use super::complete_prefix;

    #[test]
    fn holds_incomplete_utf8_only() {
        let crab = "🦀".as_bytes(); // 4 bytes
        assert_eq!(complete_prefix(&crab[..1]), 0);
        assert_eq!(complete_prefix(&crab[..3]), 0);
        assert_eq!(complete_prefix(crab), 4);
        let mut s = b"ab".to_vec();
        s.extend_from_slice(&crab[..2]);
        assert_eq!(complete_prefix(&s), 2);
        // An invalid byte never completes: it is final.
        assert_eq!(complete_prefix(&[b'a', 0xFF, b'b']), 3);
        assert_eq!(complete_prefix(&[0xFF, 0xF0, 0x9F]), 1);
    }
}
