//! The `hearth` binary end to end: generate (text and --json), tokenize, models, and its error messages.

use std::process::Command;

fn hearth(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hearth")).args(args).output().expect("run hearth")
}

#[test]
fn generate_json_is_greedy_and_reproducible() {
    let args = ["generate", "--device", "cpu", "--raw", "--max-tokens", "12", "--json", "The capital of France is"];
    let out = hearth(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ids"].as_array().unwrap().len(), 12);
    assert_eq!(v["finish_reason"], "length");
    // llama.cpp's greedy continuation starts with " Paris." (tests/goldens/logits_smollm2.json, prompt 0).
    assert!(v["text"].as_str().unwrap().starts_with(" Paris."), "{v}");
    assert_eq!(v["prompt_ids"], serde_json::json!([504, 3575, 282, 4649, 314]));
    let again: serde_json::Value = serde_json::from_slice(&hearth(&args).stdout).unwrap();
    assert_eq!(v["ids"], again["ids"]);
}

#[test]
fn generate_streams_text_and_reports_speed_on_stderr() {
    let out =
        hearth(&["generate", "--device", "cpu", "--max-tokens", "8", "--temperature", "0.7", "--seed", "3", "Say hi"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("prefill:") && err.contains("tok/s") && err.contains("finish:"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty());
}

#[test]
fn tokenize_plain_and_chat() {
    let out = hearth(&["tokenize", "Hello world"]);
    assert!(out.status.success());
    let ids: Vec<u32> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!ids.is_empty());
    let chat: Vec<u32> = serde_json::from_slice(&hearth(&["tokenize", "--chat", "Hello world"]).stdout).unwrap();
    assert_eq!(chat[0], 1, "ChatML starts with <|im_start|>");
    assert!(chat.len() > ids.len() + 5);
}

#[test]
fn clear_errors() {
    let out = hearth(&["generate", "-m", "gemma3-270m", "--device", "cpu", "hi"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no chat template") && err.contains("--raw"), "{err}");

    let out = hearth(&["tokenize", "-m", "no-such-model", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("hearth models"));

    let out = hearth(&["generate", "--device", "tpu", "x"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown device"));

    let out = hearth(&["serve", "-m", "smollm2-135m", "-m", "gemma3-270m", "--served-model-name", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--served-model-name names one model"));

    // --mmproj: only beside a GGUF model, only an mmproj file.
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let (dir, text) = (fixtures.join("tiny-qwen2_5_vl"), fixtures.join("tiny-qwen2_5_vl.gguf"));
    let (dir, text) = (dir.to_string_lossy(), text.to_string_lossy());
    let out = hearth(&["serve", "--device", "cpu", "--port", "0", "-m", &dir, "--mmproj", &text]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("carries its own vision tower"));
    let out = hearth(&["serve", "--device", "cpu", "--port", "0", "-m", &text, "--mmproj", &text]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not an mmproj file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = hearth(&["serve", "--port", "0", "-m", &text, "-m", &dir, "--mmproj", &text]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--mmproj goes with one --model"));
}

#[test]
fn serve_refuses_a_kv_cache_that_cannot_fit() {
    // 65,536 full contexts of SmolLM2 would take terabytes: refused at start, with the sizes, before allocating.
    let args = ["serve", "-m", "smollm2-135m", "--device", "cpu", "--port", "0", "--batch", "65536"];
    let out = hearth(&[&args[..], &["--kv-budget", "100000"]].concat());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a KV cache of") && err.contains("(--kv-budget) needs") && err.contains("GiB"), "{err}");
    assert!(err.contains("MemAvailable") && err.contains("lower --kv-budget"), "{err}");
}

#[test]
fn models_lists_the_aliases() {
    let out = hearth(&["models"]);
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("smollm2-135m") && s.contains("llama") && s.contains("gemma3-270m"), "{s}");
}

#[test]
fn levers_show_effective_values_and_refuse_malformed_ones() {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["levers", "--json"])
        .env("HEARTH_CPU_FUSED", "0")
        .output()
        .expect("run hearth");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["HEARTH_CPU_FUSED"], "off", "{v}");
    assert_eq!(v["HEARTH_FAST_QUANT"], "on", "{v}");
    let table = hearth(&["levers"]);
    assert!(table.status.success());
    assert!(String::from_utf8_lossy(&table.stdout).contains("HEARTH_CUDA_PAGED_ATTN"));

    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["models"])
        .env("HEARTH_CUDA_SPLIT_FILL", "lots")
        .output()
        .expect("run hearth");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HEARTH_CUDA_SPLIT_FILL") && err.contains("expected"), "{err}");
}

/// `hearth kv-quality` on a document: an f32 cache scores exactly the reference (KL 0, every top-1 agreeing),
/// f16, q8_0 and turbo:k8v3 a small positive KL, growing in that order; bad arguments fail with a message.
#[test]
fn kv_quality_scores_encodings_against_the_f32_cache() {
    let doc = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(doc.path(), "The history of the printing press begins in the fifteenth century. ".repeat(12))
        .unwrap();
    let path = doc.path().to_str().unwrap();
    let out = hearth(&[
        "kv-quality",
        "--device",
        "cpu",
        "--dequantize",
        "--ctx",
        "96",
        "--chunk",
        "40",
        "--json",
        "--encodings",
        "f32,f16,q8_0,turbo:k8v3",
        path,
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kl = |i: usize| rows[i]["mean_kl"].as_f64().unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!((rows[0]["cache"].as_str(), rows[0]["tokens"].as_u64()), (Some("f32"), Some(95)));
    assert_eq!((kl(0), rows[0]["top1"].as_f64()), (0.0, Some(1.0)));
    assert!(kl(1) > 0.0 && kl(1) < kl(2) && kl(2) < kl(3) && kl(3) < 0.2, "{rows:?}");
    let bad = hearth(&["kv-quality", "--encodings", "q3", path]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown KV cache dtype"));
}
