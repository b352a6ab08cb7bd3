//! Image preprocessing against transformers and Pillow (tests/goldens/vision_preprocess.json, written by
//! tools/oracle/vision_goldens.py): Pillow's resize bit-exact for every filter, up, down and along one axis; the
//! Qwen2-VL processor's grid, its resized image bit-exact and its `pixel_values` within 1e-5.

mod common;

use base64::Engine as _;
use hearth_engine::vision::qwen2_vl::Qwen2VlProcessor;
use hearth_engine::vision::resample::{resize_rgb, Filter};
use hearth_engine::vision::Image;

fn bytes(v: &serde_json::Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(v.as_str().expect("base64 string")).expect("base64")
}

fn dims(v: &serde_json::Value) -> (usize, usize) {
    (v[0].as_u64().unwrap() as usize, v[1].as_u64().unwrap() as usize)
}

#[test]
fn resize_equals_pillow_bit_for_bit() {
    let g = common::golden("vision_preprocess.json");
    let cases = g["resize"].as_array().unwrap();
    assert_eq!(cases.len(), 15);
    for c in cases {
        let (w, h) = dims(&c["size"]);
        let (ow, oh) = dims(&c["out"]);
        let filter = match c["filter"].as_str().unwrap() {
            "bilinear" => Filter::Bilinear,
            "bicubic" => Filter::Bicubic,
            _ => Filter::Lanczos,
        };
        let got = resize_rgb(&common::image_pattern(c["pattern"].as_str().unwrap(), w, h), w, h, ow, oh, filter);
        let want = bytes(&c["rgb"]);
        let diff = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(diff, 0, "{w}x{h} -> {ow}x{oh} {filter:?}: {diff} of {} bytes differ", want.len());
    }
}

#[test]
fn qwen2_vl_processor_equals_transformers() {
    let g = common::golden("vision_preprocess.json");
    for c in g["qwen2_vl"].as_array().unwrap() {
        let (w, h) = dims(&c["size"]);
        let proc = Qwen2VlProcessor::from_config(&c["config"]);
        let img = Image::new(w, h, common::image_pattern(c["pattern"].as_str().unwrap(), w, h)).unwrap();
        let p = proc.preprocess(&img).unwrap();
        let grid: Vec<usize> = c["grid_thw"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
        assert_eq!(p.grid.to_vec(), grid, "{w}x{h}");
        let (oh, ow) = proc.target_size(&img).unwrap();
        let resized = resize_rgb(&img.rgb, w, h, ow, oh, Filter::Bicubic);
        assert_eq!(resized, bytes(&c["resized_rgb"]), "{w}x{h}: resized image");
        let shape = dims(&c["shape"]);
        assert_eq!(p.values.len(), shape.0 * shape.1, "{w}x{h}: pixel_values size");
        let mut worst = 0f32;
        for s in c["samples"].as_array().unwrap() {
            let (i, want) = (s[0].as_u64().unwrap() as usize, s[1].as_f64().unwrap() as f32);
            worst = worst.max((p.values[i] - want).abs());
        }
        assert!(worst <= 1e-5, "{w}x{h}: worst sampled difference {worst}");
        let sum: f64 = p.values.iter().map(|&v| v as f64).sum();
        let want = c["sum"].as_f64().unwrap();
        assert!((sum - want).abs() <= 1e-5 * p.values.len() as f64, "{w}x{h}: sum {sum} vs {want}");
    }
}
