//! Images through the serving engine, for each vision-language family (tests/fixtures/tiny-qwen2_5_vl and
//! tiny-gemma3-vision against their goldens): greedy tokens equal transformers' for prompts with one and two images,
//! alone and batched with text-only rows and with an image where 32-token prompt pieces would cut it (Qwen2.5-VL's
//! is cut; Gemma 3's tokens attend each other both ways, so its piece stops before the image); the second
//! identical request reuses the prompt cache's blocks (image tokens included) and the encoder cache; an image with
//! another hash in the same place does not reuse the blocks that hold it.

mod common;

use common::{golden, ids};
use hearth_engine::engine::{start, CacheConfig, EngineConfig, EngineEvent, EngineHandle, EngineRequest};
use hearth_engine::vision::qwen2_vl::rope_positions;
use hearth_engine::vision::{Image, MropePositions, PromptImage, RequestMedia, VisionSpec};
use sha2::Digest;

/// The families' fixtures and goldens.
const FAMILIES: [(&str, &str); 2] =
    [("tiny-qwen2_5_vl", "tiny_qwen2_5_vl.json"), ("tiny-gemma3-vision", "tiny_gemma3_vision.json")];

fn engine(fixture: &str) -> (EngineHandle, VisionSpec) {
    let spec = VisionSpec::from_hf_dir(&common::fixture(fixture)).unwrap().expect("a vision spec");
    (engine_of(fixture), spec)
}

/// An engine on fixture `name`, 32-token prompt pieces, a prompt cache of 16-token blocks.
fn engine_of(name: &str) -> EngineHandle {
    let dir = common::fixture(name);
    let m = hearth_engine::loader::load(dir.to_str().unwrap(), &candle_core::Device::Cpu, None).unwrap();
    let cfg = EngineConfig {
        max_batch: 4,
        kv_block_size: 16,
        kv_blocks: 64,
        step_tokens: 32,
        step_tokens_decoding: 32,
        max_prefill_rows: 0,
        max_queue: 16,
        cache: CacheConfig { max_blocks: 64, namespace: m.fingerprint, ..Default::default() },
        spec: Default::default(),
    };
    start(m.model, m.device, cfg, vec![]).unwrap()
}

/// Golden case `name` as an engine request: its images resized by the processor, hashed by their pixels (and
/// `salt`), placed at their placeholder runs, with the prompt's 3D positions.
fn request(spec: &VisionSpec, g: &serde_json::Value, case: &serde_json::Value, salt: u8) -> EngineRequest {
    let prompt = ids(&case["input_ids"]);
    let mut images = Vec::new();
    let mut at = 0;
    for key in case["images"].as_array().unwrap() {
        let e = &g["encoder"][key.as_str().unwrap()];
        let (w, h) = (e["size"][0].as_u64().unwrap() as usize, e["size"][1].as_u64().unwrap() as usize);
        let img = Image::new(w, h, common::image_pattern(e["pattern"].as_str().unwrap(), w, h)).unwrap();
        let resized = spec.processor.resize(&img).unwrap();
        let tokens = spec.processor.tokens_for(w, h).unwrap();
        while prompt[at] != spec.image_token {
            at += 1;
        }
        let mut hash: [u8; 32] = sha2::Sha256::digest(&img.rgb).into();
        hash[0] ^= salt;
        images.push(PromptImage {
            start: at,
            tokens,
            hash,
            width: resized.width,
            height: resized.height,
            rgb: resized.rgb,
        });
        at += tokens;
    }
    let rope = spec.processor.qwen2_vl().map(|p| {
        let grids: Vec<[usize; 3]> = images.iter().map(|i| [1, i.height / p.patch, i.width / p.patch]).collect();
        let (rows, delta) = rope_positions(&prompt, spec.image_token, &grids, p.merge).unwrap();
        MropePositions { rows, delta }
    });
    EngineRequest { media: Some(RequestMedia { images, rope }), ..common::greedy(prompt, ids(&case["greedy"]).len()) }
}

/// Tokens and cached prompt tokens of a finished request.
fn finish(mut s: hearth_engine::engine::RequestStream) -> (Vec<u32>, usize) {
    let mut out = Vec::new();
    loop {
        match s.blocking_next().expect("stream ended early") {
            EngineEvent::Token { id, .. } => out.push(id),
            EngineEvent::Finished { usage, .. } => return (out, usage.cached_tokens),
            EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
            EngineEvent::PromptLogprobs { .. } => {}
        }
    }
}

fn case<'a>(g: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    g["cases"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap()
}

#[test]
fn images_batched_with_text_rows_give_the_reference_tokens() {
    for (fixture, golden_file) in FAMILIES {
        batched_with_text_rows(fixture, golden_file);
    }
}

fn batched_with_text_rows(fixture: &str, golden_file: &str) {
    let (e, spec) = engine(fixture);
    let g = golden(golden_file);
    let names = ["one_image", "two_images", "straddle"];
    // Every case at once, with a text-only row beside them.
    let mut streams: Vec<_> = names.iter().map(|n| e.submit(request(&spec, &g, case(&g, n), 0)).unwrap()).collect();
    let text = e.submit(common::greedy(vec![1, 40, 41, 42, 43], 6)).unwrap();
    for (n, s) in names.iter().zip(streams.drain(..)) {
        assert_eq!(finish(s).0, ids(&case(&g, n)["greedy"]), "{fixture} {n}");
    }
    let (text_alone, _) = finish(e.submit(common::greedy(vec![1, 40, 41, 42, 43], 6)).unwrap());
    assert_eq!(finish(text).0, text_alone, "the text-only row beside the images");
}

#[test]
fn a_repeated_image_reuses_the_prompt_cache_and_another_image_does_not() {
    for (fixture, golden_file) in FAMILIES {
        repeated_image(fixture, golden_file);
    }
}

fn repeated_image(fixture: &str, golden_file: &str) {
    let (e, spec) = engine(fixture);
    let g = golden(golden_file);
    let c = case(&g, "straddle");
    let want = ids(&c["greedy"]);
    let (first, cached0) = finish(e.submit(request(&spec, &g, c, 0)).unwrap());
    assert_eq!((first.as_slice(), cached0), (want.as_slice(), 0), "{fixture}");
    // The same image again: at least every whole 16-token block before the prompt's last token (text and image
    // tokens) comes from the cache (and a cached partial block's shared tokens, where the first request left one).
    let (again, cached) = finish(e.submit(request(&spec, &g, c, 0)).unwrap());
    assert_eq!(again, want, "{fixture}");
    let prompt_len = ids(&c["input_ids"]).len();
    assert!(cached >= (prompt_len - 1) / 16 * 16, "{fixture}: blocks holding the image are reused ({cached})");
    // Another image hash at the same place: the reuse stops where the image begins.
    let other = request(&spec, &g, c, 1);
    let image_at = other.media.as_ref().map_or(0, |m| m.images[0].start);
    let (_, cached_other) = finish(e.submit(other).unwrap());
    assert_eq!(cached_other, image_at, "{fixture}: only the tokens before another image are reused");
    // Two images were encoded (where the repeat computed some of its image's tokens, it took their embeddings
    // from the encoder cache).
    let images = e.stats().images;
    assert_eq!((images.encoded_total, images.cached), (2, 2), "{fixture}: {images:?}");
    let end = image_end(&request(&spec, &g, c, 0));
    assert_eq!(images.cache_hits_total >= 1, cached < end, "{fixture}: {images:?}, {cached} cached");
}

/// The end of a request's first image's tokens.
fn image_end(r: &EngineRequest) -> usize {
    r.media.as_ref().map_or(0, |m| m.images[0].start + m.images[0].tokens)
}

#[test]
fn images_are_refused_where_they_cannot_go() {
    let (e, spec) = engine("tiny-qwen2_5_vl");
    let g = golden("tiny_qwen2_5_vl.json");
    let mut r = request(&spec, &g, case(&g, "one_image"), 0);
    if let Some(m) = r.media.as_mut() {
        m.images[0].start = 100;
    }
    let err = e.submit(r).err().expect("an image outside the prompt is refused").to_string();
    assert!(err.contains("outside the prompt"), "{err}");
    // A text model refuses images.
    let text = engine_of("tiny-qwen2");
    let err = text.submit(request(&spec, &g, case(&g, "one_image"), 0)).err().unwrap().to_string();
    assert!(err.contains("does not take images"), "{err}");
}
