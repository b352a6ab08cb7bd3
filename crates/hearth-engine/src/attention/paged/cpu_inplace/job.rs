//! One call's work: its shape and inputs ([`Job`]), the partial softmax of a tile's queries over a range of
//! chunks ([`Job::partials`]), and a unit (a tile of tokens and one kv head) folded as its partials come.

#[cfg(target_arch = "x86_64")]
use super::chunk::x86;
use super::chunk::{portable, Chunk};
use super::elem::KvElem;
use crate::attention::AttnParams;
use std::cell::RefCell;

/// The heads, head size and block size of one call, and its chunk of keys.
pub(super) struct Shape {
    pub(super) kv_heads: usize,
    pub(super) dim: usize,
    pub(super) block_size: usize,
    /// Query heads per kv head.
    pub(super) groups: usize,
    pub(super) heads: usize,
    /// Keys per chunk.
    pub(super) chunk: usize,
}

/// One call's inputs, shared by the work units.
pub(super) struct Job<'a, K, V> {
    pub(super) shape: Shape,
    /// Queries, (T, H, D).
    pub(super) q: &'a [f32],
    pub(super) kd: &'a [K],
    pub(super) vd: &'a [V],
    /// Each packed token's block table and position.
    pub(super) tokens: &'a [(&'a [u32], usize)],
    pub(super) p: &'a AttnParams,
    /// The x86 chunk kernel runs (the CPU has it and D is a multiple of 8).
    pub(super) fast: bool,
}

/// One query's partial softmax over one chunk: max score, Σ exp(s − max), and Σ exp(s − max)·v (D values).
pub(super) struct Partial<'a> {
    pub(super) m: f32,
    pub(super) l: f32,
    pub(super) acc: &'a [f32],
}

impl<K: KvElem, V: KvElem> Job<'_, K, V> {
    /// Visible key positions lo..hi of the token at packed index `ti`.
    fn span(&self, ti: usize) -> (usize, usize) {
        let pos = self.tokens[ti].1;
        (self.p.window.map_or(0, |w| (pos + 1).saturating_sub(w)), pos + 1)
    }

    /// The chunks a tile's tokens see.
    pub(super) fn chunks(&self, t0: usize, count: usize) -> std::ops::Range<usize> {
        let c = self.shape.chunk;
        (self.span(t0).0 / c)..(self.span(t0 + count - 1).1.div_ceil(c))
    }

    /// Offset in `out` (and `q`) of token ti's query heads of kv head g.
    fn q_at(&self, ti: usize, g: usize) -> usize {
        (ti * self.shape.heads + g * self.shape.groups) * self.shape.dim
    }

    /// Every partial of a tile (tokens t0..t0+count, kv head g) over `chunks`, chunk by chunk; `sink(i, c, part)`
    /// gets query i's (token i / groups, head i % groups) partial over chunk c, for every chunk it sees.
    pub(super) fn partials(
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
                    row * s.kv_heads + g
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
    pub(super) fn fold_unit(&self, t0: usize, count: usize, g: usize, out: SharedOut) {
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
    pub(super) fn emit(&self, t0: usize, count: usize, g: usize, state: &[Fold], accs: &[f32], out: SharedOut) {
        let d = self.shape.dim;
        for i in 0..count {
            let dst = self.q_at(t0 + i, g);
            // SAFETY: (token t0 + i, kv head g) is written by this unit alone: its heads g*groups..(g+1)*groups
            // are disjoint from every other unit's, and `out` (T·H·D values) outlives the parallel loops.
            let dst = unsafe { std::slice::from_raw_parts_mut(out.at(dst), self.shape.groups * d) };
            for (j, o) in dst.chunks_exact_mut(d).enumerate() {
                let q = i * self.shape.groups + j;
                let Fold { m, l } = state[q];
                self.p.finish(g * self.shape.groups + j, m, l, &accs[q * d..(q + 1) * d], o);
            }
        }
    }
}

/// A query's running softmax: the largest chunk maximum so far and the sum of exponentials scaled to it (its
/// weighted values live beside it, in the caller's buffer).
#[derive(Clone, Copy)]
pub(super) struct Fold {
    m: f32,
    l: f32,
}

impl Fold {
    pub(super) const EMPTY: Fold = Fold { m: f32::NEG_INFINITY, l: 0.0 };

    /// Fold the next chunk's partial in: rescale both sides to the larger maximum (plain f32 ops in a fixed order).
    pub(super) fn merge(&mut self, acc: &mut [f32], p: &Partial) {
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
}

/// The output buffer shared by the work units, each writing its own disjoint range.
#[derive(Clone, Copy)]
pub(super) struct SharedOut(pub(super) *mut f32);
// SAFETY: the units write disjoint ranges (see `Job::emit` and `Job::split`).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    pub(super) fn at(self, i: usize) -> *mut f32 {
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

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}
