//! Sentence embeddings: all-MiniLM-L6-v2 (fetched by scripts/fetch-models) against sentence-transformers'
//! golden (tools/oracle/embeddings_golden.py). Every sentence's vector, embedded in one padded batch and alone,
//! must have cosine >= MIN_COSINE with the reference and unit norm (the model normalizes); the tokenizer must give
//! the reference's ids. CLS, max and last-token pooling (the same transformer, unnormalized) must match too. The
//! worker thread must answer concurrent requests with the same vectors. The decoder embedder (a tiny random Qwen3
//! in Qwen3-Embedding's layout, tools/oracle/decoder_embeddings_golden.py) must match its golden the same way.

mod common;
use common::*;
use hearth_engine::embed::{self, EmbedError, Embedder, EmbedderOptions, Pooling};

const MIN_COSINE: f64 = 0.9999;
/// Batched vs alone: the same math on different padding (only summation order may differ).
const MIN_SELF_COSINE: f64 = 0.999_999;

fn load(opts: &EmbedderOptions) -> Embedder {
    Embedder::load("all-minilm-l6-v2", &candle_core::Device::Cpu, opts)
        .unwrap_or_else(|e| panic!("loading all-minilm-l6-v2: {e} (run scripts/fetch-models)"))
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    dot / (norm(a) * norm(b))
}

fn norm(a: &[f32]) -> f64 {
    a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt()
}

struct Case {
    text: String,
    ids: Vec<u32>,
    want: Vec<f32>,
}

fn cases() -> Vec<Case> {
    cases_of("embeddings_all_minilm_l6_v2.json")
}

fn cases_of(golden_name: &str) -> Vec<Case> {
    let g = golden(golden_name);
    g["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            text: c["text"].as_str().unwrap().to_string(),
            ids: ids(&c["input_ids"]),
            want: floats(&c["embedding"]),
        })
        .collect()
}

/// Every case's vector batched and alone against the reference: cosine >= MIN_COSINE, batched = alone, unit norm.
/// Returns the smallest cosine.
fn check_against_golden(e: &Embedder, cases: &[Case]) -> f64 {
    let inputs: Vec<Vec<u32>> = cases.iter().map(|c| c.ids.clone()).collect();
    let together = e.embed(&inputs).unwrap();
    let mut min = f64::MAX;
    for (c, got) in cases.iter().zip(&together) {
        let alone = e.embed(&[c.ids.as_slice()]).unwrap().remove(0);
        let (cb, ca, cs) = (cosine(got, &c.want), cosine(&alone, &c.want), cosine(got, &alone));
        let max_abs = got.iter().zip(&c.want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        eprintln!(
            "{:>3} tokens: 1 - cosine batched {:.1e} alone {:.1e} batched-vs-alone {:.1e}; max |diff| {max_abs:.1e}",
            c.ids.len(),
            1.0 - cb,
            1.0 - ca,
            1.0 - cs
        );
        assert!(cb >= MIN_COSINE && ca >= MIN_COSINE, "{:?}: cosine {cb} / {ca} < {MIN_COSINE}", c.text);
        assert!(cs >= MIN_SELF_COSINE, "{:?}: padding changed the vector (cosine {cs})", c.text);
        for v in [got, &alone] {
            assert!((norm(v) - 1.0).abs() < 1e-5, "{:?}: norm {}", c.text, norm(v));
        }
        min = min.min(cb).min(ca);
    }
    min
}

#[test]
fn matches_sentence_transformers_batched_and_alone() {
    // Small batches too: 3 rows per forward pass splits the golden's sentences over several passes.
    for limits in [embed::BatchLimits::default(), embed::BatchLimits { max_rows: 3, max_tokens: 8192 }] {
        let e = load(&EmbedderOptions { limits, ..Default::default() });
        let info = e.info();
        assert_eq!(
            (info.dimensions, info.max_input_tokens, info.normalized, info.pooling, info.supports_dimensions),
            (384, 256, true, Pooling::Mean, false)
        );
        let cases = cases();
        for c in &cases {
            assert_eq!(e.tokenize(&c.text).unwrap(), c.ids, "token ids of {:?}", c.text);
        }
        let min = check_against_golden(&e, &cases);
        eprintln!("limits {limits:?}: minimum cosine vs sentence-transformers {min:.10}");
    }
}

/// The fetched model's directory with its pooling replaced by `mode` (sentence-transformers 6's config layout)
/// and no Normalize module; the other files are linked (or copied where links fail).
fn with_pooling(mode: &str) -> tempfile::TempDir {
    let src = match hearth_engine::weights::resolve::resolve("all-minilm-l6-v2") {
        Ok(loc) => loc.path().to_path_buf(),
        Err(e) => panic!("{e}"),
    };
    let tmp = tempfile::tempdir().unwrap();
    for f in
        ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "sentence_bert_config.json"]
    {
        let (from, to) = (src.join(f), tmp.path().join(f));
        std::fs::hard_link(&from, &to).or_else(|_| std::fs::copy(&from, &to).map(|_| ())).unwrap();
    }
    let t = "sentence_transformers.models.";
    let modules = serde_json::json!([{"idx": 0, "path": "", "type": format!("{t}Transformer")},
                                     {"idx": 1, "path": "1_Pooling", "type": format!("{t}Pooling")}]);
    std::fs::write(tmp.path().join("modules.json"), modules.to_string()).unwrap();
    std::fs::create_dir(tmp.path().join("1_Pooling")).unwrap();
    let pooling = serde_json::json!({"embedding_dimension": 384, "pooling_mode": mode, "include_prompt": true});
    std::fs::write(tmp.path().join("1_Pooling/config.json"), pooling.to_string()).unwrap();
    tmp
}

#[test]
fn other_pooling_modes_match_sentence_transformers() {
    let g = golden("embeddings_all_minilm_l6_v2.json");
    let cases = cases();
    let picked: Vec<usize> =
        g["other_pooling_cases"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as usize).collect();
    for (mode, pooling) in [("cls", Pooling::Cls), ("max", Pooling::Max), ("lasttoken", Pooling::LastToken)] {
        let dir = with_pooling(mode);
        let e = Embedder::from_dir(dir.path(), &candle_core::Device::Cpu, &EmbedderOptions::default()).unwrap();
        assert_eq!((e.info().pooling, e.info().normalized), (pooling, false));
        let inputs: Vec<Vec<u32>> = picked.iter().map(|&i| cases[i].ids.clone()).collect();
        let got = e.embed(&inputs).unwrap();
        for ((v, want), &i) in got.iter().zip(g["other_pooling"][mode].as_array().unwrap()).zip(&picked) {
            let c = cosine(v, &floats(want));
            eprintln!("{mode} pooling, case {i}: 1 - cosine {:.1e}, norm {:.3}", 1.0 - c, norm(v));
            assert!(c >= MIN_COSINE, "{mode} pooling of {:?}: cosine {c}", cases[i].text);
        }
    }
}

#[test]
fn refuses_what_it_cannot_embed() {
    let e = load(&EmbedderOptions::default());
    let max = e.info().max_input_tokens;
    let err = |inputs: &[Vec<u32>]| e.embed(inputs).unwrap_err().to_string();
    let long = vec![101u32; max + 1];
    let m = err(&[vec![101, 102], long]);
    assert!(m.contains("input 1") && m.contains(&format!("at most {max}")), "{m}");
    assert!(err(&[vec![]]).contains("no tokens"));
    let m = err(&[vec![101, 999_999, 102]]);
    assert!(m.contains("999999") && m.contains("vocabulary"), "{m}");
    // Exactly max tokens is fine.
    assert_eq!(e.embed(&[vec![101u32; max]]).unwrap()[0].len(), 384);

    // A generative GGUF is not an embedding model.
    let m = Embedder::load("smollm2-135m", &candle_core::Device::Cpu, &EmbedderOptions::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(m.contains("not GGUF"), "{m}");
}

#[test]
fn worker_batches_concurrent_requests() {
    let cases = cases();
    let handle = embed::start(load(&EmbedderOptions::default())).unwrap();
    assert_eq!(handle.info().dimensions, 384);
    // One request per sentence from as many threads, plus one request holding every sentence.
    let threads: Vec<_> = cases
        .iter()
        .map(|c| {
            let (h, ids) = (handle.clone(), c.ids.clone());
            std::thread::spawn(move || h.submit(vec![ids]).unwrap().blocking_recv().unwrap().unwrap().remove(0))
        })
        .collect();
    let all = handle.submit(cases.iter().map(|c| c.ids.clone()).collect()).unwrap().blocking_recv().unwrap().unwrap();
    for ((c, t), v) in cases.iter().zip(threads).zip(&all) {
        let one = t.join().unwrap();
        assert!(cosine(&one, &c.want) >= MIN_COSINE && cosine(v, &c.want) >= MIN_COSINE, "{:?}", c.text);
    }
    assert_eq!(handle.tokenize(&cases[0].text).unwrap(), cases[0].ids);
    assert!(matches!(handle.submit(vec![]), Err(EmbedError::Invalid(_))));
    assert!(matches!(handle.submit(vec![vec![]]), Err(EmbedError::Invalid(m)) if m.contains("input 0")));
    assert_eq!(handle.queued(), 0);
    assert!(handle.is_alive());
}

fn tiny_qwen3(opts: &EmbedderOptions) -> Embedder {
    Embedder::from_dir(&fixture("tiny-qwen3-embedding"), &candle_core::Device::Cpu, opts)
        .unwrap_or_else(|e| panic!("loading tests/fixtures/tiny-qwen3-embedding: {e}"))
}

#[test]
fn decoder_embedder_matches_sentence_transformers() {
    // The fixture's tokenizer appends <|endoftext|> (Qwen3-Embedding's post-processor); its state is pooled.
    for limits in [embed::BatchLimits::default(), embed::BatchLimits { max_rows: 3, max_tokens: 8192 }] {
        let e = tiny_qwen3(&EmbedderOptions { limits, ..Default::default() });
        let info = e.info();
        assert_eq!(
            (info.dimensions, info.max_input_tokens, info.normalized, info.pooling, info.vocab_size),
            (64, 256, true, Pooling::LastToken, 512)
        );
        let cases = cases_of("embeddings_tiny_qwen3.json");
        for c in &cases {
            assert_eq!(e.tokenize(&c.text).unwrap(), c.ids, "token ids of {:?}", c.text);
            assert_eq!(c.ids.last(), Some(&0), "the golden's ids end with <|endoftext|>");
        }
        let min = check_against_golden(&e, &cases);
        eprintln!("tiny-qwen3-embedding, limits {limits:?}: minimum cosine vs sentence-transformers {min:.10}");
    }
}

#[test]
fn refuses_what_is_not_an_embedding_model() {
    let cpu = candle_core::Device::Cpu;
    let err = |r: hearth_engine::Result<Embedder>| r.err().map(|e| e.to_string()).unwrap_or_default();
    // A generative decoder directory (no modules.json) is a chat model, not an embedder.
    let m = err(Embedder::from_dir(&fixture("tiny-qwen3"), &cpu, &EmbedderOptions::default()));
    assert!(m.contains("modules.json") && m.contains("qwen3"), "{m}");
    // An architecture that is neither BERT nor a causal decoder of the Llama family.
    let m = err(Embedder::from_dir(&fixture("tiny-gemma3"), &cpu, &EmbedderOptions::default()));
    assert!(m.contains("gemma3_text") && m.contains("BERT"), "{m}");
    // A GGUF file, whatever it holds.
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("model.gguf");
    std::fs::write(&gguf, b"GGUF").unwrap();
    let m = err(Embedder::load(&gguf.to_string_lossy(), &cpu, &EmbedderOptions::default()));
    assert!(m.contains("not GGUF"), "{m}");
}

#[test]
fn decoder_worker_answers_like_the_embedder() {
    let e = tiny_qwen3(&EmbedderOptions::default());
    let cases = cases_of("embeddings_tiny_qwen3.json");
    let direct = e.embed(&[cases[2].ids.as_slice()]).unwrap().remove(0);
    let handle = embed::start(e).unwrap();
    let ids = handle.tokenize(&cases[2].text).unwrap();
    let v = handle.submit(vec![ids]).unwrap().blocking_recv().unwrap().unwrap().remove(0);
    assert_eq!(v, direct);
}
