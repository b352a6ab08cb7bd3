//! Logit processors applied before sampling: logit bias, then penalties over a window of recent context.

use super::SamplingParams;
use std::collections::HashMap;

pub fn apply_logit_bias(logits: &mut [f32], bias: &[(u32, f32)]) {
    for &(id, b) in bias {
        if let Some(l) = logits.get_mut(id as usize) {
            *l += b;
        }
    }
}

/// Repetition (multiplicative), presence and frequency (additive) penalties over the last `penalty_last_n`
/// tokens of `context` (prompt + generated so far).
pub fn apply_penalties(logits: &mut [f32], context: &[u32], p: &SamplingParams) {
    if p.repetition_penalty == 1.0 && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0 {
        return;
    }
    let window = match p.penalty_last_n {
        Some(n) => &context[context.len().saturating_sub(n)..],
        None => context,
    };
    let mut counts: HashMap<u32, u32> = HashMap::new();
    for &t in window {
        *counts.entry(t).or_default() += 1;
    }
    for (&id, &n) in &counts {
        let Some(l) = logits.get_mut(id as usize) else { continue };
        if p.repetition_penalty != 1.0 {
            *l = if *l > 0.0 { *l / p.repetition_penalty } else { *l * p.repetition_penalty };
        }
        *l -= p.frequency_penalty * n as f32 + p.presence_penalty;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn penalties_by_hand() {
        let p = SamplingParams {
            repetition_penalty: 2.0,
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            penalty_last_n: Some(3),
            ..Default::default()
        };
        let mut l = vec![4.0, -4.0, 1.0, 1.0];
        // window = last 3 = [1, 1, 0]; token 3 is outside the window.
        apply_penalties(&mut l, &[3, 1, 1, 0], &p);
        assert_eq!(l, vec![4.0 / 2.0 - 0.25 - 0.5, -4.0 * 2.0 - 0.5 - 0.5, 1.0, 1.0]);
    }

    #[test]
    fn whole_context_window() {
        let p = SamplingParams { presence_penalty: 1.0, penalty_last_n: None, ..Default::default() };
        let mut l = vec![0.0; 3];
        apply_penalties(&mut l, &[2, 0, 0, 0], &p);
        assert_eq!(l, vec![-1.0, 0.0, -1.0]);
    }

    #[test]
    fn bias_adds_and_ignores_out_of_range() {
        let mut l = vec![0.0, 1.0];
        apply_logit_bias(&mut l, &[(1, -100.0), (7, 5.0)]);
        assert_eq!(l, vec![0.0, -99.0]);
    }
}
