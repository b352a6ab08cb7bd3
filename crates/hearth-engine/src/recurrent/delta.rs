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
use std::sync::Mutex;

/// One value head's part of a layer state.
#[derive(Debug, Clone, PartialEq)]
struct HeadState {
    /// The state at the last chunk boundary: key_dim × value_dim.
    s: Vec<f32>,
    /// This chunk's normalized keys so far: chunk × key_dim.
    keys: Vec<f32>,
    /// This chunk's corrections δ so far: chunk × value_dim.
    deltas: Vec<f32>,
    /// This chunk's cumulative log decays so far.
    gammas: Vec<f32>,
}

/// One linear-attention layer's state for one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerState {
    /// Tokens consumed.
    pub pos: usize,
    /// The convolution's last `kernel - 1` inputs, oldest first: (kernel - 1) × conv_dim.
    conv: Vec<f32>,
    heads: Vec<HeadState>,
    /// After a speculative step: how to take back the tokens its verification rejects.
    undo: Option<Box<Undo>>,
}

/// What a speculative step keeps to return to any position within it: where it started, the convolution inputs it
/// saw (the kept ones, then its own), and each head's state just before every chunk it folded.
#[derive(Debug, Clone, PartialEq)]
struct Undo {
    from: usize,
    inputs: Vec<f32>,
    /// (the position the fold completed, every head before it), ascending.
    folds: Vec<(usize, Vec<HeadState>)>,
}

impl LayerState {
    /// The state before any token.
    pub fn new(c: &LinearAttnConfig, chunk: usize) -> Self {
        let head = HeadState {
            s: vec![0.0; c.key_dim * c.value_dim],
            keys: vec![0.0; chunk * c.key_dim],
            deltas: vec![0.0; chunk * c.value_dim],
            gammas: vec![0.0; chunk],
        };
        Self { pos: 0, conv: vec![0.0; (c.conv_kernel - 1) * c.conv_dim()], heads: vec![head; c.v_heads], undo: None }
    }

    /// Return to position `q` within the last step, which kept its undo (a speculative step whose verification
    /// rejected the tokens after `q`): the heads as they were before the first chunk it folded past `q`, the
    /// convolution's inputs before `q`. False when the last step kept none or `q` is outside it.
    pub fn rollback(&mut self, c: &LinearAttnConfig, q: usize) -> bool {
        let Some(u) = self.undo.take() else { return false };
        if q < u.from || q > self.pos {
            return false;
        }
        if let Some((_, heads)) = u.folds.into_iter().find(|(f, _)| *f > q) {
            self.heads = heads;
        }
        let (cd, keep) = (c.conv_dim(), (c.conv_kernel - 1) * c.conv_dim());
        let r = q - u.from;
        self.conv = u.inputs[r * cd..r * cd + keep].to_vec();
        self.pos = q;
        true
    }

    /// The state without its chunk buffers, which a state at a chunk boundary never reads again (a snapshot);
    /// the next token after it allocates them again.
    pub fn compact(mut self) -> Self {
        self.undo = None;
        for h in &mut self.heads {
            (h.keys, h.deltas, h.gammas) = (Vec::new(), Vec::new(), Vec::new());
        }
        self
    }

    /// The floats a snapshot of one layer keeps (its convolution inputs, then each head's state matrix).
    pub fn snapshot_floats(c: &LinearAttnConfig) -> usize {
        (c.conv_kernel - 1) * c.conv_dim() + c.v_heads * c.key_dim * c.value_dim
    }

    /// A state at a chunk boundary as little-endian f32 bytes ([`Self::snapshot_floats`] of them), appended to
    /// `out`.
    pub fn write_snapshot(&self, out: &mut Vec<u8>) {
        for v in self.conv.iter().chain(self.heads.iter().flat_map(|h| h.s.iter())) {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// The state at `pos` (a chunk boundary) from [`Self::write_snapshot`]'s bytes; None if they do not have
    /// this layer's shape.
    pub fn read_snapshot(c: &LinearAttnConfig, pos: usize, bytes: &[u8]) -> Option<Self> {
        if bytes.len() != 4 * Self::snapshot_floats(c) {
            return None;
        }
        let mut floats = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let conv: Vec<f32> = floats.by_ref().take((c.conv_kernel - 1) * c.conv_dim()).collect();
        let heads = (0..c.v_heads)
            .map(|_| HeadState {
                s: floats.by_ref().take(c.key_dim * c.value_dim).collect(),
                keys: Vec::new(),
                deltas: Vec::new(),
                gammas: Vec::new(),
            })
            .collect();
        Some(Self { pos, conv, heads, undo: None })
    }

    /// Bytes this state holds.
    pub fn bytes(&self) -> usize {
        let heads: usize = self.heads.iter().map(|h| h.s.len() + h.keys.len() + h.deltas.len() + h.gammas.len()).sum();
        4 * (self.conv.len() + heads)
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
/// position); `out` receives len × v_heads × value_dim outputs (before the gated norm). Returns the state at each
/// position of `captures` (chunk boundaries within the row's new tokens, ascending), in order. Value heads run in
/// parallel on the kernel pool; each head's arithmetic is the same however many threads there are. `keep_undo`:
/// a speculative step, which keeps what [`LayerState::rollback`] needs.
#[allow(clippy::too_many_arguments)]
pub fn run_row(
    c: &LinearAttnConfig,
    w: &DeltaWeights,
    chunk: usize,
    st: &mut LayerState,
    x: &RowInputs,
    out: &mut [f32],
    captures: &[usize],
    keep_undo: bool,
) -> Vec<LayerState> {
    let (cd, kern, hv, dv) = (c.conv_dim(), c.conv_kernel, c.v_heads, c.value_dim);
    let len = x.a.len() / hv;
    let pos0 = st.pos;
    let captures: Vec<usize> =
        captures.iter().copied().filter(|&p| p > pos0 && p <= pos0 + len && p.is_multiple_of(chunk)).collect();
    // 1. the convolution over the kept inputs and the new ones, q and k normalized
    let mut inputs = std::mem::take(&mut st.conv);
    inputs.extend_from_slice(x.mixed);
    let y = convolve(c, w, &inputs, len);
    // 2. the delta rule, each value head over every token
    let jobs: Vec<Mutex<HeadJob>> = st
        .heads
        .iter_mut()
        .map(|head| Mutex::new(HeadJob { head, out: vec![0.0; len * dv], snaps: Vec::new(), prefold: Vec::new() }))
        .collect();
    let ctx = RowCtx { c, w, chunk, pos0, y: &y, x, captures: &captures, keep_undo };
    crate::work_pool::par_chunks(hv, 1, |range| {
        for h in range {
            let mut job = jobs[h].lock().unwrap_or_else(|e| e.into_inner());
            run_head(&ctx, h, &mut job);
        }
    });
    // 3. outputs in token order, the kept inputs, the captured states
    let mut snaps: Vec<Vec<HeadState>> = vec![Vec::with_capacity(hv); captures.len()];
    let mut folds: Vec<(usize, Vec<HeadState>)> = Vec::new();
    for (h, job) in jobs.into_iter().enumerate() {
        let job = job.into_inner().unwrap_or_else(|e| e.into_inner());
        for t in 0..len {
            out[(t * hv + h) * dv..][..dv].copy_from_slice(&job.out[t * dv..(t + 1) * dv]);
        }
        for (k, s) in job.snaps.into_iter().enumerate() {
            snaps[k].push(s);
        }
        for (k, (f, s)) in job.prefold.into_iter().enumerate() {
            match folds.get_mut(k) {
                Some(fold) => fold.1.push(s),
                None => folds.push((f, vec![s])),
            }
        }
    }
    let keep = (kern - 1) * cd;
    st.conv = inputs[inputs.len() - keep..].to_vec();
    st.pos += len;
    st.undo = keep_undo.then(|| Box::new(Undo { from: pos0, inputs: inputs.clone(), folds }));
    // the inputs before position p are rows p - pos0 .. p - pos0 + kernel - 1 of `inputs`
    captures
        .iter()
        .zip(snaps)
        .map(|(&p, heads)| {
            let r = p - pos0;
            LayerState { pos: p, conv: inputs[r * cd..r * cd + keep].to_vec(), heads, undo: None }
        })
        .collect()
}

/// The causal depthwise convolution and SiLU of every new token (`inputs`: the kept kernel - 1 rows, then the new
/// ones), with each key head's q (scaled by 1/√key_dim) and k L2-normalized: len × conv_dim.
fn convolve(c: &LinearAttnConfig, w: &DeltaWeights, inputs: &[f32], len: usize) -> Vec<f32> {
    let (cd, kern, hk, dk) = (c.conv_dim(), c.conv_kernel, c.k_heads, c.key_dim);
    let scale = 1.0 / (dk as f32).sqrt();
    let mut y = vec![0.0f32; len * cd];
    for (t, yt) in y.chunks_exact_mut(cd).enumerate() {
        for (ch, yc) in yt.iter_mut().enumerate() {
            let wc = &w.conv[ch * kern..(ch + 1) * kern];
            let mut acc = 0.0f32;
            for (i, &wi) in wc[..kern - 1].iter().enumerate() {
                acc += wi * inputs[(t + i) * cd + ch];
            }
            *yc = silu(acc + wc[kern - 1] * inputs[(t + kern - 1) * cd + ch]);
        }
        let (q, rest) = yt.split_at_mut(hk * dk);
        for h in 0..hk {
            l2norm(&mut q[h * dk..(h + 1) * dk]);
            l2norm(&mut rest[h * dk..(h + 1) * dk]);
        }
        q.iter_mut().for_each(|e| *e *= scale);
    }
    y
}

/// One value head's share of a row.
struct HeadJob<'a> {
    head: &'a mut HeadState,
    /// len × value_dim.
    out: Vec<f32>,
    snaps: Vec<HeadState>,
    /// (position, the head before the fold that completed it), for the undo of a speculative step.
    prefold: Vec<(usize, HeadState)>,
}

/// What every value head of a row reads.
struct RowCtx<'a> {
    c: &'a LinearAttnConfig,
    w: &'a DeltaWeights<'a>,
    chunk: usize,
    /// The row's first position.
    pos0: usize,
    /// The convolved tokens (len × conv_dim).
    y: &'a [f32],
    x: &'a RowInputs<'a>,
    /// Positions whose state is kept.
    captures: &'a [usize],
    /// Keep each head's state before every fold (a speculative step).
    keep_undo: bool,
}

/// Value head `h` over every token of the row.
fn run_head(r: &RowCtx, h: usize, job: &mut HeadJob) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { run_head_avx2(r, h, job) };
    }
    run_head_any(r, h, job)
}

/// [`run_head_any`] compiled for AVX2 (the same operations in the same order, eight lanes wide).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn run_head_avx2(r: &RowCtx, h: usize, job: &mut HeadJob) {
    run_head_any(r, h, job)
}

#[inline(always)]
fn run_head_any(rc: &RowCtx, h: usize, job: &mut HeadJob) {
    let RowCtx { c, w, chunk, pos0, y, x, captures, keep_undo } = *rc;
    let (cd, hk, hv, dk, dv) = (c.conv_dim(), c.k_heads, c.v_heads, c.key_dim, c.value_dim);
    let g_head = c.key_head(h);
    let (mut sk, mut r) = (vec![0.0f32; dv], vec![0.0f32; dv]);
    let st = &mut *job.head;
    if st.gammas.len() != chunk {
        // resumed from a compacted snapshot (at a chunk boundary: the buffers are written before they are read)
        (st.keys, st.deltas, st.gammas) = (vec![0.0; chunk * dk], vec![0.0; chunk * dv], vec![0.0; chunk]);
    }
    for (t, yt) in y.chunks_exact(cd).enumerate() {
        let qh = &yt[g_head * dk..][..dk];
        let kh = &yt[hk * dk + g_head * dk..][..dk];
        let vh = &yt[2 * hk * dk + h * dv..][..dv];
        let i = (pos0 + t) % chunk;
        let beta = 1.0 / (1.0 + (-x.b[t * hv + h]).exp());
        let g = -w.decay_rate[h] * softplus(x.a[t * hv + h] + w.dt_bias[h]);
        let gamma = if i == 0 { g } else { st.gammas[i - 1] + g };
        st.gammas[i] = gamma;
        st.keys[i * dk..(i + 1) * dk].copy_from_slice(kh);
        let eg = gamma.exp();
        // δ = β (v − e^γ S₀ᵀk) − Σ_{m<i} β e^(γ−γₘ) (k·kₘ) δₘ
        sk.iter_mut().for_each(|e| *e = 0.0);
        for (a, &ka) in kh.iter().enumerate() {
            for (e, s) in sk.iter_mut().zip(&st.s[a * dv..(a + 1) * dv]) {
                *e += s * ka;
            }
        }
        for ((re, &ve), &ske) in r.iter_mut().zip(vh).zip(&sk) {
            *re = beta * (ve - eg * ske);
        }
        for m in 0..i {
            let coef = beta * (gamma - st.gammas[m]).exp() * dot(kh, &st.keys[m * dk..(m + 1) * dk]);
            for (re, &de) in r.iter_mut().zip(&st.deltas[m * dv..(m + 1) * dv]) {
                *re -= coef * de;
            }
        }
        st.deltas[i * dv..(i + 1) * dv].copy_from_slice(&r);
        // o = e^γ S₀ᵀq + Σ_{m≤i} e^(γ−γₘ) (kₘ·q) δₘ
        let o = &mut job.out[t * dv..(t + 1) * dv];
        for (a, &qa) in qh.iter().enumerate() {
            for (e, s) in o.iter_mut().zip(&st.s[a * dv..(a + 1) * dv]) {
                *e += s * qa;
            }
        }
        o.iter_mut().for_each(|e| *e *= eg);
        for m in 0..=i {
            let coef = (gamma - st.gammas[m]).exp() * dot(&st.keys[m * dk..(m + 1) * dk], qh);
            for (e, &de) in o.iter_mut().zip(&st.deltas[m * dv..(m + 1) * dv]) {
                *e += coef * de;
            }
        }
        // a complete chunk folds into the state
        if i == chunk - 1 {
            if keep_undo {
                job.prefold.push((pos0 + t + 1, st.clone()));
            }
            fold(st, chunk, dk, dv);
            if captures.contains(&(pos0 + t + 1)) {
                job.snaps.push(st.clone());
            }
        }
    }
}

/// S = e^γ_(C−1) S₀ + Σₘ e^(γ_(C−1)−γₘ) kₘ δₘᵀ.
#[inline(always)]
fn fold(st: &mut HeadState, chunk: usize, dk: usize, dv: usize) {
    let last = st.gammas[chunk - 1];
    let decay = last.exp();
    st.s.iter_mut().for_each(|e| *e *= decay);
    for m in 0..chunk {
        let wgt = (last - st.gammas[m]).exp();
        let (km, dm) = (&st.keys[m * dk..(m + 1) * dk], &st.deltas[m * dv..(m + 1) * dv]);
        for (a, &k) in km.iter().enumerate() {
            let ka = wgt * k;
            for (e, &d) in st.s[a * dv..(a + 1) * dv].iter_mut().zip(dm) {
                *e += ka * d;
            }
        }
    }
}
