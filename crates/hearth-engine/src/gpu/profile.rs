//! The step observer ([`StepObserver`]): what the runner tells about each step, and the counters it keeps for
//! `/stats` — the host's time to issue a step and to wait for its output, and with the `cuda` feature:
//!
//! - [`StepTimer`] (`HEARTH_CUDA_STEP_TIMING=1`): CUDA events around every step's forward pass, so that `/stats`
//!   tells the device's time for a step from the gap between two steps (the host's work between them: reading
//!   the token back, sampling, scheduling, uploading the next step's inputs);
//! - [`ProfileWindow`], a profiling window for Nsight Compute: `HEARTH_CUDA_PROFILE=ROWS:STEPS` calls
//!   `cuProfilerStart` before the first step that decodes exactly ROWS rows (one new token each) and
//!   `cuProfilerStop` after STEPS steps, so that `ncu --profile-from-start off` records the kernels of those decode
//!   steps only (bench/gpu/device_profile.sh); `HEARTH_CUDA_PROFILE=prefill:STEPS` opens it instead at the first
//!   step that carries at least 1024 new tokens.
//!
//! Without the feature the observer keeps the host's times only.

use crate::types::EngineStats;
#[cfg(feature = "cuda")]
use candle_core::backend::BackendDevice;
#[cfg(feature = "cuda")]
use candle_core::cuda_backend::cudarc::driver::sys;
use candle_core::Device;
use std::time::Instant;

/// Cumulative step time, milliseconds (see `EngineStats`).
#[derive(Debug, Default, Clone, Copy)]
struct StepTimes {
    issue_ms: f64,
    wait_ms: f64,
    device_ms: f64,
    gap_ms: f64,
    gaps: u64,
}

/// Observes the runner's steps: [`Self::start`] before a step's first upload, [`Self::issued`] once its last
/// kernel is issued, [`Self::done`] once its output is on the host (a failed step never gets there and counts
/// nothing), [`Self::idle`] when no step follows at once.
pub struct StepObserver {
    times: StepTimes,
    /// When the running step started, and when its last kernel was issued.
    t_issue: Instant,
    t_wait: Instant,
    #[cfg(feature = "cuda")]
    device: Device,
    #[cfg(feature = "cuda")]
    window: Option<ProfileWindow>,
    #[cfg(feature = "cuda")]
    timer: Option<StepTimer>,
}

impl StepObserver {
    /// An observer of steps on `device` (device timing and the profiling window as their levers ask).
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
    pub fn new(device: &Device) -> Self {
        let now = Instant::now();
        Self {
            times: StepTimes::default(),
            t_issue: now,
            t_wait: now,
            #[cfg(feature = "cuda")]
            device: device.clone(),
            #[cfg(feature = "cuda")]
            window: ProfileWindow::from_env(),
            #[cfg(feature = "cuda")]
            timer: StepTimer::from_env(device),
        }
    }

    /// Before a step of `rows` rows carrying `tokens` new tokens (`decode_only`: each adds one) uploads anything.
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
    pub fn start(&mut self, rows: usize, tokens: usize, decode_only: bool) {
        #[cfg(feature = "cuda")]
        if let Some(p) = self.window.as_mut() {
            p.before(&self.device, rows, tokens, decode_only);
        }
        self.t_issue = Instant::now();
        #[cfg(feature = "cuda")]
        if let Some(t) = self.timer.as_mut() {
            t.start();
        }
    }

    /// The step's last kernel is issued (its output is not read back yet).
    pub fn issued(&mut self) {
        self.t_wait = Instant::now();
        #[cfg(feature = "cuda")]
        if let Some(t) = self.timer.as_mut() {
            t.end();
        }
    }

    /// The step's output is on the host: count its times.
    pub fn done(&mut self) {
        self.times.issue_ms += (self.t_wait - self.t_issue).as_secs_f64() * 1e3;
        self.times.wait_ms += self.t_wait.elapsed().as_secs_f64() * 1e3;
        #[cfg(feature = "cuda")]
        if let Some((busy, gap)) = self.timer.as_mut().and_then(|t| t.collect()) {
            self.times.device_ms += busy;
            if let Some(g) = gap {
                self.times.gap_ms += g;
                self.times.gaps += 1;
            }
        }
        #[cfg(feature = "cuda")]
        if let Some(p) = self.window.as_mut() {
            p.after(&self.device);
        }
    }

    /// No step follows at once (the engine waits for work): the wait is no gap between steps.
    pub fn idle(&mut self) {
        #[cfg(feature = "cuda")]
        if let Some(t) = self.timer.as_mut() {
            t.idle();
        }
    }

    /// The step counters, into a `/stats` snapshot.
    pub fn add_stats(&self, s: &mut EngineStats) {
        s.step_issue_ms_total = self.times.issue_ms;
        s.step_wait_ms_total = self.times.wait_ms;
        s.step_device_ms_total = self.times.device_ms;
        s.step_gap_ms_total = self.times.gap_ms;
        s.step_gaps_total = self.times.gaps;
    }
}

/// The Nsight Compute window of `HEARTH_CUDA_PROFILE`.
#[cfg(feature = "cuda")]
pub struct ProfileWindow {
    /// 0: a prefill step (>= 1024 new tokens).
    rows: usize,
    steps: usize,
    done: usize,
    active: bool,
}

#[cfg(feature = "cuda")]
impl ProfileWindow {
    /// The window asked for by `HEARTH_CUDA_PROFILE` (the lever registry parsed it), if any.
    pub fn from_env() -> Option<Self> {
        let spec = crate::levers::get().cuda_profile?;
        Some(Self { rows: spec.rows, steps: spec.steps, done: 0, active: false })
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

#[cfg(feature = "cuda")]
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

/// Events around each step's forward pass on the device's stream (`HEARTH_CUDA_STEP_TIMING=1`; off by default:
/// two event records a step). `start` before the step's first upload, `end` after its last kernel is issued, and
/// `collect` once the host has synced on the step's output: the device time from start to end, and from the
/// previous step's end to this start (the gap the host leaves the device between steps).
#[cfg(feature = "cuda")]
pub struct StepTimer {
    stream: std::sync::Arc<candle_core::cuda_backend::cudarc::driver::CudaStream>,
    start: Option<candle_core::cuda_backend::cudarc::driver::CudaEvent>,
    end: Option<candle_core::cuda_backend::cudarc::driver::CudaEvent>,
    prev_end: Option<candle_core::cuda_backend::cudarc::driver::CudaEvent>,
}

#[cfg(feature = "cuda")]
impl StepTimer {
    /// A timer for a CUDA device when `HEARTH_CUDA_STEP_TIMING=1`, else None.
    pub fn from_env(device: &Device) -> Option<Self> {
        let Device::Cuda(d) = device else { return None };
        crate::levers::get().cuda_step_timing.then(|| Self {
            stream: d.cuda_stream(),
            start: None,
            end: None,
            prev_end: None,
        })
    }

    fn record(&self) -> Option<candle_core::cuda_backend::cudarc::driver::CudaEvent> {
        match self.stream.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)) {
            Ok(e) => Some(e),
            Err(e) => {
                tracing::warn!("step timing: {e}");
                None
            }
        }
    }

    /// No step this time: the next step's gap would include the engine's idle time, so it is not counted.
    pub fn idle(&mut self) {
        self.prev_end = None;
    }

    /// Before the step's first upload or launch.
    pub fn start(&mut self) {
        self.start = self.record();
    }

    /// After the step's last kernel is issued (before its output is read back).
    pub fn end(&mut self) {
        self.end = self.record();
    }

    /// After the host synced on the step's output: (device ms from start to end, ms from the previous step's end to
    /// this start when there was one). None when an event is missing (a failed step) or timing failed.
    pub fn collect(&mut self) -> Option<(f64, Option<f64>)> {
        let (start, end) = (self.start.take()?, self.end.take()?);
        let busy = start.elapsed_ms(&end).ok()? as f64;
        let gap = self.prev_end.as_ref().and_then(|p| p.elapsed_ms(&start).ok()).map(|g| g as f64);
        self.prev_end = Some(end);
        Some((busy, gap))
    }
}
