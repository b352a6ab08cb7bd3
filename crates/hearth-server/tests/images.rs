//! Images through the HTTP APIs on a tiny random Qwen2.5-VL (tests/fixtures/tiny-qwen2_5_vl, its published chat
//! template): an image as a data: URL (OpenAI chat), a base64 block (Anthropic Messages), an `input_image`
//! (Responses) and an http URL fetched through the media policy all give transformers' greedy answer
//! (tests/goldens/tiny_qwen2_5_vl.json `chat`), from the checkpoint's directory and from its llama.cpp
//! conversion (a GGUF and its `mmproj` file); refused URLs, bad images and images for a text model get 400s in
//! each API's shape, naming the part, and the server keeps serving.

mod served;

use axum::body::{to_bytes, Body};
use axum::http::{Method, Request};
use axum::Router;
use base64::Engine as _;
use hearth_engine::engine::{start, EngineConfig};
use hearth_engine::weights::GgufFile;
use hearth_media::fetch::{Net, NetFuture};
use hearth_media::MediaLimits;
use hearth_server::chat::images::ImageSupport;
use hearth_server::config::ServerConfig;
use hearth_server::model::{Engine, Ready};
use hearth_server::state::AppState;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn golden() -> Value {
    golden_of("tiny_qwen2_5_vl.json")
}

fn golden_of(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join("tests/goldens").join(name)).unwrap()).unwrap()
}

/// `images.test` and `public.test` resolve to a public test address, every connection goes to `server`.
struct TestNet {
    server: SocketAddr,
}

impl Net for TestNet {
    fn resolve<'a>(&'a self, host: &'a str, _port: u16) -> NetFuture<'a, Vec<IpAddr>> {
        let ips = match host {
            "images.test" => vec!["203.0.113.10".parse().unwrap()],
            "intranet.test" => vec!["10.1.1.1".parse().unwrap()],
            _ => vec![],
        };
        Box::pin(async move { Ok(ips) })
    }
    fn connect(&self, _addr: SocketAddr) -> NetFuture<'_, TcpStream> {
        Box::pin(TcpStream::connect(self.server))
    }
}

/// A local server answering every request with `png`.
async fn image_server(png: Vec<u8>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let png = png.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let head =
                    format!("HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: {}\r\n\r\n", png.len());
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&png).await;
            });
        }
    });
    addr
}

async fn router(png: &[u8]) -> (Router, Arc<hearth_engine::tokenizer::Tokenizer>) {
    router_dir("tiny-qwen2_5_vl", png).await
}

/// A Hugging Face directory of tests/fixtures.
async fn router_dir(fixture: &str, png: &[u8]) -> (Router, Arc<hearth_engine::tokenizer::Tokenizer>) {
    let dir = repo().join("tests/fixtures").join(fixture);
    let m = hearth_engine::loader::load(dir.to_str().unwrap(), &candle_core::Device::Cpu, None).unwrap();
    let vision = hearth_engine::vision::VisionSpec::from_hf_dir(&dir).unwrap().map(Arc::new);
    serve(m, vision, png).await
}

/// A checkpoint as llama.cpp converts it: a text GGUF and its vision tower's `mmproj` file.
async fn router_gguf(name: &str, png: &[u8]) -> (Router, Arc<hearth_engine::tokenizer::Tokenizer>) {
    let fixtures = repo().join("tests/fixtures");
    let (text, mmproj) =
        (fixtures.join(format!("tiny-{name}.gguf")), fixtures.join(format!("tiny-{name}-mmproj.gguf")));
    let opts = hearth_engine::models::LoadOptions { mmproj: Some(mmproj.clone()), ..Default::default() };
    let m = hearth_engine::loader::load_with(text.to_str().unwrap(), &candle_core::Device::Cpu, None, &opts).unwrap();
    let (g, mm) = (GgufFile::open(&text).unwrap(), GgufFile::open(&mmproj).unwrap());
    let vision = hearth_engine::vision::VisionSpec::from_gguf(&g, &mm, &mmproj).unwrap();
    serve(m, Some(Arc::new(vision)), png).await
}

async fn serve(
    m: hearth_engine::loader::LoadedModel,
    vision: Option<Arc<hearth_engine::vision::VisionSpec>>,
    png: &[u8],
) -> (Router, Arc<hearth_engine::tokenizer::Tokenizer>) {
    let cfg = EngineConfig {
        max_batch: 4,
        kv_block_size: 16,
        kv_blocks: 64,
        step_tokens: 64,
        step_tokens_decoding: 32,
        max_prefill_rows: 0,
        max_queue: 16,
        cache: Default::default(),
        spec: Default::default(),
    };
    let engine = start(m.model, m.device, cfg, m.tokenizer.eos_ids().to_vec()).unwrap();
    let tokenizer = Arc::new(m.tokenizer);
    let net = TestNet { server: image_server(png.to_vec()).await };
    let state = AppState::new(ServerConfig::default());
    let ready = Ready {
        engine: Engine::Local(Box::new(engine)),
        tokenizer: tokenizer.clone(),
        model_id: "tiny-vl".into(),
        device: "cpu".into(),
        defaults: Default::default(),
        reasoning: None,
        created: 1,
        images: ImageSupport { vision, limits: Arc::new(MediaLimits::default()), net: Arc::new(net) },
    };
    assert!(state.set_ready(ready));
    (hearth_server::router(state), tokenizer)
}

async fn call(r: &Router, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let resp = r.clone().oneshot(req).await.unwrap();
    let status = resp.status().as_u16();
    let raw = to_bytes(resp.into_body(), 1 << 22).await.unwrap();
    (status, serde_json::from_slice(&raw).unwrap_or(Value::Null))
}

fn openai(url: &str, text: &str) -> Value {
    json!({"model": "tiny-vl", "max_tokens": 6, "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]}]})
}

/// Where the served model comes from.
enum Served {
    QwenDir,
    QwenGguf,
    Gemma3Dir,
    Gemma3Gguf,
}

#[tokio::test]
async fn every_api_answers_an_image_as_transformers_does() {
    every_api_answers(Served::QwenDir).await;
}

#[tokio::test]
async fn a_gguf_with_its_mmproj_answers_as_transformers_does() {
    every_api_answers(Served::QwenGguf).await;
}

/// Gemma 3: the template's `<start_of_image>` expanded in text as Gemma3Processor does, the image's tokens
/// attending each other both ways.
#[tokio::test]
async fn gemma3_answers_an_image_as_transformers_does() {
    every_api_answers(Served::Gemma3Dir).await;
    every_api_answers(Served::Gemma3Gguf).await;
}

async fn every_api_answers(served: Served) {
    let gemma = matches!(served, Served::Gemma3Dir | Served::Gemma3Gguf);
    let g = golden_of(if gemma { "tiny_gemma3_vision.json" } else { "tiny_qwen2_5_vl.json" });
    let c = &g["chat"];
    let b64 = c["png_base64"].as_str().unwrap();
    let png = base64_decode(b64);
    let (r, tok) = match served {
        Served::QwenDir => router(&png).await,
        Served::QwenGguf => router_gguf("qwen2_5_vl", &png).await,
        Served::Gemma3Dir => router_dir("tiny-gemma3-vision", &png).await,
        Served::Gemma3Gguf => router_gguf("gemma3-vision", &png).await,
    };
    // The answer as the server writes it: the greedy tokens decoded, the leading space trimmed.
    let want = tok.decode(&ids(&c["greedy"]), true).trim_start().to_string();
    let text = c["text"].as_str().unwrap();
    let prompt_tokens = c["prompt_ids"].as_array().unwrap().len();

    let (s, v) =
        call(&r, Method::POST, "/v1/chat/completions", Some(openai(&format!("data:image/png;base64,{b64}"), text)))
            .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], want.as_str(), "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], prompt_tokens);

    let (s, v) = call(&r, Method::POST, "/v1/chat/completions", Some(openai("http://images.test/a.png", text))).await;
    assert_eq!((s, v["choices"][0]["message"]["content"].as_str()), (200, Some(want.as_str())), "{v}");

    let anthropic = json!({"model": "tiny-vl", "max_tokens": 6, "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
        {"type": "text", "text": text}]}]});
    let (s, v) = call(&r, Method::POST, "/v1/messages", Some(anthropic.clone())).await;
    assert_eq!((s, v["content"][0]["text"].as_str()), (200, Some(want.as_str())), "{v}");
    let (s, v) = call(&r, Method::POST, "/v1/messages/count_tokens", Some(anthropic)).await;
    assert_eq!((s, v["input_tokens"].as_u64()), (200, Some(prompt_tokens as u64)), "images count as their tokens: {v}");

    let responses = json!({"model": "tiny-vl", "max_output_tokens": 6, "temperature": 0, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": format!("data:image/png;base64,{b64}")},
        {"type": "input_text", "text": text}]}]});
    let (s, v) = call(&r, Method::POST, "/v1/responses", Some(responses)).await;
    assert_eq!(
        (s, v["output_text"].as_str().or(v["output"][0]["content"][0]["text"].as_str())),
        (200, Some(want.as_str())),
        "{v}"
    );

    let (s, v) = call(&r, Method::GET, "/v1/models", None).await;
    assert_eq!((s, &v["data"][0]["input_modalities"]), (200, &json!(["text", "image"])));
}

#[tokio::test]
async fn bad_images_get_clear_400s_and_the_server_keeps_serving() {
    let g = golden();
    let b64 = g["chat"]["png_base64"].as_str().unwrap();
    let (r, _) = router(&base64_decode(b64)).await;
    for (url, code, says) in [
        ("http://127.0.0.1/a.png", "image_url_refused", "loopback"),
        ("http://2130706433/a.png", "image_url_refused", "loopback"),
        ("http://[::ffff:169.254.169.254]/latest", "image_url_refused", "link-local"),
        ("http://intranet.test/a.png", "image_url_refused", "intranet.test resolves to 10.1.1.1"),
        ("file:///etc/passwd", "invalid_image_url", "`file:` scheme"),
        ("data:image/png;base64,AAAA", "unsupported_image_format", "send PNG, JPEG, WebP, GIF or BMP"),
        ("data:image/png;base64,@@@", "invalid_image", "base64"),
        ("data:text/html;base64,PGI+", "unsupported_image_format", "not an image"),
    ] {
        let (s, v) = call(&r, Method::POST, "/v1/chat/completions", Some(openai(url, "hi"))).await;
        assert_eq!(s, 400, "{url}: {v}");
        assert_eq!(v["error"]["code"], code, "{url}: {v}");
        assert_eq!(v["error"]["param"], "messages[0].content[0]", "{url}: {v}");
        assert!(v["error"]["message"].as_str().unwrap_or("").contains(says), "{url}: {v}");
    }
    // A truncated PNG, in the Anthropic shape.
    let png = base64_decode(b64);
    let cut = base64_encode(&png[..png.len() / 2]);
    let body = json!({"model": "tiny-vl", "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": cut}}]}]});
    let (s, v) = call(&r, Method::POST, "/v1/messages", Some(body)).await;
    assert_eq!(
        (s, v["type"].as_str(), v["error"]["type"].as_str()),
        (400, Some("error"), Some("invalid_request_error")),
        "{v}"
    );
    assert!(v["error"]["message"].as_str().unwrap_or("").contains("messages[0].content[0]"), "{v}");
    // Still serving.
    let (s, _) =
        call(&r, Method::POST, "/v1/chat/completions", Some(openai(&format!("data:image/png;base64,{b64}"), "hi")))
            .await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn a_text_model_refuses_images_without_fetching_them() {
    let (r, _) = served::ready_router("smollm2-135m", served::Template::Own, 64, |cfg, _| {
        Box::new(served::FnModel { cfg, max_positions: 4096, logits: |_: &[u32], _: &_, vocab| vec![0.0; vocab] })
    });
    let (s, v) =
        call(&r, Method::POST, "/v1/chat/completions", Some(openai("http://127.0.0.1:9/never.png", "hi"))).await;
    assert_eq!((s, v["error"]["code"].as_str()), (400, Some("model_takes_no_images")), "{v}");
    assert_eq!(v["error"]["param"], "messages[0].content[0]");
    let (_, v) = call(&r, Method::GET, "/v1/models", None).await;
    assert_eq!(v["data"][0]["input_modalities"], json!(["text"]));
}

fn base64_decode(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

fn base64_encode(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}
