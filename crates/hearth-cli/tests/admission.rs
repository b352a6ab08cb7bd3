//! End-to-end: what the real server admits. A request is queued whole (prompts × n) or refused whole, the waiting
//! count never passes `--max-queue`, refusals carry `Retry-After`, and a drain stops admission while what runs
//! finishes. (Time limits only detect hangs.)

mod support;

use serde_json::{json, Value};
use std::io::Read;
use std::net::TcpStream;
use std::thread::JoinHandle;
use std::time::Duration;
use support::*;

/// A stream of `n` choices, read until tokens flow; the connection is returned (drop it to cancel).
fn occupy(port: u16, n: usize, max_tokens: usize) -> TcpStream {
    let body = json!({"prompt": "Once upon a time", "max_tokens": max_tokens, "ignore_eos": true, "stream": true,
        "n": n});
    let mut c = connect(port);
    write_request(&mut c, "POST", "/v1/completions", &[], Some(body.to_string().as_bytes()));
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.windows(6).filter(|w| w == b"data: ").count() < 2 * n {
        let n = c.read(&mut buf).expect("reading the stream");
        assert!(n > 0, "stream ended early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    c
}

fn post_in_background(port: u16, path: &'static str, body: Value) -> JoinHandle<Resp> {
    std::thread::spawn(move || request(port, "POST", path, &[], Some(body.to_string().as_bytes())))
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !done() {
        assert!(t0.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn requests_are_admitted_whole_and_the_queue_never_overshoots() {
    let s = Server::start(&["--batch", "2", "--max-queue", "3"], &[]);
    // The KV pool's real size, before any request.
    let st = s.get("/stats").json();
    let total = st["kv_blocks_total"].as_u64().unwrap_or(0);
    assert!(total > 0 && st["kv_blocks_free"].as_u64() == Some(total), "{st}");
    assert!(st["prompt_cache"]["max_bytes"].as_u64().is_some_and(|b| b > 0), "{st}");
    // More sequences than the queue can ever hold: a 400 naming `n`, not a 429.
    let r = s.post("/v1/completions", &json!({"prompt": ["a", "b"], "n": 2, "max_tokens": 1}));
    assert_eq!(r.status, 400, "{}", r.text());
    let e = error_of(&r);
    assert_eq!(e["param"], "n", "{e}");
    assert!(e["message"].as_str().unwrap_or("").contains("--max-queue"), "{e}");
    // Both batch rows busy; then four requests of 2 sequences each: only one fits a queue of 3.
    let running = occupy(s.port, 2, 4000);
    let burst: Vec<_> = (0..4)
        .map(|_| post_in_background(s.port, "/v1/completions", json!({"prompt": "hi", "n": 2, "max_tokens": 1})))
        .collect();
    wait_for("three of four requests to be refused", || burst.iter().filter(|t| t.is_finished()).count() >= 3);
    // The fourth may still be tokenizing: wait until its two sequences are queued behind the busy batch.
    wait_for("the fourth request to be queued", || s.get("/stats").json()["rows_waiting"].as_u64() == Some(2));
    // Two prompts need 2 places and 1 is left: refused whole (the first prompt is not submitted either).
    let submitted = s.get("/stats").json()["rows_submitted_total"].clone();
    let r = s.post("/v1/completions", &json!({"prompt": ["a", "b"], "max_tokens": 1}));
    assert_eq!(r.status, 429, "{}", r.text());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(s.get("/stats").json()["rows_submitted_total"], submitted);
    drop(running);
    let mut statuses: Vec<u16> = Vec::new();
    for t in burst {
        let r = t.join().expect("request thread");
        if r.status == 429 {
            assert_eq!(r.header("retry-after"), Some("1"), "{:?}", r.headers);
            assert_eq!(error_of(&r)["code"], "server_busy");
        }
        statuses.push(r.status);
    }
    statuses.sort();
    assert_eq!(statuses, [200, 429, 429, 429]);
}

#[test]
fn a_drain_stops_admission_lets_running_requests_finish_and_undrain_resumes() {
    let s = Server::start(&[], &[]);
    let mut running = occupy(s.port, 1, 48);
    let drain = std::thread::spawn({
        let port = s.port;
        move || request(port, "POST", "/admin/drain", &[], None)
    });
    wait_for("/health to say draining", || s.get("/health").status == 503);
    let h = s.get("/health");
    assert_eq!(h.json()["status"], "draining", "{}", h.text());
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    let r = s.post("/v1/chat/completions", &chat);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(error_of(&r)["code"], "draining");
    assert_eq!(r.header("retry-after"), Some("5"));
    // Other routes still answer.
    assert_eq!(s.post("/tokenize", &json!({"content": "hello"})).status, 200);
    let d = drain.join().expect("drain thread");
    assert_eq!(d.status, 200, "{}", d.text());
    let v = d.json();
    assert_eq!(v["drained"], true, "{v}");
    assert!(v["rows_finished"].as_u64().is_some_and(|n| n >= 1), "{v}");
    // The running stream finished on its own.
    let mut rest = Vec::new();
    let _ = running.read_to_end(&mut rest);
    let text = String::from_utf8_lossy(&rest);
    assert!(text.contains("\"finish_reason\":\"length\"") && !text.contains("\"error\""), "{text}");
    let u = s.post("/admin/undrain", &json!({}));
    assert_eq!((u.status, u.json()["drained"].clone()), (200, json!(false)), "{}", u.text());
    assert_eq!(s.get("/health").status, 200);
    assert_eq!(s.post("/v1/chat/completions", &chat).status, 200);
}
