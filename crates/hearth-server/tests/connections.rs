//! The connection layer without a model: header-read and body-read timeouts, and the cap on open connections.
//! (Time bounds here only detect hangs: each is many times what the behaviour needs.)

mod common;

use common::start;
use hearth_server::ServerConfig;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15))).expect("read timeout");
    s
}

/// Read until the server closes the connection; panics if it holds it past the read timeout.
fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return raw,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return raw,
            Err(e) => {
                panic!("the server held the connection open ({e}); read so far: {:?}", String::from_utf8_lossy(&raw))
            }
        }
    }
}

#[test]
fn a_stalled_request_head_is_closed_after_the_header_timeout() {
    let s = start(ServerConfig { header_timeout: Duration::from_secs(1), ..ServerConfig::default() });
    let mut c = connect(s.port);
    c.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n").expect("partial head");
    read_until_closed(&mut c);
    // An idle keep-alive connection is closed the same way.
    let mut c = connect(s.port);
    c.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").expect("request");
    let raw = read_until_closed(&mut c);
    assert!(raw.starts_with(b"HTTP/1.1 503"), "{:?}", String::from_utf8_lossy(&raw));
}

#[test]
fn a_body_that_does_not_arrive_in_time_is_a_408() {
    let s = start(ServerConfig { timeout: Duration::from_secs(1), ..ServerConfig::default() });
    let mut c = connect(s.port);
    let head =
        "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";
    c.write_all(head.as_bytes()).expect("head");
    c.write_all(b"{\"content\":").expect("part of the body");
    let raw = read_until_closed(&mut c);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("\"code\":\"request_timeout\"") && text.contains("--timeout"), "{text}");
}

#[test]
fn stalled_connections_over_the_cap_make_room_for_a_working_client() {
    let cap = 8;
    let s = start(ServerConfig {
        max_connections: Some(cap),
        header_timeout: Duration::from_secs(600),
        ..ServerConfig::default()
    });
    let mut stalled: Vec<TcpStream> = (0..cap * 4)
        .map(|_| {
            let mut c = connect(s.port);
            c.write_all(b"GET /health HTTP/1.1\r\n").expect("partial head");
            c
        })
        .collect();
    let mut c = connect(s.port);
    c.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").expect("request");
    let raw = read_until_closed(&mut c);
    assert!(raw.starts_with(b"HTTP/1.1 503"), "{:?}", String::from_utf8_lossy(&raw));
    assert!(String::from_utf8_lossy(&raw).contains("loading"), "{:?}", String::from_utf8_lossy(&raw));
    // The oldest stalled connection gave its place up.
    read_until_closed(&mut stalled[0]);
}
