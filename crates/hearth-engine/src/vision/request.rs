//! Images as a request carries them to the engine: each one resized by the model's processor (the server
//! decodes and resizes; the engine normalizes, patches and encodes), where its placeholder tokens sit in the
//! prompt, and its content hash, which keys the engine's encoder cache and the prompt cache's blocks. Plain data:
//! a request crosses the isolation protocol as JSON (pixels as base64).

use serde::{Deserialize, Serialize};

/// What a request's prompt carries besides its tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestMedia {
    /// In prompt order.
    pub images: Vec<PromptImage>,
    /// M-RoPE models: every prompt position's 3D rope position, and what later positions add to their index.
    pub rope: Option<MropePositions>,
}

/// A model with multimodal rope: the prompt's (temporal, height, width) positions and the delta after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MropePositions {
    pub rows: [Vec<u32>; 3],
    pub delta: i64,
}

impl MropePositions {
    /// The rope position of token index `p` on `axis`: its prompt entry, or `p + delta` after the prompt.
    pub fn at(&self, axis: usize, p: usize) -> u32 {
        match self.rows[axis].get(p) {
            Some(&v) => v,
            None => (p as i64 + self.delta).max(0) as u32,
        }
    }
}

/// One image of a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptImage {
    /// Index of its first placeholder token in the prompt, and how many it has.
    pub start: usize,
    pub tokens: usize,
    /// SHA-256 of the image's encoded bytes.
    #[serde(with = "hex32")]
    pub hash: [u8; 32],
    /// The image at the size the processor resized it to: RGB, row-major.
    pub width: usize,
    pub height: usize,
    #[serde(with = "b64")]
    pub rgb: Vec<u8>,
}

impl RequestMedia {
    /// The ids the prompt cache names a prompt's blocks by: the tokens, with each image's placeholders replaced
    /// by ids derived from the image's hash (above any vocabulary), so that blocks holding different images have
    /// different names and the same image in the same place finds its blocks again.
    pub fn cache_ids(&self, tokens: &[u32]) -> Vec<u32> {
        let mut out = tokens.to_vec();
        for img in &self.images {
            let seed = u64::from_le_bytes(img.hash[..8].try_into().unwrap_or([0; 8]));
            for k in 0..img.tokens {
                if let Some(t) = out.get_mut(img.start + k) {
                    let mixed = seed.wrapping_add((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    *t = 0x8000_0000 | ((mixed ^ (mixed >> 29)) as u32 & 0x7FFF_FFFF);
                }
            }
        }
        out
    }

    /// Check the images against the prompt: in order, inside it, not overlapping, each with its pixels.
    pub fn validate(&self, prompt_len: usize) -> Result<(), String> {
        let mut end = 0;
        for (i, img) in self.images.iter().enumerate() {
            if img.tokens == 0 || img.start < end || img.start + img.tokens > prompt_len {
                return Err(format!("image {i}'s placeholder tokens are out of order or outside the prompt"));
            }
            if img.width == 0 || img.height == 0 || img.rgb.len() != img.width * img.height * 3 {
                return Err(format!(
                    "image {i} has {} bytes for {}x{} RGB pixels",
                    img.rgb.len(),
                    img.width,
                    img.height
                ));
            }
            end = img.start + img.tokens;
        }
        if let Some(r) = &self.rope {
            if r.rows.iter().any(|row| row.len() != prompt_len) {
                return Err("the rope positions do not cover the prompt".into());
            }
        }
        Ok(())
    }
}

mod b64 {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

mod hex32 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.iter().map(|b| format!("{b:02x}")).collect::<String>())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let text = String::deserialize(d)?;
        let bytes: Option<Vec<u8>> = (0..text.len())
            .step_by(2)
            .map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect();
        bytes.and_then(|b| b.try_into().ok()).ok_or_else(|| serde::de::Error::custom("an image hash is 64 hex digits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(start: usize, tokens: usize, hash: u8) -> PromptImage {
        PromptImage { start, tokens, hash: [hash; 32], width: 2, height: 1, rgb: vec![1, 2, 3, 4, 5, 6] }
    }

    #[test]
    fn cache_ids_tell_images_apart_and_survive_json() {
        let tokens = vec![7, 9, 9, 9, 8];
        let a = RequestMedia { images: vec![image(1, 3, 1)], rope: None };
        let b = RequestMedia { images: vec![image(1, 3, 2)], rope: None };
        let (ia, ib) = (a.cache_ids(&tokens), b.cache_ids(&tokens));
        assert_eq!((ia[0], ia[4]), (7, 8));
        assert!(ia[1..4].iter().all(|&t| t >= 0x8000_0000) && ia[1] != ia[2]);
        assert_ne!(ia, ib);
        assert_eq!(a.cache_ids(&tokens), ia);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<RequestMedia>(&json).unwrap(), a);
        assert!(a.validate(5).is_ok());
        assert!(a.validate(3).is_err());
        let overlapping = RequestMedia { images: vec![image(0, 2, 1), image(1, 2, 2)], rope: None };
        assert!(overlapping.validate(5).is_err());
    }
}
