//! The web chat's files, embedded at build time (`build.rs` writes the table from `web/dist/`).

/// One embedded file and its precompressed variants.
#[derive(Debug)]
pub struct Asset {
    /// URL path, from `/` (`/index.html`, `/assets/main-HASH.js`).
    pub path: &'static str,
    pub body: &'static [u8],
    pub gzip: Option<&'static [u8]>,
    pub brotli: Option<&'static [u8]>,
    /// A strong ETag from the content, quoted.
    pub etag: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));

/// Where the app's entry page lives.
pub const INDEX: &str = "/index.html";

/// The asset at a URL path (`/` is the index page).
pub fn find(path: &str) -> Option<&'static Asset> {
    let path = if path == "/" { INDEX } else { path };
    ASSETS.iter().find(|a| a.path == path)
}

/// Whether the build embedded an app at all.
pub fn has_app() -> bool {
    find(INDEX).is_some()
}

/// The `Content-Type` of a path, from its extension.
pub fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    match ext {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "webmanifest" => "application/manifest+json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Files under `/assets/` carry a content hash in their name and never change: cache them for a year. Everything
/// else (the page, the service worker, the manifest, icons) is revalidated on each use (ETag, 304).
pub fn cache_control(path: &str) -> &'static str {
    if path.starts_with("/assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_cache_policy() {
        assert_eq!(content_type("/assets/main-AB12.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("/manifest.webmanifest"), "application/manifest+json");
        assert_eq!(content_type("/noext"), "application/octet-stream");
        assert_eq!(cache_control("/assets/main-AB12.js"), "public, max-age=31536000, immutable");
        assert_eq!(cache_control("/index.html"), "no-cache");
        assert_eq!(cache_control("/sw.js"), "no-cache");
    }

    #[test]
    fn the_table_is_consistent() {
        for a in ASSETS {
            assert!(a.path.starts_with('/') && !a.path.contains(".."), "{}", a.path);
            assert!(a.etag.starts_with('"') && a.etag.ends_with('"'), "{}", a.etag);
            assert_eq!(find(a.path).map(|f| f.path), Some(a.path));
        }
        if has_app() {
            assert_eq!(find("/").map(|a| a.path), Some(INDEX));
        }
    }
}
