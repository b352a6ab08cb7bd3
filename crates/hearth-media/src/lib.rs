//! hearth's media input, the server's side of images: bytes from `data:` URLs, bare base64 or http(s) URLs
//! fetched under an SSRF policy ([`fetch`], [`policy`], [`url`]), decoded to RGB under a pixel limit
//! ([`decode`]), and keyed by a content hash (the encoder cache and the prefix cache key image tokens by it).
//! What a model does with the pixels (resizing, normalizing, patching) is the engine's.

pub mod data_url;
pub mod decode;
pub mod fetch;
pub mod policy;
pub mod url;

pub use decode::RgbImage;
pub use fetch::{Net, SystemNet};
pub use policy::FetchPolicy;

use sha2::{Digest, Sha256};

/// Why an image could not be had. Every kind is the client's to fix (an HTTP 400 in the API's own error shape);
/// [`MediaError::code`] names the kind for the error's `code` field.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    #[error("invalid image URL {0}")]
    BadUrl(String),
    #[error("refused to fetch {url}: {reason}")]
    Refused { url: String, reason: String },
    #[error("fetching {url} took longer than the {secs} s limit")]
    Timeout { url: String, secs: f64 },
    #[error("could not fetch {url}: {why}")]
    Fetch { url: String, why: String },
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    TooManyPixels(String),
    #[error("{0}")]
    Decode(String),
}

impl MediaError {
    pub fn code(&self) -> &'static str {
        match self {
            MediaError::BadUrl(_) => "invalid_image_url",
            MediaError::Refused { .. } => "image_url_refused",
            MediaError::Timeout { .. } => "image_fetch_timeout",
            MediaError::Fetch { .. } => "image_fetch_failed",
            MediaError::TooLarge(_) => "image_too_large",
            MediaError::Unsupported(_) => "unsupported_image_format",
            MediaError::TooManyPixels(_) => "image_too_many_pixels",
            MediaError::Decode(_) => "invalid_image",
        }
    }
}

/// The limits of one image.
#[derive(Clone, Debug)]
pub struct MediaLimits {
    pub fetch: FetchPolicy,
    /// The most pixels an image may have (width × height), checked from its header before decoding.
    pub max_pixels: u64,
}

impl Default for MediaLimits {
    fn default() -> Self {
        MediaLimits { fetch: FetchPolicy::default(), max_pixels: 50_000_000 }
    }
}

/// An image's encoded bytes and their SHA-256, before decoding (a cache hit on the hash decodes nothing).
#[derive(Clone, Debug)]
pub struct ImageBytes {
    pub bytes: Vec<u8>,
    pub hash: [u8; 32],
}

impl ImageBytes {
    pub fn new(bytes: Vec<u8>) -> Self {
        let hash = Sha256::digest(&bytes).into();
        ImageBytes { bytes, hash }
    }
    /// The hash as 64 hex digits.
    pub fn hash_hex(&self) -> String {
        self.hash.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The bytes of an image given as a URL: `data:` (inline) or http(s) (fetched under the policy).
pub async fn load_url(url: &str, limits: &MediaLimits, net: &dyn Net) -> Result<ImageBytes, MediaError> {
    let head = url.trim_start();
    if head.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("data:")) {
        return Ok(ImageBytes::new(data_url::parse_data_url(head, limits.fetch.max_bytes)?.0));
    }
    Ok(ImageBytes::new(fetch::fetch(url, &limits.fetch, net).await?.bytes))
}

/// A byte count for messages: bytes, KiB or MiB.
pub(crate) fn fmt_bytes(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}
