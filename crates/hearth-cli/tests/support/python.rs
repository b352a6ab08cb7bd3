//! The official Python clients (`openai`, `anthropic`) run as scripts of `tests/` against a test server: the
//! interpreter is `.venv-test/bin/python`, made by `scripts/setup-test-python` (scripts/test runs it first). Without
//! it a test fails; it never skips.

use serde_json::Value;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn venv_python() -> PathBuf {
    let py = repo_root().join(".venv-test/bin/python");
    assert!(
        py.is_file(),
        "{} is missing: run ./scripts/setup-test-python (it creates .venv-test with the pinned `openai` and `anthropic` packages)",
        py.display()
    );
    py
}

/// Run a client script of `tests/` against `base_url`; its stdout's last line, parsed.
pub fn run_client(script: &str, base_url: &str, model: &str) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join(script);
    let mut child = Command::new(venv_python())
        .arg(&script)
        .arg(base_url)
        .arg(model)
        // Loopback must not go through a proxy; the client's own env settings must not redirect it.
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the Python client");
    let mut out_pipe = child.stdout.take().expect("stdout");
    let mut err_pipe = child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for the client") {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the Python client ran over 600 s; stderr:\n{}", err_t.join().unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    if !stderr.trim().is_empty() {
        eprintln!("[client stderr]\n{stderr}");
    }
    assert!(status.success(), "the Python client failed ({status}); stdout:\n{stdout}\nstderr:\n{stderr}");
    let line = stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("the client's last line is not JSON ({e}): {stdout}\nstderr:\n{stderr}"))
}

/// A check of the script's result ran without raising (the script records `{"exception": ...}` instead).
pub fn no_exception(v: &Value, what: &str) {
    assert!(v.is_object(), "{what}: {v}");
    assert!(v.get("exception").is_none(), "{what} raised: {}", v["exception"]);
}
