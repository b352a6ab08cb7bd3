//! The per-row sampler. Order (as vLLM and transformers): bias -> penalties -> temperature -> top-k -> top-p ->
//! min-p -> XTC -> draw. Log-probabilities are those of the model's raw distribution (log-softmax of the logits
//! before any processing), as OpenAI reports them.

use super::processors::{apply_logit_bias, apply_penalties};
use super::rng::Rng;
use super::SamplingParams;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TopLogprob {
    pub id: u32,
    pub logprob: f32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub id: u32,
    /// Present when the request asked for logprobs.
    pub logprob: Option<f32>,
    pub top: Vec<TopLogprob>,
}

pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
}

/// Index of the maximum (lowest index on ties), as torch.argmax and llama.cpp's greedy sampler.
pub fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best
}

/// The log-probability of `id` under `logits` (raw: before any sampling transform) and the `k` most likely
/// tokens with theirs, best first (ties by id).
pub fn scored(logits: &[f32], id: u32, k: usize) -> (f32, Vec<TopLogprob>) {
    let lp = log_softmax(logits);
    (lp.get(id as usize).copied().unwrap_or(f32::NEG_INFINITY), top_of(&lp, k))
}

/// The `k` best entries of log-probabilities `lp`, best first (ties by id).
fn top_of(lp: &[f32], k: usize) -> Vec<TopLogprob> {
    let mut idx: Vec<usize> = (0..lp.len()).collect();
    let k = k.min(lp.len());
    if k == 0 {
        return Vec::new();
    }
    idx.select_nth_unstable_by(k - 1, |&a, &b| lp[b].total_cmp(&lp[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx.sort_by(|&a, &b| lp[b].total_cmp(&lp[a]).then(a.cmp(&b)));
    idx.into_iter().map(|i| TopLogprob { id: i as u32, logprob: lp[i] }).collect()
}

fn log_softmax(xs: &[f32]) -> Vec<f32> {
    let m = xs.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let lse = m + xs.iter().map(|&x| ((x - m) as f64).exp()).sum::<f64>().ln() as f32;
    xs.iter().map(|&x| x - lse).collect()
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let rng = match params.seed {
            Some(s) => Rng::seeded(s),
            None => Rng::from_entropy(),
        };
        Self { params, rng }
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The token the device chose for a plain-greedy row ([`SamplingParams::is_plain_greedy`]): what
    /// [`Sampler::sample`] returns for the same logits.
    pub fn chosen(&self, id: u32) -> Sampled {
        debug_assert!(self.params.is_plain_greedy());
        Sampled { id, logprob: None, top: Vec::new() }
    }

    /// Pick the next token from one row's logits; `context` is the row's prompt + generated tokens.
    pub fn sample(&mut self, logits: &[f32], context: &[u32]) -> Sampled {
        let (logprob, top) = match self.params.logprobs {
            Some(k) => {
                let lp = log_softmax(logits);
                let top = top_of(&lp, k);
                (Some(lp), top)
            }
            None => (None, Vec::new()),
        };
        let id = self.choose(logits, context);
        Sampled { id: id as u32, logprob: logprob.map(|lp| lp[id]), top }
    }

    fn choose(&mut self, raw: &[f32], context: &[u32]) -> usize {
        let p = &self.params;
        let mut logits = raw.to_vec();
        apply_logit_bias(&mut logits, &p.logit_bias);
        apply_penalties(&mut logits, context, p);
        if p.is_greedy() {
            return argmax(&logits);
        }
        let probs = self.filtered_probs(&logits);
        self.draw(&probs)
    }

    /// Candidates (id, prob) after temperature and the truncations, sorted by prob descending, renormalized.
    pub fn filtered_probs(&mut self, logits: &[f32]) -> Vec<(usize, f32)> {
        let p = self.params.clone();
        let t = p.temperature.max(1e-6);
        let mut cand: Vec<(usize, f32)> =
            logits.iter().enumerate().filter(|(_, l)| l.is_finite()).map(|(i, &l)| (i, l / t)).collect();
        if cand.is_empty() {
            return vec![(argmax(logits), 1.0)];
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if p.top_k > 0 && p.top_k < cand.len() {
            cand.truncate(p.top_k);
        }
        // softmax over the remaining candidates
        let m = cand[0].1;
        let mut z = 0f64;
        let mut probs: Vec<(usize, f32)> = cand
            .iter()
            .map(|&(i, l)| {
                let e = ((l - m) as f64).exp();
                z += e;
                (i, e as f32)
            })
            .collect();
        probs.iter_mut().for_each(|x| x.1 = (x.1 as f64 / z) as f32);
        if p.top_p < 1.0 {
            let mut cum = 0f32;
            let mut keep = probs.len();
            for (j, &(_, pr)) in probs.iter().enumerate() {
                cum += pr;
                if cum >= p.top_p {
                    keep = j + 1;
                    break;
                }
            }
            probs.truncate(keep.max(1));
        }
        if p.min_p > 0.0 {
            let floor = probs[0].1 * p.min_p;
            let keep = probs.iter().take_while(|x| x.1 >= floor).count();
            probs.truncate(keep.max(1));
        }
        if p.xtc_probability > 0.0 && self.rng.next_f64() < p.xtc_probability as f64 {
            // Remove every token above the threshold except the least likely of them.
            let above = probs.iter().take_while(|x| x.1 >= p.xtc_threshold).count();
            if above >= 2 {
                probs.drain(..above - 1);
            }
        }
        let s: f32 = probs.iter().map(|x| x.1).sum();
        probs.iter_mut().for_each(|x| x.1 /= s);
        probs
    }

    fn draw(&mut self, probs: &[(usize, f32)]) -> usize {
        let r = self.rng.next_f64() as f32;
        let mut cum = 0f32;
        for &(i, p) in probs {
            cum += p;
            if r < cum {
                return i;
            }
        }
        probs.last().map(|x| x.0).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(f: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
        let mut p = SamplingParams { temperature: 1.0, seed: Some(1), ..Default::default() };
        f(&mut p);
        p
    }

    fn ln(ps: &[f32]) -> Vec<f32> {
        ps.iter().map(|p| p.ln()).collect()
    }

    fn close(a: &[(usize, f32)], b: &[(usize, f32)]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert_eq!(x.0, y.0);
            assert!((x.1 - y.1).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn greedy_takes_first_max() {
        let mut s = Sampler::new(SamplingParams::default());
        assert_eq!(s.sample(&[1.0, 3.0, 3.0, 2.0], &[]).id, 1);
    }

    #[test]
    fn plain_greedy_is_only_the_raw_argmax() {
        // What the device may choose for a row: greedy with nothing that reads the logits on the host.
        assert!(SamplingParams::default().is_plain_greedy());
        let g = |f: fn(&mut SamplingParams)| {
            let mut p = SamplingParams::default();
            f(&mut p);
            p.is_plain_greedy()
        };
        assert!(!g(|p| p.temperature = 0.7));
        assert!(!g(|p| p.logit_bias = vec![(1, 5.0)]));
        assert!(!g(|p| p.repetition_penalty = 1.1));
        assert!(!g(|p| p.presence_penalty = 0.5));
        assert!(!g(|p| p.frequency_penalty = 0.5));
        assert!(!g(|p| p.logprobs = Some(0)));
        assert!(g(|p| p.top_k = 5), "truncations do not change a greedy pick");
        let mut s = Sampler::new(SamplingParams::default());
        assert_eq!(s.chosen(2), Sampled { id: 2, logprob: None, top: Vec::new() });
        assert_eq!(s.sample(&[0.0, 1.0, 4.0], &[]), s.chosen(2));
    }

    #[test]
    fn temperature_sharpens_as_hand_computed() {
        // probs 0.5, 0.3, 0.2 at T=0.5 -> p^2 normalized: .25,.09,.04 / .38
        let mut s = Sampler::new(params(|p| p.temperature = 0.5));
        let got = s.filtered_probs(&ln(&[0.5, 0.3, 0.2]));
        close(&got, &[(0, 0.25 / 0.38), (1, 0.09 / 0.38), (2, 0.04 / 0.38)]);
    }

    #[test]
    fn top_k_top_p_min_p_by_hand() {
        let l = ln(&[0.1, 0.4, 0.3, 0.2]);
        close(&Sampler::new(params(|p| p.top_k = 2)).filtered_probs(&l), &[(1, 0.4 / 0.7), (2, 0.3 / 0.7)]);
        // top_p 0.75: 0.4 + 0.3 = 0.7 < 0.75, + 0.2 = 0.9 -> keep three
        close(
            &Sampler::new(params(|p| p.top_p = 0.75)).filtered_probs(&l),
            &[(1, 0.4 / 0.9), (2, 0.3 / 0.9), (3, 0.2 / 0.9)],
        );
        // min_p 0.6: floor 0.24 -> keep 0.4, 0.3
        close(&Sampler::new(params(|p| p.min_p = 0.6)).filtered_probs(&l), &[(1, 0.4 / 0.7), (2, 0.3 / 0.7)]);
    }

    #[test]
    fn xtc_removes_all_but_the_least_likely_top_choice() {
        let l = ln(&[0.5, 0.3, 0.15, 0.05]);
        let got = Sampler::new(params(|p| {
            p.xtc_probability = 1.0;
            p.xtc_threshold = 0.2;
        }))
        .filtered_probs(&l);
        close(&got, &[(1, 0.3 / 0.5), (2, 0.15 / 0.5), (3, 0.05 / 0.5)]);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_follows_the_distribution() {
        let l = ln(&[0.7, 0.2, 0.1]);
        let run = |seed| {
            let mut s = Sampler::new(params(|p| p.seed = Some(seed)));
            (0..4000).map(|_| s.sample(&l, &[]).id).collect::<Vec<_>>()
        };
        let a = run(42);
        assert_eq!(a, run(42));
        assert_ne!(a, run(43));
        let freq0 = a.iter().filter(|&&x| x == 0).count() as f32 / a.len() as f32;
        assert!((freq0 - 0.7).abs() < 0.03, "{freq0}");
    }

    #[test]
    fn logprobs_are_raw_log_softmax_with_sorted_top() {
        let mut s = Sampler::new(SamplingParams { logprobs: Some(2), ..Default::default() });
        let l = ln(&[0.1, 0.6, 0.3]);
        let out = s.sample(&l, &[]);
        assert_eq!(out.id, 1);
        assert!((out.logprob.unwrap() - 0.6f32.ln()).abs() < 1e-6);
        assert_eq!(out.top.iter().map(|t| t.id).collect::<Vec<_>>(), vec![1, 2]);
        assert!((out.top[1].logprob - 0.3f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn bias_can_force_a_token() {
        let mut s = Sampler::new(SamplingParams { logit_bias: vec![(2, 100.0)], ..Default::default() });
        assert_eq!(s.sample(&[5.0, 4.0, 0.0], &[]).id, 2);
    }
}
