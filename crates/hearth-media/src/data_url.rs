//! Inline images: `data:` URLs and bare base64 (Anthropic's `base64` source), size-capped before decoding.

use crate::MediaError;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, Engine};

/// Standard and URL-safe alphabets, padding optional (clients differ).
const STANDARD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A `data:` URL's bytes and declared media type (`data:[<type>][;base64],<data>`); a type that is not
/// `image/*` is refused.
pub fn parse_data_url(url: &str, max_bytes: usize) -> Result<(Vec<u8>, Option<String>), MediaError> {
    let rest = url
        .get(..5)
        .filter(|p| p.eq_ignore_ascii_case("data:"))
        .map(|_| &url[5..])
        .ok_or_else(|| MediaError::BadUrl("not a `data:` URL".into()))?;
    let comma = rest.find(',').ok_or_else(|| MediaError::BadUrl("a `data:` URL without its `,`".into()))?;
    let (meta, payload) = (&rest[..comma], &rest[comma + 1..]);
    let mut params = meta.split(';').map(str::trim);
    let mime = params.next().filter(|m| !m.is_empty()).map(|m| m.to_ascii_lowercase());
    let is_b64 = params.any(|p| p.eq_ignore_ascii_case("base64"));
    if let Some(m) = &mime {
        if !m.starts_with("image/") {
            return Err(MediaError::Unsupported(format!("a `data:` URL of type `{m}` is not an image")));
        }
    }
    let bytes = if is_b64 { decode_base64(payload, max_bytes)? } else { percent_decoded(payload, max_bytes)? };
    Ok((bytes, mime))
}

/// Base64 (whitespace ignored, padding optional, either alphabet), refused by its length before decoding when
/// it would exceed `max_bytes`.
pub fn decode_base64(text: &str, max_bytes: usize) -> Result<Vec<u8>, MediaError> {
    let significant = text.bytes().filter(|b| !b.is_ascii_whitespace()).count();
    if significant / 4 * 3 > max_bytes {
        return Err(MediaError::TooLarge(format!(
            "the inline image ({} after decoding) is larger than the limit of {}",
            crate::fmt_bytes(significant / 4 * 3),
            crate::fmt_bytes(max_bytes)
        )));
    }
    let compact: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    STANDARD
        .decode(&compact)
        .or_else(|_| URL_SAFE.decode(&compact))
        .map_err(|e| MediaError::Decode(format!("the inline image is not valid base64: {e}")))
}

fn percent_decoded(text: &str, max_bytes: usize) -> Result<Vec<u8>, MediaError> {
    let s = text.as_bytes();
    let mut out = Vec::with_capacity(s.len().min(max_bytes));
    let mut i = 0;
    while i < s.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (s[i], s.get(i + 1).copied().and_then(hex), s.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
        if out.len() > max_bytes {
            return Err(MediaError::TooLarge(format!(
                "the inline image is larger than the limit of {}",
                crate::fmt_bytes(max_bytes)
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_decode_and_are_capped_before_decoding() {
        let (b, m) = parse_data_url("data:image/png;base64,aGVs bG8=", 100).unwrap();
        assert_eq!((b.as_slice(), m.as_deref()), (&b"hello"[..], Some("image/png")));
        assert_eq!(parse_data_url("DATA:image/gif;BASE64,aGVsbG8", 100).unwrap().0, b"hello");
        assert_eq!(parse_data_url("data:,a%20b", 100).unwrap().0, b"a b");
        assert_eq!(decode_base64("-_8", 10).unwrap(), vec![0xfb, 0xff]);
        let e = parse_data_url("data:text/html;base64,aGVsbG8=", 100).unwrap_err().to_string();
        assert!(e.contains("`text/html` is not an image"), "{e}");
        let big = format!("data:image/png;base64,{}", "A".repeat(4000));
        assert!(matches!(parse_data_url(&big, 1000), Err(MediaError::TooLarge(_))));
        assert!(matches!(
            parse_data_url(&format!("data:image/png,{}", "x".repeat(11)), 10),
            Err(MediaError::TooLarge(_))
        ));
        assert!(matches!(parse_data_url("data:image/png;base64,@@@@", 100), Err(MediaError::Decode(_))));
        assert!(matches!(parse_data_url("data:image/png;base64", 100), Err(MediaError::BadUrl(_))));
    }
}
