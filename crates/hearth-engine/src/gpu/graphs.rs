//! CUDA graphs for decode steps (`HEARTH_CUDA_GRAPHS`): a decode-only step of a model whose decode forward is
//! capturable ([`crate::models::Model::decode_capturable`]) over the CUDA paged kernels with a float cache runs
//! from fixed device buffers — tokens, positions, cache slots, token rows and block tables in one u32 buffer —
//! so that the whole step (a few hundred kernel launches) can be captured once and replayed as one graph launch.
//!
//! A graph is keyed by the step's row count and its context bucket (the most keys a row sees, rounded up to a power
//! of two, at least [`MIN_KEYS`]): the attention kernels' launch shapes depend on both, nothing else of the step
//! does. The first step of a key runs eagerly on fresh fixed buffers with candle's host-to-device cache on (its
//! kernel-parameter uploads become cached device buffers), then the same forward is captured (capturing runs
//! nothing); later steps of that key write their metadata into the buffers and replay. Graphs are kept for the
//! [`MAX_GRAPHS`] most recently used keys. A capture that fails turns graphs off for the runner (logged once) and the
//! step's eager result stands.

use crate::attention::{BatchContext, FixedMeta, PagedAttention};
use crate::models::Model;
use crate::Result;
use candle_core::cuda_backend::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use candle_core::cuda_backend::cudarc::driver::CudaGraph;
use candle_core::{Device, Tensor};

/// The smallest context bucket (keys).
pub const MIN_KEYS: usize = 256;
/// Graphs kept (each holds its step's intermediate buffers and logits).
pub const MAX_GRAPHS: usize = 32;
/// The most rows a captured step has (larger decode steps run eagerly).
pub const MAX_ROWS: usize = 64;

/// One decode row: (KV slot, position of its token, token).
pub type DecodeRow = (usize, usize, u32);

/// A graph owned by one runner.
struct Graph(CudaGraph);

// SAFETY: cudarc leaves `CudaGraph` !Send because its raw handles must not be used from two threads at once (CUDA's
// graph objects are not thread-safe). A `Graph` is only reachable through its `StepGraphs`, which its runner owns
// and uses from one thread at a time (`&mut self` for every launch); moving it between threads is what CUDA allows.
unsafe impl Send for Graph {}

/// A captured step and the buffers it reads and writes.
struct Captured {
    key: (usize, usize),
    graph: Graph,
    /// tokens | positions | slots | token rows | tables, u32.
    buf: Tensor,
    /// The logits the graph writes (its own allocation: valid after each launch, rewritten by the next).
    logits: Option<Tensor>,
    launched: bool,
}

impl Drop for Captured {
    fn drop(&mut self) {
        // Memory a graph allocates and does not free outlives it: freed here when a launch made it; never-launched
        // graphs hold none (the capture's tensor is forgotten, not freed).
        if let Some(l) = self.logits.take() {
            if self.launched {
                drop(l);
            } else {
                std::mem::forget(l);
            }
        }
    }
}

/// The decode-step graphs of one runner.
#[derive(Default)]
pub struct StepGraphs {
    /// Most recently used last.
    graphs: Vec<Captured>,
    /// Why graphs were turned off (a failed capture); then every step runs eagerly.
    off: Option<String>,
}

impl StepGraphs {
    /// Graphs for a runner on `device` of `model` over `kv`, when they serve it: `HEARTH_CUDA_GRAPHS` on, a CUDA
    /// device, a capturable model, the CUDA paged kernels with a float cache.
    /// Also needs candle's per-tensor event tracking off (`device::tune_cuda` turns it off with PDL): its event
    /// records and waits around every launch would otherwise be captured into the graph.
    pub fn choose(device: &Device, model: &dyn Model, kv: &PagedAttention) -> Option<Self> {
        let untracked = matches!(device, Device::Cuda(d) if !d.is_event_tracking());
        let on = crate::levers::get().cuda_graphs && untracked && model.decode_capturable() && kv.takes_fixed_meta();
        on.then(Self::default)
    }

    /// The logits (rows, vocabulary) of a decode step of these rows through a graph, or None when graphs do not
    /// serve it (too many rows, graphs turned off): the caller runs it eagerly then.
    pub fn run(&mut self, model: &dyn Model, kv: &mut PagedAttention, rows: &[DecodeRow]) -> Result<Option<Tensor>> {
        if self.off.is_some() || rows.is_empty() || rows.len() > MAX_ROWS {
            return Ok(None);
        }
        let (host, key) = fill(kv, rows)?;
        if let Some(i) = self.graphs.iter().position(|c| c.key == key) {
            let mut c = self.graphs.remove(i);
            let dev = c.buf.device().clone();
            c.buf.slice_set(&Tensor::from_vec(host, c.buf.dim(0)?, &dev)?, 0, 0)?;
            c.graph.0.launch().map_err(|e| super::driver_error("CUDA graph launch", e))?;
            c.launched = true;
            let logits = c.logits.clone();
            self.graphs.push(c);
            return Ok(logits);
        }
        let Device::Cuda(cuda) = kv.storage().layer(0)?.0.device().clone() else { return Ok(None) };
        let (buf, input, ctx) = fixed_step(kv, rows, host, key.1)?;
        let _cache = cuda.enable_cuda_graph_htod_cache();
        let logits = model.forward(&input, &ctx, kv)?;
        let stream = cuda.cuda_stream();
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| super::driver_error("CUDA graph capture", e))?;
        let captured = model.forward(&input, &ctx, kv);
        // the step's own allocations belong to the graph; a relaunch frees the last launch's (the logits)
        let graph = stream.end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
        match (captured, graph) {
            (Ok(l), Ok(Some(graph))) => {
                if self.graphs.len() >= MAX_GRAPHS {
                    self.graphs.remove(0);
                }
                self.graphs.push(Captured { key, graph: Graph(graph), buf, logits: Some(l), launched: false });
            }
            (l, g) => {
                let why = format!("forward {:?}, capture {:?}", l.as_ref().err(), g.as_ref().err());
                if let Ok(l) = l {
                    std::mem::forget(l); // captured, never allocated
                }
                // a failed capture's frees leave an error for the next driver call: cleared
                let _ = stream.context().check_err();
                tracing::warn!("CUDA graphs off for this model: a decode step did not capture ({why})");
                self.off = Some(why);
            }
        }
        Ok(Some(logits))
    }

    /// The same step run eagerly from fresh fixed buffers, as the first step of a key runs (tests compare a
    /// graph's replays against this).
    pub fn run_eager(model: &dyn Model, kv: &mut PagedAttention, rows: &[DecodeRow]) -> Result<Tensor> {
        let (host, key) = fill(kv, rows)?;
        let (_buf, input, ctx) = fixed_step(kv, rows, host, key.1)?;
        model.forward(&input, &ctx, kv)
    }

    /// Graphs held now.
    pub fn len(&self) -> usize {
        self.graphs.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.graphs.is_empty()
    }

    /// Why graphs were turned off, if they were.
    pub fn off(&self) -> Option<&str> {
        self.off.as_deref()
    }
}

/// The step's buffer contents (tokens | positions | slots | token rows | tables padded to the bucket's blocks)
/// and its key (rows, context bucket).
fn fill(kv: &PagedAttention, rows: &[DecodeRow]) -> Result<(Vec<u32>, (usize, usize))> {
    let store = kv.storage();
    let bs = store.block_size();
    let keys = rows.iter().map(|r| r.1 + 1).max().unwrap_or(1);
    let bucket = keys.next_power_of_two().max(MIN_KEYS).max(bs);
    let max_blocks = bucket.div_ceil(bs);
    let r = rows.len();
    let mut host = vec![0u32; 4 * r + r * max_blocks];
    for (i, &(slot, pos, token)) in rows.iter().enumerate() {
        let table = store.table(slot)?;
        // blocks held past the bucket are not read by this step (its keys are within the bucket)
        let table = &table[..table.len().min(max_blocks)];
        host[i] = token;
        host[r + i] = pos as u32;
        host[2 * r + i] = store.row_of(table, pos)? as u32;
        host[3 * r + i] = i as u32;
        host[4 * r + i * max_blocks..4 * r + i * max_blocks + table.len()].copy_from_slice(table);
    }
    Ok((host, (r, bucket)))
}

/// The step's fixed buffer on the KV store's device, filled with `host`, and its input tokens and batch context as
/// views of it (no copies: a graph reads these addresses).
fn fixed_step(
    kv: &PagedAttention,
    rows: &[DecodeRow],
    host: Vec<u32>,
    bucket: usize,
) -> Result<(Tensor, Tensor, BatchContext)> {
    let n = host.len();
    let buf = Tensor::from_vec(host, n, kv.storage().layer(0)?.0.device())?;
    let r = rows.len();
    let max_blocks = bucket.div_ceil(kv.storage().block_size());
    let spans: Vec<(usize, usize, usize)> = rows.iter().map(|&(slot, pos, _)| (slot, pos, 1)).collect();
    // the spans' host-side view (positions are replaced by the fixed buffer's)
    let mut ctx = BatchContext::new(&spans, false, &Device::Cpu)?;
    ctx.positions = buf.narrow(0, r, r)?;
    ctx.fixed = Some(FixedMeta {
        slots: buf.narrow(0, 2 * r, r)?,
        tok_row: buf.narrow(0, 3 * r, r)?,
        tables: buf.narrow(0, 4 * r, r * max_blocks)?.reshape((r, max_blocks))?,
        max_blocks,
        max_keys: bucket,
    });
    Ok((buf.narrow(0, 0, r)?, buf, ctx))
}
