//! The real `hearth serve` and its web chat: the ready banner names the app's URL, `--open` starts the browser
//! (`$BROWSER`) on it, `--no-ui` serves the API alone.

mod support;

use std::time::{Duration, Instant};
use support::*;

#[test]
fn serves_the_app_and_opens_the_browser_on_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seen = dir.path().join("opened");
    let browser = dir.path().join("browser.sh");
    std::fs::write(&browser, format!("#!/bin/sh\necho \"$1\" > {}\n", seen.display())).expect("write");
    std::fs::set_permissions(&browser, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let browser = browser.to_string_lossy().into_owned();
    let s = Server::start(&["--open"], &[("BROWSER", browser.as_str())]);
    let url = format!("http://127.0.0.1:{}/", s.port);
    let t0 = Instant::now();
    while !seen.exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let opened = std::fs::read_to_string(&seen).unwrap_or_default();
    assert_eq!(opened.trim(), url, "--open should start $BROWSER on the app");
    let r = s.get("/");
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/html")));
    assert!(r.text().contains("<div id=\"app\">"));
}

#[test]
fn no_ui_leaves_the_root_to_the_api() {
    let s = Server::start(&["--no-ui"], &[]);
    let r = s.get("/");
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(error_of(&r)["code"], "not_found");
    assert_eq!(s.get("/health").status, 200);
}

#[test]
fn no_ui_and_open_conflict() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["serve", "--no-ui", "--open"])
        .output()
        .expect("running hearth");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-ui"), "{}", String::from_utf8_lossy(&out.stderr));
}
