//! End-to-end: how the real `hearth serve` binary ends and what stalled connections can do to it. SIGTERM lets
//! streams end with a finish or an error event and exits 0; a stalled connection does not outlive the grace
//! period; a second signal exits at once; stalled connections under a low open-file limit do not lock a client
//! out. Time limits here only detect hangs: each is many times what the behaviour needs.

mod support;

use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;
use support::*;

/// A stream far longer than any grace period here.
fn long_stream() -> Vec<u8> {
    json!({"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 4000,
        "ignore_eos": true, "stream": true})
    .to_string()
    .into_bytes()
}

/// A long stream on its own thread: `started` hears once tokens flow; the thread returns the whole response.
fn stream_in_background(port: u16, started: mpsc::Sender<()>) -> JoinHandle<Resp> {
    std::thread::spawn(move || {
        let mut c = connect(port);
        write_request(&mut c, "POST", "/v1/chat/completions", &[], Some(&long_stream()));
        let mut raw = Vec::new();
        let mut buf = [0u8; 8192];
        let mut told = false;
        loop {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
            }
            if !told && raw.windows(6).filter(|w| w == b"data: ").count() >= 3 {
                told = true;
                let _ = started.send(());
            }
        }
        parse_response(&raw)
    })
}

fn start_streams(port: u16, n: usize) -> Vec<JoinHandle<Resp>> {
    let (tx, rx) = mpsc::channel();
    let streams: Vec<_> = (0..n).map(|_| stream_in_background(port, tx.clone())).collect();
    for _ in 0..n {
        rx.recv_timeout(Duration::from_secs(120)).expect("a stream did not start");
    }
    streams
}

/// How a stream ended: `true` for an error event, `false` for its finish; panics if it ended without either.
fn ended_with_error(r: &Resp) -> bool {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.sse().last(), Some(&Sse::Data("[DONE]".into())), "{}", r.text());
    let chunks = r.sse_json();
    let last = chunks.last().unwrap_or_else(|| panic!("no chunks: {}", r.text()));
    if let Some(e) = last.get("error") {
        assert_eq!(e["code"], "server_shutting_down", "{last}");
        return true;
    }
    assert!(last["choices"][0]["finish_reason"].is_string(), "the stream ended without a finish or an error: {last}");
    false
}

#[test]
fn sigterm_ends_every_stream_with_a_finish_or_an_error_and_exits_0() {
    let mut s = Server::start_direct("true", &["--shutdown-grace", "1"], &[]);
    let streams = start_streams(s.port, 3);
    s.signal("TERM");
    let st = s.wait_exit(Duration::from_secs(60)).expect("the server still runs 60 s after SIGTERM (grace 1 s)");
    assert_eq!(st.code(), Some(0), "{st:?}");
    let ended: Vec<bool> = streams.into_iter().map(|t| ended_with_error(&t.join().expect("stream thread"))).collect();
    // 4000 tokens cannot be generated within the grace period: the shutdown ended them.
    assert!(ended.iter().any(|e| *e), "{ended:?}");
}

#[test]
fn a_stalled_connection_does_not_keep_the_server_alive_past_the_grace() {
    let mut s = Server::start_direct("true", &["--shutdown-grace", "1", "--header-timeout", "600"], &[]);
    let mut stalled = connect(s.port);
    stalled.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n").expect("partial head");
    s.signal("TERM");
    let st = s.wait_exit(Duration::from_secs(30)).expect("a stalled connection kept the server alive after SIGTERM");
    assert_eq!(st.code(), Some(0), "{st:?}");
}

#[test]
fn a_second_signal_exits_at_once() {
    let mut s = Server::start_direct("true", &["--shutdown-grace", "600"], &[]);
    let stream = start_streams(s.port, 1);
    s.signal("TERM");
    // The stream may go on for the grace period...
    assert!(s.wait_exit(Duration::from_millis(500)).is_none(), "the server exited before its stream ended");
    // ...until a second signal.
    s.signal("INT");
    let st = s.wait_exit(Duration::from_secs(20)).expect("the server ignored a second signal");
    assert_eq!(st.code(), Some(130), "{st:?}");
    drop(stream);
}

#[test]
fn stalled_connections_do_not_lock_a_client_out_under_a_low_open_file_limit() {
    // 256 descriptors: without a cap below that, 400 stalled connections leave none to accept a client with.
    let s = Server::start_direct("ulimit -n 256", &["--header-timeout", "600"], &[]);
    let stalled: Vec<TcpStream> = (0..400)
        .map(|_| {
            let mut c = connect(s.port);
            c.write_all(b"GET /health HTTP/1.1\r\n").expect("partial head");
            c
        })
        .collect();
    let mut c = connect(s.port);
    c.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    write_request(&mut c, "GET", "/health", &[], None);
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    assert!(raw.starts_with(b"HTTP/1.1 200"), "locked out: {:?}", String::from_utf8_lossy(&raw));
    drop(stalled);
}
