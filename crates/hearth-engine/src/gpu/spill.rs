//! Prompt-cache spills off the decode path (CUDA). A step that evicts cached blocks gathers them on the compute
//! stream (one device-side copy per layer and buffer, queued like any kernel), then a second stream waits for
//! that gather and copies the result into pinned host memory while the step's forward pass runs. The engine picks
//! the bytes up at a later step, once the copy's event has completed: the host never waits for a device-to-host
//! copy of a spill.

use crate::scheduler::Spill;
use crate::{Error, Result};
use candle_core::cuda_backend::cudarc::driver::{CudaEvent, CudaStream, PinnedHostSlice};
use candle_core::{DType, Device, Tensor};
use std::collections::VecDeque;
use std::sync::Arc;

/// One step's spills in flight.
struct InFlight {
    done: CudaEvent,
    /// The gathered device tensors, kept alive until the copy has read them.
    _gathered: Vec<Tensor>,
    host: Vec<PinnedHostSlice<u8>>,
    spills: Vec<Spill>,
}

pub struct AsyncSpiller {
    compute: Arc<CudaStream>,
    copy: Arc<CudaStream>,
    inflight: VecDeque<InFlight>,
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
        Ok(Some(Self { compute, copy, inflight: VecDeque::new() }))
    }

    /// Start copying `gathered` (per layer, K then V: each `blocks × block_size` rows, as
    /// `PagedKv::gather_blocks` returns them) for `spills` (in the gathered order).
    pub fn start(&mut self, gathered: Vec<Tensor>, spills: Vec<Spill>) -> Result<()> {
        let ready = self.compute.record_event(None).map_err(driver)?;
        self.copy.wait(&ready).map_err(driver)?;
        let mut host = Vec::with_capacity(gathered.len());
        for t in &gathered {
            let bytes = t.elem_count() * t.dtype().size_in_bytes();
            // SAFETY: pinned host memory of `bytes` bytes; it is only read after the copy's event completed.
            let mut dst = unsafe { self.copy.context().alloc_pinned::<u8>(bytes) }.map_err(driver)?;
            let (storage, layout) = t.storage_and_layout();
            let cuda = crate::gpu::cuda_of(&storage)?;
            if layout.start_offset() != 0 || !layout.is_contiguous() {
                return Err(Error::InvalidRequest("spill copy: gathered blocks must be contiguous".into()));
            }
            macro_rules! copy_as {
                ($t:ty) => {{
                    let src = cuda.as_cuda_slice::<$t>()?;
                    // SAFETY: the bytes of `elem_count` values of this dtype, within the slice.
                    let view = unsafe { src.transmute::<u8>(bytes) }.ok_or_else(|| driver("transmute"))?;
                    self.copy.memcpy_dtoh(&view, &mut dst).map_err(driver)?;
                }};
            }
            match t.dtype() {
                DType::F32 => copy_as!(f32),
                DType::BF16 => copy_as!(half::bf16),
                DType::F16 => copy_as!(half::f16),
                d => return Err(Error::Unsupported(format!("spilling KV blocks of dtype {d:?}"))),
            }
            host.push(dst);
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
            for h in &f.host {
                let ptr = h.as_ptr().map_err(driver)?;
                // SAFETY: the copy into this pinned buffer completed (its event), and nothing else writes it.
                let bytes = unsafe { std::slice::from_raw_parts(ptr, h.len()) };
                let part = bytes.len() / n;
                for (b, chunk) in blocks.iter_mut().zip(bytes.chunks_exact(part.max(1))) {
                    b.extend_from_slice(chunk);
                }
            }
            out.extend(f.spills.into_iter().zip(blocks));
        }
        Ok(out)
    }
}
