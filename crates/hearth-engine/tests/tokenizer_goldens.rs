//! Tokenizer parity: hearth's GGUF-built tokenizers against llama.cpp (and Hugging Face where it loads the GGUF)
//! on a corpus with emoji, CJK, code, whitespace runs and special tokens (tools/oracle/tokenizer_goldens.py).
//! Also: token-by-token streaming decode reproduces the text exactly and never emits partial UTF-8.

mod common;
use common::*;
use hearth_engine::tokenizer::StreamDecoder;

fn check(golden_name: &str, alias: &str) {
    let g = golden(golden_name);
    let m = real_model(alias);
    let tok = &m.tokenizer;
    assert_eq!(tok.info().add_bos, g["add_bos"].as_bool().unwrap(), "add_bos differs");
    let mut hf_mismatch = Vec::new();
    for case in g["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let ours = tok.encode(text, true).unwrap();
        assert_eq!(ours, ids(&case["llama_cpp"]), "{alias}: {text:?} differs from llama.cpp");
        let ours_plain = tok.encode(text, false).unwrap();
        assert_eq!(ours_plain, ids(&case["llama_cpp_no_special"]), "{alias}: {text:?} (no BOS) differs from llama.cpp");
        if !case["hf"].is_null() && ours != ids(&case["hf"]) {
            hf_mismatch.push(text.to_string());
        }
        // Per-token bytes equal llama.cpp's pieces (llama.cpp renders control tokens as nothing unless asked;
        // hearth renders them as their text, as mlx_lm does, so they are not compared).
        if let Some(pieces) = case["detok"].as_array() {
            for (id, hex) in ours_plain.iter().zip(pieces).filter(|(id, _)| !tok.is_special(**id)) {
                let want: Vec<u8> = (0..hex.as_str().unwrap().len() / 2)
                    .map(|i| u8::from_str_radix(&hex.as_str().unwrap()[2 * i..2 * i + 2], 16).unwrap())
                    .collect();
                assert_eq!(tok.token_bytes(*id), &want[..], "{alias}: bytes of token {id} in {text:?}");
            }
        }
        // Streaming decode token by token gives back the text, and every chunk is whole UTF-8 (it is a String).
        let mut dec = StreamDecoder::new(tok, false);
        let mut out = String::new();
        for &id in &ours_plain {
            out.push_str(&dec.push(id));
        }
        out.push_str(&dec.finish());
        assert_eq!(out, text, "{alias}: streaming decode round trip");
    }
    // transformers' own GGUF tokenizer conversion must agree too (docs/parity.md).
    assert!(
        hf_mismatch.is_empty(),
        "{alias}: {} entries differ from HF's tokenizer: {hf_mismatch:?}",
        hf_mismatch.len()
    );
}

#[test]
fn smollm2_tokenizer_matches_llama_cpp() {
    check("tokenizer_smollm2.json", "smollm2-135m");
}

#[test]
fn gemma3_tokenizer_matches_llama_cpp() {
    check("tokenizer_gemma3.json", "gemma3-270m");
}

#[test]
fn streaming_holds_partial_utf8_emoji_and_cjk() {
    let m = real_model("smollm2-135m");
    let tok = &m.tokenizer;
    for text in ["👩‍👩‍👧 family 🦀", "日本語のテキスト、漢字と仮名。", "한국어 텍스트 🇯🇵"]
    {
        let ids = tok.encode(text, false).unwrap();
        let mut dec = StreamDecoder::new(tok, false);
        let mut chunks = Vec::new();
        for &id in &ids {
            let c = dec.push(id);
            assert!(!c.contains('\u{FFFD}'), "replacement char emitted mid-stream for {text:?}");
            chunks.push(c);
        }
        chunks.push(dec.finish());
        assert_eq!(chunks.concat(), text);
        // At least one token was a partial character (held back), or the test would not exercise anything.
        assert!(
            ids.iter().any(|&i| std::str::from_utf8(tok.token_bytes(i)).is_err()),
            "{text:?} had no partial-UTF-8 token"
        );
    }
}

#[test]
fn chat_stream_trims_one_leading_space() {
    let m = real_model("smollm2-135m");
    let tok = &m.tokenizer;
    let ids = tok.encode(" Paris is", false).unwrap();
    let mut dec = StreamDecoder::new(tok, true);
    let mut s: String = ids.iter().map(|&i| dec.push(i)).collect();
    s.push_str(&dec.finish());
    assert_eq!(s, "Paris is");
}
