//! The chunk kernel with AVX2, FMA and F16C: scores four keys by two queries at a time, a vectorized `exp`, the
//! weighted values in register-held column blocks.

use super::KvElem;
use crate::cpu_simd::{exp8, hsum};
use core::arch::x86_64::*;

/// The scores of one query against four key rows, each reduced by the same tree.
#[inline(always)]
unsafe fn dot4<E: KvElem>(qh: *const f32, k: [*const E; 4], d: usize) -> __m128 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut c = 0;
    while c < d {
        // one run of values under one scale (a whole row for float rows)
        let s = [E::scale8(k[0], c, d), E::scale8(k[1], c, d), E::scale8(k[2], c, d), E::scale8(k[3], c, d)];
        let end = d.min(c.saturating_add(E::RUN));
        while c < end {
            let qv = _mm256_loadu_ps(qh.add(c));
            for ((a, kr), s) in acc.iter_mut().zip(k).zip(s) {
                *a = _mm256_fmadd_ps(qv, E::load8_scaled(kr, c, s), *a);
            }
            c += 8;
        }
    }
    reduce4(acc)
}

/// The scores of two queries against four key rows (eight independent accumulators), each reduced by the
/// same tree as [`dot4`]: a score does not depend on which query it was paired with.
#[inline(always)]
unsafe fn dot2x4<E: KvElem>(q: [*const f32; 2], k: [*const E; 4], d: usize) -> [__m128; 2] {
    let mut a0 = [_mm256_setzero_ps(); 4];
    let mut a1 = [_mm256_setzero_ps(); 4];
    let mut c = 0;
    while c < d {
        let s = [E::scale8(k[0], c, d), E::scale8(k[1], c, d), E::scale8(k[2], c, d), E::scale8(k[3], c, d)];
        let end = d.min(c.saturating_add(E::RUN));
        while c < end {
            let (q0, q1) = (_mm256_loadu_ps(q[0].add(c)), _mm256_loadu_ps(q[1].add(c)));
            for x in 0..4 {
                let kv = E::load8_scaled(k[x], c, s[x]);
                a0[x] = _mm256_fmadd_ps(q0, kv, a0[x]);
                a1[x] = _mm256_fmadd_ps(q1, kv, a1[x]);
            }
            c += 8;
        }
    }
    [reduce4(a0), reduce4(a1)]
}

/// The four lane sums of four accumulators, by one fixed tree.
#[inline(always)]
unsafe fn reduce4(a: [__m256; 4]) -> __m128 {
    let h = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h))
}

/// Queries in a chunk from which its keys and values are widened to f32 once, into a per-thread scratch, before
/// the queries pass over them (below, each query widens each row it reads: `vcvtph2ps` takes a port the FMAs
/// need, and a q8_0 row costs more). Widening is exact, so the results are bit-identical either way; a decoding
/// row brings only its query heads per kv head, for which the extra copy does not pay (q8_0 rows from 2 queries
/// widened: SmolLM2 at 4k decoded 0.84× the f16 cache, against 1.05× without).
const WIDEN_MIN_QUERIES: usize = 8;

thread_local! {
    /// This thread's widened keys then values of one chunk, and their row offsets.
    static WIDE: std::cell::RefCell<(Vec<f32>, Vec<usize>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// [`chunk_rows`] on the chunk's keys and values, widened first to f32 where the cache keeps a narrower type and
/// enough queries share the chunk.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn chunk<K: KvElem, V: KvElem>(
    t: &super::Chunk,
    kd: &[K],
    vd: &[V],
    sc: &mut [f32],
    acc: &mut [f32],
    res: &mut [(f32, f32)],
) {
    let float = |size: usize| size == std::mem::size_of::<f32>();
    if (float(std::mem::size_of::<K>()) && float(std::mem::size_of::<V>())) || t.queries.len() < WIDEN_MIN_QUERIES {
        return chunk_rows(t, kd, vd, sc, acc, res);
    }
    let (d, n) = (t.d, t.offs.len());
    let (ku, vu) = (K::units(d), V::units(d));
    let taken = WIDE.with(|cell| std::mem::take(&mut *cell.borrow_mut()));
    let (mut wide, mut offs) = taken;
    wide.resize(2 * n * d, 0.0);
    offs.clear();
    let (kp, vp, wp) = (kd.as_ptr(), vd.as_ptr(), wide.as_mut_ptr());
    for (i, &o) in t.offs.iter().enumerate() {
        let mut c = 0;
        while c < d {
            _mm256_storeu_ps(wp.add(i * d + c), K::load8(kp.add(o * ku), c, d));
            _mm256_storeu_ps(wp.add((n + i) * d + c), V::load8(vp.add(o * vu), c, d));
            c += 8;
        }
        offs.push(i);
    }
    let (wk, wv) = wide.split_at(n * d);
    let widened = super::Chunk { offs: &offs, ..*t };
    chunk_rows::<f32, f32>(&widened, wk, wv, sc, acc, res);
    WIDE.with(|cell| *cell.borrow_mut() = (wide, offs));
}

/// Every query of a chunk against the keys it sees, in L1-sized sub-blocks of keys: first the scores (each
/// sub-block's keys, four at a time, against the queries two at a time; a key past the end is a copy of the
/// last), then per query its max, exp(s − max) and sum over its own keys, then the weighted values (per
/// sub-block, each query's accumulators loaded, fed in key order and stored back: 64 columns in eight
/// registers at a time, then 8). Every query's arithmetic is the same whichever queries share the chunk.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn chunk_rows<K: KvElem, V: KvElem>(
    t: &super::Chunk,
    kd: &[K],
    vd: &[V],
    sc: &mut [f32],
    acc: &mut [f32],
    res: &mut [(f32, f32)],
) {
    let (d, n, nq) = (t.d, t.offs.len(), t.queries.len());
    let (ku, vu) = (K::units(d), V::units(d));
    let (kp, vp, qp) = (kd.as_ptr(), vd.as_ptr(), t.q.as_ptr());
    let sb = super::sub_block(d);
    let scale = _mm_set1_ps(t.scale);
    let put = |sc: &mut [f32], k: usize, j: usize, v: __m128| {
        let mut four = [0f32; 4];
        _mm_storeu_ps(four.as_mut_ptr(), _mm_mul_ps(v, scale));
        let to = (j + 4).min(n);
        sc[k * n + j..k * n + to].copy_from_slice(&four[..to - j]);
    };
    // 1. scores of every query against every key of the chunk (the unseen ones are ignored below)
    let mut s0 = 0;
    while s0 < n {
        let s1 = (s0 + sb).min(n);
        let mut k = 0;
        while k < nq {
            let q0 = qp.add(t.queries[k].1);
            let mut j = s0;
            while j < s1 {
                let at = |x: usize| kp.add(t.offs[(j + x).min(n - 1)] * ku);
                let keys = [at(0), at(1), at(2), at(3)];
                if k + 1 < nq {
                    let [v0, v1] = dot2x4([q0, qp.add(t.queries[k + 1].1)], keys, d);
                    put(sc, k, j, v0);
                    put(sc, k + 1, j, v1);
                } else {
                    put(sc, k, j, dot4(q0, keys, d));
                }
                j += 4;
            }
            k += 2;
        }
        s0 = s1;
    }
    // 2. each query's softmax over its own keys
    for (k, &(a, b)) in t.spans.iter().enumerate() {
        let row = &mut sc[k * n + a..k * n + b];
        if let Some(cap) = t.softcap {
            row.iter_mut().for_each(|x| *x = (*x / cap).tanh() * cap);
        }
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        res[k] = (max, exp_sub_sum(row, max));
    }
    // 3. values
    acc[..nq * d].iter_mut().for_each(|x| *x = 0.0);
    let mut s0 = 0;
    while s0 < n {
        let s1 = (s0 + sb).min(n);
        for (k, &(a, b)) in t.spans.iter().enumerate() {
            let (a, b) = (a.max(s0), b.min(s1));
            if a >= b {
                continue;
            }
            let (w, offs) = (&sc[k * n + a..k * n + b], &t.offs[a..b]);
            let o = acc.as_mut_ptr().add(k * d);
            let mut c = 0;
            while c + 64 <= d {
                values::<8, V>(w, offs, vp, (c, d, vu), o.add(c));
                c += 64;
            }
            while c < d {
                values::<1, V>(w, offs, vp, (c, d, vu), o.add(c));
                c += 8;
            }
        }
        s0 = s1;
    }
}

/// `o[..8·W] += Σ_j w_j · v_j` over 8·W columns from column `c` of the value rows (row j at `vp` + its index
/// times `units`, `d` values a row), in key order, W accumulators kept in registers between the load and the store
/// of `o`.
#[inline(always)]
unsafe fn values<const W: usize, E: KvElem>(
    w: &[f32],
    offs: &[usize],
    vp: *const E,
    (c, d, units): (usize, usize, usize),
    o: *mut f32,
) {
    let mut acc: [__m256; W] = std::array::from_fn(|x| _mm256_loadu_ps(o.add(8 * x)));
    // The 8·W columns lie in one run under one scale, or (runs shorter than 8·W: q4_0's 32) each group of 8 in
    // one: a float row is one run, and a quantized row's head size is a multiple of its runs
    // (`KvEncoding::unfit`), walked with W = 8 from multiples of 64.
    let one_run = E::RUN >= 8 * W;
    debug_assert!(!one_run || c % E::RUN.min(d) + 8 * W <= E::RUN.min(d));
    for (&w, &off) in w.iter().zip(offs) {
        let wv = _mm256_set1_ps(w);
        let vr = vp.add(off * units);
        let s = E::scale8(vr, c, d);
        for (x, acc) in acc.iter_mut().enumerate() {
            let s = if one_run { s } else { E::scale8(vr, c + 8 * x, d) };
            *acc = _mm256_fmadd_ps(wv, E::load8_scaled(vr, c + 8 * x, s), *acc);
        }
    }
    for (x, a) in acc.iter().enumerate() {
        _mm256_storeu_ps(o.add(8 * x), *a);
    }
}

/// x ← exp(x - max); returns Σ x (vector lanes, then the tail, in a fixed order).
#[target_feature(enable = "avx2,fma")]
pub unsafe fn exp_sub_sum(x: &mut [f32], max: f32) -> f32 {
    let n = x.len();
    let p = x.as_mut_ptr();
    let m = _mm256_set1_ps(max);
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), m));
        _mm256_storeu_ps(p.add(i), e);
        acc = _mm256_add_ps(acc, e);
        i += 8;
    }
    if i < n {
        let mut tail = [f32::NEG_INFINITY; 8];
        tail[..n - i].copy_from_slice(&x[i..]);
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(tail.as_ptr()), m));
        _mm256_storeu_ps(tail.as_mut_ptr(), e);
        x[i..].copy_from_slice(&tail[..n - i]);
        acc = _mm256_add_ps(acc, e);
    }
    hsum(acc)
}
