//! The web chat at `/`: the app built from `web/` (`web/dist/`, embedded at build time), served with precompressed
//! brotli/gzip by `Accept-Encoding`, `Cache-Control` (hashed assets immutable, the rest revalidated by an ETag per
//! encoding) and `nosniff`. The app and its files need no API key (they are the same for everyone; the app asks for
//! the key when the API answers 401). A page navigation (`GET`, `Accept: text/html`) to a path that is neither an asset
//! nor under an API prefix gets the app too; everything else falls through to the API's JSON 404. `--no-ui` turns
//! all of it off.

pub mod assets;
pub mod encoding;

use crate::error::ApiError;
use crate::state::AppState;
use assets::Asset;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// Paths under these prefixes belong to the API: never answered with the app.
const API_PREFIXES: &[&str] =
    &["/v1", "/admin", "/metrics", "/health", "/stats", "/engine", "/tokenize", "/detokenize", "/apply-template"];

fn is_api_path(path: &str) -> bool {
    API_PREFIXES.iter().any(|p| path == *p || path.strip_prefix(p).is_some_and(|rest| rest.starts_with('/')))
}

/// The embedded file a request gets, if the UI answers it at all.
pub fn resolve(method: &Method, path: &str, headers: &HeaderMap) -> Option<&'static Asset> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    if let Some(a) = assets::find(path) {
        return Some(a);
    }
    let last = path.rsplit('/').next().unwrap_or("");
    let wants_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim().starts_with("text/html")));
    if wants_html && !is_api_path(path) && !last.contains('.') {
        return assets::find(assets::INDEX);
    }
    None
}

/// The ETag of one encoding of an asset: each stored encoding is its own representation.
fn etag(asset: &Asset, enc: encoding::Encoding) -> String {
    let base = asset.etag.trim_matches('"');
    match enc.header() {
        Some(ce) => format!("\"{base}-{ce}\""),
        None => asset.etag.to_string(),
    }
}

/// One asset: 304 when the client's copy is current, else the best stored encoding.
pub fn respond(asset: &'static Asset, method: &Method, headers: &HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok());
    let enc = encoding::negotiate(accept, asset.brotli.is_some(), asset.gzip.is_some());
    let tag = etag(asset, enc);
    let mut builder = Response::builder()
        .header(header::CACHE_CONTROL, assets::cache_control(asset.path))
        .header(header::ETAG, &tag)
        .header(header::VARY, "accept-encoding")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    let current = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim().trim_start_matches("W/") == tag));
    if current {
        return builder.status(StatusCode::NOT_MODIFIED).body(Body::empty()).unwrap_or_default();
    }
    let bytes = match enc {
        encoding::Encoding::Brotli => asset.brotli.unwrap_or(asset.body),
        encoding::Encoding::Gzip => asset.gzip.unwrap_or(asset.body),
        encoding::Encoding::Identity => asset.body,
    };
    builder = builder
        .header(header::CONTENT_TYPE, HeaderValue::from_static(assets::content_type(asset.path)))
        .header(header::CONTENT_LENGTH, bytes.len());
    if let Some(ce) = enc.header() {
        builder = builder.header(header::CONTENT_ENCODING, ce);
    }
    let body = if method == Method::HEAD { Body::empty() } else { Body::from(bytes) };
    builder.body(body).unwrap_or_default()
}

/// Whether the router's fallback answers this request with a file of the app (which needs no API key).
pub fn serves(st: &AppState, method: &Method, path: &str, headers: &HeaderMap) -> bool {
    st.cfg.ui && resolve(method, path, headers).is_some()
}

/// The router's fallback: the app where it applies, else the API's JSON 404.
pub async fn fallback(State(st): State<AppState>, method: Method, uri: Uri, headers: HeaderMap) -> Response {
    if st.cfg.ui {
        if let Some(a) = resolve(&method, uri.path(), &headers) {
            return respond(a, &method, &headers);
        }
        if uri.path() == "/" && !assets::has_app() {
            let msg = "this hearth binary was built without the web chat (web/dist/ was empty when it was compiled: \
                       run `npm --prefix web run build` and rebuild)";
            return ApiError::not_found(msg).into_response();
        }
    }
    ApiError::no_route(&method, uri.path()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_paths() {
        assert!(is_api_path("/v1"));
        assert!(is_api_path("/v1/nope"));
        assert!(is_api_path("/metrics"));
        assert!(!is_api_path("/v1x"));
        assert!(!is_api_path("/chat"));
        assert!(!is_api_path("/"));
    }

    #[test]
    fn page_navigations_get_the_app_and_api_paths_do_not() {
        let mut html = HeaderMap::new();
        html.insert(header::ACCEPT, HeaderValue::from_static("text/html,application/xhtml+xml,*/*;q=0.8"));
        let none = HeaderMap::new();
        if assets::has_app() {
            assert_eq!(resolve(&Method::GET, "/", &none).map(|a| a.path), Some(assets::INDEX));
            assert_eq!(resolve(&Method::GET, "/some/page", &html).map(|a| a.path), Some(assets::INDEX));
        }
        assert!(resolve(&Method::GET, "/some/page", &none).is_none());
        assert!(resolve(&Method::GET, "/v1/nope", &html).is_none());
        assert!(resolve(&Method::GET, "/missing.js", &html).is_none());
        assert!(resolve(&Method::POST, "/", &html).is_none());
    }
}
