//! `hearth serve --open`: open the web chat in the user's browser once the server is ready.

use std::process::{Command, Stdio};

/// The command that opens `url`: `$BROWSER` when set (`%s` in it is replaced by the URL, else the URL is the last
/// argument), else the platform's opener.
fn opener(url: &str) -> Command {
    if let Some(browser) = std::env::var("BROWSER").ok().filter(|b| !b.trim().is_empty()) {
        let mut words = browser.split_whitespace();
        let mut cmd = Command::new(words.next().unwrap_or_default());
        let rest: Vec<&str> = words.collect();
        let placeholder = rest.iter().any(|w| w.contains("%s"));
        cmd.args(rest.iter().map(|w| w.replace("%s", url)));
        if !placeholder {
            cmd.arg(url);
        }
        return cmd;
    }
    if cfg!(target_os = "macos") {
        let mut c = Command::new("open");
        c.arg(url);
        c
    } else if cfg!(windows) {
        let mut c = Command::new("cmd");
        c.args(["/C", "start", "", url]);
        c
    } else {
        let mut c = Command::new("xdg-open");
        c.arg(url);
        c
    }
}

/// Start the browser on `url` without waiting for it; a failure is a warning, never an error.
pub fn browser(url: &str) {
    let mut cmd = opener(url);
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    match cmd.spawn() {
        Ok(mut child) => {
            // Reap it when it exits (openers return at once; a browser started directly may run on).
            let _ = std::thread::Builder::new().name("hearth-open".into()).spawn(move || child.wait());
        }
        Err(e) => eprintln!(
            "hearth: could not open a browser ({:?}: {e}); open {url} yourself (or set BROWSER)",
            cmd.get_program()
        ),
    }
}
