//! The router without a model: what a client sees while the model loads, and the layers every route shares
//! (404 fallback, 405, 413, API key, CORS, request ids, compression), errors all in OpenAI's error shape.

mod common;

use common::{call, read_response, start};
use hearth_server::ServerConfig;
use serde_json::Value;
use std::io::Write;
use std::net::TcpStream;

fn error(body: &str) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    let e = v["error"].clone();
    assert!(
        e["message"].is_string() && e.get("type").is_some() && e.get("param").is_some() && e.get("code").is_some(),
        "{v}"
    );
    e
}

#[test]
fn while_loading_health_says_so_and_model_routes_are_503() {
    let s = start(ServerConfig::default());
    let (st, _, body) = call(s.port, "GET", "/health", &[], b"");
    assert_eq!((st, body.as_str()), (503, r#"{"status":"loading"}"#));
    for (m, p, b) in
        [("GET", "/v1/models", ""), ("GET", "/stats", ""), ("POST", "/v1/chat/completions", r#"{"messages":[]}"#)]
    {
        let (st, _, body) = call(s.port, m, p, &[], b.as_bytes());
        assert_eq!(st, 503, "{p}: {body}");
        assert_eq!(error(&body)["code"], "model_loading");
    }
    // A malformed body is still a 400: the body is read before the model is needed.
    let (st, _, body) = call(s.port, "POST", "/v1/completions", &[], b"{oops");
    assert_eq!(st, 400);
    assert_eq!(error(&body)["code"], "invalid_json");
}

#[test]
fn not_found_method_not_allowed_and_body_limit_are_openai_errors() {
    let s = start(ServerConfig { max_body: 1024, ..Default::default() });
    let (st, _, body) = call(s.port, "GET", "/nope", &[], b"");
    assert_eq!(st, 404);
    assert_eq!(error(&body)["type"], "not_found_error");
    let (st, headers, body) = call(s.port, "DELETE", "/v1/completions", &[], b"");
    assert_eq!(st, 405);
    assert!(headers.contains("allow:"), "{headers}");
    assert_eq!(error(&body)["code"], "method_not_allowed");
    let big = format!("{{\"prompt\": \"{}\"}}", "a".repeat(4096));
    let (st, _, body) = call(s.port, "POST", "/v1/completions", &[], big.as_bytes());
    assert_eq!(st, 413);
    assert_eq!(error(&body)["code"], "body_too_large");
    // Without a Content-Length the limit holds as the body streams in.
    let (st, _, body) = call_chunked(s.port, "/v1/completions", big.as_bytes());
    assert_eq!(st, 413, "{body}");
    assert_eq!(error(&body)["message"], "the request body is larger than the server's limit (--max-body)");
}

/// POST `body` as one chunk of a chunked upload (no Content-Length).
fn call_chunked(port: u16, path: &str, body: &[u8]) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let head =
        format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n");
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(format!("{:x}\r\n", body.len()).as_bytes());
    let _ = s.write_all(body);
    let _ = s.write_all(b"\r\n0\r\n\r\n");
    read_response(s)
}

#[test]
fn api_key_and_cors() {
    let s = start(ServerConfig { api_key: Some("k1".into()), ..Default::default() });
    assert_eq!(call(s.port, "GET", "/health", &[], b"").0, 503, "health is open (and loading)");
    let (st, _, body) = call(s.port, "GET", "/v1/models", &[], b"");
    assert_eq!(st, 401);
    assert_eq!(error(&body)["type"], "authentication_error");
    assert_eq!(call(s.port, "GET", "/v1/models", &[("Authorization", "Bearer k2")], b"").0, 401);
    assert_eq!(call(s.port, "GET", "/nope", &[], b"").0, 401, "unknown routes need the key too");
    let big = vec![b' '; 8 << 20];
    assert_eq!(call(s.port, "POST", "/v1/completions", &[], &big).0, 401, "the key is checked before the body size");
    // Past the key check: 503 because the model is loading.
    assert_eq!(call(s.port, "GET", "/v1/models", &[("Authorization", "Bearer k1")], b"").0, 503);
    assert_eq!(call(s.port, "GET", "/v1/models", &[("x-api-key", "k1")], b"").0, 503);
    // CORS preflight needs no key.
    let (st, headers, _) = call(
        s.port,
        "OPTIONS",
        "/v1/chat/completions",
        &[("Origin", "http://localhost:3000"), ("Access-Control-Request-Method", "POST")],
        b"",
    );
    assert_eq!(st, 200);
    assert!(headers.contains("access-control-allow-origin: http://localhost:3000"), "{headers}");
    assert!(headers.contains("access-control-allow-methods: get,post,options"), "{headers}");
    assert!(headers.contains("access-control-max-age: 86400"), "{headers}");
    // Errors carry it too.
    let (_, headers, _) = call(s.port, "GET", "/v1/models", &[("Origin", "http://localhost:3000")], b"");
    assert!(headers.contains("access-control-allow-origin: http://localhost:3000"), "{headers}");
}

fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim)
}

#[test]
fn request_ids_are_made_or_echoed() {
    let s = start(ServerConfig::default());
    let (_, h1, _) = call(s.port, "GET", "/health", &[], b"");
    let (_, h2, _) = call(s.port, "GET", "/nope", &[], b"");
    let (a, b) = (header(&h1, "x-request-id"), header(&h2, "x-request-id"));
    assert!(a.is_some_and(|a| a.len() >= 16) && a != b, "{h1}\n{h2}");
    let (_, h, _) = call(s.port, "POST", "/v1/completions", &[("X-Request-Id", "client-42")], b"{}");
    assert_eq!(header(&h, "x-request-id"), Some("client-42"), "{h}");
}

#[test]
fn json_is_gzipped_when_asked() {
    let s = start(ServerConfig::default());
    let (st, h, body) = call(s.port, "GET", "/v1/models", &[("Accept-Encoding", "gzip")], b"");
    assert_eq!(st, 503);
    assert_eq!(header(&h, "content-encoding"), Some("gzip"), "{h}");
    assert!(!body.contains("model_loading"), "not compressed: {body:?}");
    let (_, h, body) = call(s.port, "GET", "/v1/models", &[], b"");
    assert_eq!(header(&h, "content-encoding"), None, "{h}");
    assert_eq!(error(&body)["code"], "model_loading");
}
