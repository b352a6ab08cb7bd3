//! gzip for clients that ask (`Accept-Encoding: gzip`), without stalling the async workers. tower-http's
//! compression layer compresses a body as it is written, on the async workers that also answer `/health` and write
//! running streams: fine for the usual answer, but a few MB of JSON (a `/tokenize` with pieces, a long completion
//! with log-probabilities) would hold a worker for a while. A whole body from [`offload::LARGE_BYTES`] up is
//! therefore gzip'ed at once on the blocking pool ([`gzip_large`]) and sent with its `Content-Length`; the layer
//! compresses the rest. Streams (`text/event-stream`) are never compressed: a compressor would hold tokens back
//! until its block fills.

use super::ui::encoding::{negotiate, Encoding};
use crate::chat::offload;
use axum::body::{to_bytes, Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue, Response as HttpResponse};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use std::io::Write;
use tower_http::compression::predicate::{DefaultPredicate, Predicate};
use tower_http::compression::CompressionLayer;

/// gzip for `router`'s answers: large whole bodies on the blocking pool, the rest as they are written.
pub fn gzip<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router.layer(axum::middleware::from_fn(gzip_large)).layer(compression())
}

/// The compression layer for the bodies [`gzip_large`] leaves: its default predicate leaves out
/// `text/event-stream`, images, gRPC and bodies under 32 bytes; [`Small`] leaves out large whole bodies.
fn compression() -> CompressionLayer<impl Predicate> {
    CompressionLayer::new().gzip(true).compress_when(DefaultPredicate::new().and(Small))
}

/// A body whose size is not known to be [`offload::LARGE_BYTES`] or more.
#[derive(Debug, Clone, Copy)]
struct Small;

impl Predicate for Small {
    fn should_compress<B: HttpBody>(&self, response: &HttpResponse<B>) -> bool {
        !is_large(response.body())
    }
}

fn is_large<B: HttpBody>(body: &B) -> bool {
    body.size_hint().exact().is_some_and(|n| n >= offload::LARGE_BYTES as u64)
}

/// Whether a body of this type is worth compressing (JSON, text; never a stream).
fn compressible(resp: &Response) -> bool {
    let ct = resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    (ct.starts_with("application/json") || ct.starts_with("text/")) && !ct.starts_with("text/event-stream")
}

/// gzip a large whole body on the blocking pool, for a client that accepts gzip.
pub async fn gzip_large(req: Request, next: Next) -> Response {
    let accept = req.headers().get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok());
    let wants_gzip = negotiate(accept, false, true) == Encoding::Gzip;
    let resp = next.run(req).await;
    if !wants_gzip || resp.headers().contains_key(header::CONTENT_ENCODING) || !compressible(&resp) {
        return resp;
    }
    if !is_large(resp.body()) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    // A body of known size is already in memory: collecting it waits for nothing.
    let Ok(bytes) = to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let plain = bytes.clone();
    match offload::run(move || Ok(gzip_bytes(&bytes))).await {
        Ok(Some(gz)) => {
            parts.headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            parts.headers.insert(header::CONTENT_LENGTH, HeaderValue::from(gz.len()));
            parts.headers.append(header::VARY, HeaderValue::from_static("accept-encoding"));
            Response::from_parts(parts, Body::from(gz))
        }
        // Compression failed (it does not, for memory): the plain body is still an answer.
        _ => Response::from_parts(parts, Body::from(plain)),
    }
}

/// `bytes` gzip'ed (None if the encoder fails).
fn gzip_bytes(bytes: &[u8]) -> Option<Bytes> {
    let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(bytes.len() / 4), flate2::Compression::default());
    enc.write_all(bytes).ok()?;
    enc.finish().ok().map(Bytes::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{Method, StatusCode};
    use axum::routing::get;
    use std::io::Read;
    use tower::ServiceExt;

    /// A JSON array of `n` bytes or a little more.
    fn json_of(n: usize) -> String {
        let item = "{\"id\":1234,\"piece\":\"hello\"},";
        let mut s = String::from("[");
        while s.len() < n {
            s.push_str(item);
        }
        s.push_str("0]");
        s
    }

    fn gunzip(b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(b).read_to_end(&mut out).expect("valid gzip");
        out
    }

    async fn get_with(router: &Router, path: &str, accept: &str) -> (Response, Bytes) {
        let req = Request::builder().method(Method::GET).uri(path).header(header::ACCEPT_ENCODING, accept);
        let resp = router.clone().oneshot(req.body(Body::empty()).expect("request")).await.expect("answer");
        let (parts, body) = resp.into_parts();
        let bytes = to_bytes(body, usize::MAX).await.expect("body");
        (Response::from_parts(parts, Body::empty()), bytes)
    }

    fn json(body: String) -> Response {
        Response::builder().header(header::CONTENT_TYPE, "application/json").body(Body::from(body)).expect("response")
    }

    /// A large whole body is gzip'ed at once, off the async workers, and goes out with its length; small bodies
    /// are compressed by the layer as they are written (without a length); a client that does not ask for gzip
    /// gets the plain bytes.
    #[tokio::test]
    async fn large_bodies_are_gzipped_whole_on_the_blocking_pool_small_ones_as_written() {
        let (big, small) = (json_of(offload::LARGE_BYTES + 1000), json_of(4000));
        let (b, s) = (big.clone(), small.clone());
        let router = gzip(
            Router::new()
                .route("/big", get(move || async move { json(b) }))
                .route("/small", get(move || async move { json(s) })),
        );
        let (resp, body) = get_with(&router, "/big", "gzip, br").await;
        assert_eq!(resp.status(), StatusCode::OK);
        let h = resp.headers();
        assert_eq!(h.get(header::CONTENT_ENCODING).map(|v| v.as_bytes()), Some(&b"gzip"[..]), "{h:?}");
        assert_eq!(h.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()), Some(&*body.len().to_string()));
        assert!(h.get_all(header::VARY).iter().any(|v| v == "accept-encoding"), "{h:?}");
        assert_eq!(gunzip(&body), big.as_bytes());
        assert!(body.len() < big.len() / 4);

        let (resp, body) = get_with(&router, "/small", "gzip").await;
        let h = resp.headers();
        assert_eq!(h.get(header::CONTENT_ENCODING).map(|v| v.as_bytes()), Some(&b"gzip"[..]), "{h:?}");
        assert!(h.get(header::CONTENT_LENGTH).is_none(), "the layer streams its output: {h:?}");
        assert_eq!(gunzip(&body), small.as_bytes());

        for accept in ["identity", "gzip;q=0", "br"] {
            let (resp, body) = get_with(&router, "/big", accept).await;
            assert!(resp.headers().get(header::CONTENT_ENCODING).is_none(), "{accept}");
            assert_eq!(body, big.as_bytes(), "{accept}");
        }
    }
}
