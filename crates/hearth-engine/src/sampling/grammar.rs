//! Grammar-constrained decoding with llguidance: a [`Grammars`] per model compiles a [`ConstraintSpec`] (JSON
//! schema, regex, Lark, a list of choices) into a [`Constraint`], one per constrained row. Before a row samples,
//! its constraint's mask sets every token the grammar cannot take next to -inf (computed while the step's forward
//! pass runs: `engine::core`); the chosen token is then committed. EOS is allowed exactly when the grammar accepts.
//!
//! The vocabulary llguidance sees is hearth's own per-token bytes (`Tokenizer::token_bytes`); control, unknown
//! and unused tokens are special (llguidance's 0xFF marker: text can never produce them), user-defined tokens
//! (Gemma's `<table>`, runs of newlines) stay text. Rows of the logits past the tokenizer (padded lm_head rows)
//! are never allowed.

use super::super::tokenizer::{TokenKind, Tokenizer};
pub use super::lark::lark_string;
use llguidance::api::{StopReason, TopLevelGrammar};
use llguidance::toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// How the message of a row whose grammar failed mid-generation begins (its kind, `EngineErrorKind::GrammarFailed`,
/// is what the server answers by).
pub const GRAMMAR_FAILED: &str = "the output grammar failed";

/// A constraint as a request states it: its specification, and the marker it waits for (if any).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConstraintSource {
    pub spec: ConstraintSpec,
    pub after_marker: Option<String>,
}

/// What a request constrains its output to.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ConstraintSpec {
    /// A JSON schema (`response_format` `json_schema`, vLLM's `json`, llama.cpp's `json_schema`).
    JsonSchema(serde_json::Value),
    /// Any JSON object (`response_format` `json_object`).
    JsonObject,
    /// The whole output matches this regular expression.
    Regex(String),
    /// A Lark grammar (llguidance's dialect).
    Lark(String),
    /// A llama.cpp GBNF grammar (converted to Lark).
    Gbnf(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// Optionally a thought first (`<think>`, free text, `</think>`, whitespace), then the constraint: for a model
    /// that may open its own thought (Qwen3 with thinking on), the grammar applies after the reasoning ends.
    AfterOptionalThought(Box<ConstraintSpec>),
}

impl ConstraintSpec {
    /// The grammar llguidance compiles.
    fn grammar(&self) -> Result<TopLevelGrammar, String> {
        Ok(match self {
            ConstraintSpec::JsonSchema(s) => TopLevelGrammar::from_json_schema(s.clone()),
            ConstraintSpec::JsonObject => TopLevelGrammar::from_json_schema(serde_json::json!({"type": "object"})),
            ConstraintSpec::Regex(r) => TopLevelGrammar::from_regex(r),
            ConstraintSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
            ConstraintSpec::Gbnf(g) => TopLevelGrammar::from_lark(super::gbnf::to_lark(g)?),
            ConstraintSpec::Choice(list) => {
                if list.is_empty() {
                    return Err("the list of choices is empty".into());
                }
                let alts: Vec<String> = list.iter().map(|c| lark_string(c)).collect();
                TopLevelGrammar::from_lark(format!("start: {}", alts.join(" | ")))
            }
            ConstraintSpec::AfterOptionalThought(inner) => {
                // The thought is one lazy lexeme (it ends at the first `</think>`); the inner grammar is nested by
                // name, whatever its kind.
                let mut nested = inner.grammar()?;
                let Some(first) = nested.grammars.first_mut() else { return Err("an empty grammar".into()) };
                first.name = Some("hearth_inner".into());
                let outer = format!(
                    "start: (thought WS)? @hearth_inner\nthought[lazy]: {} TEXT {}\nTEXT: /(.|\\n)*/\nWS: /[ \\t\\n]*/\n",
                    lark_string("<think>"),
                    lark_string("</think>")
                );
                let mut grammars = vec![llguidance::api::GrammarWithLexer::from_lark(outer)];
                grammars[0].name = None;
                grammars.extend(nested.grammars);
                TopLevelGrammar { grammars, max_tokens: None }
            }
        })
    }
}

/// llguidance's view of hearth's vocabulary.
struct HearthTokEnv {
    trie: TokTrie,
}

impl TokenizerEnv for HearthTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    /// Greedy tokenization is not the tokenizer's: llguidance then forces no tokens, and masks stay exact.
    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// The grammar compiler of one model, built on first use (its vocabulary index: 0.15 s for 49k tokens, 1.7 s for
/// 262k on the 2-core CI machine).
pub struct Grammars {
    tokenizer: Arc<Tokenizer>,
    logits_width: usize,
    factory: OnceLock<Result<Arc<ParserFactory>, String>>,
}

impl Grammars {
    /// For a model whose logits rows have `logits_width` entries.
    pub fn new(tokenizer: Arc<Tokenizer>, logits_width: usize) -> Self {
        Self { tokenizer, logits_width, factory: OnceLock::new() }
    }

    /// Build the vocabulary index now (a server does it at start, off the request path).
    pub fn warm(&self) {
        if let Err(e) = self.factory() {
            tracing::warn!("structured output is unavailable: {e}");
        }
    }

    fn factory(&self) -> Result<Arc<ParserFactory>, String> {
        self.factory.get_or_init(|| build_factory(&self.tokenizer, self.logits_width)).clone()
    }

    /// Compile a constraint as a request states it (the engine does, at submit).
    pub fn compile_source(&self, source: &ConstraintSource) -> Result<Constraint, String> {
        let c = self.compile(&source.spec)?;
        Ok(match &source.after_marker {
            Some(m) => c.after_marker(m),
            None => c,
        })
    }

    /// Compile `spec`; the error names what is wrong with it (an invalid schema, regex or grammar).
    pub fn compile(&self, spec: &ConstraintSpec) -> Result<Constraint, String> {
        let factory = self.factory()?;
        let grammar = spec.grammar()?;
        let t0 = Instant::now();
        let parser = factory.create_parser(grammar).map_err(|e| e.to_string())?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(e);
        }
        // The first mask now: a grammar this vocabulary cannot start (a character no token spells, say) is the
        // request's error, not a failure mid-generation; and the mask is ready for the first sample.
        let mut c = Constraint { matcher, mask: None, width: self.logits_width, dormant: None };
        c.prepare().map_err(|e| format!("it cannot start: {e}"))?;
        tracing::debug!(ms = t0.elapsed().as_secs_f64() * 1e3, "compiled a grammar");
        Ok(c)
    }
}

fn build_factory(tok: &Tokenizer, logits_width: usize) -> Result<Arc<ParserFactory>, String> {
    let t0 = Instant::now();
    let info = tok.info();
    let n = logits_width.max(info.tokens.len());
    let mut words: Vec<Vec<u8>> = (0..info.tokens.len())
        .map(|i| match info.kinds[i] {
            TokenKind::Control | TokenKind::Unknown | TokenKind::Unused => {
                [&[TokTrie::SPECIAL_TOKEN_MARKER][..], info.tokens[i].as_bytes()].concat()
            }
            _ => tok.token_bytes(i as u32).to_vec(),
        })
        .collect();
    // Padded lm_head rows: special names no text or grammar refers to.
    while words.len() < n {
        let name = format!("<[pad{}]>", words.len());
        words.push([&[TokTrie::SPECIAL_TOKEN_MARKER][..], name.as_bytes()].concat());
    }
    let eos = info.eos_ids.first().copied().ok_or("the model has no EOS token: output cannot be constrained")?;
    let mut trie = TokTrie::from(&TokRxInfo::new(n as u32, eos), &words);
    if info.eos_ids.len() > 1 {
        trie = trie.with_eos_tokens(&info.eos_ids);
    }
    let env: TokEnv = Arc::new(HearthTokEnv { trie });
    let mut factory = ParserFactory::new_simple(&env).map_err(|e| format!("building the grammar compiler: {e}"))?;
    factory.set_stderr_log_level(0);
    factory.limits_mut().verbose_errors = false;
    tracing::info!(vocab = n, ms = t0.elapsed().as_secs_f64() * 1e3, "grammar compiler ready");
    Ok(Arc::new(factory))
}

/// What committing a token did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// The grammar goes on.
    Continue,
    /// The grammar is complete and cannot be extended: the row ends here (finish reason `stop`).
    Complete,
}

/// The token id a device's masked argmax reports for a mask that allows nothing.
pub const NONE_ALLOWED: u32 = u32::MAX;

/// One row's grammar state.
#[derive(Clone)]
pub struct Constraint {
    matcher: Matcher,
    /// The mask for the next token (None: not computed since the last commit).
    mask: Option<SimpleVob>,
    width: usize,
    /// Free until the output contains these bytes (the end of a thought, `</think>`); then the grammar applies.
    dormant: Option<Dormant>,
}

#[derive(Clone)]
struct Dormant {
    marker: Vec<u8>,
    /// The output's last bytes (at most the marker's length).
    tail: Vec<u8>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").field("stopped", &self.matcher.is_stopped()).finish()
    }
}

impl Constraint {
    /// Leave the output free until it contains `marker` (a thought's end, for a prompt that opened one): the
    /// grammar applies to what follows.
    pub fn after_marker(mut self, marker: &str) -> Self {
        self.dormant = Some(Dormant { marker: marker.as_bytes().to_vec(), tail: Vec::new() });
        self
    }

    /// Whether the grammar is still waiting for its marker.
    pub fn is_dormant(&self) -> bool {
        self.dormant.is_some()
    }

    /// Compute the mask for the next token if it is not computed yet; returns the milliseconds it took (0 when it
    /// was ready, or the grammar is dormant).
    pub fn prepare(&mut self) -> Result<f64, String> {
        if self.mask.is_some() || self.dormant.is_some() {
            return Ok(0.0);
        }
        let t0 = Instant::now();
        let mask = self.matcher.compute_mask_or_eos().map_err(|e| {
            let why = grammar_error(&self.matcher, e);
            let why = why.lines().next().unwrap_or("").to_string();
            format!("no token of this model can continue the output here ({why})")
        })?;
        self.mask = Some(mask);
        Ok(t0.elapsed().as_secs_f64() * 1e3)
    }

    /// Set every logit the grammar does not allow next to -inf.
    pub fn apply(&mut self, logits: &mut [f32]) -> Result<(), String> {
        if self.dormant.is_some() {
            // Free text, but never a padded row.
            let w = self.width.min(logits.len());
            logits[w..].iter_mut().for_each(|l| *l = f32::NEG_INFINITY);
            return Ok(());
        }
        self.prepare()?;
        let Some(mask) = &self.mask else { return Err("the grammar mask is missing".into()) };
        let n = logits.len();
        for (w, &word) in mask.as_slice().iter().enumerate() {
            let base = w * 32;
            if base >= n {
                break;
            }
            if word == u32::MAX {
                continue;
            }
            for (i, l) in logits[base..(base + 32).min(n)].iter_mut().enumerate() {
                if word & (1 << i) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        // Logits wider than the vocabulary the mask covers are never allowed.
        if logits.len() > self.width {
            logits[self.width..].iter_mut().for_each(|l| *l = f32::NEG_INFINITY);
        }
        Ok(())
    }

    /// The allowed token with the highest logit (lowest id on ties), without copying the logits: what greedy
    /// sampling over the masked logits picks. None when the mask allows nothing within `logits`.
    pub fn masked_argmax(&mut self, logits: &[f32]) -> Result<Option<u32>, String> {
        if self.dormant.is_some() {
            let w = self.width.min(logits.len());
            return Ok((w > 0).then(|| super::sampler::argmax(&logits[..w]) as u32));
        }
        self.prepare()?;
        let Some(mask) = &self.mask else { return Err("the grammar mask is missing".into()) };
        let n = logits.len().min(self.width);
        let mut best: Option<(usize, f32)> = None;
        for (w, &word) in mask.as_slice().iter().enumerate() {
            let base = w * 32;
            if base >= n {
                break;
            }
            let mut bits = word;
            while bits != 0 {
                let i = base + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if i >= n {
                    break;
                }
                if best.is_none_or(|(_, b)| logits[i] > b) {
                    best = Some((i, logits[i]));
                }
            }
        }
        Ok(best.map(|(i, _)| i as u32))
    }

    /// The tokens allowed next as bits (token i: bit i % 32 of word i / 32), ⌈vocabulary / 32⌉ words: what a device
    /// masks its argmax with. While dormant, every token of the vocabulary.
    pub fn mask_words(&mut self) -> Result<Vec<u32>, String> {
        let words = self.width.div_ceil(32);
        let mut out = if self.dormant.is_some() {
            vec![u32::MAX; words]
        } else {
            self.prepare()?;
            let Some(mask) = &self.mask else { return Err("the grammar mask is missing".into()) };
            let mut m = mask.as_slice().to_vec();
            m.resize(words, 0);
            m
        };
        if !self.width.is_multiple_of(32) {
            if let Some(last) = out.last_mut() {
                *last &= (1u32 << (self.width % 32)) - 1;
            }
        }
        Ok(out)
    }

    /// Commit the chosen (non-EOS) token.
    pub fn commit(&mut self, token: u32) -> Result<Commit, String> {
        if let Some(d) = self.dormant.as_mut() {
            let env = self.matcher.tok_env().map_err(|e| e.to_string())?;
            d.tail.extend_from_slice(env.tok_trie().token(token));
            if d.tail.ends_with(&d.marker) {
                self.dormant = None;
                self.mask = None;
            } else {
                let keep = d.tail.len().saturating_sub(d.marker.len());
                d.tail.drain(..keep);
            }
            return Ok(Commit::Continue);
        }
        self.mask = None;
        self.matcher.consume_token(token).map_err(|e| grammar_error(&self.matcher, e))?;
        if !self.matcher.is_stopped() {
            return Ok(Commit::Continue);
        }
        match self.matcher.stop_reason() {
            StopReason::NoExtension | StopReason::NoExtensionBias | StopReason::EndOfSentence => Ok(Commit::Complete),
            r => Err(self.matcher.get_error().unwrap_or_else(|| format!("the grammar stopped: {r:?}"))),
        }
    }

    /// Whether `token` is allowed next (computes the mask if needed).
    pub fn allows(&mut self, token: u32) -> Result<bool, String> {
        if self.dormant.is_some() {
            return Ok((token as usize) < self.width);
        }
        self.prepare()?;
        Ok(self.mask.as_ref().is_some_and(|m| m.is_allowed(token)))
    }

    /// How many of `tokens` (a speculative draft) the grammar takes in a row from here, without committing any;
    /// 0 while it is dormant (the marker it waits for decides where it starts).
    pub fn valid_prefix(&mut self, tokens: &[u32]) -> usize {
        if self.dormant.is_some() {
            return 0;
        }
        self.matcher.validate_tokens(tokens).unwrap_or(0)
    }
}

fn grammar_error(m: &Matcher, e: impl std::fmt::Display) -> String {
    m.get_error().unwrap_or_else(|| e.to_string())
}
