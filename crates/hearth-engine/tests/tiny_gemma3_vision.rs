//! Gemma 3's vision side against transformers on a tiny random checkpoint in the published layout
//! (tests/fixtures/tiny-gemma3-vision, tests/goldens/tiny_gemma3_vision.json, tools/oracle/tiny_gemma3_vision.py):
//! the processor and SigLIP tower + projector's embeddings of each image, and logits at image and text positions
//! with the embeddings spliced in and each image's tokens attending each other both ways (within the sliding
//! window), then greedy decoding; from the checkpoint's directory and from its llama.cpp conversion (a `gemma3`
//! text GGUF and its `mmproj`, tools/oracle/tiny_gguf.py).

mod common;

use candle_core::{Device, Tensor};
use common::{fixture, floats, golden, ids};
use hearth_engine::attention::{BatchContext, BatchMedia, ContiguousKv};
use hearth_engine::loader::{load, load_with, LoadedModel};
use hearth_engine::models::LoadOptions;
use hearth_engine::vision::{Image, ImageProcessor, PromptImage, VisionSpec};
use hearth_engine::weights::GgufFile;

fn embeddings(m: &hearth_engine::loader::LoadedModel, spec: &VisionSpec, e: &serde_json::Value) -> Tensor {
    let (w, h) = (e["size"][0].as_u64().unwrap() as usize, e["size"][1].as_u64().unwrap() as usize);
    let img = Image::new(w, h, common::image_pattern(e["pattern"].as_str().unwrap(), w, h)).unwrap();
    let r = spec.processor.resize(&img).unwrap();
    let tokens = spec.processor.tokens_for(w, h).unwrap();
    let p = PromptImage { start: 0, tokens, hash: [0; 32], width: r.width, height: r.height, rgb: r.rgb };
    m.model.encode_image(&p).unwrap()
}

#[test]
fn gemma3_vision_equals_transformers() {
    let dir = fixture("tiny-gemma3-vision");
    let spec = VisionSpec::from_hf_dir(&dir).unwrap().expect("a vision spec");
    check(load(dir.to_str().unwrap(), &Device::Cpu, None).unwrap(), spec, "directory");
}

#[test]
fn gemma3_gguf_with_its_mmproj_equals_transformers() {
    let (text, mmproj) = (fixture("tiny-gemma3-vision.gguf"), fixture("tiny-gemma3-vision-mmproj.gguf"));
    let opts = LoadOptions { mmproj: Some(mmproj.clone()), ..Default::default() };
    let m = load_with(text.to_str().unwrap(), &Device::Cpu, None, &opts).unwrap();
    let spec = VisionSpec::from_gguf(&GgufFile::open(&text).unwrap(), &GgufFile::open(&mmproj).unwrap(), &mmproj);
    let spec = spec.unwrap();
    // The same processor and tokens as the checkpoint's directory states.
    let hf = VisionSpec::from_hf_dir(&fixture("tiny-gemma3-vision")).unwrap().unwrap();
    assert_eq!((&spec.processor, spec.image_token), (&hf.processor, hf.image_token));
    check(m, spec, "GGUF + mmproj");
}

fn check(m: LoadedModel, spec: VisionSpec, source: &str) {
    let ImageProcessor::Gemma3 { processor, boi, eoi } = &spec.processor else { panic!("{spec:?}") };
    let g = golden("tiny_gemma3_vision.json");
    assert_eq!((spec.image_token, *boi, *eoi), (452, 450, 451));
    assert_eq!(processor.tokens, 16);
    assert!(m.model.takes_images() && m.model.images_attend_both_ways());
    for key in ["a", "b"] {
        let e = &g["encoder"][key];
        let rows = embeddings(&m, &spec, e).to_vec2::<f32>().unwrap();
        let want = e["embeddings"].as_array().unwrap();
        assert_eq!(rows.len(), want.len(), "image {key}: tokens");
        let mut worst = 0f32;
        for (r, w) in rows.iter().zip(want) {
            for (a, b) in r.iter().zip(floats(w)) {
                worst = worst.max((a - b).abs() / (1.0 + b.abs()));
            }
        }
        eprintln!("{source} image {key}: worst relative difference {worst:.2e}");
        assert!(worst < 2e-5, "image {key}: embeddings differ by {worst}");
    }

    let cpu = Device::Cpu;
    let layers = m.model.config().num_layers;
    for case in g["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let input = ids(&case["input_ids"]);
        let mut embeds = Vec::new();
        let mut runs = Vec::new();
        let mut i = 0;
        for key in case["images"].as_array().unwrap() {
            let e = embeddings(&m, &spec, &g["encoder"][key.as_str().unwrap()]);
            while input[i] != spec.image_token {
                i += 1;
            }
            let n = e.dim(0).unwrap();
            embeds.push((i, e));
            runs.push((0, i, i + n));
            i += n;
        }
        let t = input.len();
        let mut ctx = BatchContext::new(&[(0, 0, t)], true, &cpu).unwrap();
        ctx.media = Some(BatchMedia { embeds, both_ways: runs, ..Default::default() });
        let mut kv = ContiguousKv::new(layers, t + 16);
        let logits = m.model.forward(&Tensor::new(input.as_slice(), &cpu).unwrap(), &ctx, &mut kv).unwrap();
        let logits = logits.to_vec2::<f32>().unwrap();
        for (p, want) in case["logits_at"].as_object().unwrap() {
            let p: usize = p.parse().unwrap();
            let d = logits[p].iter().zip(floats(want)).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            eprintln!("{source} {name} position {p}: logits max-abs {d:.2e}");
            assert!(d < 5e-5, "{name} position {p}: logits differ by {d}");
        }
        let want = ids(&case["greedy"]);
        let mut next = hearth_engine::sampling::sampler::argmax(&logits[t - 1]) as u32;
        let mut got = vec![next];
        for step in 1..want.len() {
            let ctx = BatchContext::new(&[(0, t + step - 1, 1)], false, &cpu).unwrap();
            let l = m.model.forward(&Tensor::new(&[next], &cpu).unwrap(), &ctx, &mut kv).unwrap();
            next = hearth_engine::sampling::sampler::argmax(&l.to_vec2::<f32>().unwrap()[0]) as u32;
            got.push(next);
        }
        assert_eq!(got, want, "{source} {name}: greedy tokens");
    }
}
