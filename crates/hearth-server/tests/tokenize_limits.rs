//! What one `/tokenize` or `/detokenize` request may hold: text over `--max-tokenize` is a 413 naming the limit (and
//! the server goes on serving), and a large answer a client takes gzip'ed is compressed whole, off the async workers.
//! The requests go through the real router over a fake model (`fuzz::server`).

mod fuzz;
mod served;

use axum::body::{to_bytes, Body};
use axum::http::{header, Method, Request};
use axum::Router;
use fuzz::server::{ready_router_with, Template};
use hearth_server::ServerConfig;
use serde_json::{json, Value};
use std::io::Read;
use tower::ServiceExt;

/// (status, headers, body bytes) of one request.
fn send(router: &Router, method: Method, path: &str, headers: &[(&str, &str)], body: &Value) -> (u16, String, Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let mut req = Request::builder().method(method).uri(path).header(header::CONTENT_TYPE, "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let body = if body.is_null() { Body::empty() } else { Body::from(body.to_string()) };
        let resp = router.clone().oneshot(req.body(body).expect("request")).await.expect("answer");
        let status = resp.status().as_u16();
        let head = format!("{:?}", resp.headers()).to_ascii_lowercase();
        let bytes = to_bytes(resp.into_body(), 256 << 20).await.expect("body");
        (status, head, bytes.to_vec())
    })
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", short(bytes)))
}

/// The start of a body, for a failure's message.
fn short(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned()
}

const CAP: usize = 64 << 10;

#[test]
fn text_over_the_cap_is_a_413_naming_the_limit_and_the_server_goes_on() {
    let cfg = ServerConfig { max_tokenize: CAP, ..ServerConfig::default() };
    let (router, _) = ready_router_with("smollm2-135m", Template::Own, cfg);
    let post = |path: &str, body: Value| send(&router, Method::POST, path, &[], &body);

    let (status, _, body) = post("/tokenize", json!({"content": "a".repeat(CAP + 1), "with_pieces": true}));
    assert_eq!(status, 413, "{}", short(&body));
    let e = json_of(&body);
    assert_eq!(e["error"]["param"], "content", "{e}");
    assert_eq!(e["error"]["code"], "text_too_large", "{e}");
    let msg = e["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("--max-tokenize") && msg.contains(&CAP.to_string()), "{msg}");

    // Token ids that spell more text than the cap.
    let (status, _, body) = post("/tokenize", json!({"content": "hello world ".repeat(CAP / 12)}));
    assert_eq!(status, 200);
    let ids = json_of(&body)["tokens"].clone();
    let doubled: Vec<Value> =
        ids.as_array().into_iter().flatten().chain(ids.as_array().into_iter().flatten()).cloned().collect();
    let (status, _, body) = post("/detokenize", json!({"tokens": doubled}));
    assert_eq!(status, 413, "{}", short(&body));
    let e = json_of(&body);
    assert_eq!(e["error"]["param"], "tokens", "{e}");
    assert!(e["error"]["message"].as_str().is_some_and(|m| m.contains("--max-tokenize")), "{e}");

    // The server goes on serving.
    let (status, _, body) = post("/tokenize", json!({"content": "Hello"}));
    assert_eq!(status, 200, "{}", short(&body));
    let (status, _, body) = post("/detokenize", json!({"tokens": json_of(&body)["tokens"]}));
    assert_eq!((status, json_of(&body)["content"].clone()), (200, json!("Hello")));
    assert_eq!(send(&router, Method::GET, "/health", &[], &Value::Null).0, 200);
}

#[test]
fn a_large_tokenize_answer_is_gzipped_whole() {
    let (router, _) = ready_router_with("smollm2-135m", Template::Own, ServerConfig::default());
    let text = "Hello world, how are you? ".repeat(10_000);
    let body = json!({"content": text, "with_pieces": true});
    let (status, head, gz) = send(&router, Method::POST, "/tokenize", &[("accept-encoding", "gzip")], &body);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("\"content-encoding\": \"gzip\""), "{head}");
    assert!(head.contains(&format!("\"content-length\": \"{}\"", gz.len())), "compressed whole: {head}");
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut plain).expect("gzip");
    let pieces = json_of(&plain)["tokens"].as_array().map(Vec::len).unwrap_or(0);
    assert!(pieces > 10_000, "{pieces} pieces");
}
