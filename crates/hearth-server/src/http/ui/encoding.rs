//! `Accept-Encoding` negotiation for the precompressed assets: brotli, then gzip, then the plain bytes.

/// A stored encoding of an asset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Brotli,
    Gzip,
    Identity,
}

impl Encoding {
    /// The `Content-Encoding` value (none for identity).
    pub fn header(self) -> Option<&'static str> {
        match self {
            Encoding::Brotli => Some("br"),
            Encoding::Gzip => Some("gzip"),
            Encoding::Identity => None,
        }
    }
}

/// Whether `accept` (an `Accept-Encoding` value) allows `coding`: named (or `*`) with a q-value above zero.
fn accepts(accept: &str, coding: &str) -> bool {
    let mut named = None;
    let mut star = None;
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .filter_map(|v| v.trim().parse::<f32>().ok())
            .next()
            .unwrap_or(1.0);
        if name.eq_ignore_ascii_case(coding) {
            named = Some(q > 0.0);
        } else if name == "*" {
            star = Some(q > 0.0);
        }
    }
    named.or(star).unwrap_or(false)
}

/// The best encoding `accept` allows among those stored (`has_br`, `has_gzip`).
pub fn negotiate(accept: Option<&str>, has_br: bool, has_gzip: bool) -> Encoding {
    let Some(accept) = accept else { return Encoding::Identity };
    if has_br && accepts(accept, "br") {
        Encoding::Brotli
    } else if has_gzip && accepts(accept, "gzip") {
        Encoding::Gzip
    } else {
        Encoding::Identity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_brotli_then_gzip_then_identity() {
        assert_eq!(negotiate(Some("gzip, deflate, br, zstd"), true, true), Encoding::Brotli);
        assert_eq!(negotiate(Some("gzip, deflate, br"), false, true), Encoding::Gzip);
        assert_eq!(negotiate(Some("gzip"), true, true), Encoding::Gzip);
        assert_eq!(negotiate(Some("br;q=0, gzip;q=0.5"), true, true), Encoding::Gzip);
        assert_eq!(negotiate(Some("*"), true, true), Encoding::Brotli);
        assert_eq!(negotiate(Some("*;q=0"), true, true), Encoding::Identity);
        assert_eq!(negotiate(Some("identity"), true, true), Encoding::Identity);
        assert_eq!(negotiate(Some(""), true, true), Encoding::Identity);
        assert_eq!(negotiate(None, true, true), Encoding::Identity);
        assert_eq!(negotiate(Some("GZIP;q=bogus"), false, true), Encoding::Gzip);
    }
}
