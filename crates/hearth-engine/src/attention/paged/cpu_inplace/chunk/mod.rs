//! One chunk of keys against the queries of a tile that see it: every query's scores, its partial softmax (max
//! and sum of exponentials) and its weighted values. The AVX2+FMA+F16C kernel ([`x86`]) where the CPU has it and
//! the head size is a multiple of 8, plain loops ([`portable`]) otherwise.

#[cfg(target_arch = "x86_64")]
pub(super) mod x86;

use super::elem::KvElem;

/// What the kernels need of a chunk: head size, the queries (offsets into `q`), the keys each sees (a range of
/// `offs`, the key and value head rows in position order: a row's offset is its index times the code's units
/// per head row) and the score transforms.
pub(super) struct Chunk<'a> {
    pub(super) d: usize,
    pub(super) q: &'a [f32],
    pub(super) queries: &'a [(usize, usize)],
    pub(super) spans: &'a [(usize, usize)],
    pub(super) offs: &'a [usize],
    pub(super) scale: f32,
    pub(super) softcap: Option<f32>,
}

/// Keys per sub-block: about 8 KiB of one kv head's keys (or values), which stay in L1 while every query of the
/// chunk passes over them. A multiple of 4; it changes no result (scores are per key, sums run in key order).
pub(super) fn sub_block(d: usize) -> usize {
    (2048 / d.max(1)).clamp(4, 64) / 4 * 4
}

/// Whether the AVX2+FMA+F16C kernels run (checked once).
pub(super) fn fast() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static FAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *FAST.get_or_init(|| {
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The plain-loop version of [`x86::chunk`] (any CPU, any head size).
pub(super) fn portable<K: KvElem, V: KvElem>(
    t: &Chunk,
    kd: &[K],
    vd: &[V],
    sc: &mut [f32],
    acc: &mut [f32],
    res: &mut [(f32, f32)],
) {
    let (d, n) = (t.d, t.offs.len());
    let (ku, vu) = (K::units(d), V::units(d));
    for (k, (&(_, qo), &(a, b))) in t.queries.iter().zip(t.spans).enumerate() {
        let q = &t.q[qo..qo + d];
        let row = &mut sc[k * n + a..k * n + b];
        for (x, &o) in row.iter_mut().zip(&t.offs[a..b]) {
            *x = q.iter().enumerate().map(|(i, x)| x * K::get(&kd[o * ku..], i, d)).sum::<f32>() * t.scale;
            if let Some(cap) = t.softcap {
                *x = (*x / cap).tanh() * cap;
            }
        }
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for x in row.iter_mut() {
            *x = (*x - max).exp();
            sum += *x;
        }
        let o = &mut acc[k * d..(k + 1) * d];
        o.iter_mut().for_each(|x| *x = 0.0);
        for (&w, &off) in row.iter().zip(&t.offs[a..b]) {
            for (i, x) in o.iter_mut().enumerate() {
                *x += w * V::get(&vd[off * vu..], i, d);
            }
        }
        res[k] = (max, sum);
    }
}
