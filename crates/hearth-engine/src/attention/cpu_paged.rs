//! Attention in place on the CPU: each query token reads its row's keys and values straight from the paged
//! blocks (no gather, no padded sub-blocks), in f32, with the work split over candle's barrier pool (the threads
//! the quantized matmuls use, so the two never fight over the cores).
//!
//! A token's arithmetic depends only on its own query and the keys and values at the positions it sees: the keys
//! are walked in position order, the scores' maximum, exponentials and sum and the weighted sum of values are
//! computed in one fixed order, whatever the step, batch, piece or prompt-cache hit. A prompt token and the same
//! token decoded one at a time therefore give bit-identical results (batch invariance for free), and so do the K/V
//! rows a later prompt-cache hit reuses.
//!
//! Per (token, kv head) work item: the scores of the group's query heads against every visible key (one pass over
//! the keys, each key row loaded once for the whole group), softmax, then the values (one pass per head). The
//! scores of a token fit a scratch row (4 bytes a key), so no online rescaling is needed: the keys and the values
//! are each read once per item. AVX2+FMA with a vectorized `exp` where the CPU has them, plain loops otherwise.

use super::paged_gather::write_row;
use super::{AttnParams, BatchContext};
use crate::kernels::{par_chunks, Pool};
use crate::kv::PagedKv;
use crate::{Error, Result};
use candle_core::{CpuStorage, DType, Storage, Tensor};
use std::cell::RefCell;

/// Whether this backend serves a KV cache of `dtype` on `device` (f32 on the CPU).
pub fn supports(dtype: DType, device: &candle_core::Device) -> bool {
    device.is_cpu() && dtype == DType::F32
}

/// Append this step's k/v of every row of `ctx` at `layer` and attend. `q`: (T, H, D), `k`/`v`: (T, KvH, D).
pub fn attend(
    kv: &PagedKv,
    layer: usize,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    ctx: &BatchContext,
    p: &AttnParams,
) -> Result<Tensor> {
    for row in &ctx.rows {
        write_row(kv, layer, k, v, row)?;
    }
    let (t, h, d) = q.dims3()?;
    let (_, kvh, _) = k.dims3()?;
    if kvh == 0 || h % kvh != 0 {
        return Err(Error::InvalidRequest(format!("{h} query heads do not group over {kvh} kv heads")));
    }
    let qf = q.to_dtype(DType::F32)?.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let (kbuf, vbuf) = kv.layer(layer)?;
    let (ks, kl) = kbuf.storage_and_layout();
    let (vs, vl) = vbuf.storage_and_layout();
    let (Storage::Cpu(CpuStorage::F32(kd)), Storage::Cpu(CpuStorage::F32(vd))) = (&*ks, &*vs) else {
        return Err(Error::Unsupported("in-place CPU attention needs an f32 KV cache on the CPU".into()));
    };
    let (kd, vd) = (&kd[kl.start_offset()..], &vd[vl.start_offset()..]);
    // Every token's block table and position, in packing order; each row's table checked once against its last
    // position and the buffers (the kernels then index without checks).
    let bs = kv.block_size();
    let rows_held = kd.len() / (kvh * d);
    let mut tokens = Vec::with_capacity(t);
    for row in &ctx.rows {
        let table = kv.table(row.slot)?;
        let last = row.pos0 + row.len - 1;
        if table.len() * bs <= last || table.iter().any(|&b| (b as usize + 1) * bs > rows_held) {
            return Err(Error::InvalidRequest(format!("position {last} is outside its block table")));
        }
        tokens.extend((0..row.len).map(|i| (table, row.pos0 + i)));
    }
    if tokens.len() != t {
        return Err(Error::InvalidRequest(format!("{t} queries for {} packed tokens", tokens.len())));
    }
    let shape = Shape { kv_heads: kvh, dim: d, block_size: bs };
    let mut out = vec![0f32; t * h * d];
    let out_ptr = SharedOut(out.as_mut_ptr());
    let isa = fast();
    let groups = h / kvh;
    // Work items: up to TILE consecutive tokens of one row and one kv head, ordered so that the items sharing a
    // row's keys and values of one kv head are neighbours (each thread takes a run of items).
    let mut items = Vec::new();
    for row in &ctx.rows {
        for g in 0..kvh {
            items.extend((0..row.len).step_by(TILE).map(|i| (row.start + i, TILE.min(row.len - i), g)));
        }
    }
    par_chunks(Pool::Candle, items.len(), 1, |range| {
        for &(t0, count, g) in &items[range] {
            let table = tokens[t0].0;
            let span = |pos: usize| (p.window.map_or(0, |w| (pos + 1).saturating_sub(w)), pos + 1);
            let (lo, _) = span(tokens[t0].1);
            let (_, hi) = span(tokens[t0 + count - 1].1);
            let keys = Keys { table, lo, hi, g };
            let tile: Vec<(usize, usize)> = (t0..t0 + count).map(|ti| span(tokens[ti].1)).collect();
            let q_at = |ti: usize| (ti * h + g * groups) * d;
            token_tile(&shape, groups, &qf, q_at(t0), h * d, &tile, kd, vd, &keys, p, isa, |i, o| {
                // SAFETY: item (tokens t0.., kv head g) alone writes heads g*groups..(g+1)*groups of its
                // tokens: the ranges of different items are disjoint, and `out` outlives the parallel loop.
                let dst = unsafe { std::slice::from_raw_parts_mut(out_ptr.at(q_at(t0 + i)), groups * d) };
                dst.copy_from_slice(o);
            });
        }
    });
    drop((ks, vs));
    Ok(Tensor::from_vec(out, (t, h * d), q.device())?.to_dtype(q.dtype())?)
}

/// Tokens per work item: their queries share each key row loaded from memory.
const TILE: usize = 4;

struct Shape {
    kv_heads: usize,
    dim: usize,
    block_size: usize,
}

/// The keys one work item sees: positions lo..hi of kv head `g` of a row's blocks.
struct Keys<'a> {
    table: &'a [u32],
    lo: usize,
    hi: usize,
    g: usize,
}

impl Keys<'_> {
    /// Offset of position `pos`'s row (kv head `g`) in a layer buffer.
    #[inline(always)]
    fn offset(&self, s: &Shape, pos: usize) -> usize {
        let row = self.table[pos / s.block_size] as usize * s.block_size + pos % s.block_size;
        (row * s.kv_heads + self.g) * s.dim
    }
}

/// The output buffer shared by the work items, each writing its own disjoint range.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: the items write disjoint ranges (see `attend`).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    fn at(self, i: usize) -> *mut f32 {
        // SAFETY: callers stay within the buffer (`attend` sizes it for every item).
        unsafe { self.0.add(i) }
    }
}

/// Per-thread buffers of a work item: its keys' row offsets, its queries, each query's keys, their scores
/// (queries × keys) and the outputs.
#[derive(Default)]
struct Scratch {
    offsets: Vec<usize>,
    queries: Vec<f32>,
    spans: Vec<(usize, usize)>,
    scores: Vec<f32>,
    out: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Whether the AVX2+FMA kernels run (checked once).
fn fast() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static FAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *FAST.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A tile of consecutive tokens of one row (`tile`: each token's visible key positions lo..hi, within `keys`), the
/// `groups` query heads of kv head `keys.g` each (token i's at `q[q0 + i * stride..]`); `emit(i, out)` receives
/// token i's groups × D outputs.
#[allow(clippy::too_many_arguments)]
fn token_tile(
    s: &Shape,
    groups: usize,
    q: &[f32],
    q0: usize,
    stride: usize,
    tile: &[(usize, usize)],
    kd: &[f32],
    vd: &[f32],
    keys: &Keys,
    p: &AttnParams,
    isa: bool,
    mut emit: impl FnMut(usize, &[f32]),
) {
    let d = s.dim;
    let n = keys.hi - keys.lo;
    SCRATCH.with(|sc| {
        let mut sc = sc.borrow_mut();
        let Scratch { scores, offsets, queries, spans, out } = &mut *sc;
        offsets.clear();
        offsets.extend((keys.lo..keys.hi).map(|pos| keys.offset(s, pos)));
        queries.clear();
        spans.clear();
        for (i, &(lo, hi)) in tile.iter().enumerate() {
            queries.extend_from_slice(&q[q0 + i * stride..q0 + i * stride + groups * d]);
            spans.extend(std::iter::repeat_n((lo - keys.lo, hi - keys.lo), groups));
        }
        scores.clear();
        scores.resize(spans.len() * n, 0.0);
        out.clear();
        out.resize(spans.len() * d, 0.0);
        let (scale, softcap) = (p.scale as f32, p.softcap.map(|c| c as f32));
        let args = Tile { d, offs: offsets, spans, scale, softcap };
        #[cfg(target_arch = "x86_64")]
        if isa && d.is_multiple_of(8) {
            // SAFETY: `isa` is true only where AVX2 and FMA were detected; every offset + D is within kd/vd
            // (`attend` checked the block tables against the buffers), and the buffers have the sizes above.
            unsafe { x86::tile(&args, queries, kd, vd, scores, out) };
        } else {
            portable(&args, queries, kd, vd, scores, out);
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = isa;
            portable(&args, queries, kd, vd, scores, out);
        }
        for (i, o) in out.chunks_exact(groups * d).enumerate() {
            emit(i, o);
        }
    });
}

/// What the kernels need of a tile: head size, the row offset of each key (in position order), each query's
/// visible keys as a range of those, and the score transforms.
struct Tile<'a> {
    d: usize,
    offs: &'a [usize],
    spans: &'a [(usize, usize)],
    scale: f32,
    softcap: Option<f32>,
}

/// The plain-loop version of [`x86::tile`] (any CPU, any head size).
fn portable(t: &Tile, q: &[f32], kd: &[f32], vd: &[f32], sc: &mut [f32], out: &mut [f32]) {
    let (d, n) = (t.d, t.offs.len());
    for (i, &(a, b)) in t.spans.iter().enumerate() {
        let qh = &q[i * d..(i + 1) * d];
        let row = &mut sc[i * n + a..i * n + b];
        for (x, &o) in row.iter_mut().zip(&t.offs[a..b]) {
            *x = qh.iter().zip(&kd[o..o + d]).map(|(x, y)| x * y).sum::<f32>() * t.scale;
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
        let o = &mut out[i * d..(i + 1) * d];
        for (&w, &off) in row.iter().zip(&t.offs[a..b]) {
            for (x, y) in o.iter_mut().zip(&vd[off..off + d]) {
                *x += w * y;
            }
        }
        o.iter_mut().for_each(|x| *x /= sum);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use crate::kernels::cpu::x86::{exp8, hsum};
    use core::arch::x86_64::*;

    /// The scores of one query against four key rows, each reduced by the same tree.
    #[inline(always)]
    unsafe fn dot4(qh: *const f32, k: [*const f32; 4], d: usize) -> __m128 {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut c = 0;
        while c < d {
            let qv = _mm256_loadu_ps(qh.add(c));
            for (a, kr) in acc.iter_mut().zip(k) {
                *a = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kr.add(c)), *a);
            }
            c += 8;
        }
        let h = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
        _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h))
    }

    /// A tile's queries against their keys in three passes: scores (key rows four at a time, each loaded once
    /// for every query of the tile that sees one of them), softmax, and the values (64 columns at a time in
    /// eight accumulators). A key's score is the same whichever four it was computed with (a key past the end
    /// of the list is a copy of the last one), and each query's softmax and weighted sum run over its own keys
    /// in position order: a token's result depends on nothing but its inputs.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile(t: &super::Tile, q: &[f32], kd: &[f32], vd: &[f32], sc: &mut [f32], out: &mut [f32]) {
        let (d, n) = (t.d, t.offs.len());
        let (kp, vp, qp) = (kd.as_ptr(), vd.as_ptr(), q.as_ptr());
        let scale = _mm_set1_ps(t.scale);
        // 1. scores
        let mut j = 0;
        while j < n {
            let at = |x: usize| kp.add(t.offs[(j + x).min(n - 1)]);
            let k = [at(0), at(1), at(2), at(3)];
            let mut four = [0f32; 4];
            for (i, &(a, b)) in t.spans.iter().enumerate() {
                if j + 4 <= a || j >= b {
                    continue;
                }
                _mm_storeu_ps(four.as_mut_ptr(), _mm_mul_ps(dot4(qp.add(i * d), k, d), scale));
                let row = &mut sc[i * n..(i + 1) * n];
                let (from, to) = (j.max(a), (j + 4).min(b));
                row[from..to].copy_from_slice(&four[from - j..to - j]);
            }
            j += 4;
        }
        for (i, &(a, b)) in t.spans.iter().enumerate() {
            let row = &mut sc[i * n + a..i * n + b];
            if let Some(cap) = t.softcap {
                row.iter_mut().for_each(|x| *x = (*x / cap).tanh() * cap);
            }
            // 2. softmax
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let inv = _mm256_set1_ps(1.0 / exp_sub_sum(row, max));
            // 3. values, 64 columns (8 accumulators) at a time, then 8
            let o = out.as_mut_ptr().add(i * d);
            let offs = &t.offs[a..b];
            let mut c = 0;
            while c + 64 <= d {
                let acc = values::<8>(row, offs, vp.add(c));
                for (x, acc) in acc.iter().enumerate() {
                    _mm256_storeu_ps(o.add(c + 8 * x), _mm256_mul_ps(*acc, inv));
                }
                c += 64;
            }
            while c < d {
                let [acc] = values::<1>(row, offs, vp.add(c));
                _mm256_storeu_ps(o.add(c), _mm256_mul_ps(acc, inv));
                c += 8;
            }
        }
    }

    /// Σ_j w_j · v_j over 8·W columns starting at `vp` (+ each key's row offset), W accumulators kept in registers.
    #[inline(always)]
    unsafe fn values<const W: usize>(w: &[f32], offs: &[usize], vp: *const f32) -> [__m256; W] {
        let mut acc = [_mm256_setzero_ps(); W];
        for (&w, &off) in w.iter().zip(offs) {
            let wv = _mm256_set1_ps(w);
            let vr = vp.add(off);
            for (x, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(vr.add(8 * x)), *acc);
            }
        }
        acc
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::paged_gather;
    use crate::attention::test_util::{self, rnd, Attend};
    use candle_core::Device;

    fn run(f: Attend, qkv: [&Tensor; 3], pieces: &[(usize, usize)], p: &AttnParams) -> Vec<Vec<f32>> {
        test_util::run(f, qkv, pieces, p, pieces.iter().all(|&(_, l)| l == 1))
    }

    /// Matches the gather backend (candle's matmul and softmax) to f32 rounding, for full, sliding-window and
    /// soft-capped attention, GQA and MHA, head sizes with and without a multiple of 8; and a token's result is
    /// bit-identical however its prompt was cut (one piece, after a hit anywhere, or decoded one at a time).
    #[test]
    fn matches_the_gather_backend_and_is_the_same_for_any_cut() {
        for (h, kvh, d) in [(4, 2, 16), (3, 3, 8), (2, 1, 12)] {
            let n = 70;
            let (q, k, v) = (rnd((n, h, d), 0.1), rnd((n, kvh, d), 0.2), rnd((n, kvh, d), 0.3));
            for (window, softcap) in [(None, None), (Some(20), None), (None, Some(5.0))] {
                let p = AttnParams { scale: 0.35, window, softcap };
                let want = run(paged_gather::attend, [&q, &k, &v], &[(0, n)], &p);
                let got = run(attend, [&q, &k, &v], &[(0, n)], &p);
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    for (x, y) in a.iter().zip(b) {
                        assert!((x - y).abs() < 2e-5, "token {i}: {x} vs {y} ({h}/{kvh}/{d}, {window:?} {softcap:?})");
                    }
                }
                let decoded: Vec<(usize, usize)> = (0..n).map(|i| (i, 1)).collect();
                for pieces in [vec![(0, 17), (17, 53)], vec![(0, 64), (64, 6)], decoded] {
                    assert_eq!(run(attend, [&q, &k, &v], &pieces, &p), got, "{pieces:?}");
                }
            }
        }
    }

    /// Rows packed together (a decode row between two prompt pieces) get what each gets alone.
    #[test]
    fn packed_rows_attend_their_own_blocks() {
        let dev = Device::Cpu;
        let (h, kvh, d, n) = (4, 2, 16, 40);
        let (q, k, v) = (rnd((n, h, d), 0.4), rnd((n, kvh, d), 0.5), rnd((n, kvh, d), 0.6));
        let p = AttnParams { scale: 0.3, window: None, softcap: None };
        let alone = run(attend, [&q, &k, &v], &[(0, n)], &p);
        let mut kv = PagedKv::new(1, 9, 16, kvh, d, DType::F32, &dev).unwrap();
        let (ta, tb, tc) = ([0u32, 1, 2], [5u32, 4, 3], [8u32, 7, 6]);
        kv.set_tables([(0usize, &ta[..]), (1, &tb[..]), (2, &tc[..])]);
        // Step 1: rows 0 and 2 compute 39 prompt tokens, row 1 computes 21.
        let part = |t: &Tensor, a: usize, l: usize| t.narrow(0, a, l).unwrap();
        let cat = |t: &Tensor, spans: &[(usize, usize)]| {
            Tensor::cat(&spans.iter().map(|&(a, l)| part(t, a, l)).collect::<Vec<_>>(), 0).unwrap()
        };
        let step1 = [(0, 39), (0, 21), (0, 39)];
        let ctx = BatchContext::new(&[(0, 0, 39), (1, 0, 21), (2, 0, 39)], false, &dev).unwrap();
        let o1 = attend(&kv, 0, &cat(&q, &step1), &cat(&k, &step1), &cat(&v, &step1), &ctx, &p).unwrap();
        // Step 2: row 0 decodes its last token, row 1 the rest of its prompt, row 2 its last token.
        let step2 = [(39, 1), (21, 19), (39, 1)];
        let ctx = BatchContext::new(&[(0, 39, 1), (1, 21, 19), (2, 39, 1)], false, &dev).unwrap();
        let o2 = attend(&kv, 0, &cat(&q, &step2), &cat(&k, &step2), &cat(&v, &step2), &ctx, &p).unwrap();
        let (o1, o2) = (o1.to_vec2::<f32>().unwrap(), o2.to_vec2::<f32>().unwrap());
        let row0: Vec<_> = o1[..39].iter().chain(&o2[..1]).cloned().collect();
        let row1: Vec<_> = o1[39..60].iter().chain(&o2[1..20]).cloned().collect();
        let row2: Vec<_> = o1[60..].iter().chain(&o2[20..]).cloned().collect();
        assert_eq!((&row0, &row1, &row2), (&alone, &alone, &alone));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_vector_exp_is_close_to_libm() {
        if !fast() {
            eprintln!("no AVX2+FMA: the vector exp is not used on this CPU");
            return;
        }
        let mut x: Vec<f32> = (0..203).map(|i| -90.0 + i as f32 * 0.45).collect();
        let want: Vec<f32> = x.iter().map(|v| (v - 1.5).exp()).collect();
        // SAFETY: fast() checked AVX2 and FMA.
        let sum = unsafe { x86::exp_sub_sum(&mut x, 1.5) };
        for (a, b) in x.iter().zip(&want) {
            // Below e^-87.3 (subnormal results) the vector exp flushes to 0.
            assert!((a - b).abs() <= 4.0 * f32::EPSILON * b.abs() + 2e-38, "{a} vs {b}");
        }
        assert!((sum - want.iter().sum::<f32>()).abs() < 1e-5 * sum);
    }
}
