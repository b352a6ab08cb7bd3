//! End-to-end: the prompt cache of the real `hearth serve` binary. A repeated conversation reuses its KV
//! (`cached_tokens`) and answers the same; the SSD tier is flushed, survives a restart, and a tier full of
//! corrupt files still gives the right answer from a server that keeps serving.

mod support;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use support::*;

fn chat(s: &Server, turns: &Value) -> (String, u64) {
    let r = s.post("/v1/chat/completions", &json!({"messages": turns, "max_tokens": 12, "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let text = v["choices"][0]["message"]["content"].as_str().expect("content").to_string();
    (text, v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().expect("cached_tokens"))
}

fn conversation() -> Value {
    let system = "You are a careful assistant for a library. You answer in one short sentence. ".repeat(6);
    json!([
        {"role": "system", "content": system},
        {"role": "user", "content": "Which century did the printing press appear in Europe?"}
    ])
}

fn block_files(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() && p.file_name().is_some_and(|n| n.len() == 2) {
            out.extend(block_files(&p));
        } else if p.extension().is_some_and(|x| x == "kvb") {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn the_prompt_cache_and_its_ssd_tier_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let ssd = dir.path().to_str().unwrap().to_string();
    let conv = conversation();
    let want = {
        let s = Server::start(&["--prompt-cache", "0"], &[]);
        let (text, cached) = chat(&s, &conv);
        assert_eq!(cached, 0, "--prompt-cache 0 caches nothing");
        assert_eq!(chat(&s, &conv), (text.clone(), 0));
        text
    };
    {
        let s = Server::start(&["--ssd-cache", &ssd], &[]);
        assert_eq!(chat(&s, &conv), (want.clone(), 0));
        let (text, cached) = chat(&s, &conv);
        assert_eq!(text, want, "a cache hit changed the answer");
        assert!(cached >= 64, "the repeated conversation reused its KV: {cached}");
        let f = s.post("/admin/cache/flush", &json!({}));
        assert_eq!(f.status, 200, "{}", f.text());
        let f = f.json();
        assert_eq!(f["status"], "flushed");
        assert!(f["files"].as_u64().is_some_and(|n| n >= 4), "{f}");
        let st = s.get("/stats").json();
        assert!(st["prompt_cache"]["hits"].as_u64() >= Some(1), "{st}");
        assert_eq!(st["ssd_cache"]["pending"], 0, "{st}");
    }
    // A restart: the prefix comes back from the SSD.
    {
        let s = Server::start(&["--ssd-cache", &ssd], &[]);
        let (text, cached) = chat(&s, &conv);
        assert_eq!(text, want, "a restored prefix changed the answer");
        assert!(cached >= 64, "{cached}");
        let st = s.get("/stats").json();
        assert!(st["ssd_cache"]["restores"].as_u64() >= Some(4), "{st}");
        assert!(st["prompt_cache"]["restored_tokens"].as_u64() >= Some(64), "{st}");
    }
    let fp: Vec<PathBuf> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(fp.len(), 1, "one fingerprint directory: {fp:?}");
    let files = block_files(&fp[0]);
    let intact: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    // Damage only the data (64 bytes in the middle of each file; the headers stay intact), default flags: every
    // block's data is hashed on restore, so each is quarantined and the answer is the cold one.
    for (f, b) in files.iter().zip(&intact) {
        let mut b = b.clone();
        let mid = b.len() / 2;
        b[mid..mid + 64].iter_mut().for_each(|x| *x ^= 0x5a);
        std::fs::write(f, b).unwrap();
    }
    {
        let s = Server::start(&["--ssd-cache", &ssd], &[]);
        let (text, cached) = chat(&s, &conv);
        assert_eq!(text, want, "damaged cache data changed the answer");
        assert_eq!(cached, 0, "no damaged block is restored");
        let st = s.get("/stats").json();
        assert!(st["ssd_cache"]["quarantined"].as_u64() >= Some(1), "{st}");
        assert_eq!(st["prompt_cache"]["restored_tokens"], 0, "{st}");
    }
    // Break every file in some way (from intact copies): quarantined at start or on restore, never served.
    for (f, b) in files.iter().zip(&intact) {
        std::fs::write(f, b).unwrap();
    }
    for (i, f) in files.iter().enumerate() {
        let mut b = std::fs::read(f).unwrap();
        match i % 4 {
            0 => b[12] ^= 0xff,                  // header
            1 => b.truncate(b.len() / 3),        // truncated
            2 => b = b"not a block".to_vec(),    // garbage with the right name
            _ => *b.last_mut().unwrap() ^= 0x01, // data (caught by the data hash, on by default)
        }
        std::fs::write(f, b).unwrap();
    }
    let s = Server::start(&["--ssd-cache", &ssd], &[]);
    let (text, _) = chat(&s, &conv);
    assert_eq!(text, want, "a corrupt SSD tier changed the answer");
    let st = s.get("/stats").json();
    assert!(st["ssd_cache"]["quarantined"].as_u64() >= Some(files.len() as u64 * 3 / 4), "{st}");
    assert_eq!(s.get("/health").status, 200);
    assert_eq!(chat(&s, &conv).0, want, "still serving, still right");
}
