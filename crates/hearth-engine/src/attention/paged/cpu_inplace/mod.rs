//! Attention in place on the CPU: each query token reads its row's keys and values straight from the paged
//! blocks (no gather, no padded sub-blocks), kept in f32 or f16 and computed in f32, with the work split over
//! hearth's work pool (the threads the quantized matmuls use, so the two never fight over the cores).
//!
//! Keys are taken in **chunks** of [`chunk_keys`] positions aligned to absolute positions (a fixed function of
//! the head size). Per query and chunk the kernel computes a partial softmax — the chunk's maximum score `m`, the
//! sum `l` of `exp(s − m)` and the unnormalized weighted sum of values — and the partials are folded in chunk
//! order (online softmax, as flash attention does). A chunk's keys and values are loaded once for all the queries
//! of a tile of tokens, so they stay in cache while the queries pass over them.
//!
//! A token's arithmetic depends only on its own query and the keys and values at the positions it sees: the
//! chunk boundaries, the order inside a chunk and the fold are fixed, whatever the step, batch, piece,
//! prompt-cache hit or thread count. When there are too few (tile, kv head) units to keep every thread busy — one
//! decoding row at a long context — the chunks of a unit are split over threads and their partials stored, then
//! folded in the same order: a prompt token and the same token decoded one at a time therefore give
//! bit-identical results (batch invariance for free), and so do the K/V rows a later prompt-cache hit reuses.
//! AVX2+FMA with a vectorized `exp` where the CPU has them, plain loops otherwise.

use super::paged_gather::write_row;
use super::{AttnParams, BatchContext};
use crate::kernels::par_chunks;
use crate::kv::PagedKv;
use crate::{Error, Result};
use candle_core::{CpuStorage, DType, Storage, Tensor};
use std::cell::RefCell;

/// Whether this backend serves a KV cache of `dtype` on `device` (f32 or f16 on the CPU).
pub fn supports(dtype: DType, device: &candle_core::Device) -> bool {
    device.is_cpu() && matches!(dtype, DType::F32 | DType::F16)
}

/// An element of the KV cache as the kernels read it: widened to f32 on load, so every sum runs in f32 whatever
/// the cache keeps.
pub trait KvElem: Copy + Send + Sync + 'static {
    fn to_f32(self) -> f32;
    /// Eight consecutive values at `p`, widened.
    ///
    /// # Safety
    /// Eight values must be readable at `p` and the CPU must have AVX and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> core::arch::x86_64::__m256;
}

impl KvElem for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx")]
    unsafe fn load8(p: *const f32) -> core::arch::x86_64::__m256 {
        core::arch::x86_64::_mm256_loadu_ps(p)
    }
}

impl KvElem for half::f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx,f16c")]
    unsafe fn load8(p: *const half::f16) -> core::arch::x86_64::__m256 {
        use core::arch::x86_64::*;
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast::<__m128i>()))
    }
}

/// Tokens per tile: their queries share each chunk of keys and values loaded from memory.
const TILE: usize = 8;

/// Keys per chunk of the online softmax for head size `d`: about 128 KiB of keys (and as much of values), a
/// multiple of 4. A fixed function of `d`, so results never depend on the machine.
pub fn chunk_keys(d: usize) -> usize {
    (32768 / d.max(1)).clamp(64, 512) / 4 * 4
}

/// Units of work wanted per thread before chunks are split over threads (load balance).
const UNITS_PER_THREAD: usize = 4;

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
    let (kbuf, vbuf) = kv.layer(layer)?;
    // The cache may keep a narrower dtype than the model computes in (`HEARTH_CPU_KV_F16`).
    let (k, v) = (k.to_dtype(kbuf.dtype())?, v.to_dtype(vbuf.dtype())?);
    for row in &ctx.rows {
        write_row(kv, layer, &k, &v, row)?;
    }
    let (t, h, d) = q.dims3()?;
    let (_, kvh, _) = k.dims3()?;
    if kvh == 0 || h % kvh != 0 {
        return Err(Error::InvalidRequest(format!("{h} query heads do not group over {kvh} kv heads")));
    }
    let qf = q.to_dtype(DType::F32)?.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
    let (ks, kl) = kbuf.storage_and_layout();
    let (vs, vl) = vbuf.storage_and_layout();
    let out = match (&*ks, &*vs) {
        (Storage::Cpu(CpuStorage::F32(kd)), Storage::Cpu(CpuStorage::F32(vd))) => {
            run(kv, &kd[kl.start_offset()..], &vd[vl.start_offset()..], &qf, (t, h, kvh, d), ctx, p)?
        }
        (Storage::Cpu(CpuStorage::F16(kd)), Storage::Cpu(CpuStorage::F16(vd))) => {
            run(kv, &kd[kl.start_offset()..], &vd[vl.start_offset()..], &qf, (t, h, kvh, d), ctx, p)?
        }
        _ => return Err(Error::Unsupported("in-place CPU attention needs an f32 or f16 KV cache on the CPU".into())),
    };
    drop((ks, vs));
    Ok(Tensor::from_vec(out, (t, h * d), q.device())?.to_dtype(q.dtype())?)
}

/// Attend every token of `ctx` over the cache's `kd`/`vd` (already holding this step's rows): (T, H·D) values.
fn run<E: KvElem>(
    kv: &PagedKv,
    kd: &[E],
    vd: &[E],
    qf: &[f32],
    (t, h, kvh, d): (usize, usize, usize, usize),
    ctx: &BatchContext,
    p: &AttnParams,
) -> Result<Vec<f32>> {
    // Every token's block table and position, in packing order; each row's table checked once against its last
    // position and the buffers (the kernels then index without checks).
    let bs = kv.block_size();
    let rows_held = kd.len().min(vd.len()) / (kvh * d);
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
    let groups = h / kvh;
    let job = Job {
        shape: Shape { kv_heads: kvh, dim: d, block_size: bs, groups, heads: h, chunk: chunk_keys(d) },
        q: qf,
        kd,
        vd,
        tokens: &tokens,
        p,
        fast: fast() && d.is_multiple_of(8),
    };
    // Tiles: up to TILE consecutive tokens of one row, each with every kv head.
    let mut tiles = Vec::new();
    for row in &ctx.rows {
        tiles.extend((0..row.len).step_by(TILE).map(|i| (row.start + i, TILE.min(row.len - i))));
    }
    let mut out = vec![0f32; t * h * d];
    let out_ptr = SharedOut(out.as_mut_ptr());
    let units = tiles.len() * kvh;
    let threads = candle_core::utils::get_num_threads().max(1);
    if units >= UNITS_PER_THREAD * threads {
        // Enough units: each folds its partials as it goes.
        par_chunks(units, 1, |range| {
            for u in range {
                let (t0, count) = tiles[u / kvh];
                job.fold_unit(t0, count, u % kvh, out_ptr);
            }
        });
    } else {
        job.split(&tiles, threads, out_ptr);
    }
    Ok(out)
}

struct Shape {
    kv_heads: usize,
    dim: usize,
    block_size: usize,
    /// Query heads per kv head.
    groups: usize,
    heads: usize,
    /// Keys per chunk.
    chunk: usize,
}

/// One call's inputs, shared by the work units.
struct Job<'a, E> {
    shape: Shape,
    /// Queries, (T, H, D).
    q: &'a [f32],
    kd: &'a [E],
    vd: &'a [E],
    /// Each packed token's block table and position.
    tokens: &'a [(&'a [u32], usize)],
    p: &'a AttnParams,
    fast: bool,
}

/// One query's partial softmax over one chunk: max score, Σ exp(s − max), and Σ exp(s − max)·v (D values).
struct Partial<'a> {
    m: f32,
    l: f32,
    acc: &'a [f32],
}

impl<E: KvElem> Job<'_, E> {
    /// Visible key positions lo..hi of the token at packed index `ti`.
    fn span(&self, ti: usize) -> (usize, usize) {
        let pos = self.tokens[ti].1;
        (self.p.window.map_or(0, |w| (pos + 1).saturating_sub(w)), pos + 1)
    }

    /// The chunks a tile's tokens see.
    fn chunks(&self, t0: usize, count: usize) -> std::ops::Range<usize> {
        let c = self.shape.chunk;
        (self.span(t0).0 / c)..(self.span(t0 + count - 1).1.div_ceil(c))
    }

    /// Offset in `out` (and `q`) of token ti's query heads of kv head g.
    fn q_at(&self, ti: usize, g: usize) -> usize {
        (ti * self.shape.heads + g * self.shape.groups) * self.shape.dim
    }

    /// Every partial of a tile (tokens t0..t0+count, kv head g) over `chunks`, chunk by chunk; `sink(i, c, part)`
    /// gets query i's (token i / groups, head i % groups) partial over chunk c, for every chunk it sees.
    fn partials(
        &self,
        t0: usize,
        count: usize,
        g: usize,
        chunks: std::ops::Range<usize>,
        mut sink: impl FnMut(usize, usize, Partial),
    ) {
        let s = &self.shape;
        let (d, cl) = (s.dim, s.chunk);
        let table = self.tokens[t0].0;
        let (scale, softcap) = (self.p.scale as f32, self.p.softcap.map(|c| c as f32));
        SCRATCH.with(|sc| {
            let mut sc = sc.borrow_mut();
            let Scratch { offsets, queries, spans, scores, acc, res } = &mut *sc;
            for c in chunks {
                // this chunk's key positions that any token of the tile sees
                let (lo, hi) = ((c * cl).max(self.span(t0).0), ((c + 1) * cl).min(self.span(t0 + count - 1).1));
                if lo >= hi {
                    continue;
                }
                offsets.clear();
                offsets.extend((lo..hi).map(|pos| {
                    let row = table[pos / s.block_size] as usize * s.block_size + pos % s.block_size;
                    (row * s.kv_heads + g) * d
                }));
                // the queries that see some of it, with the keys each sees (indices into `offsets`)
                queries.clear();
                spans.clear();
                for i in 0..count {
                    let (a, b) = self.span(t0 + i);
                    let (a, b) = (a.max(lo), b.min(hi));
                    if a < b {
                        for j in 0..s.groups {
                            queries.push((i * s.groups + j, self.q_at(t0 + i, g) + j * d));
                            spans.push((a - lo, b - lo));
                        }
                    }
                }
                let (nq, n) = (queries.len(), offsets.len());
                scores.resize(nq * n, 0.0);
                acc.resize(nq * d, 0.0);
                res.resize(nq, (0.0, 0.0));
                let args = Chunk { d, q: self.q, queries, spans, offs: offsets, scale, softcap };
                #[cfg(target_arch = "x86_64")]
                if self.fast {
                    // SAFETY: `fast` is true only where AVX2, FMA and F16C were detected and D is a multiple of
                    // 8; every offset + D is within kd/vd (`attend` checked the block tables against the buffers),
                    // every query offset + D within q, and the buffers have the sizes above.
                    unsafe { x86::chunk(&args, self.kd, self.vd, scores, acc, res) };
                } else {
                    portable(&args, self.kd, self.vd, scores, acc, res);
                }
                #[cfg(not(target_arch = "x86_64"))]
                portable(&args, self.kd, self.vd, scores, acc, res);
                for (k, &(qi, _)) in queries.iter().enumerate() {
                    let (m, l) = res[k];
                    sink(qi, c, Partial { m, l, acc: &acc[k * d..(k + 1) * d] });
                }
            }
        });
    }

    /// A whole tile and kv head: fold each query's partials in chunk order, write the normalized outputs.
    fn fold_unit(&self, t0: usize, count: usize, g: usize, out: SharedOut) {
        let d = self.shape.dim;
        let queries = count * self.shape.groups;
        let mut state = vec![Fold::EMPTY; queries];
        let mut accs = vec![0f32; queries * d];
        self.partials(t0, count, g, self.chunks(t0, count), |i, _, part| {
            state[i].merge(&mut accs[i * d..(i + 1) * d], &part);
        });
        self.emit(t0, count, g, &state, &accs, out);
    }

    /// Write a tile's folded outputs (acc / l) to `out`.
    fn emit(&self, t0: usize, count: usize, g: usize, state: &[Fold], accs: &[f32], out: SharedOut) {
        let d = self.shape.dim;
        for i in 0..count {
            let dst = self.q_at(t0 + i, g);
            // SAFETY: (token t0 + i, kv head g) is written by this unit alone: its heads g*groups..(g+1)*groups
            // are disjoint from every other unit's, and `out` (T·H·D values) outlives the parallel loops.
            let dst = unsafe { std::slice::from_raw_parts_mut(out.at(dst), self.shape.groups * d) };
            for (j, o) in dst.chunks_exact_mut(d).enumerate() {
                let q = i * self.shape.groups + j;
                state[q].finish(&accs[q * d..(q + 1) * d], o);
            }
        }
    }

    /// Few units: split each tile's chunks over threads, store every partial, then fold them in chunk order.
    fn split(&self, tiles: &[(usize, usize)], threads: usize, out: SharedOut) {
        let (d, kvh, groups) = (self.shape.dim, self.shape.kv_heads, self.shape.groups);
        let stride = d + 2; // m, l, acc
                            // Per (tile, kv head): its chunk range and the start of its partials in the buffer.
        let mut base = Vec::with_capacity(tiles.len() * kvh);
        let mut total = 0;
        for &(t0, count) in tiles {
            let chunks = self.chunks(t0, count);
            for _ in 0..kvh {
                base.push((chunks.clone(), total));
                total += count * groups * chunks.len() * stride;
            }
        }
        // A stored partial with l = 0 is a chunk the query does not see (a real one has l >= 1).
        let mut parts = vec![0f32; total];
        let parts_ptr = SharedOut(parts.as_mut_ptr());
        let per_unit = (UNITS_PER_THREAD * threads).div_ceil(base.len()).max(1);
        let mut jobs = Vec::new();
        for (u, (chunks, _)) in base.iter().enumerate() {
            let n = chunks.len();
            let pieces = per_unit.min(n.max(1));
            jobs.extend((0..pieces).map(|k| (u, chunks.start + k * n / pieces..chunks.start + (k + 1) * n / pieces)));
        }
        par_chunks(jobs.len(), 1, |range| {
            for (u, cs) in &jobs[range] {
                let (t0, count) = tiles[u / kvh];
                let (all, at) = &base[*u];
                self.partials(t0, count, u % kvh, cs.clone(), |i, c, part| {
                    let at = at + (i * all.len() + c - all.start) * stride;
                    // SAFETY: each (unit, query, chunk) slot is written by the one job owning that chunk.
                    let dst = unsafe { std::slice::from_raw_parts_mut(parts_ptr.at(at), stride) };
                    dst[0] = part.m;
                    dst[1] = part.l;
                    dst[2..].copy_from_slice(part.acc);
                });
            }
        });
        par_chunks(base.len(), 1, |range| {
            for u in range {
                let (t0, count) = tiles[u / kvh];
                let (all, at) = &base[u];
                let queries = count * groups;
                let mut state = vec![Fold::EMPTY; queries];
                let mut accs = vec![0f32; queries * d];
                for (i, st) in state.iter_mut().enumerate() {
                    for c in 0..all.len() {
                        let p = &parts[at + (i * all.len() + c) * stride..][..stride];
                        if p[1] > 0.0 {
                            st.merge(&mut accs[i * d..(i + 1) * d], &Partial { m: p[0], l: p[1], acc: &p[2..] });
                        }
                    }
                }
                self.emit(t0, count, u % kvh, &state, &accs, out);
            }
        });
    }
}

/// A query's running softmax: the largest chunk maximum so far and the sum of exponentials scaled to it (its
/// weighted values live beside it, in the caller's buffer).
#[derive(Clone, Copy)]
struct Fold {
    m: f32,
    l: f32,
}

impl Fold {
    const EMPTY: Fold = Fold { m: f32::NEG_INFINITY, l: 0.0 };

    /// Fold the next chunk's partial in: rescale both sides to the larger maximum (plain f32 ops in a fixed order).
    fn merge(&mut self, acc: &mut [f32], p: &Partial) {
        if self.l == 0.0 {
            *self = Fold { m: p.m, l: p.l };
            acc.copy_from_slice(p.acc);
            return;
        }
        let m = self.m.max(p.m);
        let (alpha, beta) = ((self.m - m).exp(), (p.m - m).exp());
        self.l = self.l * alpha + p.l * beta;
        self.m = m;
        for (a, &b) in acc.iter_mut().zip(p.acc) {
            *a = *a * alpha + b * beta;
        }
    }

    /// The normalized output.
    fn finish(&self, acc: &[f32], out: &mut [f32]) {
        let inv = 1.0 / self.l;
        for (o, &a) in out.iter_mut().zip(acc) {
            *o = a * inv;
        }
    }
}

/// The output buffer shared by the work units, each writing its own disjoint range.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: the units write disjoint ranges (see `Job::emit` and `Job::split`).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    fn at(self, i: usize) -> *mut f32 {
        // SAFETY: callers stay within the buffer (`attend` and `Job::split` size it for every unit).
        unsafe { self.0.add(i) }
    }
}

/// Per-thread buffers of one chunk: its key row offsets, the queries that see it (index in the tile, offset in
/// q) and the keys each sees, their scores (queries × keys), weighted values (queries × D) and (max, sum).
#[derive(Default)]
struct Scratch {
    offsets: Vec<usize>,
    queries: Vec<(usize, usize)>,
    spans: Vec<(usize, usize)>,
    scores: Vec<f32>,
    acc: Vec<f32>,
    res: Vec<(f32, f32)>,
}

/// What the kernels need of a chunk: head size, the queries (offsets into `q`), the keys each sees (a range of
/// `offs`, the key rows' offsets in position order) and the score transforms.
struct Chunk<'a> {
    d: usize,
    q: &'a [f32],
    queries: &'a [(usize, usize)],
    spans: &'a [(usize, usize)],
    offs: &'a [usize],
    scale: f32,
    softcap: Option<f32>,
}

/// Keys per sub-block: about 8 KiB of one kv head's keys (or values), which stay in L1 while every query of the
/// chunk passes over them. A multiple of 4; it changes no result (scores are per key, sums run in key order).
fn sub_block(d: usize) -> usize {
    (2048 / d.max(1)).clamp(4, 64) / 4 * 4
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Whether the AVX2+FMA+F16C kernels run (checked once).
fn fast() -> bool {
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
fn portable<E: KvElem>(t: &Chunk, kd: &[E], vd: &[E], sc: &mut [f32], acc: &mut [f32], res: &mut [(f32, f32)]) {
    let (d, n) = (t.d, t.offs.len());
    for (k, (&(_, qo), &(a, b))) in t.queries.iter().zip(t.spans).enumerate() {
        let q = &t.q[qo..qo + d];
        let row = &mut sc[k * n + a..k * n + b];
        for (x, &o) in row.iter_mut().zip(&t.offs[a..b]) {
            *x = q.iter().zip(&kd[o..o + d]).map(|(x, y)| x * y.to_f32()).sum::<f32>() * t.scale;
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
            for (x, y) in o.iter_mut().zip(&vd[off..off + d]) {
                *x += w * y.to_f32();
            }
        }
        res[k] = (max, sum);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::KvElem;
    use crate::kernels::cpu::x86::{exp8, hsum};
    use core::arch::x86_64::*;

    /// The scores of one query against four key rows, each reduced by the same tree.
    #[inline(always)]
    unsafe fn dot4<E: KvElem>(qh: *const f32, k: [*const E; 4], d: usize) -> __m128 {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut c = 0;
        while c < d {
            let qv = _mm256_loadu_ps(qh.add(c));
            for (a, kr) in acc.iter_mut().zip(k) {
                *a = _mm256_fmadd_ps(qv, E::load8(kr.add(c)), *a);
            }
            c += 8;
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
            let (q0, q1) = (_mm256_loadu_ps(q[0].add(c)), _mm256_loadu_ps(q[1].add(c)));
            for x in 0..4 {
                let kv = E::load8(k[x].add(c));
                a0[x] = _mm256_fmadd_ps(q0, kv, a0[x]);
                a1[x] = _mm256_fmadd_ps(q1, kv, a1[x]);
            }
            c += 8;
        }
        [reduce4(a0), reduce4(a1)]
    }

    /// The four lane sums of four accumulators, by one fixed tree.
    #[inline(always)]
    unsafe fn reduce4(a: [__m256; 4]) -> __m128 {
        let h = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
        _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h))
    }

    /// Every query of a chunk against the keys it sees, in L1-sized sub-blocks of keys: first the scores (each
    /// sub-block's keys, four at a time, against the queries two at a time; a key past the end is a copy of the
    /// last), then per query its max, exp(s − max) and sum over its own keys, then the weighted values (per
    /// sub-block, each query's accumulators loaded, fed in key order and stored back: 64 columns in eight
    /// registers at a time, then 8). Every query's arithmetic is the same whichever queries share the chunk.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn chunk<E: KvElem>(
        t: &super::Chunk,
        kd: &[E],
        vd: &[E],
        sc: &mut [f32],
        acc: &mut [f32],
        res: &mut [(f32, f32)],
    ) {
        let (d, n, nq) = (t.d, t.offs.len(), t.queries.len());
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
                    let at = |x: usize| kp.add(t.offs[(j + x).min(n - 1)]);
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
                    values::<8, E>(w, offs, vp.add(c), o.add(c));
                    c += 64;
                }
                while c < d {
                    values::<1, E>(w, offs, vp.add(c), o.add(c));
                    c += 8;
                }
            }
            s0 = s1;
        }
    }

    /// `o[..8·W] += Σ_j w_j · v_j` over 8·W columns starting at `vp` (+ each key's row offset), in key order,
    /// W accumulators kept in registers between the load and the store of `o`.
    #[inline(always)]
    unsafe fn values<const W: usize, E: KvElem>(w: &[f32], offs: &[usize], vp: *const E, o: *mut f32) {
        let mut acc: [__m256; W] = std::array::from_fn(|x| _mm256_loadu_ps(o.add(8 * x)));
        for (&w, &off) in w.iter().zip(offs) {
            let wv = _mm256_set1_ps(w);
            let vr = vp.add(off);
            for (x, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(wv, E::load8(vr.add(8 * x)), *acc);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::paged_gather;
    use crate::attention::test_util::{self, rnd, Attend};
    use candle_core::Device;

    /// Outputs of `f` over a cache kept in `dtype`, decode rows when every piece is one token.
    fn run_in(f: Attend, dtype: DType, qkv: [&Tensor; 3], pieces: &[(usize, usize)], p: &AttnParams) -> Vec<Vec<f32>> {
        test_util::run_kv(f, dtype, qkv, pieces, p, pieces.iter().all(|&(_, l)| l == 1))
    }

    fn run(f: Attend, qkv: [&Tensor; 3], pieces: &[(usize, usize)], p: &AttnParams) -> Vec<Vec<f32>> {
        run_in(f, DType::F32, qkv, pieces, p)
    }

    /// What a cache in `dtype` keeps of `t`, as f32 (an f16 cache rounds each value to f16).
    fn kept(dtype: DType, t: &Tensor) -> Tensor {
        t.to_dtype(dtype).and_then(|t| t.to_dtype(DType::F32)).unwrap()
    }

    /// Every output within f32 rounding (2e-5) of the reference's.
    fn assert_close(got: &[Vec<f32>], want: &[Vec<f32>], case: &str) {
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() < 2e-5, "token {i}: {x} vs {y} ({case})");
            }
        }
    }

    /// Matches the gather backend (candle's matmul and softmax over f32) to f32 rounding, for full, sliding-window
    /// and soft-capped attention, GQA and MHA, head sizes with and without a multiple of 8, with the cache in f32
    /// and in f16 (against the gather backend given the f16-rounded keys and values: the f16 cache rounds on
    /// write and computes in f32); and a token's result is bit-identical however its prompt was cut (one piece,
    /// after a hit anywhere, or decoded one at a time).
    #[test]
    fn matches_the_gather_backend_and_is_the_same_for_any_cut() {
        for dtype in [DType::F32, DType::F16] {
            for (h, kvh, d) in [(4, 2, 16), (3, 3, 8), (2, 1, 12)] {
                let n = 70;
                let (q, k, v) = (rnd((n, h, d), 0.1), rnd((n, kvh, d), 0.2), rnd((n, kvh, d), 0.3));
                let (kr, vr) = (kept(dtype, &k), kept(dtype, &v));
                for (window, softcap) in [(None, None), (Some(20), None), (None, Some(5.0))] {
                    let p = AttnParams { scale: 0.35, window, softcap };
                    let want = run(paged_gather::attend, [&q, &kr, &vr], &[(0, n)], &p);
                    let got = run_in(attend, dtype, [&q, &k, &v], &[(0, n)], &p);
                    assert_close(&got, &want, &format!("{dtype:?} {h}/{kvh}/{d}, {window:?} {softcap:?}"));
                    let decoded: Vec<(usize, usize)> = (0..n).map(|i| (i, 1)).collect();
                    for pieces in [vec![(0, 17), (17, 53)], vec![(0, 64), (64, 6)], decoded] {
                        assert_eq!(run_in(attend, dtype, [&q, &k, &v], &pieces, &p), got, "{dtype:?} {pieces:?}");
                    }
                }
            }
        }
    }

    /// The f16 cache's rounding is visible (the test above would pass vacuously if the cache kept f32): its
    /// outputs differ from the f32 cache's, by about f16's precision.
    #[test]
    fn an_f16_cache_rounds_its_keys_and_values() {
        let (h, kvh, d, n) = (4, 2, 16, 40);
        let (q, k, v) = (rnd((n, h, d), 0.1), rnd((n, kvh, d), 0.2), rnd((n, kvh, d), 0.3));
        let p = AttnParams { scale: 0.35, window: None, softcap: None };
        let f32s = run_in(attend, DType::F32, [&q, &k, &v], &[(0, n)], &p);
        let f16s = run_in(attend, DType::F16, [&q, &k, &v], &[(0, n)], &p);
        let worst = f32s.iter().flatten().zip(f16s.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst > 1e-6 && worst < 5e-3, "largest difference {worst}");
    }

    /// Past one chunk of keys: the partials folded in chunk order match the gather backend, and a token gets the
    /// same bits whether its chunks were folded by one unit (a prompt piece) or split over threads and folded
    /// afterwards (a row decoded alone), with and without a window that starts mid-chunk.
    #[test]
    fn chunked_softmax_matches_and_split_folds_are_bit_identical() {
        let (h, kvh, d) = (4, 2, 8);
        let n = 2 * chunk_keys(d) + 90;
        let (q, k, v) = (rnd((n, h, d), 0.7), rnd((n, kvh, d), 0.8), rnd((n, kvh, d), 0.9));
        for dtype in [DType::F32, DType::F16] {
            let (kr, vr) = (kept(dtype, &k), kept(dtype, &v));
            for (window, softcap) in [(None, None), (Some(700), None), (None, Some(4.0))] {
                let p = AttnParams { scale: 0.4, window, softcap };
                let want = run(paged_gather::attend, [&q, &kr, &vr], &[(0, n)], &p);
                let got = run_in(attend, dtype, [&q, &k, &v], &[(0, n)], &p);
                assert_close(&got, &want, &format!("{dtype:?} {window:?} {softcap:?}"));
                // the last 40 tokens decoded one at a time (split path) after a prompt of the rest (fold path)
                let mut pieces = vec![(0, n - 40)];
                pieces.extend((n - 40..n).map(|i| (i, 1)));
                assert_eq!(run_in(attend, dtype, [&q, &k, &v], &pieces, &p), got, "{dtype:?} {window:?} {softcap:?}");
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
