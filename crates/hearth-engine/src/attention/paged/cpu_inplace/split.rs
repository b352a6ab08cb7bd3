//! Few units (one row decoding alone at a long context): each unit's chunks split over threads, their partials
//! stored, then folded in chunk order, so a token gets the bits it gets when its unit folds them as they come.

use super::elem::KvElem;
use super::job::{Fold, Job, Partial, SharedOut};
use super::UNITS_PER_THREAD;
use crate::work_pool::par_chunks;

impl<K: KvElem, V: KvElem> Job<'_, K, V> {
    /// Few units: split each tile's chunks over threads, store every partial, then fold them in chunk order.
    pub(super) fn split(&self, tiles: &[(usize, usize)], threads: usize, out: SharedOut) {
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
