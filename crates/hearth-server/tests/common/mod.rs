//! A router without a model on a loopback port, for the tests of what answers before (or without) one, and a
//! one-request HTTP/1.1 client.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;

use hearth_server::{AppState, ServerConfig};

pub struct Running {
    pub port: u16,
    _rt: tokio::runtime::Runtime,
}

pub fn start(cfg: ServerConfig) -> Running {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    rt.spawn(hearth_server::serve(listener, AppState::new(cfg)));
    Running { port, _rt: rt }
}

/// (status, lowercased head, body) of one request with these headers (`Host: 127.0.0.1` unless they give one).
pub fn call(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str("Host: 127.0.0.1\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(body);
    read_response(s)
}

/// (status, lowercased head, body) of the response the server writes before closing `s`.
pub fn read_response(mut s: TcpStream) -> (u16, String, String) {
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (h, b) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = h.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, h.to_ascii_lowercase(), b.to_string())
}
