//! Accepting a row's next token: sample it from the step's output (masked by the row's grammar, if any), apply the
//! stop rules (a stop token, EOS, the grammar's end, `max_tokens`, the model's context) and advance the grammar.
//! What happened goes to the caller's list of [`Update`]s; nothing here touches the queue or the KV cache.

use super::outcome::Update;
use super::plan::Pick;
use super::sequence::Sequence;
use crate::sampling::grammar::{Commit, NONE_ALLOWED};
use crate::types::{EngineStats, FinishReason};

pub struct Acceptor {
    /// Tokens that end a choice (unless the request ignores EOS and has no grammar).
    eos: Vec<u32>,
    /// The model's context: a row ends when its tokens fill it.
    max_positions: usize,
}

impl Acceptor {
    pub fn new(eos: Vec<u32>, max_positions: usize) -> Self {
        Self { eos, max_positions }
    }

    /// The model's context, in tokens.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// Sample the next token of `s` from its step output and apply it; returns true when the row is finished.
    pub fn accept(&self, s: &mut Sequence, pick: &Pick<'_>, out: &mut Vec<Update>, stats: &mut EngineStats) -> bool {
        let sampled = match (*pick, s.constraint.as_mut()) {
            (Pick::Logits(logits), Some(c)) => {
                // The grammar's mask (computed during the forward pass, or now), then the sampler: plain greedy
                // takes the best allowed token straight from the logits; anything else samples masked logits.
                let fresh = c.prepare();
                if let Ok(ms) = fresh {
                    if ms > 0.0 {
                        note_mask(stats, ms);
                    }
                }
                let picked = fresh.and_then(|_| {
                    if s.sampler.params().is_plain_greedy() {
                        let id = c.masked_argmax(logits)?.ok_or("it allows no token")?;
                        Ok(s.sampler.chosen(id))
                    } else {
                        let mut masked = logits.to_vec();
                        c.apply(&mut masked)?;
                        Ok(s.sampler.sample(&masked, &s.tokens))
                    }
                });
                match picked {
                    Ok(sampled) => sampled,
                    Err(e) => {
                        out.push(Update::grammar_failed(s, e));
                        return true;
                    }
                }
            }
            (Pick::Logits(logits), None) => s.sampler.sample(logits, &s.tokens),
            // The device found no token the grammar allows: the mask's own error says why.
            (Pick::Id(NONE_ALLOWED), Some(c)) => {
                let why = c.prepare().err().unwrap_or_else(|| "it allows no token".into());
                out.push(Update::grammar_failed(s, why));
                return true;
            }
            (Pick::Id(id), _) => s.sampler.chosen(id),
        };
        let id = sampled.id;
        // With a grammar, EOS is only allowed where the grammar accepts: it always ends the row.
        let eos = self.eos.contains(&id) && (!s.ignore_eos || s.constraint.is_some());
        if s.stop_ids.contains(&id) || eos {
            out.push(Update::finished(s, FinishReason::Stop));
            return true;
        }
        s.tokens.push(id);
        stats.tokens_generated_total += 1;
        out.push(Update::token(s, sampled));
        if let Some(c) = s.constraint.as_mut() {
            match c.commit(id) {
                Ok(Commit::Continue) => {}
                Ok(Commit::Complete) => {
                    out.push(Update::finished(s, FinishReason::Stop));
                    return true;
                }
                Err(e) => {
                    out.push(Update::grammar_failed(s, e));
                    return true;
                }
            }
        }
        if s.generated() >= s.max_tokens || s.tokens.len() >= self.max_positions {
            out.push(Update::finished(s, FinishReason::Length));
            return true;
        }
        false
    }
}

/// Count one grammar mask that took `ms`.
pub fn note_mask(st: &mut EngineStats, ms: f64) {
    st.grammar_masks_total += 1;
    st.grammar_mask_ms_total += ms;
    st.grammar_mask_ms_max = st.grammar_mask_ms_max.max(ms);
    // Quarter-octave buckets of microseconds, from 1 µs to ~30 s.
    let bucket = ((ms * 1e3).max(1.0).log2() * 4.0).ceil().clamp(0.0, 99.0) as usize;
    if st.grammar_mask_hist.len() <= bucket {
        st.grammar_mask_hist.resize(bucket + 1, 0);
    }
    st.grammar_mask_hist[bucket] += 1;
}
