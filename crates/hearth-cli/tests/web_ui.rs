//! The web chat's own tests, run with node: `web/tests/unit.mjs` (its logic: incremental Markdown, the SSE reader,
//! search, export/import) and `web/tests/e2e.mjs`, which drives Debian's Chromium with playwright-core against this
//! build's `hearth serve` on SmolLM2 (see that file for what it checks). Needs node, `web/node_modules` and
//! chromium: `scripts/setup-ui-test` installs them (scripts/test runs it first). Without them these tests fail;
//! they never skip.

use std::path::PathBuf;
use std::process::Command;

/// Run a node script of `web/tests/`; fail with its output unless it passes.
fn node(script: &str) {
    let web = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../web");
    assert!(
        web.join("node_modules/playwright-core").is_dir(),
        "web/node_modules is missing: run ./scripts/setup-ui-test (npm ci in web/, and Debian's chromium)"
    );
    let out = Command::new("node")
        .arg(web.join("tests").join(script))
        .current_dir(&web)
        .env("HEARTH_BIN", env!("CARGO_BIN_EXE_hearth"))
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .output()
        .expect("running node (install it: ./scripts/setup-ui-test)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The measurements the tests print (first paint, the 2,000-token stream) and the summary.
    for line in stdout.lines().filter_map(|l| l.strip_prefix("# ")) {
        eprintln!("web/tests/{script}: {line}");
    }
    assert!(out.status.success(), "web/tests/{script} failed:\n{stdout}\n{stderr}");
}

#[test]
fn web_chat_logic() {
    node("unit.mjs");
}

#[test]
fn web_chat_in_chromium() {
    node("e2e.mjs");
}
