//! Prompt-cache spills off the decode path (CUDA). A step that evicts cached blocks gathers them on the compute
//! stream (one device-side copy per layer and buffer, queued like any kernel, before anything can overwrite them).
//! The gathered copies wait in device memory; each step then hands at most [`CHUNK_BYTES`]-sized chunks of them to
//! a second stream that copies them into pinned host buffers while the forward pass runs, at most
//! [`RING_BUFFERS`] chunks in flight. The engine picks the bytes up at a later step, once a chunk's event has
//! completed: the host never waits for a device-to-host copy, and a step that evicts a thousand blocks costs no more
//! pinned memory or copy time than one that evicts thirty. The pinned buffers are allocated once and reused
//! (allocating pinned memory is slow and freeing it synchronizes the device), cached rather than write-combined
//! (the host reads them).
use crate::kv::Spill;
use crate::{Error, Result};
use candle_core::cuda_backend::cudarc::driver::{result, CudaEvent, CudaStream, DevicePtr, PinnedHostSlice};
use candle_core::{DType, Device, Tensor};
use std::collections::VecDeque;
use std::sync::Arc;

/// One step's gathered blocks, waiting to be copied to the host a chunk at a time.
struct Gathered {
    /// Per layer, K then V: each `blocks × block_size` rows.
    tensors: Vec<Tensor>,
    spills: Vec<Spill>,
    /// Blocks already handed to the copy stream.
    next: usize,
}

/// A chunk of blocks in flight to the host.
struct InFlight {
    done: CudaEvent,
    /// The gathered tensors the copy reads, kept alive until it has.
    _source: Vec<Tensor>,
    host: PinnedHostSlice<u8>,
    /// Bytes of one block in each gathered tensor (the chunk holds tensor after tensor, `blocks` blocks each).
    per_block: Vec<usize>,
    spills: Vec<Spill>,
}

/// A chunk whose copy completed (what the sink thread gets: no device objects cross threads).
struct Copied {
    host: PinnedHostSlice<u8>,
    per_block: Vec<usize>,
    spills: Vec<Spill>,
}

/// Pinned bytes of one chunk.
pub const CHUNK_BYTES: usize = 64 << 20;
/// Chunks in flight at once (their pinned buffers are all the pinned memory spills use).
pub const RING_BUFFERS: usize = 4;
/// Gathered bytes that may wait in device memory; evictions beyond are not spilled (dropped, as without a tier).
pub const MAX_WAITING_BYTES: usize = 4 << 30;

pub struct AsyncSpiller {
    compute: Arc<CudaStream>,
    copy: Arc<CudaStream>,
    waiting: VecDeque<Gathered>,
    waiting_bytes: usize,
    inflight: VecDeque<InFlight>,
    free: Vec<PinnedHostSlice<u8>>,
    allocated: usize,
    /// Bytes of one ring buffer ([`CHUNK_BYTES`]; smaller in tests, to cut spills into several chunks).
    chunk_bytes: usize,
    /// The thread completed chunks go to, and the buffers it gives back.
    sink: Option<(std::sync::mpsc::Sender<Copied>, std::sync::mpsc::Receiver<PinnedHostSlice<u8>>)>,
    /// Chunks with the sink thread.
    handed: usize,
}

fn driver(e: impl std::fmt::Display) -> Error {
    super::driver_error("spill copy", e)
}

fn bytes_of(t: &Tensor) -> usize {
    t.elem_count() * t.dtype().size_in_bytes()
}

impl AsyncSpiller {
    /// None on a CPU device.
    pub fn new(device: &Device) -> Result<Option<Self>> {
        let Device::Cuda(d) = device else { return Ok(None) };
        let compute = d.cuda_stream();
        let copy = compute.context().new_stream().map_err(driver)?;
        Ok(Some(Self {
            compute,
            copy,
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            inflight: VecDeque::new(),
            free: Vec::new(),
            allocated: 0,
            chunk_bytes: CHUNK_BYTES,
            sink: None,
            handed: 0,
        }))
    }

    /// Ring buffers of `bytes` instead of [`CHUNK_BYTES`] (tests: several chunks from a few small blocks).
    pub fn with_chunk_bytes(mut self, bytes: usize) -> Self {
        self.chunk_bytes = bytes;
        self
    }

    /// Whether gathering `blocks` more blocks of `block_bytes` each stays within [`MAX_WAITING_BYTES`] (else the
    /// caller drops them).
    pub fn has_room(&self, blocks: usize, block_bytes: usize) -> bool {
        self.waiting_bytes + blocks * block_bytes <= MAX_WAITING_BYTES
    }

    /// Queue `gathered` (per layer, K then V: each `blocks × block_size` rows, as `PagedKv::gather_blocks` returns
    /// them) for `spills` (in the gathered order), and start copying what the ring has room for.
    pub fn start(&mut self, gathered: Vec<Tensor>, spills: Vec<Spill>) -> Result<()> {
        if spills.is_empty() {
            return Ok(());
        }
        for t in &gathered {
            let (_, layout) = t.storage_and_layout();
            if layout.start_offset() != 0 || !layout.is_contiguous() {
                return Err(Error::InvalidRequest("spill copy: gathered blocks must be contiguous".into()));
            }
        }
        // The copy stream must not read the gathered blocks before the compute stream wrote them.
        let ready = self.compute.record_event(None).map_err(driver)?;
        self.copy.wait(&ready).map_err(driver)?;
        self.waiting_bytes += gathered.iter().map(bytes_of).sum::<usize>();
        self.waiting.push_back(Gathered { tensors: gathered, spills, next: 0 });
        self.pump()
    }

    /// A free pinned ring buffer, while fewer than [`RING_BUFFERS`] exist or one is free.
    fn buffer(&mut self) -> Result<Option<PinnedHostSlice<u8>>> {
        if let Some(b) = self.free.pop() {
            return Ok(Some(b));
        }
        if self.allocated >= RING_BUFFERS {
            return Ok(None);
        }
        // SAFETY: page-locked host memory, cached (flags 0: the host reads it back); read only after a copy into
        // it completed.
        let b = unsafe { self.copy.context().alloc_pinned_with_flags::<u8>(self.chunk_bytes, 0) }.map_err(driver)?;
        self.allocated += 1;
        Ok(Some(b))
    }

    /// Hand waiting blocks to the copy stream, a chunk per free ring buffer.
    fn pump(&mut self) -> Result<()> {
        while let Some(g) = self.waiting.front() {
            let per_block: Vec<usize> = g.tensors.iter().map(|t| bytes_of(t) / g.spills.len()).collect();
            let block_bytes: usize = per_block.iter().sum();
            let fit = (self.chunk_bytes / block_bytes.max(1)).max(1);
            if block_bytes > self.chunk_bytes {
                return Err(Error::Unsupported(format!(
                    "spilling KV blocks of {block_bytes} bytes (more than a {}-byte copy chunk)",
                    self.chunk_bytes
                )));
            }
            let Some(mut host) = self.buffer()? else { return Ok(()) };
            let g = self.waiting.front_mut().ok_or_else(|| driver("no waiting spill"))?;
            let (b0, b1) = (g.next, (g.next + fit).min(g.spills.len()));
            let n = b1 - b0;
            let dst = host.as_mut_slice().map_err(driver)?;
            let mut at = 0;
            for (t, &per) in g.tensors.iter().zip(&per_block) {
                let (storage, _) = t.storage_and_layout();
                let cuda = crate::gpu::cuda_of(&storage)?;
                let len = n * per;
                macro_rules! copy_as {
                    ($t:ty) => {{
                        let src = cuda.as_cuda_slice::<$t>()?;
                        let (ptr, _record) = src.device_ptr(&self.copy);
                        let ptr = ptr + (b0 * per) as u64;
                        // SAFETY: bytes [b0 * per, b1 * per) of the contiguous gathered tensor, into [at, at + len)
                        // of a pinned ring buffer of at least the chunk's size, on the copy stream (which waited for the
                        // gather); the buffer is read only after the chunk's event completed.
                        unsafe { result::memcpy_dtoh_async(&mut dst[at..at + len], ptr, self.copy.cu_stream()) }
                            .map_err(driver)?;
                    }};
                }
                match t.dtype() {
                    DType::F32 => copy_as!(f32),
                    DType::BF16 => copy_as!(half::bf16),
                    DType::F16 => copy_as!(half::f16),
                    d => return Err(Error::Unsupported(format!("spilling KV blocks of dtype {d:?}"))),
                }
                at += len;
            }
            let done = self.copy.record_event(None).map_err(driver)?;
            g.next = b1;
            let spills = g.spills[b0..b1].to_vec();
            let source = g.tensors.clone();
            if g.next == g.spills.len() {
                let g = self.waiting.pop_front().ok_or_else(|| driver("no waiting spill"))?;
                self.waiting_bytes -= g.tensors.iter().map(bytes_of).sum::<usize>();
            }
            self.inflight.push_back(InFlight { done, _source: source, host, per_block, spills });
        }
        Ok(())
    }

    /// Nothing waiting or in flight (the sink thread may still be writing the last chunks out).
    pub fn is_idle(&self) -> bool {
        self.inflight.is_empty() && self.waiting.is_empty()
    }

    /// Hand every completed chunk to a thread that splits it into blocks and gives each to `sink` (the SSD tier),
    /// then returns the buffer to the ring: the engine thread never copies spilled bytes itself. Without a sink,
    /// [`Self::collect`] returns the blocks instead.
    pub fn with_sink(mut self, sink: impl Fn(Spill, Vec<u8>) + Send + 'static) -> Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<Copied>();
        let (back_tx, back_rx) = std::sync::mpsc::channel::<PinnedHostSlice<u8>>();
        std::thread::Builder::new()
            .name("hearth-spill".into())
            .spawn(move || {
                for f in rx {
                    match split(&f) {
                        Ok(blocks) => {
                            for (s, d) in f.spills.iter().cloned().zip(blocks) {
                                sink(s, d);
                            }
                        }
                        Err(e) => tracing::warn!("spilling KV blocks: {e}"),
                    }
                    if back_tx.send(f.host).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| Error::io("spawning the spill thread", e))?;
        self.sink = Some((tx, back_rx));
        Ok(self)
    }

    /// Buffers the sink thread is done with.
    fn reclaim(&mut self, wait: bool) -> Result<()> {
        let Some((_, back)) = &self.sink else { return Ok(()) };
        if wait {
            while self.handed > 0 {
                let b = back.recv().map_err(|_| driver("the spill thread stopped"))?;
                self.free.push(b);
                self.handed -= 1;
            }
        }
        while let Ok(b) = back.try_recv() {
            self.free.push(b);
            self.handed -= 1;
        }
        Ok(())
    }

    /// The spills whose copies are done (all of them with `wait`), each with its block's bytes in the SSD
    /// tier's layout (per layer K then V), or none when a sink takes them; then more waiting blocks go to the copy
    /// stream.
    pub fn collect(&mut self, wait: bool) -> Result<Vec<(Spill, Vec<u8>)>> {
        let mut out = Vec::new();
        loop {
            self.reclaim(false)?;
            while let Some(f) = self.inflight.front() {
                if wait {
                    f.done.synchronize().map_err(driver)?;
                } else if !f.done.is_complete() {
                    break;
                }
                let Some(InFlight { host, per_block, spills, .. }) = self.inflight.pop_front() else { break };
                let c = Copied { host, per_block, spills };
                if let Some((tx, _)) = &self.sink {
                    self.handed += 1;
                    tx.send(c).map_err(|_| driver("the spill thread stopped"))?;
                    continue;
                }
                out.extend(c.spills.iter().cloned().zip(split(&c)?));
                self.free.push(c.host);
            }
            self.pump()?;
            if !wait {
                return Ok(out);
            }
            if self.is_idle() {
                self.reclaim(true)?;
                return Ok(out);
            }
            // Buffers must come back before the waiting blocks can be copied.
            if self.free.is_empty() && self.allocated >= RING_BUFFERS {
                let Some((_, back)) = &self.sink else { continue };
                let b = back.recv().map_err(|_| driver("the spill thread stopped"))?;
                self.free.push(b);
                self.handed -= 1;
            }
        }
    }
}

/// A completed chunk's blocks, each in the SSD tier's layout (per layer K then V).
fn split(f: &Copied) -> Result<Vec<Vec<u8>>> {
    let bytes = f.host.as_slice().map_err(driver)?;
    let mut blocks = vec![Vec::with_capacity(f.per_block.iter().sum()); f.spills.len()];
    let mut at = 0;
    for &per in &f.per_block {
        for b in blocks.iter_mut() {
            b.extend_from_slice(&bytes[at..at + per]);
            at += per;
        }
    }
    Ok(blocks)
}
