//! A `hearth serve` child process on a free loopback port, and a tiny HTTP/1.1 client over `TcpStream`.

#![allow(dead_code)]

pub mod python;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running server. The child is a shell that starts `hearth serve` and kills it when its stdin closes, so the
/// server goes away even if the test process dies without running `Drop`.
pub struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    pub port: u16,
}

impl Server {
    /// Start with the default model and a small KV cache; `args` and `env` are added.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Server {
        let script = r#""$0" "$@" & p=$!; read _; kill -9 $p 2>/dev/null; wait $p"#;
        Self::spawn(script, args, env)
    }

    /// Start `hearth serve` as the child itself (`exec`, after `prelude`, a shell command such as `ulimit -n 256`),
    /// so that a test can signal it and see its exit status. `Drop` kills it.
    pub fn start_direct(prelude: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let script = format!(r#"{prelude}; exec "$0" "$@""#);
        let mut s = Self::spawn(&script, args, env);
        drop(s.stdin.take());
        s
    }

    fn spawn(script: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script).arg(env!("CARGO_BIN_EXE_hearth"));
        cmd.args(["serve", "--port", "0", "--kv-budget", "0.25", "--threads", "2"]).args(args);
        cmd.env_remove("HEARTH_API_KEY").env_remove("HEARTH_MAX_QUEUE").env_remove("HEARTH_PORT");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawning hearth serve");
        let stdin = child.stdin.take();
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[server] {line}");
                let _ = tx.send(line);
            }
        });
        let mut seen = Vec::new();
        let port = loop {
            match rx.recv_timeout(Duration::from_secs(180)) {
                Ok(line) => {
                    if let Some(rest) = line.split("ready on http://127.0.0.1:").nth(1) {
                        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
                        break digits.parse().expect("port in the banner");
                    }
                    seen.push(line);
                }
                Err(_) => panic!("hearth serve did not become ready; stderr:\n{}", seen.join("\n")),
            }
        };
        Server { child, stdin, port }
    }

    pub fn get(&self, path: &str) -> Resp {
        request(self.port, "GET", path, &[], None)
    }

    pub fn post(&self, path: &str, body: &Value) -> Resp {
        request(self.port, "POST", path, &[], Some(body.to_string().as_bytes()))
    }

    /// Send a signal (`TERM`, `INT`, ...) to a server started with `start_direct`.
    pub fn signal(&self, name: &str) {
        let st = Command::new("kill").arg(format!("-{name}")).arg(self.child.id().to_string()).status();
        assert!(st.is_ok_and(|s| s.success()), "kill -{name} failed");
    }

    /// The exit status of a server started with `start_direct`, once it exits; None if it is still running after
    /// `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let t0 = std::time::Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if t0.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        match self.stdin.take() {
            Some(stdin) => drop(stdin),
            // Started with `start_direct`: the child is the server.
            None => {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// SSE frames in order: `data` payloads as `Data(text)`, comments as `Comment(text)`.
    pub fn sse(&self) -> Vec<Sse> {
        let text = self.text();
        let mut out = Vec::new();
        for frame in text.split("\n\n").filter(|f| !f.trim().is_empty()) {
            for line in frame.lines() {
                if let Some(d) = line.strip_prefix("data: ") {
                    out.push(Sse::Data(d.to_string()));
                } else if let Some(c) = line.strip_prefix(':') {
                    out.push(Sse::Comment(c.trim().to_string()));
                }
            }
        }
        out
    }

    /// Each frame's `event:` name (empty when it has none) and `data` JSON (frames without data are left out).
    pub fn sse_events(&self) -> Vec<(String, Value)> {
        let text = self.text();
        let mut out = Vec::new();
        for frame in text.split("\n\n").filter(|f| !f.trim().is_empty()) {
            let name = frame.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("").to_string();
            if let Some(d) = frame.lines().find_map(|l| l.strip_prefix("data: ")) {
                let v = serde_json::from_str(d).unwrap_or_else(|e| panic!("bad SSE JSON {d}: {e}"));
                out.push((name, v));
            }
        }
        out
    }

    /// The JSON `data` payloads (without `[DONE]`).
    pub fn sse_json(&self) -> Vec<Value> {
        self.sse()
            .into_iter()
            .filter_map(|e| match e {
                Sse::Data(d) if d != "[DONE]" => {
                    Some(serde_json::from_str(&d).unwrap_or_else(|e| panic!("bad SSE JSON {d}: {e}")))
                }
                _ => None,
            })
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Sse {
    Data(String),
    Comment(String),
}

pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connecting to the server");
    s.set_read_timeout(Some(Duration::from_secs(300))).ok();
    s
}

pub fn write_request(s: &mut TcpStream, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len()));
    }
    head.push_str("\r\n");
    // A server may answer (413, 401) before reading a large body: ignore write errors, read the answer.
    let _ = s.write_all(head.as_bytes());
    if let Some(b) = body {
        let _ = s.write_all(b);
    }
}

/// One request on a fresh connection; the whole response (chunked bodies decoded).
pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Resp {
    let mut s = connect(port);
    write_request(&mut s, method, path, headers, body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

pub fn parse_response(raw: &[u8]) -> Resp {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 =
        lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")) {
        body = dechunk(&body);
    }
    Resp { status, headers, body }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&b[..eol]).into_owned();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        b = &b[eol + 2..];
        if size == 0 || b.len() < size {
            out.extend_from_slice(&b[..size.min(b.len())]);
            break;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[(size + 2).min(b.len())..];
    }
    out
}

/// The `error` object of an OpenAI-shaped error response, after checking the shape.
pub fn error_of(r: &Resp) -> Value {
    let v = r.json();
    let e = v.get("error").unwrap_or_else(|| panic!("no `error` in {v}")).clone();
    for k in ["message", "type", "param", "code"] {
        assert!(e.get(k).is_some(), "error object lacks `{k}`: {e}");
    }
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "empty message: {e}");
    e
}
