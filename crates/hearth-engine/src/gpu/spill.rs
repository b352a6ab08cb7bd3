//! Prompt-cache spills off the decode path (CUDA). A step that evicts cached blocks gathers them on the compute
//! stream (one device-side copy per layer and buffer, queued like any kernel), then a second stream waits for
//! that gather and copies the result into pinned host memory while the step's forward pass runs. The engine picks
//! the bytes up at a later step, once the copy's event has completed: the host never waits for a device-to-host
//! copy of a spill. The pinned buffers are cached host memory (not write-combined: the host reads them) and are
//! reused from a pool: allocating or freeing pinned memory is slow and freeing it synchronizes the device.

use crate::scheduler::Spill;
use crate::{Error, Result};
use candle_core::cuda_backend::cudarc::driver::{result, CudaEvent, CudaStream, DevicePtr, PinnedHostSlice};
use candle_core::{DType, Device, Tensor};
use std::collections::VecDeque;
use std::sync::Arc;

/// One step's spills in flight.
struct InFlight {
    done: CudaEvent,
    /// The gathered device tensors, kept alive until the copy has read them.
    _gathered: Vec<Tensor>,
    /// Each gathered tensor's bytes: a pooled buffer and the length used.
    host: Vec<(PinnedHostSlice<u8>, usize)>,
    spills: Vec<Spill>,
}

/// Pinned buffers kept for reuse, at most [`POOL_MAX_BYTES`] of them.
#[derive(Default)]
struct PinnedPool {
    free: Vec<PinnedHostSlice<u8>>,
    bytes: usize,
}

/// Pinned memory the pool keeps between steps.
const POOL_MAX_BYTES: usize = 1 << 30;
/// The smallest pinned buffer allocated (sizes are rounded up to a power of two from here).
const MIN_BUFFER: usize = 1 << 20;

impl PinnedPool {
    /// The smallest free buffer of at least `bytes`, or a new one.
    fn take(&mut self, copy: &CudaStream, bytes: usize) -> Result<PinnedHostSlice<u8>> {
        let best = self.free.iter().enumerate().filter(|(_, b)| b.len() >= bytes).min_by_key(|(_, b)| b.len());
        if let Some((i, _)) = best {
            let b = self.free.swap_remove(i);
            self.bytes -= b.len();
            return Ok(b);
        }
        let size = bytes.max(MIN_BUFFER).next_power_of_two();
        // SAFETY: page-locked host memory of `size` bytes, cached (flags 0: the host reads it back); its contents
        // are only read after a copy into it completed.
        unsafe { copy.context().alloc_pinned_with_flags::<u8>(size, 0) }.map_err(driver)
    }

    fn give(&mut self, b: PinnedHostSlice<u8>) {
        if self.bytes + b.len() <= POOL_MAX_BYTES {
            self.bytes += b.len();
            self.free.push(b);
        }
    }
}

pub struct AsyncSpiller {
    compute: Arc<CudaStream>,
    copy: Arc<CudaStream>,
    inflight: VecDeque<InFlight>,
    pool: PinnedPool,
}

fn driver(e: impl std::fmt::Display) -> Error {
    Error::Candle(candle_core::Error::Msg(format!("spill copy: {e}")))
}

impl AsyncSpiller {
    /// None on a CPU device.
    pub fn new(device: &Device) -> Result<Option<Self>> {
        let Device::Cuda(d) = device else { return Ok(None) };
        let compute = d.cuda_stream();
        let copy = compute.context().new_stream().map_err(driver)?;
        Ok(Some(Self { compute, copy, inflight: VecDeque::new(), pool: PinnedPool::default() }))
    }

    /// Start copying `gathered` (per layer, K then V: each `blocks × block_size` rows, as
    /// `PagedKv::gather_blocks` returns them) for `spills` (in the gathered order).
    pub fn start(&mut self, gathered: Vec<Tensor>, spills: Vec<Spill>) -> Result<()> {
        let ready = self.compute.record_event(None).map_err(driver)?;
        self.copy.wait(&ready).map_err(driver)?;
        let mut host = Vec::with_capacity(gathered.len());
        for t in &gathered {
            let bytes = t.elem_count() * t.dtype().size_in_bytes();
            let mut dst = self.pool.take(&self.copy, bytes)?;
            let (storage, layout) = t.storage_and_layout();
            let cuda = crate::gpu::cuda_of(&storage)?;
            if layout.start_offset() != 0 || !layout.is_contiguous() {
                return Err(Error::InvalidRequest("spill copy: gathered blocks must be contiguous".into()));
            }
            macro_rules! copy_as {
                ($t:ty) => {{
                    let src = cuda.as_cuda_slice::<$t>()?;
                    let (ptr, _record) = src.device_ptr(&self.copy);
                    let dst = dst.as_mut_slice().map_err(driver)?;
                    // SAFETY: `bytes` bytes from the start of `src` (its values of this dtype, contiguous) into
                    // the first `bytes` of a pinned buffer at least that long, on the copy stream, which waited
                    // for the gather; the buffer is read only after the copy's event completed.
                    unsafe { result::memcpy_dtoh_async(&mut dst[..bytes], ptr, self.copy.cu_stream()) }
                        .map_err(driver)?;
                }};
            }
            match t.dtype() {
                DType::F32 => copy_as!(f32),
                DType::BF16 => copy_as!(half::bf16),
                DType::F16 => copy_as!(half::f16),
                d => return Err(Error::Unsupported(format!("spilling KV blocks of dtype {d:?}"))),
            }
            host.push((dst, bytes));
        }
        let done = self.copy.record_event(None).map_err(driver)?;
        self.inflight.push_back(InFlight { done, _gathered: gathered, host, spills });
        Ok(())
    }

    pub fn is_idle(&self) -> bool {
        self.inflight.is_empty()
    }

    /// The spills whose copies are done (all of them with `wait`), each with its block's bytes in the SSD
    /// tier's layout (per layer K then V).
    pub fn collect(&mut self, wait: bool) -> Result<Vec<(Spill, Vec<u8>)>> {
        let mut out = Vec::new();
        while let Some(f) = self.inflight.front() {
            if wait {
                f.done.synchronize().map_err(driver)?;
            } else if !f.done.is_complete() {
                break;
            }
            let Some(f) = self.inflight.pop_front() else { break };
            let n = f.spills.len().max(1);
            let mut blocks = vec![Vec::new(); f.spills.len()];
            for (h, used) in &f.host {
                let ptr = h.as_ptr().map_err(driver)?;
                // SAFETY: the copy of `used` bytes into this pinned buffer completed (its event), and nothing else
                // writes it.
                let bytes = unsafe { std::slice::from_raw_parts(ptr, *used) };
                let part = bytes.len() / n;
                for (b, chunk) in blocks.iter_mut().zip(bytes.chunks_exact(part.max(1))) {
                    b.extend_from_slice(chunk);
                }
            }
            for (h, _) in f.host {
                self.pool.give(h);
            }
            out.extend(f.spills.into_iter().zip(blocks));
        }
        Ok(out)
    }
}
