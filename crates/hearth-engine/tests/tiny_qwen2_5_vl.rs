//! Qwen2.5-VL against transformers on a tiny random checkpoint in the published layout
//! (tests/fixtures/tiny-qwen2_5_vl, tests/goldens/tiny_qwen2_5_vl.json, tools/oracle/tiny_qwen2_5_vl.py): the
//! vision tower's merged embeddings of each image (window and full attention, 2D rope), the 3D rope positions
//! of prompts with one and two images, logits at image and text positions with the embeddings spliced in, and
//! greedy decoding with positions continued by the rope delta. Each is checked twice: from the checkpoint's
//! directory, and from its llama.cpp conversion, a `qwen2vl` text GGUF with its vision tower in an `mmproj` file
//! (tests/fixtures/tiny-qwen2_5_vl.gguf and -mmproj.gguf, tools/oracle/tiny_gguf.py; both f32).

mod common;

use candle_core::{Device, Tensor};
use common::{fixture, floats, golden, ids};
use hearth_engine::attention::{BatchContext, BatchMedia, ContiguousKv};
use hearth_engine::loader::{load, load_with};
use hearth_engine::models::qwen2_5_vl_vision::{VisionConfig, VisionTower};
use hearth_engine::models::vision_weights::VisionWeights;
use hearth_engine::models::LoadOptions;
use hearth_engine::vision::qwen2_vl::{rope_positions, Qwen2VlProcessor};
use hearth_engine::vision::{Image, VisionSpec};
use hearth_engine::weights::{GgufFile, HfWeights};

const IMAGE_TOKEN: u32 = 448;

struct Vl {
    tower: VisionTower,
    proc: Qwen2VlProcessor,
    model: hearth_engine::loader::LoadedModel,
}

/// Where the model is read from.
#[derive(Clone, Copy, Debug)]
enum Source {
    HfDir,
    GgufMmproj,
}

fn setup(source: Source) -> Vl {
    let dir = fixture("tiny-qwen2_5_vl");
    match source {
        Source::HfDir => {
            let cfg: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
            let pre: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("preprocessor_config.json")).unwrap()).unwrap();
            let vcfg: VisionConfig = serde_json::from_value(cfg["vision_config"].clone()).unwrap();
            let model = load(dir.to_str().unwrap(), &Device::Cpu, None).unwrap();
            let hf = HfWeights::open(&dir).unwrap();
            let tower = VisionTower::load(VisionWeights::Hf(&hf), vcfg, &Device::Cpu).unwrap();
            Vl { tower, proc: Qwen2VlProcessor::from_config(&pre), model }
        }
        Source::GgufMmproj => {
            let (text, mmproj) = (fixture("tiny-qwen2_5_vl.gguf"), fixture("tiny-qwen2_5_vl-mmproj.gguf"));
            let opts = LoadOptions { mmproj: Some(mmproj.clone()), ..Default::default() };
            let model = load_with(text.to_str().unwrap(), &Device::Cpu, None, &opts).unwrap();
            assert!(model.model.takes_images());
            let (g, mm) = (GgufFile::open(&text).unwrap(), GgufFile::open(&mmproj).unwrap());
            let spec = VisionSpec::from_gguf(&g, &mm, &mmproj).unwrap();
            // The same processor, placeholder and tower as the checkpoint's directory states.
            let hf_spec = VisionSpec::from_hf_dir(&dir).unwrap().unwrap();
            assert_eq!((&spec.processor, spec.image_token), (&hf_spec.processor, hf_spec.image_token));
            for k in ["depth", "hidden_size", "num_heads", "window_size", "out_hidden_size", "fullatt_block_indexes"] {
                assert_eq!(spec.vision_config[k], hf_spec.vision_config[k], "vision config `{k}`");
            }
            let vcfg: VisionConfig = serde_json::from_value(spec.vision_config).unwrap();
            let tower = VisionTower::load(VisionWeights::Mmproj(&mm), vcfg, &Device::Cpu).unwrap();
            Vl { tower, proc: spec.processor.qwen2_vl().unwrap().clone(), model }
        }
    }
}

/// (grid, embeddings) of golden image `key`.
fn encode(vl: &Vl, g: &serde_json::Value, key: &str) -> ([usize; 3], Tensor) {
    let e = &g["encoder"][key];
    let (w, h) = (e["size"][0].as_u64().unwrap() as usize, e["size"][1].as_u64().unwrap() as usize);
    let img = Image::new(w, h, common::image_pattern(e["pattern"].as_str().unwrap(), w, h)).unwrap();
    let p = vl.proc.preprocess(&img).unwrap();
    (p.grid, vl.tower.encode(&p.values, p.grid).unwrap())
}

#[test]
fn vision_tower_equals_transformers() {
    tower_equals_transformers(Source::HfDir);
}

#[test]
fn mmproj_vision_tower_equals_transformers() {
    tower_equals_transformers(Source::GgufMmproj);
}

#[test]
fn prompts_with_images_equal_transformers() {
    prompts_equal_transformers(Source::HfDir);
}

#[test]
fn gguf_with_mmproj_prompts_equal_transformers() {
    prompts_equal_transformers(Source::GgufMmproj);
}

fn tower_equals_transformers(source: Source) {
    let vl = setup(source);
    let g = golden("tiny_qwen2_5_vl.json");
    for key in ["a", "b"] {
        let (grid, emb) = encode(&vl, &g, key);
        let want: Vec<usize> =
            g["encoder"][key]["grid_thw"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        assert_eq!(grid.to_vec(), want, "image {key}: grid");
        let rows = emb.to_vec2::<f32>().unwrap();
        let golden_rows = g["encoder"][key]["embeddings"].as_array().unwrap();
        assert_eq!(rows.len(), golden_rows.len(), "image {key}: tokens");
        let mut worst = 0f32;
        for (r, w) in rows.iter().zip(golden_rows) {
            for (a, b) in r.iter().zip(floats(w)) {
                worst = worst.max((a - b).abs() / (1.0 + b.abs()));
            }
        }
        eprintln!("{source:?} image {key}: worst relative difference {worst:.2e}");
        assert!(worst < 2e-4, "image {key}: embeddings differ by {worst}");
    }
}

fn prompts_equal_transformers(source: Source) {
    let vl = setup(source);
    let g = golden("tiny_qwen2_5_vl.json");
    let m = &vl.model;
    let cpu = Device::Cpu;
    let layers = m.model.config().num_layers;
    for case in g["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let input = ids(&case["input_ids"]);
        let encoded: Vec<([usize; 3], Tensor)> =
            case["images"].as_array().unwrap().iter().map(|k| encode(&vl, &g, k.as_str().unwrap())).collect();
        let grids: Vec<[usize; 3]> = encoded.iter().map(|e| e.0).collect();
        let (pos, delta) = rope_positions(&input, IMAGE_TOKEN, &grids, 2).unwrap();
        for (axis, want) in case["positions"].as_array().unwrap().iter().enumerate() {
            assert_eq!(pos[axis], ids(want), "{name}: rope positions, axis {axis}");
        }
        // The image embeddings go where each run of placeholders starts.
        let mut embeds = Vec::new();
        let mut i = 0;
        for (_, e) in &encoded {
            while input[i] != IMAGE_TOKEN {
                i += 1;
            }
            embeds.push((i, e.clone()));
            i += e.dim(0).unwrap();
        }
        let t = input.len();
        let mut ctx = BatchContext::new(&[(0, 0, t)], true, &cpu).unwrap();
        let flat: Vec<u32> = pos.iter().flatten().copied().collect();
        let rope_positions = Some(Tensor::from_vec(flat, (3, t), &cpu).unwrap());
        ctx.media = Some(BatchMedia { rope_positions, embeds, ..Default::default() });
        let max_len = t + 16;
        let mut kv = ContiguousKv::new(layers, max_len);
        let tokens = Tensor::new(input.as_slice(), &cpu).unwrap();
        let logits = m.model.forward(&tokens, &ctx, &mut kv).unwrap().to_vec2::<f32>().unwrap();
        for (p, want) in case["logits_at"].as_object().unwrap() {
            let p: usize = p.parse().unwrap();
            let d = logits[p].iter().zip(floats(want)).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            eprintln!("{source:?} {name} position {p}: logits max-abs {d:.2e}");
            assert!(d < 1e-3, "{name} position {p}: logits differ by {d}");
        }
        // Greedy decoding: each new token at KV position n, rope position n + delta on all three axes.
        let want = ids(&case["greedy"]);
        let mut next = hearth_engine::sampling::sampler::argmax(&logits[t - 1]) as u32;
        let mut got = vec![next];
        for step in 1..want.len() {
            let n = t + step - 1;
            let mut ctx = BatchContext::new(&[(0, n, 1)], false, &cpu).unwrap();
            let rp = (n as i64 + delta) as u32;
            ctx.media = Some(BatchMedia {
                rope_positions: Some(Tensor::from_vec(vec![rp; 3], (3, 1), &cpu).unwrap()),
                ..Default::default()
            });
            let l = m.model.forward(&Tensor::new(&[next], &cpu).unwrap(), &ctx, &mut kv).unwrap();
            next = hearth_engine::sampling::sampler::argmax(&l.to_vec2::<f32>().unwrap()[0]) as u32;
            got.push(next);
        }
        assert_eq!(got, want, "{name}: greedy tokens");
    }
}
