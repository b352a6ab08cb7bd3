//! Faults, injected into the real binary with the default model: the engine child of `hearth serve --isolate` killed
//! with SIGKILL while streams run, and a panic inside the in-process engine (`HEARTH_FAULT_PANIC_AT_TOKEN`).

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::*;

/// How a request of a round ended.
#[derive(Debug, PartialEq)]
enum End {
    /// Finished normally (a finish_reason).
    Done,
    /// Ended with the isolated engine's error: an SSE `error` event, or a 502 `engine_unavailable`.
    EngineGone,
    /// Refused because no engine was up at submission (503).
    Refused,
}

/// A request that must end within `limit` (nothing hangs): a stream read line by line (its first data line is
/// reported on `started`), or a plain request.
fn run_one(port: u16, stream: bool, started: mpsc::Sender<()>, limit: Duration) -> Result<End, String> {
    let body = json!({
        "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
        "max_tokens": 300, "temperature": 0, "stream": stream,
    });
    let mut s = connect(port);
    s.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
    write_request(&mut s, "POST", "/v1/chat/completions", &[], Some(body.to_string().as_bytes()));
    if !stream {
        let _ = started.send(());
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).map_err(|e| format!("no answer in {limit:?}: {e}"))?;
        let r = parse_response(&raw);
        return match r.status {
            200 => Ok(End::Done),
            502 if error_of(&r)["type"] == "engine_unavailable" => Ok(End::EngineGone),
            503 => Ok(End::Refused),
            other => Err(format!("status {other}: {}", r.text())),
        };
    }
    let mut status = None;
    let mut told = false;
    let mut end = None;
    for line in BufReader::new(s).lines() {
        let line = line.map_err(|e| format!("the stream stalled or broke: {e}"))?;
        if status.is_none() {
            status = line.split_whitespace().nth(1).and_then(|c| c.parse::<u16>().ok());
            if status == Some(503) {
                return Ok(End::Refused);
            }
            if status != Some(200) {
                return Err(format!("status line {line:?}"));
            }
            continue;
        }
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data == "[DONE]" {
            break;
        }
        if !told {
            told = true;
            let _ = started.send(());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| format!("bad SSE data {data:?}: {e}"))?;
        if let Some(e) = v.get("error") {
            if e["type"] != "engine_unavailable" {
                return Err(format!("an unexpected error event: {v}"));
            }
            end = Some(End::EngineGone);
        } else if v["choices"][0]["finish_reason"].is_string() {
            end = Some(End::Done);
        }
    }
    end.ok_or_else(|| "the stream ended without a finish_reason or an error (truncated)".into())
}

fn engine(s: &Server) -> Value {
    let r = s.get("/engine");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Wait until the engine is up again after `restarts` restarts.
fn wait_up(s: &Server, restarts: u64) -> Value {
    let t0 = Instant::now();
    loop {
        let e = engine(s);
        if e["state"] == "up" && e["restarts"].as_u64() == Some(restarts) {
            assert_eq!(s.get("/health").status, 200);
            return e;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the engine did not come back: {e}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill9(pid: u64) {
    let st = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().expect("running kill");
    assert!(st.success(), "kill -9 {pid}");
}

#[test]
fn the_server_survives_twenty_engine_kills_under_eight_streams() {
    // Respawns in a row back off up to 10 s by default; 0.2 s keeps twenty of them quick.
    let s = Server::start(&["--isolate", "--batch", "8", "--isolate-backoff-max", "0.2"], &[]);
    let e = engine(&s);
    assert_eq!(e["isolated"], true, "{e}");
    assert_eq!(e["state"], "up", "{e}");
    assert_eq!(e["pool"][0]["loaded"], true, "{e}");

    // Before any fault: an answer, and a constrained one (the grammar is compiled again in the child).
    let r = s.post("/v1/completions", &json!({"prompt": "The capital of France is", "max_tokens": 8}));
    assert_eq!(r.status, 200, "{}", r.text());
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 999}},
                        "required": ["n"], "additionalProperties": false});
    let r = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Give a number as JSON."}], "max_tokens": 40,
                "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let content = r.json()["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string();
    let parsed: Value = serde_json::from_str(&content).unwrap_or_else(|e| panic!("not JSON ({e}): {content:?}"));
    assert!(parsed["n"].is_i64(), "{parsed}");

    // A client that leaves mid-stream: its cancellation reaches the child and the row is freed.
    {
        let mut c = connect(s.port);
        let body = json!({"messages": [{"role": "user", "content": "Count to a thousand."}], "max_tokens": 2000,
                          "stream": true});
        write_request(&mut c, "POST", "/v1/chat/completions", &[], Some(body.to_string().as_bytes()));
        let mut first = [0u8; 512];
        let _ = c.read(&mut first);
    }
    let t0 = Instant::now();
    loop {
        let rows = s.get("/stats").json()["rows_running"].as_u64();
        if rows == Some(0) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the abandoned stream still runs in the child ({rows:?})");
        std::thread::sleep(Duration::from_millis(100));
    }

    let mut ends = Vec::new();
    for round in 0..20u64 {
        let (tx, rx) = mpsc::channel();
        let port = s.port;
        let workers: Vec<_> = (0..8)
            .map(|i| {
                let tx = tx.clone();
                std::thread::spawn(move || run_one(port, i % 2 == 0, tx, Duration::from_secs(60)))
            })
            .collect();
        // Kill once every request is under way (the streams have their first token).
        for _ in 0..8 {
            rx.recv_timeout(Duration::from_secs(60)).expect("a request never started");
        }
        let pid = engine(&s)["pid"].as_u64().expect("the child's pid");
        kill9(pid);
        for w in workers {
            let end = w.join().expect("a client thread panicked");
            ends.push(end.unwrap_or_else(|e| panic!("round {round}: {e}")));
        }
        let e = wait_up(&s, round + 1);
        assert_ne!(e["pid"].as_u64(), Some(pid), "{e}");
        // The parent kept serving while the child was down.
        assert_eq!(s.get("/v1/models").status, 200);
    }
    let gone = ends.iter().filter(|e| **e == End::EngineGone).count();
    assert!(gone >= 20, "the kills ended only {gone} of {} requests: were they in flight? {ends:?}", ends.len());
    let e = engine(&s);
    eprintln!(
        "restart ms: p50 {} p95 {} (ends: {} done, {gone} engine gone, {} refused)",
        e["restart_ms_p50"],
        e["restart_ms_p95"],
        ends.iter().filter(|e| **e == End::Done).count(),
        ends.iter().filter(|e| **e == End::Refused).count()
    );
    assert!(e["restart_ms_p95"].as_f64().is_some_and(|ms| ms > 0.0), "{e}");
    let r = s.post("/v1/completions", &json!({"prompt": "The capital of France is", "max_tokens": 8}));
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn health_is_degraded_while_the_engine_restarts_and_engine_reports_in_process_serving() {
    let s = Server::start(&["--isolate"], &[]);
    let pid = engine(&s)["pid"].as_u64().expect("pid");
    // Until the new child's hello, /health says degraded (503) and the model list is still served.
    kill9(pid);
    let t0 = Instant::now();
    let mut saw_degraded = false;
    while t0.elapsed() < Duration::from_secs(30) {
        let h = s.get("/health");
        if h.status == 503 {
            assert_eq!(h.json()["status"], "degraded", "{}", h.text());
            assert_eq!(s.get("/v1/models").status, 200);
            saw_degraded = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(saw_degraded, "/health never reported the restart");
    wait_up(&s, 1);

    let plain = Server::start(&[], &[]);
    let e = engine(&plain);
    assert_eq!(e["isolated"], false, "{e}");
    assert_eq!(e["state"], "up", "{e}");
    assert_eq!(e["restarts"], 0, "{e}");
}

/// The text of a streamed completion, and the error event that ended it (if one did).
fn stream_text(port: u16, body: &Value, started: Option<mpsc::Sender<()>>) -> (String, Option<Value>) {
    let mut s = connect(port);
    s.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    write_request(&mut s, "POST", "/v1/completions", &[], Some(body.to_string().as_bytes()));
    let (mut text, mut error) = (String::new(), None);
    for line in BufReader::new(s).lines() {
        let line = line.expect("the stream stalled");
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(data).expect("SSE JSON");
        if let Some(tx) = &started {
            let _ = tx.send(());
        }
        match v.get("error") {
            Some(e) => error = Some(e.clone()),
            None => text.push_str(v["choices"][0]["text"].as_str().unwrap_or("")),
        }
    }
    (text, error)
}

#[test]
fn a_panic_in_the_engine_ends_only_the_rows_it_was_running() {
    // One row at a time: the second request waits while the first runs into the injected panic.
    let s = Server::start(&["--batch", "1"], &[("HEARTH_FAULT_PANIC_AT_TOKEN", "6")]);
    let port = s.port;
    let (tx, rx) = mpsc::channel();
    let first = std::thread::spawn(move || {
        let body = json!({"prompt": "Once upon a time", "max_tokens": 40, "ignore_eos": true, "stream": true});
        stream_text(port, &body, Some(tx))
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the first stream never started");
    let second = std::thread::spawn(move || {
        let body = json!({"prompt": "The capital of France is", "max_tokens": 12, "ignore_eos": true, "stream": true});
        stream_text(port, &body, None)
    });
    let (_, error) = first.join().expect("first client");
    let error = error.expect("the stream the panic hit ends with an error event");
    assert_eq!(error["type"], "server_error", "{error}");
    assert!(error["message"].as_str().is_some_and(|m| m.contains("panicked")), "{error}");
    let (text, error) = second.join().expect("second client");
    assert!(error.is_none(), "the waiting request was not in the panicking step, yet failed: {error:?}");
    assert!(!text.is_empty());

    // The server goes on serving, and the hook fired once.
    assert_eq!(s.get("/health").status, 200);
    let r = s.post("/v1/completions", &json!({"prompt": "Hello", "max_tokens": 10, "ignore_eos": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["usage"]["completion_tokens"], 10);
}

#[test]
fn sigterm_with_an_isolated_engine_ends_every_stream_exits_0_and_takes_the_child_along() {
    let mut s = Server::start_direct("true", &["--isolate", "--shutdown-grace", "1"], &[]);
    let child = engine(&s)["pid"].as_u64().expect("the child's pid");
    let (tx, rx) = mpsc::channel();
    let port = s.port;
    let streams: Vec<_> = (0..3)
        .map(|_| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let body =
                    json!({"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true, "stream": true});
                stream_text(port, &body, Some(tx))
            })
        })
        .collect();
    for _ in 0..3 {
        rx.recv_timeout(Duration::from_secs(60)).expect("a stream never started");
    }
    s.signal("TERM");
    let st = s.wait_exit(Duration::from_secs(60)).expect("the server still runs 60 s after SIGTERM (grace 1 s)");
    assert_eq!(st.code(), Some(0), "{st:?}");
    for t in streams {
        let (text, error) = t.join().expect("stream thread");
        assert!(!text.is_empty());
        // 4000 tokens do not fit in the grace period: the shutdown ended the stream, with an error event.
        let e = error.expect("the stream ended without its error event");
        assert_eq!(e["code"], "server_shutting_down", "{e}");
    }
    let t0 = Instant::now();
    while std::path::Path::new(&format!("/proc/{child}")).exists() {
        assert!(t0.elapsed() < Duration::from_secs(10), "the engine process {child} outlived its server");
        std::thread::sleep(Duration::from_millis(50));
    }
}
