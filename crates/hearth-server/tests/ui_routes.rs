//! The web chat's files as the router serves them, without a model: `/` and the hashed assets, content
//! negotiation (brotli, gzip, identity), cache headers and ETags, the page for browser navigations, JSON 404s for
//! the API, no API key for the app's files, and `--no-ui` (ui: false).

mod common;

use common::start;
use hearth_server::ServerConfig;
use std::io::{Read, Write};
use std::net::TcpStream;

struct Resp {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

fn get(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Resp { status, head, body: raw[split + 4..].to_vec() }
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b).read_to_end(&mut out).expect("valid gzip");
    out
}

/// The main script's path, from the page.
fn main_js(html: &str) -> String {
    let start = html.find("src=\"/assets/main-").expect("the page names its script") + "src=\"".len();
    let end = start + html[start..].find('"').expect("quoted");
    html[start..end].to_string()
}

#[test]
fn the_app_and_its_assets_are_served_compressed_and_cached() {
    let s = start(ServerConfig::default());
    let page = get(s.port, "GET", "/", &[]);
    assert_eq!(page.status, 200);
    assert_eq!(page.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    assert_eq!(page.header("content-encoding"), None);
    let html = String::from_utf8(page.body.clone()).expect("utf-8");
    assert!(html.contains("<div id=\"app\">"), "{html}");
    let etag = page.header("etag").expect("an ETag").to_string();
    assert_eq!(get(s.port, "GET", "/", &[("If-None-Match", &etag)]).status, 304);
    // Each encoding is its own representation, with its own ETag.
    let br_page = get(s.port, "GET", "/", &[("Accept-Encoding", "br")]);
    let br_etag = br_page.header("etag").expect("an ETag").to_string();
    assert_ne!(br_etag, etag);
    assert_eq!(get(s.port, "GET", "/", &[("If-None-Match", &br_etag), ("Accept-Encoding", "br")]).status, 304);
    assert_eq!(get(s.port, "GET", "/", &[("If-None-Match", &br_etag)]).status, 200);
    assert_eq!(get(s.port, "GET", "/index.html", &[]).body, page.body);

    let js = main_js(&html);
    let plain = get(s.port, "GET", &js, &[]);
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-type"), Some("text/javascript; charset=utf-8"));
    assert_eq!(plain.header("cache-control"), Some("public, max-age=31536000, immutable"));
    assert_eq!(plain.header("vary"), Some("accept-encoding"));
    let gz = get(s.port, "GET", &js, &[("Accept-Encoding", "gzip")]);
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(gunzip(&gz.body), plain.body, "the embedded .gz is the same file");
    let br = get(s.port, "GET", &js, &[("Accept-Encoding", "gzip, deflate, br")]);
    assert_eq!(br.header("content-encoding"), Some("br"));
    assert!(br.body.len() < plain.body.len() / 2);
    let head = get(s.port, "HEAD", &js, &[("Accept-Encoding", "br")]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-length"), Some(br.body.len().to_string().as_str()));

    for path in ["/manifest.webmanifest", "/sw.js", "/icon-192.png"] {
        let r = get(s.port, "GET", path, &[]);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("cache-control"), Some("no-cache"), "{path}");
    }
}

#[test]
fn navigations_get_the_app_api_paths_stay_json_404() {
    let s = start(ServerConfig::default());
    let html = [("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")];
    let page = get(s.port, "GET", "/some/page", &html);
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("<div id=\"app\">"));
    for (path, headers) in [("/v1/nope", &html[..]), ("/some/page", &[][..]), ("/missing.js", &html[..])] {
        let r = get(s.port, "GET", path, headers);
        assert_eq!(r.status, 404, "{path}");
        assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{path}");
    }
    let post = get(s.port, "POST", "/", &[]);
    assert_eq!(post.status, 404);
}

#[test]
fn the_app_needs_no_api_key_the_api_does() {
    let s = start(ServerConfig { api_key: Some("k1".into()), ..Default::default() });
    assert_eq!(get(s.port, "GET", "/", &[]).status, 200);
    let js = main_js(&String::from_utf8_lossy(&get(s.port, "GET", "/", &[]).body));
    assert_eq!(get(s.port, "GET", &js, &[]).status, 200);
    assert_eq!(get(s.port, "GET", "/v1/models", &[]).status, 401);
    assert_eq!(get(s.port, "GET", "/nope", &[]).status, 401);
}

#[test]
fn no_ui_serves_nothing_at_the_root() {
    let s = start(ServerConfig { ui: false, ..Default::default() });
    for path in ["/", "/index.html", "/sw.js"] {
        let r = get(s.port, "GET", path, &[("Accept", "text/html")]);
        assert_eq!(r.status, 404, "{path}");
        assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")));
    }
}
