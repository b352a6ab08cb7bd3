//! Kernel launches for hearth's own decode-path kernels, with programmatic dependent launch (PDL).
//!
//! On compute capability 9.0+ (Hopper) a kernel launched with the *programmatic stream serialization* attribute
//! may start while the kernel before it in the stream is still running. Each of hearth's kernels launched this way
//! calls `pdl_trigger()` first (its own successor may then launch) and `pdl_wait()` (`griddepcontrol.wait`: the
//! predecessor has completed and its writes are visible) before it reads anything a previous kernel wrote or writes
//! anything at all. What a kernel does before the wait only reads data that no kernel writes — the GEMV streams its
//! weight rows — so a decode step's ~300 small launches overlap their launch latency, ramp-up and tails instead of
//! paying them one after the other. Kernels of candle and cuBLAS are launched normally and serialize.
//!
//! Safety of the chain: a kernel's wait returns only after its predecessor completed, and the predecessor
//! completed only after its own wait returned, so every earlier kernel is complete when a kernel passes its wait.
//!
//! `HEARTH_CUDA_PDL=0` launches them normally (the waits are then no-ops); so does a build whose PTX targets a
//! compute capability below 9.0 (`CUDA_COMPUTE_CAP`), where the waits are compiled out. With PDL on, candle's per-tensor event
//! tracking is switched off at device creation (`device::tune_cuda`): its event records between two launches would
//! sit between the kernels that PDL overlaps; hearth runs every kernel of a device on that device's one stream.

use candle_core::cuda_backend::cudarc::driver::sys;
use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaStream, DevicePtr, DeviceRepr, DriverError, LaunchConfig, SyncOnDrop,
};
use std::ffi::c_void;

/// The most device-pointer arguments one launch takes.
const MAX_PTRS: usize = 16;

/// The compute capability hearth's PTX was built for (build.rs, `CUDA_COMPUTE_CAP`).
const PTX_CAP: &str = env!("HEARTH_PTX_CAP");

/// What the launchers need to know of a device, read once per device (not per launch: ~330 launches a step).
#[derive(Clone, Copy, Debug)]
pub struct DeviceProps {
    /// Compute capability 9.0+ (Hopper): programmatic dependent launch exists.
    pub hopper: bool,
    /// Multiprocessors (for persistent grids).
    pub sms: usize,
}

/// The devices a process caches properties for; a higher ordinal is queried at every call (still correct).
const CACHED_DEVICES: usize = 16;

/// This stream's device's [`DeviceProps`], cached per device ordinal.
pub fn device_props(stream: &CudaStream) -> DeviceProps {
    static CACHE: [std::sync::OnceLock<DeviceProps>; CACHED_DEVICES] =
        [const { std::sync::OnceLock::new() }; CACHED_DEVICES];
    let ctx = stream.context();
    let query = || {
        let major = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).unwrap_or(0);
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_or(132, |v| v.max(1) as usize);
        DeviceProps { hopper: major >= 9, sms }
    };
    match CACHE.get(ctx.ordinal()) {
        Some(cell) => *cell.get_or_init(query),
        None => query(),
    }
}

/// Whether PDL launches are on for this stream's device: `HEARTH_CUDA_PDL` not `0`, the PTX built for compute
/// capability 9.0+ (below that `pdl_wait` compiles to nothing, and a kernel launched with the attribute could read
/// its predecessor's output too early), and the device 9.0 or newer.
pub fn pdl_on(stream: &CudaStream) -> bool {
    crate::levers::get().cuda_pdl && PTX_CAP.trim().parse::<u32>().is_ok_and(|c| c >= 90) && device_props(stream).hopper
}

/// Whether thread-block clusters can be launched on this stream's device: the PTX built for compute capability 9.0+
/// (the cluster kernels trap below that) and the device 9.0 or newer.
pub fn clusters_on(stream: &CudaStream) -> bool {
    PTX_CAP.trim().parse::<u32>().is_ok_and(|c| c >= 90) && device_props(stream).hopper
}

/// A launch of one kernel: arguments in the kernel's order, then [`Launch::launch`].
pub struct Launch<'a> {
    stream: &'a CudaStream,
    func: &'a CudaFunction,
    /// Device pointers, at stable addresses that `args` points into.
    ptrs: Box<[u64; MAX_PTRS]>,
    n_ptrs: usize,
    args: Vec<*mut c_void>,
    /// Event bookkeeping of the pointer arguments (records after the launch, when candle tracks events).
    guards: Vec<SyncOnDrop<'a>>,
    overflow: bool,
    /// Launch without the PDL attribute even where PDL is on.
    plain: bool,
    /// Thread-block cluster dimensions (compute capability 9.0+), if any.
    cluster: Option<(u32, u32, u32)>,
}

impl<'a> Launch<'a> {
    pub fn new(stream: &'a CudaStream, func: &'a CudaFunction) -> Self {
        Self {
            stream,
            func,
            ptrs: Box::new([0; MAX_PTRS]),
            n_ptrs: 0,
            args: Vec::with_capacity(24),
            guards: Vec::new(),
            overflow: false,
            plain: false,
            cluster: None,
        }
    }

    /// Launch this kernel without the PDL attribute (it then starts after the previous kernel has completed).
    pub fn plain(&mut self, plain: bool) -> &mut Self {
        self.plain = plain;
        self
    }

    /// Launch as thread-block clusters of these dimensions (the grid a multiple of them; compute capability 9.0+).
    pub fn cluster(&mut self, dims: (u32, u32, u32)) -> &mut Self {
        self.cluster = Some(dims);
        self
    }

    /// A device buffer argument (a slice or a view of one).
    pub fn ptr<T, P: DevicePtr<T>>(&mut self, p: &'a P) -> &mut Self {
        let (ptr, guard) = p.device_ptr(self.stream);
        self.guards.push(guard);
        self.raw_ptr(ptr)
    }

    /// A device address the caller keeps alive until the launch (a quantized weight's buffer, whose address is all
    /// candle hands out).
    pub fn weight(&mut self, ptr: u64) -> &mut Self {
        self.raw_ptr(ptr)
    }

    /// A null device pointer (an optional buffer the kernel does not use).
    pub fn null(&mut self) -> &mut Self {
        self.raw_ptr(0)
    }

    fn raw_ptr(&mut self, ptr: u64) -> &mut Self {
        if self.n_ptrs == MAX_PTRS {
            self.overflow = true;
            return self;
        }
        self.ptrs[self.n_ptrs] = ptr;
        let at = &mut self.ptrs[self.n_ptrs] as *mut u64 as *mut c_void;
        self.n_ptrs += 1;
        self.args.push(at);
        self
    }

    /// A scalar argument (i32, f32, ...), passed by value.
    pub fn val<T: DeviceRepr>(&mut self, v: &'a T) -> &mut Self {
        self.args.push(v as *const T as *mut c_void);
        self
    }

    /// Launch on the stream, with the PDL attribute when [`pdl_on`].
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and type, and the kernel must stay inside
    /// its buffers. With PDL on, the kernel must call `pdl_wait()` before it reads data written by an earlier
    /// kernel and before any write.
    pub unsafe fn launch(mut self, cfg: LaunchConfig) -> Result<(), DriverError> {
        if self.overflow {
            return Err(DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        self.stream.context().bind_to_thread()?;
        // SAFETY: a zeroed attribute is a valid value of this plain C union; ids and values are set below.
        let mut attrs: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
        let mut n_attrs = 0;
        if pdl_on(self.stream) && !self.plain {
            attrs[n_attrs].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[n_attrs].value.programmaticStreamSerializationAllowed = 1;
            n_attrs += 1;
        }
        if let Some((x, y, z)) = self.cluster {
            attrs[n_attrs].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[n_attrs].value.clusterDim.x = x;
            attrs[n_attrs].value.clusterDim.y = y;
            attrs[n_attrs].value.clusterDim.z = z;
            n_attrs += 1;
        }
        let lc = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: if n_attrs > 0 { attrs.as_mut_ptr() } else { std::ptr::null_mut() },
            numAttrs: n_attrs as u32,
        };
        // SAFETY: `args` points at live values (the boxed pointer array, the caller's scalars) for the call; the
        // caller vouches for the kernel's signature and bounds.
        let r = unsafe {
            sys::cuLaunchKernelEx(&lc, self.func.cu_function(), self.args.as_mut_ptr(), std::ptr::null_mut())
        };
        drop(std::mem::take(&mut self.guards));
        match r {
            sys::CUresult::CUDA_SUCCESS => Ok(()),
            e => Err(DriverError(e)),
        }
    }
}
