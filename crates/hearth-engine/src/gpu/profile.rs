//! A profiling window for Nsight Compute: `HEARTH_CUDA_PROFILE=ROWS:STEPS` calls `cuProfilerStart` before the
//! first step that decodes exactly ROWS rows (one new token each) and `cuProfilerStop` after STEPS steps, so that
//! `ncu --profile-from-start off` records the kernels of those decode steps only (bench/gpu/device_profile.sh).
//! `HEARTH_CUDA_PROFILE=prefill:STEPS` opens it instead at the first step that carries at least 1024 new tokens.

use candle_core::backend::BackendDevice;
use candle_core::cuda_backend::cudarc::driver::sys;
use candle_core::Device;

pub struct ProfileWindow {
    /// 0: a prefill step (>= 1024 new tokens).
    rows: usize,
    steps: usize,
    done: usize,
    active: bool,
}

impl ProfileWindow {
    /// The window asked for by `HEARTH_CUDA_PROFILE`, if any (a malformed value is reported and ignored).
    pub fn from_env() -> Option<Self> {
        let v = std::env::var("HEARTH_CUDA_PROFILE").ok()?;
        let rows = |r: &str| if r == "prefill" { Some(0) } else { r.parse::<usize>().ok().filter(|&n| n > 0) };
        let parsed = v.split_once(':').and_then(|(r, s)| Some((rows(r)?, s.parse::<usize>().ok()?)));
        match parsed {
            Some((rows, steps)) if steps > 0 => Some(Self { rows, steps, done: 0, active: false }),
            _ => {
                tracing::warn!("HEARTH_CUDA_PROFILE={v:?} is not ROWS:STEPS or prefill:STEPS (counts > 0); not profiling");
                None
            }
        }
    }

    /// Before a step of `rows` rows carrying `tokens` new tokens, `decode_only` when each adds one token.
    pub fn before(&mut self, device: &Device, rows: usize, tokens: usize, decode_only: bool) {
        let wanted = if self.rows == 0 { tokens >= 1024 } else { rows == self.rows && decode_only };
        if !self.active && self.done == 0 && wanted {
            self.active = call(device, true);
        }
    }

    /// After a step.
    pub fn after(&mut self, device: &Device) {
        if self.active {
            self.done += 1;
            if self.done >= self.steps {
                self.active = false;
                call(device, false);
            }
        }
    }
}

fn call(device: &Device, start: bool) -> bool {
    let Device::Cuda(d) = device else { return false };
    if let Err(e) = d.synchronize() {
        tracing::warn!("profile window: {e}");
        return false;
    }
    if d.cuda_stream().context().bind_to_thread().is_err() {
        return false;
    }
    // The CUDA toolkit's link stub lacks cuProfilerStart/Stop: take them from the driver library at run time.
    let name: &[u8] = if start { b"cuProfilerStart\0" } else { b"cuProfilerStop\0" };
    // SAFETY: libcuda is the driver already loaded by this process; both functions take no arguments and
    // return a CUresult.
    let r = unsafe {
        let lib = match libloading::Library::new("libcuda.so.1") {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("profile window: {e}");
                return false;
            }
        };
        match lib.get::<unsafe extern "C" fn() -> sys::CUresult>(name) {
            Ok(f) => f(),
            Err(e) => {
                tracing::warn!("profile window: {e}");
                return false;
            }
        }
    };
    tracing::info!("profile window {}: {r:?}", if start { "start" } else { "stop" });
    r == sys::CUresult::CUDA_SUCCESS
}
