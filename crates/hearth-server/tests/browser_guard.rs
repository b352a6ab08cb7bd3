//! What a browser may do, without a model: which origins may call (CORS), which `Host` names are answered without
//! an API key (DNS rebinding), and that only JSON bodies are read.

mod common;

use common::{call, start};
use hearth_server::origin::AllowList;
use hearth_server::ServerConfig;
use serde_json::Value;

fn code(body: &str) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    v["error"]["code"].clone()
}

fn allow_origin(head: &str) -> Option<&str> {
    head.lines().find_map(|l| l.strip_prefix("access-control-allow-origin:")).map(str::trim)
}

#[test]
fn only_own_and_loopback_origins_may_call_by_default() {
    let s = start(ServerConfig::default());
    for origin in ["http://localhost:3000", "http://127.0.0.1:5173", "http://[::1]:8080"] {
        let (st, head, _) = call(s.port, "GET", "/health", &[("Origin", origin)], b"");
        assert_eq!(st, 503, "{origin}: {head}");
        assert_eq!(allow_origin(&head), Some(origin), "{head}");
    }
    // The server's own origin, reached by an address that is not loopback.
    let own = [("Host", "192.168.7.7:8080"), ("Origin", "http://192.168.7.7:8080")];
    let (st, head, _) = call(s.port, "GET", "/health", &own, b"");
    assert_eq!((st, allow_origin(&head)), (503, Some("http://192.168.7.7:8080")), "{head}");
    // Another site: refused, and its preflight allows nothing.
    let (st, head, body) = call(s.port, "POST", "/v1/chat/completions", &[("Origin", "https://evil.example")], b"{}");
    assert_eq!((st, allow_origin(&head)), (403, None), "{head}");
    assert_eq!(code(&body), "forbidden");
    assert!(body.contains("--allowed-origins"), "{body}");
    let pre = [("Origin", "https://evil.example"), ("Access-Control-Request-Method", "POST")];
    let (_, head, _) = call(s.port, "OPTIONS", "/v1/chat/completions", &pre, b"");
    assert_eq!(allow_origin(&head), None, "{head}");
}

#[test]
fn allowed_origins_widen_it() {
    let cfg = ServerConfig { allowed_origins: AllowList::parse("https://app.example"), ..ServerConfig::default() };
    let s = start(cfg);
    let (st, head, _) = call(s.port, "GET", "/health", &[("Origin", "https://app.example")], b"");
    assert_eq!((st, allow_origin(&head)), (503, Some("https://app.example")), "{head}");
    assert_eq!(call(s.port, "GET", "/health", &[("Origin", "https://other.example")], b"").0, 403);
    let s = start(ServerConfig { allowed_origins: AllowList::parse("*"), ..ServerConfig::default() });
    let (_, head, _) = call(s.port, "GET", "/health", &[("Origin", "https://other.example")], b"");
    assert_eq!(allow_origin(&head), Some("*"), "{head}");
}

#[test]
fn unknown_host_names_are_refused_without_an_api_key() {
    let s = start(ServerConfig::default());
    let (st, _, body) = call(s.port, "GET", "/health", &[("Host", "rebind.evil.example:8080")], b"");
    assert_eq!((st, code(&body)), (403, Value::from("forbidden")), "{body}");
    assert!(body.contains("--allowed-hosts"), "{body}");
    for host in ["localhost:8080", "127.0.0.1", "10.1.2.3:8080", "[::1]:8080"] {
        assert_eq!(call(s.port, "GET", "/health", &[("Host", host)], b"").0, 503, "{host}");
    }
    let cfg = ServerConfig { allowed_hosts: AllowList::parse("mybox.lan"), ..ServerConfig::default() };
    let s = start(cfg);
    assert_eq!(call(s.port, "GET", "/health", &[("Host", "mybox.lan:8080")], b"").0, 503);
    // With an API key the key guards the server: any name is answered.
    let s = start(ServerConfig { api_key: Some("k".into()), ..ServerConfig::default() });
    assert_eq!(call(s.port, "GET", "/health", &[("Host", "rebind.evil.example")], b"").0, 503);
}

#[test]
fn only_json_bodies_are_read() {
    let s = start(ServerConfig::default());
    let body = br#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    for ct in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
        let (st, _, b) = call(s.port, "POST", "/v1/chat/completions", &[("Content-Type", ct)], body);
        assert_eq!((st, code(&b)), (415, Value::from("unsupported_media_type")), "{ct}: {b}");
    }
    // JSON, or no type at all, is read (then 503: no model).
    for h in [&[("Content-Type", "application/json; charset=utf-8")][..], &[]] {
        assert_eq!(call(s.port, "POST", "/v1/chat/completions", h, body).0, 503, "{h:?}");
    }
}

#[test]
fn a_refused_origin_gets_no_cors_headers_even_on_a_preflight() {
    let s = start(ServerConfig::default());
    let cors_lines = |head: &str| head.lines().filter(|l| l.starts_with("access-control-")).count();
    for method in ["POST", "GET"] {
        let pre = [
            ("Origin", "https://evil.example"),
            ("Access-Control-Request-Method", method),
            ("Access-Control-Request-Headers", "authorization, content-type"),
        ];
        let (_, head, _) = call(s.port, "OPTIONS", "/v1/chat/completions", &pre, b"");
        assert_eq!(cors_lines(&head), 0, "{head}");
    }
    let (_, head, _) = call(s.port, "GET", "/health", &[("Origin", "https://evil.example")], b"");
    assert_eq!(cors_lines(&head), 0, "{head}");
    // An origin that may call still gets its preflight answered in full.
    let pre = [("Origin", "http://localhost:3000"), ("Access-Control-Request-Method", "POST")];
    let (st, head, _) = call(s.port, "OPTIONS", "/v1/chat/completions", &pre, b"");
    assert_eq!((st, allow_origin(&head)), (200, Some("http://localhost:3000")), "{head}");
    assert!(head.contains("access-control-allow-methods:") && head.contains("access-control-max-age:"), "{head}");
}

#[test]
fn a_request_with_two_host_headers_is_refused() {
    for cfg in [ServerConfig::default(), ServerConfig { api_key: Some("k".into()), ..ServerConfig::default() }] {
        let s = start(cfg);
        for hosts in [["127.0.0.1", "rebind.evil.example"], ["rebind.evil.example", "127.0.0.1"], ["a", "a"]] {
            let headers = [("Host", hosts[0]), ("Host", hosts[1]), ("Authorization", "Bearer k")];
            let (st, _, body) = call(s.port, "GET", "/health", &headers, b"");
            assert_eq!(st, 400, "{hosts:?}: {body}");
            assert!(body.contains("Host"), "{body}");
            let pre = [("Host", hosts[0]), ("Host", hosts[1]), ("Origin", "http://localhost:3000")];
            let (st, head, _) = call(s.port, "OPTIONS", "/v1/models", &pre, b"");
            assert_eq!((st, allow_origin(&head)), (400, None), "{hosts:?}: {head}");
        }
    }
}

#[test]
fn no_page_may_frame_the_server() {
    let s = start(ServerConfig::default());
    for path in ["/", "/health", "/v1/nope"] {
        let (_, head, _) = call(s.port, "GET", path, &[("Accept", "text/html")], b"");
        assert!(head.contains("x-frame-options: deny"), "{path}: {head}");
        assert!(head.contains("content-security-policy: frame-ancestors 'none'"), "{path}: {head}");
    }
}
