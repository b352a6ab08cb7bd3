//! End-to-end: huge prompts do not stall the server. A prompt whose text alone proves it cannot fit is a 400 before
//! it is tokenized; one that must be tokenized to know is tokenized off the async runtime, so `/health` answers
//! meanwhile. (The 2 s bound on `/health` only detects a stall: it answers in milliseconds.)

mod support;

use serde_json::{json, Value};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use support::*;

fn chat_body(text_bytes: usize) -> Vec<u8> {
    let words = "lorem ipsum dolor sit amet, consectetur adipiscing elit. ";
    let text = words.repeat(text_bytes / words.len());
    json!({"messages": [{"role": "user", "content": text}], "max_tokens": 8}).to_string().into_bytes()
}

fn post_in_background(port: u16, body: std::sync::Arc<Vec<u8>>) -> JoinHandle<Resp> {
    std::thread::spawn(move || request(port, "POST", "/v1/chat/completions", &[], Some(&body)))
}

/// Post `n` copies of `body` at once; poll `/health` until they all answered, each poll within 2 s.
fn post_while_polling_health(s: &Server, n: usize, body: Vec<u8>) -> Vec<Resp> {
    let body = std::sync::Arc::new(body);
    let posts: Vec<_> = (0..n).map(|_| post_in_background(s.port, body.clone())).collect();
    let mut polls = 0;
    while polls == 0 || !posts.iter().all(|p| p.is_finished()) {
        let t0 = Instant::now();
        let r = s.get("/health");
        assert_eq!(r.status, 200, "{}", r.text());
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(2), "/health took {took:?} while {n} large prompts were in flight");
        polls += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    posts.into_iter().map(|p| p.join().expect("request thread")).collect()
}

fn context_error(r: &Resp) -> Value {
    assert_eq!(r.status, 400, "{}", r.text());
    let e = error_of(r);
    assert_eq!(e["code"], "context_length_exceeded", "{e}");
    e
}

#[test]
fn huge_prompts_are_refused_without_stalling_health() {
    let s = Server::start(&[], &[]);
    // 3.9 MB of text: its length alone proves it cannot fit.
    let answers = post_while_polling_health(&s, 16, chat_body(3_900_000));
    let (mut longest, mut limit) = (0, 0);
    for r in &answers {
        let e = context_error(r);
        assert_eq!(e["param"], "messages", "{e}");
        let m = e["message"].as_str().unwrap_or("");
        let number_after = |what: &str| {
            m.split(what)
                .nth(1)
                .and_then(|t| t.split(' ').next())
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("no number after {what:?} in: {m}"))
        };
        longest = number_after("spells more than ");
        limit = number_after("can hold at most ");
    }
    // Text just short of that proof must be tokenized to be refused: it is, off the runtime.
    let size = (limit * longest * 9 / 10).min(3_500_000);
    assert!(size > 100_000, "limit {limit}, longest token {longest} bytes");
    for r in post_while_polling_health(&s, 16, chat_body(size)) {
        context_error(&r);
    }
}
