//! The prompt cache on the real model (SmolLM2): a hit (whole prompt, shared prefix, turn N+1 of a chat) gives
//! the greedy tokens of a cold run; the SSD tier survives an engine restart, and corrupt files in it are
//! quarantined while the answers stay right; a q8_0 cache's hits and SSD blocks do the same, under a fingerprint
//! of their own.

mod common;
use common::*;
use hearth_engine::engine::{start, CacheConfig, EngineConfig, EngineEvent, EngineHandle, EngineRequest, SsdSettings};
use hearth_engine::kv::KvEncoding;
use hearth_engine::models::LoadOptions;
use hearth_engine::sampling::SamplingParams;
use hearth_engine::tokenizer::Tokenizer;
use std::path::Path;

/// ~170 tokens: several prompt pieces and blocks.
fn long_prompt() -> String {
    "The history of the printing press begins in the fifteenth century, when a goldsmith from Mainz combined \
     movable metal type, oil-based ink and a wooden press adapted from wine making. "
        .repeat(4)
}

fn engine(cache: CacheConfig) -> (EngineHandle, Tokenizer) {
    engine_in(cache, None)
}

/// [`engine`] with the KV cache kept in `kv` (None: auto).
fn engine_in(cache: CacheConfig, kv: Option<KvEncoding>) -> (EngineHandle, Tokenizer) {
    let opts = LoadOptions { kv_cache: kv, ..Default::default() };
    let m = hearth_engine::loader::load_with("smollm2-135m", &candle_core::Device::Cpu, None, &opts)
        .unwrap_or_else(|e| panic!("loading smollm2-135m: {e} (run scripts/fetch-models)"));
    let eos = m.tokenizer.eos_ids().to_vec();
    let cfg = EngineConfig {
        max_batch: 4,
        kv_block_size: 16,
        kv_blocks: 128,
        step_tokens: 64,
        step_tokens_decoding: 32,
        max_prefill_rows: 0,
        max_queue: 16,
        cache: CacheConfig { namespace: m.fingerprint, ..cache },
        spec: Default::default(),
    };
    (start(m.model, m.device, cfg, eos).unwrap(), m.tokenizer)
}

fn cache(ssd: Option<&Path>) -> CacheConfig {
    CacheConfig {
        max_blocks: 128,
        namespace: 0,
        ssd: ssd.map(|dir| SsdSettings { dir: dir.to_path_buf(), max_bytes: 1 << 30, verify: true, demote_idle: None }),
        ..Default::default()
    }
}

fn req(prompt: Vec<u32>, max_tokens: usize) -> EngineRequest {
    let r = greedy(prompt, max_tokens);
    EngineRequest { sampling: SamplingParams { logprobs: Some(0), ..SamplingParams::default() }, ..r }
}

/// Greedy tokens and cached prompt tokens of one request.
fn run(e: &EngineHandle, prompt: &[u32], max_tokens: usize) -> (Vec<u32>, usize) {
    let (ids, cached, _) = run_logprobs(e, prompt, max_tokens);
    (ids, cached)
}

/// Greedy tokens, cached prompt tokens and the bits of each token's logprob.
fn run_logprobs(e: &EngineHandle, prompt: &[u32], max_tokens: usize) -> (Vec<u32>, usize, Vec<u32>) {
    let mut s = e.submit(req(prompt.to_vec(), max_tokens)).unwrap();
    let (mut ids, mut bits) = (Vec::new(), Vec::new());
    loop {
        match s.blocking_next().expect("stream ended without Finished") {
            EngineEvent::Token { id, logprob, .. } => {
                ids.push(id);
                bits.push(logprob.map_or(u32::MAX, f32::to_bits));
            }
            EngineEvent::Finished { usage, .. } => return (ids, usage.cached_tokens, bits),
            EngineEvent::Error { message, .. } => panic!("engine error: {message}"),
            EngineEvent::PromptLogprobs { .. } => {}
        }
    }
}

#[test]
fn hits_answer_like_cold_runs() {
    let (cold, tok) = engine(CacheConfig::default());
    let a = tok.encode(&long_prompt(), true).unwrap();
    let mut b = a[..120].to_vec();
    b.extend(tok.encode(" Meanwhile in Venice, printers", false).unwrap());
    let want_a = run_logprobs(&cold, &a, 12);
    let want_b = run_logprobs(&cold, &b, 12);
    assert_eq!(want_a.1, 0, "caching is off");

    // Prompt hits end at block boundaries (16 tokens), off the 32-position attention grid half the time: the
    // tokens after them are computed with the arithmetic of a cold run, so even the logprobs are bit-identical.
    let (warm, _) = engine(cache(None));
    assert_eq!(run_logprobs(&warm, &a, 12), want_a, "a cold run on the cached engine");
    // The whole prompt again: all but the last token (whose logits are the first sample), the tail copied from
    // the partial block the first run left.
    let (ids, cached, bits) = run_logprobs(&warm, &a, 12);
    assert_eq!((&ids, &bits), (&want_a.0, &want_a.2), "a full hit changed the greedy tokens or logprobs");
    assert_eq!(cached, a.len() - 1);
    // A shared 120-token prefix: 7 full blocks and the first 8 tokens of a copy of `a`'s eighth block.
    let (ids, cached, bits) = run_logprobs(&warm, &b, 12);
    assert_eq!((&ids, &bits), (&want_b.0, &want_b.2), "a prefix hit changed the greedy tokens or logprobs");
    assert_eq!(cached, 120);
    // Turn 2: prompt + reply + a new message, against a cold run of the same tokens.
    let mut t2 = a.clone();
    t2.extend(&want_a.0);
    t2.extend(tok.encode(" Who printed the first Bible?", false).unwrap());
    let (ids, cached) = run(&warm, &t2, 8);
    assert_eq!(ids, run(&cold, &t2, 8).0, "a multi-turn hit changed the greedy tokens");
    assert_eq!(cached, a.len() + want_a.0.len() - 1, "the reply's KV was reused too");
    let st = warm.stats().prompt_cache;
    assert!(st.enabled && st.hits == 3 && st.misses == 1, "{st:?}");
    assert_eq!(warm.stats().kv_blocks_used, 0);
}

/// Every way a block file can be bad (the SSD store's own tests check each alone).
fn corrupt_files(fp_dir: &Path) -> usize {
    let mut files: Vec<_> = walk(fp_dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == "kvb")).collect();
    files.sort();
    assert!(files.len() >= 6, "expected several block files, found {}", files.len());
    let flip = |p: &Path, at: usize| {
        let mut b = std::fs::read(p).unwrap();
        let i = at.min(b.len() - 1);
        b[i] ^= 0x5a;
        std::fs::write(p, b).unwrap();
    };
    flip(&files[0], 20); // header
    let len = std::fs::metadata(&files[1]).unwrap().len() as usize;
    flip(&files[1], len - 7); // data (verify is on)
    let f = std::fs::OpenOptions::new().write(true).open(&files[2]).unwrap();
    f.set_len(len as u64 / 2).unwrap(); // truncated
    std::fs::write(&files[3], b"garbage with the right name").unwrap();
    std::fs::remove_file(&files[4]).unwrap();
    std::fs::create_dir(&files[4]).unwrap(); // a directory where a file should be
    std::fs::write(files[5].with_extension("kvb.tmp"), b"half a write").unwrap(); // an orphan
                                                                                  // Found at start: header, truncation, garbage, directory (the flipped data only when it is restored).
    4
}

fn walk(d: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() && p.file_name().is_some_and(|n| n.len() == 2) {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn the_ssd_tier_survives_a_restart_and_never_serves_a_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let (cold, tok) = engine(CacheConfig::default());
    let a = tok.encode(&long_prompt(), true).unwrap();
    let want = run(&cold, &a, 10).0;
    drop(cold);
    {
        let (e, _) = engine(cache(Some(dir.path())));
        assert_eq!(run(&e, &a, 10), (want.clone(), 0));
        let done = e.flush_cache().unwrap().expect("an SSD tier is configured");
        done.recv().unwrap();
        let ssd = e.stats().ssd_cache.expect("ssd stats");
        // Every full block of prompt + reply (the last token's KV is never written).
        assert_eq!(ssd.files, (a.len() + 9) / 16, "{ssd:?}");
        assert!(ssd.bytes > 0 && ssd.pending == 0, "{ssd:?}");
    }
    // Restart: the prefix comes back from the SSD.
    let (e, _) = engine(cache(Some(dir.path())));
    let (ids, cached) = run(&e, &a, 10);
    assert_eq!(ids, want, "a restored prefix changed the greedy tokens");
    assert_eq!(cached, (a.len() - 1) / 16 * 16);
    let ssd = e.stats().ssd_cache.unwrap();
    assert!(ssd.restores as usize == cached / 16 && ssd.quarantined == 0, "{ssd:?}");
    drop(e);
    // Corrupt files, restart: they are quarantined at start or on restore, and the answer is still right.
    let fp_dirs: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(fp_dirs.len(), 1, "one fingerprint directory");
    let bad = corrupt_files(&fp_dirs[0]);
    let (e, _) = engine(cache(Some(dir.path())));
    let (ids, _) = run(&e, &a, 10);
    assert_eq!(ids, want, "a corrupt SSD tier changed the greedy tokens");
    let ssd = e.stats().ssd_cache.unwrap();
    assert!(ssd.quarantined as usize >= bad, "{ssd:?}");
    // Still serving.
    assert_eq!(run(&e, &a, 10).0, want);
}

/// An encoded cache (q8_0, and turbo:k4v3 with its rotated 4-bit keys and 3-bit values): a prompt-cache hit and
/// a prefix restored from the SSD tier give the cold run's tokens and logprob bits (blocks are bytes, and the
/// kernels read them the same way whichever step wrote them); its SSD blocks live under their own fingerprint, so
/// an f16 engine on the same directory restores none of them.
#[test]
fn an_encoded_cache_hits_and_restores_like_its_cold_run() {
    for enc in [KvEncoding::Q8_0, KvEncoding::turbo(4, 3).unwrap()] {
        let name = enc.name();
        let dir = tempfile::tempdir().unwrap();
        let (cold, tok) = engine_in(CacheConfig::default(), Some(enc));
        let a = tok.encode(&long_prompt(), true).unwrap();
        let want = run_logprobs(&cold, &a, 10);
        drop(cold);
        {
            let (e, _) = engine_in(cache(Some(dir.path())), Some(enc));
            assert_eq!(run_logprobs(&e, &a, 10), want, "{name}");
            let hit = run_logprobs(&e, &a, 10);
            assert_eq!((&hit.0, &hit.2), (&want.0, &want.2), "{name}: a hit changed the tokens or their logprobs");
            assert!(hit.1 > 0, "{name}: the second request hits the prompt cache");
            e.flush_cache().unwrap().expect("an SSD tier is configured").recv().unwrap();
        }
        let (f16, _) = engine_in(cache(Some(dir.path())), Some(KvEncoding::F16));
        assert_eq!(run(&f16, &a, 10).1, 0, "an f16 engine restores no {name} block");
        drop(f16);
        let (e, _) = engine_in(cache(Some(dir.path())), Some(enc));
        let restored = run_logprobs(&e, &a, 10);
        assert_eq!((&restored.0, &restored.2), (&want.0, &want.2), "{name}: a restored prefix changed the answer");
        assert_eq!(restored.1, (a.len() - 1) / 16 * 16);
        assert_eq!(e.stats().ssd_cache.unwrap().quarantined, 0);
    }
}
