//! With `--api-key`, every route the router serves needs the key except `/health` and the web chat's own files,
//! however the request is dressed: a browser's page navigation (`Accept: text/html`, `Sec-Fetch-*`) is judged by the
//! route that serves it, not by the headers. The routes are read from the router's own source (`src/lib.rs`), so a
//! route added there is checked here too.

mod common;

use common::{call, start};
use hearth_server::ServerConfig;

/// Routes that never need the key.
const OPEN: &[&str] = &["/health"];

/// Every `(method, path pattern)` of `router` in lib.rs.
fn routes() -> Vec<(String, String)> {
    let src = include_str!("../src/lib.rs");
    let mut out = Vec::new();
    for line in src.lines().map(str::trim).filter(|l| l.starts_with(".route(\"")) {
        let rest = &line[".route(\"".len()..];
        let Some((path, handlers)) = rest.split_once('"') else { continue };
        for method in ["get", "post", "delete", "put", "patch"] {
            if handlers.contains(&format!("{method}(")) {
                out.push((method.to_ascii_uppercase(), path.to_string()));
            }
        }
    }
    out
}

/// A concrete path for a route pattern (`{id}` and `{*rest}` filled in).
fn concrete(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|seg| match seg {
            s if s.starts_with("{*") => "some/model",
            s if s.starts_with('{') => "resp_1",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Header sets a client may send without the key: nothing, a browser navigation, a wrong key.
const DRESSES: &[&[(&str, &str)]] = &[
    &[],
    &[
        ("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
        ("Sec-Fetch-Mode", "navigate"),
        ("Sec-Fetch-Dest", "document"),
        ("Sec-Fetch-Site", "none"),
        ("Upgrade-Insecure-Requests", "1"),
    ],
    &[("Accept", "text/html"), ("Authorization", "Bearer wrong")],
    &[("Accept", "*/*"), ("x-api-key", "wrong")],
];

#[test]
fn every_route_but_health_needs_the_key_however_it_is_asked_for() {
    let routes = routes();
    assert!(routes.len() >= 20, "the route list from lib.rs looks short: {routes:?}");
    assert!(routes.iter().any(|(_, p)| p == "/engine"), "{routes:?}");
    let s = start(ServerConfig { api_key: Some("k1".into()), ..ServerConfig::default() });
    for (method, pattern) in &routes {
        let path = concrete(pattern);
        let body: &[u8] = if method == "POST" { b"{}" } else { b"" };
        let json = ("Content-Type", "application/json");
        for dress in DRESSES {
            let mut headers = dress.to_vec();
            headers.push(json);
            let (status, _, answer) = call(s.port, method, &path, &headers, body);
            if OPEN.contains(&pattern.as_str()) {
                assert_ne!(status, 401, "{method} {path} {dress:?}: {answer}");
            } else {
                assert_eq!(status, 401, "{method} {path} {dress:?} answered without the key: {answer}");
                assert!(answer.contains("authentication_error"), "{method} {path}: {answer}");
            }
        }
        // With the key every route answers (503 without a model, 200, 404 for an unknown id...), never 401.
        for key in [("Authorization", "Bearer k1"), ("x-api-key", "k1")] {
            let (status, _, answer) = call(s.port, method, &path, &[key, json, ("Accept", "text/html")], body);
            assert_ne!(status, 401, "{method} {path} with the key: {answer}");
        }
    }
}

#[test]
fn the_web_chat_needs_no_key_and_unknown_paths_do() {
    let s = start(ServerConfig { api_key: Some("k1".into()), ..ServerConfig::default() });
    let nav = [("Accept", "text/html,*/*;q=0.8"), ("Sec-Fetch-Mode", "navigate")];
    if hearth_server::http::ui::assets::has_app() {
        for path in ["/", "/index.html", "/some/page"] {
            let (status, head, _) = call(s.port, "GET", path, &nav, b"");
            assert_eq!(status, 200, "{path}: {head}");
            assert!(head.contains("content-type: text/html"), "{path}: {head}");
        }
    }
    // What the web chat does not serve needs the key before it is a 404.
    for (path, headers) in [("/nope", &[][..]), ("/v1/nope", &nav[..]), ("/engine/x.json", &nav[..])] {
        assert_eq!(call(s.port, "GET", path, headers, b"").0, 401, "{path}");
        assert_eq!(call(s.port, "GET", path, &[("Authorization", "Bearer k1")], b"").0, 404, "{path}");
    }
}
