//! One row: a choice of a request, with its tokens, its share of the KV cache, sampler and event channel.

use crate::kv::RowKv;
use crate::sampling::grammar::Constraint;
use crate::sampling::{Sampler, SamplingParams};
use crate::speculative::{RowSpec, SpecConfig};
use crate::types::{EngineEvent, EngineRequest, RequestStream, Usage};
use crate::vision::RequestMedia;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

pub struct Sequence {
    /// Unique id; also the KV slot.
    pub slot: usize,
    /// Admission order (FIFO; preemption takes the newest).
    pub arrival: u64,
    pub choice: usize,
    /// Choices 1..n of the request, forked from this one when its prompt is computed: they share its prompt
    /// blocks (a copy of the partial last one) and sample their first token from the same logits.
    pub siblings: Vec<Sequence>,
    /// Prompt followed by generated tokens.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// Its blocks and how much of its KV is written (the KV cache manager's to change).
    pub kv: RowKv,
    pub sampler: Sampler,
    /// The grammar this row's output follows.
    pub constraint: Option<Constraint>,
    pub max_tokens: usize,
    pub stop_ids: Vec<u32>,
    pub ignore_eos: bool,
    /// The request's event stream (the engine core sends; the scheduler reads whether it closed).
    pub tx: UnboundedSender<EngineEvent>,
    pub cancel: Arc<AtomicBool>,
    /// Its speculation (None: it never speculates).
    pub spec: Option<RowSpec>,
    /// The drafted tokens this step verifies (empty when it does not speculate this step).
    pub draft: Vec<u32>,
    /// While the request's prompt log-probabilities are owed (choice 0 only): those scored so far, one per prompt
    /// position after the first. Such a row computes its whole prompt, with logits at every position.
    pub prompt_scores: Option<PromptScores>,
    /// Images in its prompt (shared by the request's choices).
    pub media: Option<Arc<RequestMedia>>,
}

/// The ids the prompt cache names a row's blocks by ([`RequestMedia::cache_ids`]): the tokens themselves when
/// its prompt has no images.
pub fn cache_ids<'a>(media: &Option<Arc<RequestMedia>>, tokens: &'a [u32]) -> Cow<'a, [u32]> {
    match media {
        Some(m) if !m.images.is_empty() => Cow::Owned(m.cache_ids(tokens)),
        _ => Cow::Borrowed(tokens),
    }
}

/// Prompt log-probabilities as they are scored: one entry per prompt token after the first.
#[derive(Debug, Default)]
pub struct PromptScores {
    /// Alternatives wanted per position.
    pub top_k: usize,
    pub logprobs: Vec<f32>,
    pub top: Vec<Vec<crate::sampling::TopLogprob>>,
}

impl Sequence {
    /// The rows of a (validated) request: choice 0, carrying choices 1.. as siblings until its prompt is computed,
    /// and the request's event stream; `constraint` is the request's, compiled; `spec` the engine's speculation.
    /// `next_slot` hands out unique slots (also the arrival order).
    pub fn for_request(
        req: &EngineRequest,
        constraint: Option<Constraint>,
        spec: &SpecConfig,
        mut next_slot: impl FnMut() -> usize,
    ) -> (Sequence, RequestStream) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let media = req.media.clone().map(Arc::new);
        let cancel: Vec<Arc<AtomicBool>> = (0..req.n.max(1)).map(|_| Arc::new(AtomicBool::new(false))).collect();
        let mut seqs: Vec<Sequence> = cancel
            .iter()
            .enumerate()
            .map(|(choice, flag)| {
                let slot = next_slot();
                // Each choice draws from its own seed (seed + choice), so choices differ yet replay.
                let params = SamplingParams {
                    seed: req.sampling.seed.map(|s| s.wrapping_add(choice as u64)),
                    ..req.sampling.clone()
                };
                Sequence {
                    slot,
                    arrival: slot as u64,
                    choice,
                    siblings: Vec::new(),
                    tokens: req.prompt.clone(),
                    prompt_len: req.prompt.len(),
                    kv: RowKv::default(),
                    sampler: Sampler::new(params),
                    constraint: constraint.clone(),
                    max_tokens: req.max_tokens,
                    stop_ids: req.stop_token_ids.clone(),
                    ignore_eos: req.ignore_eos,
                    tx: tx.clone(),
                    cancel: flag.clone(),
                    // A draft would not see the images: rows with images do not speculate.
                    spec: if media.is_some() { None } else { RowSpec::new(spec, &req.spec) },
                    draft: Vec::new(),
                    prompt_scores: req
                        .sampling
                        .prompt_logprobs
                        .filter(|_| choice == 0)
                        .map(|top_k| PromptScores { top_k, ..Default::default() }),
                    media: media.clone(),
                }
            })
            .collect();
        let mut first = seqs.remove(0);
        first.siblings = seqs;
        (first, RequestStream { rx, cancel })
    }

    pub fn generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.tx.is_closed()
    }

    /// Tokens still to compute before the next sample.
    pub fn pending(&self) -> usize {
        self.tokens.len() - self.kv.computed
    }

    pub fn usage(&self) -> Usage {
        let (drafted, accepted) = self.spec.as_ref().map_or((0, 0), |s| (s.drafted, s.accepted));
        Usage {
            prompt_tokens: self.prompt_len,
            completion_tokens: self.generated(),
            cached_tokens: self.kv.cached.min(self.prompt_len),
            accepted_prediction_tokens: accepted,
            rejected_prediction_tokens: drafted - accepted,
        }
    }
}
