//! The gated delta rule, one token at a time, in a chunk-aligned form whose arithmetic depends only on each
//! token's absolute position.
//!
//! Per value head, with normalized key k, query q (scaled by 1/√d_k), value v, write strength β and log decay g ≤ 0,
//! the recurrence is `S ← e^g S; S ← S + k (β (v − Sᵀk))ᵀ; o = Sᵀq` (transformers'
//! `torch_recurrent_gated_delta_rule`). Positions are grouped in chunks of `C` on a fixed grid (multiples of C).
//! Within a chunk that starts from state S₀, with γᵢ the cumulative log decay of its tokens 0..=i:
//!
//! - δᵢ = β (vᵢ − e^γᵢ S₀ᵀkᵢ) − Σ_{m<i} β e^(γᵢ−γₘ) (kᵢ·kₘ) δₘ   (the delta rule's corrections, by substitution)
//! - oᵢ = e^γᵢ S₀ᵀqᵢ + Σ_{m≤i} e^(γᵢ−γₘ) (kₘ·qᵢ) δₘ
//! - at the chunk's end: S = e^γ_(C−1) S₀ + Σₘ e^(γ_(C−1)−γₘ) kₘ δₘᵀ
//!
//! which is the recurrence regrouped (transformers' chunked form computes the same δ with a triangular solve).
//! Only S₀ and the chunk's keys, corrections and decays so far are kept: a token's output is computed the same way
//! whether it comes in a prompt piece, alone in a decode step or in a batch, and the state at a chunk boundary is
//! the same whichever way the tokens before it were grouped. Every exponent is ≤ 0 (no overflow).

use crate::weights::config::LinearAttnConfig;

/// One linear-attention layer's state for one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerState {
    /// Tokens consumed.
    pub pos: usize,
    /// The convolution's last `kernel - 1` inputs, oldest first: (kernel - 1) × conv_dim.
    conv: Vec<f32>,
    /// The state at the last chunk boundary: v_heads × key_dim × value_dim.
    s: Vec<f32>,
    /// This chunk's normalized keys so far, per value head: chunk × v_heads × key_dim.
    keys: Vec<f32>,
    /// This chunk's corrections δ so far: chunk × v_heads × value_dim.
    deltas: Vec<f32>,
    /// This chunk's cumulative log decays so far: chunk × v_heads.
    gammas: Vec<f32>,
}

impl LayerState {
    /// The state before any token.
    pub fn new(c: &LinearAttnConfig, chunk: usize) -> Self {
        Self {
            pos: 0,
            conv: vec![0.0; (c.conv_kernel - 1) * c.conv_dim()],
            s: vec![0.0; c.v_heads * c.key_dim * c.value_dim],
            keys: vec![0.0; chunk * c.v_heads * c.key_dim],
            deltas: vec![0.0; chunk * c.v_heads * c.value_dim],
            gammas: vec![0.0; chunk * c.v_heads],
        }
    }

    /// Bytes this state holds.
    pub fn bytes(&self) -> usize {
        4 * (self.conv.len() + self.s.len() + self.keys.len() + self.deltas.len() + self.gammas.len())
    }
}

/// A layer's learned constants.
pub struct DeltaWeights<'a> {
    /// The depthwise convolution: conv_dim × kernel (`conv1d.weight` of shape (conv_dim, 1, kernel)).
    pub conv: &'a [f32],
    /// exp(A_log) per value head.
    pub decay_rate: &'a [f32],
    /// `dt_bias` per value head.
    pub dt_bias: &'a [f32],
}

/// Per-token inputs of one row, row-major: `mixed` (len × conv_dim, the q|k|v projection before the
/// convolution), `a` and `b` (len × v_heads).
pub struct RowInputs<'a> {
    pub mixed: &'a [f32],
    pub a: &'a [f32],
    pub b: &'a [f32],
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// torch's softplus (threshold 20: linear above it).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// x ← x / √(Σx² + 1e-6) (the FLA library's l2norm, as transformers applies it).
fn l2norm(x: &mut [f32]) {
    let inv = 1.0 / (dot(x, x) + 1e-6).sqrt();
    x.iter_mut().for_each(|v| *v *= inv);
}

/// Run `len` tokens of one row through the layer: `st` advances by `len` (it must sit at the row's first
/// position); `out` receives len × v_heads × value_dim outputs (before the gated norm). `boundary` is called with
/// the state each time a chunk completes (its position is then a multiple of `chunk`).
pub fn run_row(
    c: &LinearAttnConfig,
    w: &DeltaWeights,
    chunk: usize,
    st: &mut LayerState,
    x: &RowInputs,
    out: &mut [f32],
    mut boundary: impl FnMut(&LayerState),
) {
    let (cd, kern) = (c.conv_dim(), c.conv_kernel);
    let (hk, hv, dk, dv) = (c.k_heads, c.v_heads, c.key_dim, c.value_dim);
    let key_dim = hk * dk;
    let len = x.a.len() / hv;
    let scale = 1.0 / (dk as f32).sqrt();
    let mut y = vec![0.0f32; cd];
    let (mut sk, mut r) = (vec![0.0f32; dv], vec![0.0f32; dv]);
    for t in 0..len {
        // 1. causal depthwise convolution over this input and the kept ones, then SiLU
        let xt = &x.mixed[t * cd..(t + 1) * cd];
        for (ch, yc) in y.iter_mut().enumerate() {
            let wc = &w.conv[ch * kern..(ch + 1) * kern];
            let mut acc = 0.0f32;
            for (i, &wi) in wc[..kern - 1].iter().enumerate() {
                acc += wi * st.conv[i * cd + ch];
            }
            *yc = silu(acc + wc[kern - 1] * xt[ch]);
        }
        if kern > 1 {
            st.conv.copy_within(cd.., 0);
            let last = (kern - 2) * cd;
            st.conv[last..last + cd].copy_from_slice(xt);
        }
        // 2. normalized q (scaled) and k per key head
        let (q, rest) = y.split_at_mut(key_dim);
        let (k, v) = rest.split_at_mut(key_dim);
        for h in 0..hk {
            l2norm(&mut q[h * dk..(h + 1) * dk]);
            l2norm(&mut k[h * dk..(h + 1) * dk]);
        }
        q.iter_mut().for_each(|e| *e *= scale);
        // 3. the delta rule per value head, within the chunk
        let i = st.pos % chunk;
        for h in 0..hv {
            let g = c.key_head(h);
            let (qh, kh) = (&q[g * dk..][..dk], &k[g * dk..][..dk]);
            let vh = &v[h * dv..(h + 1) * dv];
            let beta = 1.0 / (1.0 + (-x.b[t * hv + h]).exp());
            let g = -w.decay_rate[h] * softplus(x.a[t * hv + h] + w.dt_bias[h]);
            let gamma = if i == 0 { g } else { st.gammas[(i - 1) * hv + h] + g };
            st.gammas[i * hv + h] = gamma;
            st.keys[(i * hv + h) * dk..][..dk].copy_from_slice(kh);
            let s0 = &st.s[h * dk * dv..(h + 1) * dk * dv];
            let eg = gamma.exp();
            // δ = β (v − e^γ S₀ᵀk) − Σ_{m<i} β e^(γ−γₘ) (k·kₘ) δₘ
            sk.iter_mut().for_each(|e| *e = 0.0);
            for a in 0..dk {
                let ka = kh[a];
                for (e, s) in sk.iter_mut().zip(&s0[a * dv..(a + 1) * dv]) {
                    *e += s * ka;
                }
            }
            for ((re, &ve), &ske) in r.iter_mut().zip(vh).zip(&sk) {
                *re = beta * (ve - eg * ske);
            }
            for m in 0..i {
                let gm = st.gammas[m * hv + h];
                let coef = beta * (gamma - gm).exp() * dot(kh, &st.keys[(m * hv + h) * dk..][..dk]);
                for (re, &de) in r.iter_mut().zip(&st.deltas[(m * hv + h) * dv..][..dv]) {
                    *re -= coef * de;
                }
            }
            st.deltas[(i * hv + h) * dv..][..dv].copy_from_slice(&r);
            // o = e^γ S₀ᵀq + Σ_{m≤i} e^(γ−γₘ) (kₘ·q) δₘ
            let o = &mut out[(t * hv + h) * dv..][..dv];
            o.iter_mut().for_each(|e| *e = 0.0);
            for a in 0..dk {
                let qa = qh[a];
                for (e, s) in o.iter_mut().zip(&s0[a * dv..(a + 1) * dv]) {
                    *e += s * qa;
                }
            }
            o.iter_mut().for_each(|e| *e *= eg);
            for m in 0..=i {
                let gm = st.gammas[m * hv + h];
                let coef = (gamma - gm).exp() * dot(&st.keys[(m * hv + h) * dk..][..dk], qh);
                for (e, &de) in o.iter_mut().zip(&st.deltas[(m * hv + h) * dv..][..dv]) {
                    *e += coef * de;
                }
            }
        }
        st.pos += 1;
        // 4. a complete chunk folds into the state
        if i == chunk - 1 {
            fold(c, chunk, st);
            boundary(st);
        }
    }
}

/// S = e^γ_(C−1) S₀ + Σₘ e^(γ_(C−1)−γₘ) kₘ δₘᵀ, per value head.
fn fold(c: &LinearAttnConfig, chunk: usize, st: &mut LayerState) {
    let (hv, dk, dv) = (c.v_heads, c.key_dim, c.value_dim);
    for h in 0..hv {
        let last = st.gammas[(chunk - 1) * hv + h];
        let s = &mut st.s[h * dk * dv..(h + 1) * dk * dv];
        let decay = last.exp();
        s.iter_mut().for_each(|e| *e *= decay);
        for m in 0..chunk {
            let wgt = (last - st.gammas[m * hv + h]).exp();
            let km = &st.keys[(m * hv + h) * dk..][..dk];
            let dm = &st.deltas[(m * hv + h) * dv..][..dv];
            for a in 0..dk {
                let ka = wgt * km[a];
                for (e, &d) in s[a * dv..(a + 1) * dv].iter_mut().zip(dm) {
                    *e += ka * d;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LinearAttnConfig {
        LinearAttnConfig {
            layers: vec![true],
            conv_kernel: 4,
            k_heads: 2,
            v_heads: 4,
            key_dim: 8,
            value_dim: 6,
            tiled_v_heads: false,
        }
    }

    /// A small deterministic generator (no dependency).
    fn noise(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2654435761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x as f32 / u32::MAX as f32) * 2.0 - 1.0
            })
            .collect()
    }

    struct Case {
        conv: Vec<f32>,
        rate: Vec<f32>,
        bias: Vec<f32>,
        mixed: Vec<f32>,
        a: Vec<f32>,
        b: Vec<f32>,
    }

    fn case(c: &LinearAttnConfig, len: usize) -> Case {
        Case {
            conv: noise(c.conv_dim() * c.conv_kernel, 1),
            rate: noise(c.v_heads, 2).iter().map(|x| 0.5 + 2.0 * x.abs()).collect(),
            bias: noise(c.v_heads, 3),
            mixed: noise(len * c.conv_dim(), 4).iter().map(|x| 3.0 * x).collect(),
            a: noise(len * c.v_heads, 5),
            b: noise(len * c.v_heads, 6).iter().map(|x| 3.0 * x).collect(),
        }
    }

    /// Run `len` tokens in pieces of the given sizes; the outputs of every token.
    fn run_pieces(c: &LinearAttnConfig, k: &Case, chunk: usize, pieces: &[usize]) -> (Vec<f32>, LayerState) {
        let w = DeltaWeights { conv: &k.conv, decay_rate: &k.rate, dt_bias: &k.bias };
        let (hv, cd) = (c.v_heads, c.conv_dim());
        let mut st = LayerState::new(c, chunk);
        let mut out = Vec::new();
        let mut t0 = 0;
        for &n in pieces {
            let x = RowInputs {
                mixed: &k.mixed[t0 * cd..(t0 + n) * cd],
                a: &k.a[t0 * hv..(t0 + n) * hv],
                b: &k.b[t0 * hv..(t0 + n) * hv],
            };
            let mut o = vec![0.0; n * hv * c.value_dim];
            run_row(c, &w, chunk, &mut st, &x, &mut o, |_| {});
            out.extend(o);
            t0 += n;
        }
        (out, st)
    }

    /// The recurrence itself (transformers' `torch_recurrent_gated_delta_rule`, in f64), after the same
    /// convolution.
    fn reference(c: &LinearAttnConfig, k: &Case, len: usize) -> Vec<f32> {
        let (cd, kern, hk, hv, dk, dv) = (c.conv_dim(), c.conv_kernel, c.k_heads, c.v_heads, c.key_dim, c.value_dim);
        let mut s = vec![0.0f64; hv * dk * dv];
        let mut out = Vec::new();
        for t in 0..len {
            let y: Vec<f64> = (0..cd)
                .map(|ch| {
                    let acc: f64 = (0..kern)
                        .filter(|i| t + i + 1 >= kern)
                        .map(|i| k.conv[ch * kern + i] as f64 * k.mixed[(t + i + 1 - kern) * cd + ch] as f64)
                        .sum();
                    acc / (1.0 + (-acc).exp())
                })
                .collect();
            let norm = |x: &[f64]| {
                let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() + 1e-6).sqrt();
                x.iter().map(|v| v * inv).collect::<Vec<f64>>()
            };
            for h in 0..hv {
                let kh = h / (hv / hk);
                let q: Vec<f64> = norm(&y[kh * dk..(kh + 1) * dk]).iter().map(|x| x / (dk as f64).sqrt()).collect();
                let kk = norm(&y[hk * dk + kh * dk..hk * dk + (kh + 1) * dk]);
                let v = &y[2 * hk * dk + h * dv..2 * hk * dk + (h + 1) * dv];
                let beta = 1.0 / (1.0 + (-(k.b[t * hv + h] as f64)).exp());
                let xa = k.a[t * hv + h] as f64 + k.bias[h] as f64;
                let g = -(k.rate[h] as f64) * (xa.exp()).ln_1p();
                let sh = &mut s[h * dk * dv..(h + 1) * dk * dv];
                sh.iter_mut().for_each(|e| *e *= g.exp());
                let mem: Vec<f64> = (0..dv).map(|b| (0..dk).map(|a| sh[a * dv + b] * kk[a]).sum()).collect();
                for a in 0..dk {
                    for b in 0..dv {
                        sh[a * dv + b] += kk[a] * (v[b] - mem[b]) * beta;
                    }
                }
                out.extend((0..dv).map(|b| (0..dk).map(|a| sh[a * dv + b] * q[a]).sum::<f64>() as f32));
            }
        }
        out
    }

    #[test]
    fn chunked_form_equals_the_recurrence() {
        let c = cfg();
        let len = 70;
        let k = case(&c, len);
        let want = reference(&c, &k, len);
        for chunk in [1, 4, 16] {
            let (got, st) = run_pieces(&c, &k, chunk, &[len]);
            assert_eq!(st.pos, len);
            let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(err < 2e-5, "chunk {chunk}: max abs error {err}");
        }
    }

    #[test]
    fn grouping_never_changes_a_bit() {
        // one pass, decode-like single tokens, and pieces that start and end off the chunk grid
        let c = cfg();
        let len = 53;
        let k = case(&c, len);
        let (one, st1) = run_pieces(&c, &k, 16, &[len]);
        let (singles, st2) = run_pieces(&c, &k, 16, &vec![1; len]);
        let (mixed, st3) = run_pieces(&c, &k, 16, &[7, 16, 3, 1, 20, 6]);
        assert_eq!(one, singles);
        assert_eq!(one, mixed);
        assert_eq!(st1, st2);
        assert_eq!(st1, st3);
    }

    #[test]
    fn boundaries_report_the_state_at_each_chunk_end() {
        let c = cfg();
        let k = case(&c, 40);
        let w = DeltaWeights { conv: &k.conv, decay_rate: &k.rate, dt_bias: &k.bias };
        let mut st = LayerState::new(&c, 16);
        let mut seen = Vec::new();
        let x = RowInputs { mixed: &k.mixed, a: &k.a, b: &k.b };
        let mut o = vec![0.0; 40 * c.v_heads * c.value_dim];
        run_row(&c, &w, 16, &mut st, &x, &mut o, |s| seen.push(s.clone()));
        assert_eq!(seen.iter().map(|s| s.pos).collect::<Vec<_>>(), vec![16, 32]);
        // resuming from the snapshot at 32 gives the same outputs for tokens 32.. as the straight run
        let mut resumed = seen[1].clone();
        let (hv, cd) = (c.v_heads, c.conv_dim());
        let x2 = RowInputs { mixed: &k.mixed[32 * cd..], a: &k.a[32 * hv..], b: &k.b[32 * hv..] };
        let mut o2 = vec![0.0; 8 * hv * c.value_dim];
        run_row(&c, &w, 16, &mut resumed, &x2, &mut o2, |_| {});
        assert_eq!(&o[32 * hv * c.value_dim..], &o2[..]);
        assert_eq!(resumed, st);
    }
}
