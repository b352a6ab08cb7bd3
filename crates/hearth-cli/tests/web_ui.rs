//! The web chat in a real browser: `web/tests/e2e.mjs` drives Debian's Chromium with playwright-core against this
//! build's `hearth serve` on SmolLM2 (see that file for what it checks). Needs node, `web/node_modules` and
//! chromium: `scripts/setup-ui-test` installs them (scripts/test runs it first). Without them this test fails; it
//! never skips.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn web_chat_in_chromium() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let web = root.join("web");
    assert!(
        web.join("node_modules/playwright-core").is_dir(),
        "web/node_modules is missing: run ./scripts/setup-ui-test (npm ci in web/, and Debian's chromium)"
    );
    let out = Command::new("node")
        .arg(web.join("tests/e2e.mjs"))
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
        eprintln!("web: {line}");
    }
    assert!(out.status.success(), "the browser tests failed:\n{stdout}\n{stderr}");
}
