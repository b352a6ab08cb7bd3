//! `--model` resolution: HF ids in the local HF cache (`HF_HUB_CACHE`, `refs/main` snapshot), aliases, and the
//! error messages for what cannot be resolved. One test per process-wide env setting, so this file runs alone.

mod common;
use common::*;
use hearth_engine::weights::resolve::{resolve, ModelLocation};

#[test]
fn hf_cache_ids_aliases_and_clear_errors() {
    let tmp = std::env::temp_dir().join(format!("hearth-hfcache-{}", std::process::id()));
    let repo = tmp.join("models--tiny-org--tiny-qwen2");
    let snap = repo.join("snapshots").join("0123abcd");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs").join("main"), "0123abcd\n").unwrap();
    for entry in std::fs::read_dir(fixture("tiny-qwen2")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, snap.join(p.file_name().unwrap())).unwrap();
    }
    std::env::set_var("HF_HUB_CACHE", &tmp);

    assert_eq!(resolve("tiny-org/tiny-qwen2").unwrap(), ModelLocation::HfDir(snap.clone()));
    // And it loads and runs from there.
    let m = hearth_engine::loader::load("tiny-org/tiny-qwen2", &candle_core::Device::Cpu, None).unwrap();
    assert_eq!(m.model.config().arch_name, "qwen2");

    let e = resolve("tiny-org/not-there").unwrap_err().to_string();
    assert!(e.contains("not in the Hugging Face cache") && e.contains(tmp.to_str().unwrap()), "{e}");

    // An alias whose file is missing points at the fetch script.
    std::env::set_var("HEARTH_MODELS", tmp.join("empty-models"));
    let e = resolve("gemma3-270m").unwrap_err().to_string();
    assert!(e.contains("scripts/fetch-models gemma3-270m"), "{e}");

    // A directory without weights says what it needs.
    let e = resolve(tmp.to_str().unwrap()).unwrap_err().to_string();
    assert!(e.contains("config.json") || e.contains(".gguf"), "{e}");
    std::fs::remove_dir_all(&tmp).ok();
}
