//! The chunk-aligned delta rule against the plain recurrence, and its grouping invariance, captures and undo.

use super::delta::*;
use crate::weights::config::LinearAttnConfig;

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
    case_seeded(c, len, 0)
}

/// The same weights, token inputs drawn from `seed`.
fn case_seeded(c: &LinearAttnConfig, len: usize, seed: u32) -> Case {
    Case {
        conv: noise(c.conv_dim() * c.conv_kernel, 1),
        rate: noise(c.v_heads, 2).iter().map(|x| 0.5 + 2.0 * x.abs()).collect(),
        bias: noise(c.v_heads, 3),
        mixed: noise(len * c.conv_dim(), 4 + seed).iter().map(|x| 3.0 * x).collect(),
        a: noise(len * c.v_heads, 5 + seed),
        b: noise(len * c.v_heads, 6 + seed).iter().map(|x| 3.0 * x).collect(),
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
        run_row(c, &w, chunk, &mut st, &x, &mut o, &[], false);
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
fn captures_are_the_state_at_chunk_ends() {
    let c = cfg();
    let k = case(&c, 40);
    let w = DeltaWeights { conv: &k.conv, decay_rate: &k.rate, dt_bias: &k.bias };
    let mut st = LayerState::new(&c, 16);
    let x = RowInputs { mixed: &k.mixed, a: &k.a, b: &k.b };
    let mut o = vec![0.0; 40 * c.v_heads * c.value_dim];
    // 8 is off the chunk grid and 48 beyond the row: neither is captured
    let seen = run_row(&c, &w, 16, &mut st, &x, &mut o, &[8, 16, 32, 48], false);
    assert_eq!(seen.iter().map(|s| s.pos).collect::<Vec<_>>(), vec![16, 32]);
    // resuming from the capture at 32 gives the same outputs for tokens 32.. as the straight run
    let mut resumed = seen[1].clone();
    let (hv, cd) = (c.v_heads, c.conv_dim());
    let x2 = RowInputs { mixed: &k.mixed[32 * cd..], a: &k.a[32 * hv..], b: &k.b[32 * hv..] };
    let mut o2 = vec![0.0; 8 * hv * c.value_dim];
    run_row(&c, &w, 16, &mut resumed, &x2, &mut o2, &[], false);
    assert_eq!(&o[32 * hv * c.value_dim..], &o2[..]);
    assert_eq!(resumed, st);
    // and a run cut at 32 ends in the captured state
    let (_, st32) = run_pieces(&c, &k, 16, &[7, 25]);
    assert_eq!(st32, seen[1]);
    // a snapshot's bytes give it back (without its chunk buffers), and only at its own shape
    let mut bytes = Vec::new();
    seen[1].write_snapshot(&mut bytes);
    assert_eq!(LayerState::read_snapshot(&c, 32, &bytes), Some(seen[1].clone().compact()));
    assert_eq!(LayerState::read_snapshot(&c, 32, &bytes[4..]), None);
}

#[test]
fn a_speculative_step_rolls_back_to_any_position_in_it() {
    // the true tokens, and drafts the verification rejects after position q (the step 10..22 folds at 16)
    let c = cfg();
    let (t, d) = (case(&c, 40), case_seeded(&c, 40, 9));
    let w = DeltaWeights { conv: &t.conv, decay_rate: &t.rate, dt_bias: &t.bias };
    let (hv, cd, dv) = (c.v_heads, c.conv_dim(), c.value_dim);
    let (straight, want) = run_pieces(&c, &t, 16, &[40]);
    for q in [10, 13, 16, 20, 22] {
        let mut st = run_pieces(&c, &t, 16, &[10]).1;
        let pick = |v: &[f32], k: &[f32], n: usize| -> Vec<f32> {
            (10..22)
                .flat_map(|p| if p < q { &v[p * n..(p + 1) * n] } else { &k[p * n..(p + 1) * n] })
                .copied()
                .collect()
        };
        let (mixed, a, b) = (pick(&t.mixed, &d.mixed, cd), pick(&t.a, &d.a, hv), pick(&t.b, &d.b, hv));
        let mut o = vec![0.0; 12 * hv * dv];
        run_row(&c, &w, 16, &mut st, &RowInputs { mixed: &mixed, a: &a, b: &b }, &mut o, &[], true);
        assert!(st.rollback(&c, q), "q {q}");
        let x = RowInputs { mixed: &t.mixed[q * cd..], a: &t.a[q * hv..], b: &t.b[q * hv..] };
        let mut rest = vec![0.0; (40 - q) * hv * dv];
        run_row(&c, &w, 16, &mut st, &x, &mut rest, &[], false);
        assert_eq!(&rest[..], &straight[q * hv * dv..], "outputs after rolling back to {q}");
        assert_eq!(st, want, "state after rolling back to {q}");
    }
}
