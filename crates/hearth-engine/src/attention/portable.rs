//! The portable attention math: one row's queries against that row's keys with candle's tensor ops, on any device,
//! computed in f32 (candle's reduced-precision CPU softmax accumulates in the low dtype and is wrong). The
//! contiguous store ([`super::ContiguousKv`]) and the paged gather backend ([`super::paged::gather`]) attend with it.

use super::AttnParams;
use crate::Result;
use candle_core::{DType, Device, Tensor};

/// Causal (and optionally sliding-window) mask for `lq` queries starting at position `pos0` over keys at
/// positions `kv_pos0..kv_pos0+lk`, where the positions of each run of `both_ways` ((first, end)) also see each
/// other's later ones (the window still bounds how far back a query sees). Returns (lq, lk) f32 with 0 / -inf, or
/// None when nothing is masked.
pub fn mask(
    lq: usize,
    pos0: usize,
    lk: usize,
    kv_pos0: usize,
    window: Option<usize>,
    both_ways: &[(usize, usize)],
    device: &Device,
) -> Result<Option<Tensor>> {
    let mut any = false;
    let mut m = vec![0f32; lq * lk];
    let run_of = |p: usize| both_ways.iter().position(|&(a, b)| a <= p && p < b);
    for i in 0..lq {
        let p = pos0 + i;
        let run = run_of(p);
        for j in 0..lk {
            let kp = kv_pos0 + j;
            let ahead = kp > p && run.is_some() && run_of(kp) == run;
            let visible = (kp <= p || ahead) && window.is_none_or(|w| kp + w > p);
            if !visible {
                m[i * lk + j] = f32::NEG_INFINITY;
                any = true;
            }
        }
    }
    Ok(if any { Some(Tensor::from_vec(m, (lq, lk), device)?) } else { None })
}

/// q: (Lq, H, D); k, v: (KvH, Lk, D) holding positions kv_pos0.. . Returns (Lq, H*D). `both_ways`: see [`mask`].
pub fn attend_row(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    (pos0, kv_pos0): (usize, usize),
    both_ways: &[(usize, usize)],
    p: &AttnParams,
) -> Result<Tensor> {
    let (lq, h, d) = q.dims3()?;
    let (kvh, lk, _) = k.dims3()?;
    let groups = h / kvh;
    let in_dtype = q.dtype();
    // Heads sharing a kv head are contiguous (HF repeat_kv), so (H, Lq, D) -> (KvH, G*Lq, D) needs no copy of k/v.
    let q = q.transpose(0, 1)?.contiguous()?.to_dtype(DType::F32)?.reshape((kvh, groups * lq, d))?;
    let k = k.to_dtype(DType::F32)?;
    let v = v.to_dtype(DType::F32)?;
    let mut scores = (q.matmul(&k.t()?)? * p.scale)?; // (KvH, G*Lq, Lk)
    if let Some(cap) = p.softcap {
        scores = ((scores / cap)?.tanh()? * cap)?;
    }
    if let Some(m) = mask(lq, pos0, lk, kv_pos0, p.window, both_ways, q.device())? {
        let scores4 = scores.reshape((kvh, groups, lq, lk))?.broadcast_add(&m)?;
        scores = scores4.reshape((kvh, groups * lq, lk))?;
    }
    let probs = match p.sinks.as_deref() {
        None => candle_nn::ops::softmax_last_dim(&scores)?,
        Some(sinks) => {
            // each head's sink as one more key that weighs no value: softmax over [scores, sink], sink dropped
            let col: Vec<f32> = (0..h).flat_map(|head| std::iter::repeat_n(sinks[head], lq)).collect();
            let col = Tensor::from_vec(col, (kvh, groups * lq, 1), q.device())?;
            let probs = candle_nn::ops::softmax_last_dim(&Tensor::cat(&[&scores, &col], 2)?)?;
            probs.narrow(2, 0, lk)?.contiguous()?
        }
    };
    let out = probs.matmul(&v)?; // (KvH, G*Lq, D)
    let out = out.reshape((h, lq, d))?.transpose(0, 1)?.reshape((lq, h * d))?;
    Ok(out.to_dtype(in_dtype)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_and_window_mask() {
        let m = mask(2, 3, 5, 0, Some(2), &[], &Device::Cpu).unwrap().unwrap();
        let m: Vec<Vec<f32>> = m.to_vec2().unwrap();
        // query at pos 3 sees keys 2,3; at pos 4 sees 3,4.
        let vis = |r: &Vec<f32>| r.iter().map(|x| x.is_finite()).collect::<Vec<_>>();
        assert_eq!(vis(&m[0]), vec![false, false, true, true, false]);
        assert_eq!(vis(&m[1]), vec![false, false, false, true, true]);
        assert!(mask(1, 4, 5, 0, None, &[], &Device::Cpu).unwrap().is_none());
    }

    /// A run of positions that attend both ways: its queries see the run's later keys, not the keys after it,
    /// and a window still bounds how far back they see.
    #[test]
    fn runs_attend_both_ways_within_the_window() {
        let m = mask(6, 0, 6, 0, Some(2), &[(1, 4)], &Device::Cpu).unwrap().unwrap();
        let vis: Vec<String> = m
            .to_vec2::<f32>()
            .unwrap()
            .iter()
            .map(|r| r.iter().map(|x| if x.is_finite() { '1' } else { '.' }).collect())
            .collect();
        assert_eq!(vis, ["1.....", "1111..", ".111..", "..11..", "...11.", "....11"]);
    }

    #[test]
    fn attention_matches_naive_gqa() {
        let dev = Device::Cpu;
        let (lq, h, kvh, d, lk) = (2, 4, 2, 3, 3);
        let q = Tensor::arange(0f32, (lq * h * d) as f32, &dev)
            .unwrap()
            .reshape((lq, h, d))
            .unwrap()
            .affine(0.01, 0.0)
            .unwrap();
        let k = Tensor::arange(0f32, (kvh * lk * d) as f32, &dev)
            .unwrap()
            .reshape((kvh, lk, d))
            .unwrap()
            .affine(-0.02, 0.1)
            .unwrap();
        let v = Tensor::arange(0f32, (kvh * lk * d) as f32, &dev)
            .unwrap()
            .reshape((kvh, lk, d))
            .unwrap()
            .affine(0.03, -0.2)
            .unwrap();
        let p = AttnParams { scale: 0.5, window: None, softcap: None, sinks: None };
        let out = attend_row(&q, &k, &v, (1, 0), &[], &p).unwrap().to_vec2::<f32>().unwrap();
        let (qv, kv, vv) = (q.to_vec3::<f32>().unwrap(), k.to_vec3::<f32>().unwrap(), v.to_vec3::<f32>().unwrap());
        for i in 0..lq {
            for hh in 0..h {
                let g = hh / (h / kvh);
                let visible = 1 + i + 1; // pos0 = 1
                let s: Vec<f32> =
                    (0..visible).map(|j| (0..d).map(|x| qv[i][hh][x] * kv[g][j][x]).sum::<f32>() * 0.5).collect();
                let mx = s.iter().cloned().fold(f32::MIN, f32::max);
                let e: Vec<f32> = s.iter().map(|x| (x - mx).exp()).collect();
                let z: f32 = e.iter().sum();
                for x in 0..d {
                    let want: f32 = (0..visible).map(|j| e[j] / z * vv[g][j][x]).sum();
                    assert!((out[i][hh * d + x] - want).abs() < 1e-5);
                }
            }
        }
    }
}
