//! Fuzz every route's request parsing and validation: no input may panic the server, and every answer is either
//! a success of the route's shape or an OpenAI error (`{"error": {"message", "type", "param", "code"}}`, 4xx;
//! Anthropic's shape on `/v1/messages`).
//!
//! The inputs go through the real router in-process (`tower::ServiceExt::oneshot`), so they meet exactly the code
//! the handlers run: the body extractor and the wire types' deserializers, `params::resolve`,
//! `messages::normalize`, the model's real chat template and tokenizer, `engine_request` and the engine's own
//! `submit` checks. Behind it is a real engine
//! thread (scheduler, sampler, streaming detokenizer, stop strings, SSE) over a fake `Model` whose logits are a
//! cheap hash of the last token and position, so requests that pass validation generate a few varied tokens
//! (special, byte and multi-byte ones included) and end with `stop` or `length`.
//!
//! Inputs: arbitrary bytes, arbitrary JSON values, structure-aware mutations of valid chat / completions /
//! Anthropic messages / responses / tokenize / detokenize / apply-template bodies (wrong types in every field, huge / negative / fractional numbers,
//! NaN-like strings, deep nesting, unicode and special-token text, empty and oversized arrays, null everywhere),
//! and byte-level damage to valid bodies. The same bodies also go straight to the public parsers. The parts live
//! in `fuzz/`.
//!
//! `HEARTH_FUZZ_CASES` sets the number of cases (default 10 000: a few seconds in the test profile),
//! `HEARTH_FUZZ_SEED` the seed (default fixed, so CI is reproducible). A failure prints the case index;
//! `HEARTH_FUZZ_ONLY=<index>` replays that one case, `HEARTH_FUZZ_VERBOSE=1` prints every error answer.
//! A long run: `HEARTH_FUZZ_CASES=1000000 cargo test --release -p hearth-server --test fuzz_requests -- --nocapture`.
//! Needs the fetched models (`scripts/fetch-models`) for their real tokenizers; the chat templates are the models'
//! own, none, and the oracle's Qwen3-, Llama-3.1- and Mistral-like ones (`tools/oracle/templates`).

mod fuzz;
mod served;

use axum::body::{to_bytes, Body};
use axum::http::{header, Method, Request};
use axum::Router;
use fuzz::cases::{make_case, Case, Route};
use fuzz::check::{
    check_error, direct_parsers, env_u64, install_panic_counter, run_case, show, LAST_PANIC, PANICS, TEMPLATE_PANICS,
};
use fuzz::rng::{mix, Rng};
use fuzz::server::{ready_router, Template, MISTRAL_LIKE, SERVERS};
use hearth_server::{AppState, ServerConfig};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tower::ServiceExt;

#[test]
fn fuzz_requests_never_panic_and_always_answer_in_shape() {
    install_panic_counter();
    let cases = env_u64("HEARTH_FUZZ_CASES").unwrap_or(10_000);
    let seed = env_u64("HEARTH_FUZZ_SEED").unwrap_or(0x4EA7_F022);
    let only = env_u64("HEARTH_FUZZ_ONLY");
    let (routers, vocabs): (Vec<Router>, Vec<usize>) =
        SERVERS.iter().map(|(alias, t, _)| ready_router(alias, t())).unzip();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");

    let t0 = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let mut failed = 0usize;
    let mut by_status: BTreeMap<(Route, u16), usize> = BTreeMap::new();
    let mut time_by: BTreeMap<(Route, u16), Duration> = BTreeMap::new();
    let mut per_server = vec![(0usize, Duration::ZERO); SERVERS.len()];
    let range = match only {
        Some(i) => i..i + 1,
        None => 0..cases,
    };
    let mut ran = 0u64;
    for i in range {
        let mut rng = Rng::new(mix(seed, i));
        let case = make_case(&mut rng, &vocabs);
        let panics_before = PANICS.load(Ordering::SeqCst);
        let router = &routers[case.model];
        let t_case = Instant::now();
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), run_case(router, &case)).await })
        }));
        let mut problem = match outcome {
            Err(_) => Some(format!("PANIC: {}", LAST_PANIC.lock().map(|s| s.clone()).unwrap_or_default())),
            Ok(Err(_)) => Some("no answer within 60 s".to_string()),
            Ok(Ok(Err(e))) => Some(e),
            Ok(Ok(Ok(status))) => {
                *by_status.entry((case.route, status)).or_default() += 1;
                *time_by.entry((case.route, status)).or_default() += t_case.elapsed();
                per_server[case.model].0 += 1;
                per_server[case.model].1 += t_case.elapsed();
                None
            }
        };
        if problem.is_none() {
            let direct = std::panic::catch_unwind(AssertUnwindSafe(|| direct_parsers(&case.body, vocabs[case.model])));
            problem = match direct {
                Err(_) => {
                    Some(format!("PANIC in a parser: {}", LAST_PANIC.lock().map(|s| s.clone()).unwrap_or_default()))
                }
                Ok(Err(e)) => Some(format!("parser: {e}")),
                Ok(Ok(())) => None,
            };
        }
        if problem.is_none() && PANICS.load(Ordering::SeqCst) != panics_before {
            problem =
                Some(format!("PANIC (caught elsewhere): {}", LAST_PANIC.lock().map(|s| s.clone()).unwrap_or_default()));
        }
        if let Some(p) = problem {
            failed += 1;
            if failures.len() < 20 {
                let msg = format!(
                    "case {i} (replay: HEARTH_FUZZ_SEED={seed} HEARTH_FUZZ_ONLY={i}): {p}\n    {}",
                    show(&case)
                );
                eprintln!("{msg}");
                failures.push(msg);
            }
        }
        ran += 1;
        if cases >= 100_000 && only.is_none() && ran.is_multiple_of(cases / 10) {
            eprintln!("fuzz_requests: {ran} / {cases} cases, {:.0} s, {failed} failed", t0.elapsed().as_secs_f64());
        }
    }
    let elapsed = t0.elapsed();
    eprintln!(
        "fuzz_requests: {ran} cases, seed {seed}, {:.1} s, {failed} failed, {} template-engine panics contained as 400s",
        elapsed.as_secs_f64(),
        TEMPLATE_PANICS.load(Ordering::SeqCst)
    );
    for (i, (n, d)) in per_server.iter().enumerate() {
        eprintln!("  server {i} ({}): {n} cases, {:.0} ms", SERVERS[i].0, d.as_secs_f64() * 1e3);
    }
    for ((route, status), n) in &by_status {
        let ms = time_by.get(&(*route, *status)).map(|d| d.as_secs_f64() * 1e3).unwrap_or(0.0);
        eprintln!("  {route:?} {status}: {n} ({ms:.0} ms)");
    }
    assert!(failures.is_empty(), "{failed} of {ran} cases failed; first ones:\n{}", failures.join("\n"));
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "panics were caught somewhere: {}", LAST_PANIC.lock().unwrap());
    if only.is_none() && ran >= 2000 {
        // The fuzz must reach past validation: valid requests generate, invalid ones are rejected.
        let routes = [
            Route::Chat,
            Route::Completions,
            Route::Messages,
            Route::Responses,
            Route::Tokenize,
            Route::Detokenize,
            Route::ApplyTemplate,
        ];
        for route in routes {
            let ok = by_status.get(&(route, 200)).copied().unwrap_or(0);
            let bad = by_status.get(&(route, 400)).copied().unwrap_or(0);
            assert!(ok > 0 && bad > 0, "{route:?}: {ok} successes and {bad} rejections; the generator is off");
        }
    }
}

/// While the model loads, arbitrary bodies on every POST route still get a 400 or 503 in shape.
#[test]
fn fuzz_bodies_while_loading() {
    install_panic_counter();
    let cases = env_u64("HEARTH_FUZZ_CASES").unwrap_or(10_000) / 10;
    let seed = env_u64("HEARTH_FUZZ_SEED").unwrap_or(0x4EA7_F022) ^ 0x1;
    let router = hearth_server::router(AppState::new(ServerConfig { max_body: 64 * 1024, ..Default::default() }));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let paths = ["/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize", "/apply-template"];
    for i in 0..cases {
        let mut rng = Rng::new(mix(seed, i));
        let mut case = make_case(&mut rng, &[49152; 5]);
        case.method = Method::POST;
        case.path = rng.pick(&paths).to_string();
        let (status, body) = rt.block_on(async {
            let req = Request::builder()
                .method(Method::POST)
                .uri(case.path.as_str())
                .body(Body::from(case.body.clone()))
                .unwrap();
            let resp = router.clone().oneshot(req).await.unwrap();
            let status = resp.status().as_u16();
            (status, to_bytes(resp.into_body(), 1 << 20).await.unwrap())
        });
        let v: Value =
            serde_json::from_slice(&body).unwrap_or_else(|e| panic!("case {i}: not JSON ({e}): {}", show(&case)));
        check_error(&v).unwrap_or_else(|e| panic!("case {i}: {e}: {}", show(&case)));
        assert!(matches!(status, 400 | 413 | 503), "case {i}: status {status}: {v}");
    }
    assert_eq!(PANICS.load(Ordering::SeqCst), 0);
}

/// Found by this fuzzer: minijinja 2.24 panics (index out of bounds) when a template reverses an empty list, as
/// `loop_messages[::-1]` does in a Mistral-style template given only a system message. The server answers 400.
#[test]
fn template_engine_panic_is_a_template_error() {
    install_panic_counter();
    let (router, _) = ready_router("smollm2-135m", Template::Source(MISTRAL_LIKE));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    for path in ["/apply-template", "/v1/chat/completions"] {
        let case = Case {
            route: if path == "/apply-template" { Route::ApplyTemplate } else { Route::Chat },
            method: Method::POST,
            path: path.into(),
            body: br#"{"messages": [{"role": "system", "content": "Bonjour !"}]}"#.to_vec(),
            model: 1,
        };
        let status = rt.block_on(run_case(&router, &case)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(status, 400, "{path}");
    }
}

/// A stream is SSE frames exactly (`data: {json}`, `: keep-alive` only before the first token, `data: [DONE]`
/// last) and never compressed, while a whole JSON answer is gzipped for a client that asks.
#[test]
fn streams_are_plain_sse_frames_and_json_is_gzipped() {
    let (router, _) = ready_router("smollm2-135m", Template::Own);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let post = |body: Value| {
        Request::builder()
            .method(Method::POST)
            .uri("/v1/chat/completions")
            .header(header::ACCEPT_ENCODING, "gzip")
            .body(Body::from(body.to_string()))
            .expect("request")
    };
    let messages = json!([{"role": "user", "content": "Hi"}]);
    rt.block_on(async {
        let body =
            json!({"messages": messages, "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}});
        let resp = router.clone().oneshot(post(body)).await.expect("answer");
        let h = resp.headers().clone();
        assert_eq!(resp.status(), 200);
        assert!(h.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream")), "{h:?}");
        assert!(h.get(header::CONTENT_ENCODING).is_none(), "a compressed stream would hold tokens back: {h:?}");
        assert_eq!(h.get("x-accel-buffering").map(|v| v.as_bytes()), Some(&b"no"[..]));
        assert!(h.get("x-request-id").is_some(), "{h:?}");
        let raw = to_bytes(resp.into_body(), 1 << 20).await.expect("body");
        let text = String::from_utf8_lossy(&raw);
        assert!(text.ends_with("\n\ndata: [DONE]\n\n"), "{text}");
        let frames: Vec<&str> = text.split_terminator("\n\n").collect();
        let first_token =
            frames.iter().position(|f| f.contains("\"content\":\"") && !f.contains("\"role\"")).unwrap_or(0);
        for (i, f) in frames.iter().enumerate() {
            let keepalive = *f == ": keep-alive" && i < first_token;
            assert!(keepalive || (f.starts_with("data: ") && !f.contains('\n')), "frame {i}: {f:?}\n{text}");
        }
        let data: Vec<Value> = frames
            .iter()
            .filter_map(|f| f.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect();
        assert_eq!(data[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
        assert_eq!(data[0]["usage"], Value::Null);
        let last = &data[data.len() - 1];
        assert_eq!((last["choices"].clone(), last["usage"]["total_tokens"].is_u64()), (json!([]), true), "{last}");

        let resp = router.clone().oneshot(post(json!({"messages": messages, "max_tokens": 4}))).await.expect("answer");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers().get(header::CONTENT_ENCODING).map(|v| v.as_bytes()), Some(&b"gzip"[..]));
    });
}
