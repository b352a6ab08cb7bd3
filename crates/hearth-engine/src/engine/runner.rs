//! The runner: owns the model, its device, the paged KV storage and the SSD tier, and executes a [`StepPlan`] —
//! block transfers (spills, copies, restores), then one packed forward over every planned row — returning each row's logits, or each row's token when a
//! greedy-only step can choose them on the device. Step timing and the profiling window live here.

use crate::attention::{BatchContext, PagedAttention};
use crate::kv::restorer::Restorer;
use crate::kv::ssd::{BlockRecord, SsdStore};
use crate::kv::PagedKv;
use crate::models::Model;
use crate::scheduler::{RestoreReport, SpillKind, StepOutput, StepPlan};
use crate::types::{EngineConfig, EngineStats};
use crate::Result;
use candle_core::{Device, Tensor};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the engine core needs from whatever executes its plans (the model runner; a fake in policy tests).
pub trait Runner {
    /// Execute a plan's block transfers in order: spills (to the cold tier), copies, restores (from it; they may
    /// complete in a later transfer). Returns the restores resolved so far, of this plan or earlier ones; a plan
    /// with no rows may wait a little for one.
    fn transfer(&mut self, plan: &StepPlan) -> Result<RestoreReport>;
    /// Execute one plan's rows: one packed forward. One output per planned row.
    fn run(&mut self, plan: &StepPlan) -> Result<StepOutput>;
    /// `run` for a plan whose sampled rows all pick greedily, some under a grammar
    /// ([`StepPlan::greedy_or_masked`]): `masks`, called once the forward pass is issued, gives each planned row's
    /// allowed tokens as bits ([`crate::sampling::grammar::Constraint::mask_words`]; None: unmasked). A runner
    /// that picks tokens on a device applies them there; the default copies the logits (the rows are masked on the
    /// host when they sample).
    fn run_masked(&mut self, plan: &StepPlan, masks: &mut Masks) -> Result<StepOutput> {
        let _ = masks;
        self.run(plan)
    }
    /// A receiver that fires once everything spilled so far is durable (None: no cold tier).
    fn flush(&mut self) -> Option<std::sync::mpsc::Receiver<()>> {
        None
    }
    /// No step follows at once (the engine waits for work): timing must not count the wait as a gap.
    fn idle(&mut self) {}
    /// Everything was failed and the block pool started afresh.
    fn reset(&mut self) {}
    /// Add the runner's counters (step time) to a `/stats` snapshot.
    fn add_stats(&self, _stats: &mut EngineStats) {}
}

/// What [`Runner::run_masked`] calls for the rows' grammar masks.
pub type Masks<'a> = dyn FnMut() -> Vec<Option<Vec<u32>>> + 'a;

/// Blocks restored from the SSD tier per host-to-device copy (and at most per step that has rows to run).
const RESTORE_CHUNK: usize = 64;
/// How long a transfer with no rows to run waits for restores to arrive.
const RESTORE_WAIT: Duration = Duration::from_millis(100);

pub struct ModelRunner {
    model: Box<dyn Model>,
    device: Device,
    kv: PagedAttention,
    /// Greedy-only steps take each row's token from the device (`HEARTH_GPU_ARGMAX`).
    argmax_on_device: bool,
    /// The SSD tier (`--ssd-cache`): spilled blocks go there, restores come from there.
    cold: Option<Arc<SsdStore>>,
    /// Reads from the SSD tier in the background.
    restorer: Option<Restorer>,
    /// Bytes of one KV block, and the prompt cache's cap in blocks (for `/stats`).
    block_bytes: u64,
    cache_max_blocks: usize,
    times: StepTimes,
    /// CUDA: evicted blocks are copied to the host on a second stream (`gpu::spill`).
    #[cfg(feature = "cuda")]
    spiller: Option<crate::gpu::spill::AsyncSpiller>,
    #[cfg(feature = "cuda")]
    profile: Option<crate::gpu::profile::ProfileWindow>,
    #[cfg(feature = "cuda")]
    timer: Option<crate::gpu::profile::StepTimer>,
}

/// Cumulative step time, milliseconds (see `EngineStats`).
#[derive(Debug, Default, Clone, Copy)]
struct StepTimes {
    issue_ms: f64,
    wait_ms: f64,
    device_ms: f64,
    gap_ms: f64,
    gaps: u64,
}

impl ModelRunner {
    pub fn new(model: Box<dyn Model>, device: Device, cfg: &EngineConfig, cold: Option<Arc<SsdStore>>) -> Result<Self> {
        let c = model.config();
        let kv_dtype = model.kv_dtype();
        let kv = PagedAttention::new(
            c.num_layers,
            cfg.kv_blocks,
            cfg.kv_block_size,
            c.num_heads,
            c.num_kv_heads,
            c.head_dim,
            kv_dtype,
            &device,
        )?;
        tracing::info!(backend = kv.backend_name(), kv_dtype = ?kv_dtype, "paged attention");
        let block_bytes =
            (PagedKv::bytes_per_token(c.num_layers, c.num_kv_heads, c.head_dim, kv_dtype) * cfg.kv_block_size) as u64;
        #[cfg(feature = "cuda")]
        let argmax_on_device = device.is_cuda() && crate::levers::get().gpu_argmax;
        #[cfg(not(feature = "cuda"))]
        let argmax_on_device = false;
        #[cfg(feature = "cuda")]
        // Evicted blocks' bytes go straight from the spill thread to the SSD tier.
        let spiller = match &cold {
            Some(c) => match crate::gpu::spill::AsyncSpiller::new(&device)? {
                Some(sp) => {
                    let c = c.clone();
                    Some(sp.with_sink(move |s, data| Self::hand_over(Some(&c), &s, data))?)
                }
                None => None,
            },
            None => None,
        };
        Ok(Self {
            restorer: cold.clone().map(Restorer::new),
            #[cfg(feature = "cuda")]
            spiller,
            #[cfg(feature = "cuda")]
            profile: crate::gpu::profile::ProfileWindow::from_env(),
            #[cfg(feature = "cuda")]
            timer: crate::gpu::profile::StepTimer::from_env(&device),
            model,
            device,
            kv,
            argmax_on_device,
            cold,
            block_bytes,
            cache_max_blocks: cfg.cache.max_blocks,
            times: StepTimes::default(),
        })
    }

    /// Give a spilled block's bytes to the SSD tier.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    fn hand_over(cold: Option<&SsdStore>, s: &crate::scheduler::Spill, data: Vec<u8>) {
        let Some(cold) = cold else { return };
        let m = &s.meta;
        cold.spill(
            BlockRecord { hash: m.hash, parent: m.parent, tokens: m.tokens.clone(), data },
            s.kind == SpillKind::Idle,
        );
    }

    /// Upload the blocks the background reads have finished, a chunk at a time (one host-to-device copy per
    /// layer and buffer): one chunk in a step that runs rows, as many as arrive within [`RESTORE_WAIT`] in one
    /// that runs none.
    fn upload_restored(&mut self, no_rows: bool, report: &mut RestoreReport) {
        let Some(restorer) = self.restorer.as_mut() else { return };
        let deadline = Instant::now() + if no_rows { RESTORE_WAIT } else { Duration::ZERO };
        while restorer.outstanding() > 0 {
            let got = restorer.poll(RESTORE_CHUNK, deadline.saturating_duration_since(Instant::now()));
            if got.is_empty() {
                break;
            }
            let mut ok: Vec<(u32, Vec<u8>)> = Vec::with_capacity(got.len());
            for (block, data) in got {
                match data {
                    Some(d) => ok.push((block, d)),
                    None => report.failed.push(block),
                }
            }
            let refs: Vec<(u32, &[u8])> = ok.iter().map(|(b, d)| (*b, d.as_slice())).collect();
            match self.kv.storage_mut().write_blocks(&refs) {
                Ok(()) => report.done.extend(ok.iter().map(|(b, _)| *b)),
                Err(e) => {
                    tracing::warn!("restoring KV blocks from the SSD tier: {e}");
                    report.failed.extend(ok.iter().map(|(b, _)| *b));
                }
            }
            if !no_rows || Instant::now() >= deadline {
                break;
            }
        }
    }

    /// Wait for the spill copies still in flight and hand them over (the engine is idle or flushing).
    fn finish_spills(&mut self) {
        #[cfg(feature = "cuda")]
        if let Some(sp) = self.spiller.as_mut().filter(|sp| !sp.is_idle()) {
            match sp.collect(true) {
                Ok(done) => {
                    for (s, data) in done {
                        Self::hand_over(self.cold.as_deref(), &s, data);
                    }
                }
                Err(e) => tracing::warn!("spilling KV blocks: {e}"),
            }
        }
    }

    /// One packed forward; the rows' tokens picked on the device (greedy, with `masks` when given) or their logits.
    #[allow(unused_variables)]
    fn step(&mut self, plan: &StepPlan, masks: Option<&mut Masks>) -> Result<StepOutput> {
        if let Some(c) = &self.cold {
            c.set_busy(true);
        }
        #[cfg(feature = "cuda")]
        if let Some(p) = self.profile.as_mut() {
            p.before(&self.device, plan.rows.len(), plan.num_tokens(), plan.decode_only());
        }
        let t_issue = Instant::now();
        #[cfg(feature = "cuda")]
        if let Some(t) = self.timer.as_mut() {
            t.start();
        }
        let tokens: Vec<u32> = plan.rows.iter().flat_map(|r| r.tokens.iter().copied()).collect();
        self.kv.storage_mut().set_tables(plan.rows.iter().map(|r| (r.slot, r.blocks.as_slice())));
        let mut ctx = BatchContext::new(&plan.spans(), false, &self.device)?;
        ctx.mark_prompt(plan.rows.iter().map(|r| !r.decoding));
        let input = Tensor::new(tokens.as_slice(), &self.device)?;
        let logits = self.model.forward(&input, &ctx, &mut self.kv)?;
        let t_wait = Instant::now();
        #[cfg(feature = "cuda")]
        if let Some(t) = self.timer.as_mut() {
            t.end();
        }
        let out = match masks {
            #[cfg(feature = "cuda")]
            Some(masks) if self.argmax_on_device => Self::output_masked(&logits, masks())?,
            _ => Self::output(&logits, self.argmax_on_device && plan.greedy_only())?,
        };
        self.times.issue_ms += (t_wait - t_issue).as_secs_f64() * 1e3;
        self.times.wait_ms += t_wait.elapsed().as_secs_f64() * 1e3;
        #[cfg(feature = "cuda")]
        if let Some((busy, gap)) = self.timer.as_mut().and_then(|t| t.collect()) {
            self.times.device_ms += busy;
            if let Some(g) = gap {
                self.times.gap_ms += g;
                self.times.gaps += 1;
            }
        }
        #[cfg(feature = "cuda")]
        if let Some(p) = self.profile.as_mut() {
            p.after(&self.device);
        }
        Ok(out)
    }

    /// Each row's best allowed token, picked on the device (`masks`: each row's mask words, None: every token).
    #[cfg(feature = "cuda")]
    fn output_masked(logits: &Tensor, masks: Vec<Option<Vec<u32>>>) -> Result<StepOutput> {
        let (rows, v) = logits.dims2()?;
        let w = v.div_ceil(32);
        let mut bits = Vec::with_capacity(rows * w);
        for r in 0..rows {
            match masks.get(r).and_then(Option::as_ref) {
                Some(m) => bits.extend((0..w).map(|i| m.get(i).copied().unwrap_or(0))),
                None => bits.extend(std::iter::repeat_n(u32::MAX, w)),
            }
        }
        let bits = Tensor::from_vec(bits, (rows, w), logits.device())?;
        Ok(StepOutput::Ids(crate::gpu::argmax::argmax_rows_masked(logits, &bits)?))
    }

    /// Copy a step's logits (R, V) to the host, or only their argmax per row when `on_device`.
    #[allow(unused_variables)]
    fn output(logits: &Tensor, on_device: bool) -> Result<StepOutput> {
        #[cfg(feature = "cuda")]
        if on_device {
            return Ok(StepOutput::Ids(crate::gpu::argmax::argmax_rows(logits)?));
        }
        Ok(StepOutput::Logits(logits.to_vec2::<f32>()?))
    }
}

impl Runner for ModelRunner {
    fn transfer(&mut self, plan: &StepPlan) -> Result<RestoreReport> {
        let kv = self.kv.storage_mut();
        #[cfg(feature = "cuda")]
        let sync_spills: Vec<&crate::scheduler::Spill> = match self.spiller.as_mut() {
            // Evictions happen while the engine is busy: their copies go to the second stream. Idle demotions and
            // flushes run while it is idle, and a flush must hold its blocks' bytes only a chunk at a time.
            Some(sp) => {
                for (s, data) in sp.collect(false)? {
                    Self::hand_over(self.cold.as_deref(), &s, data);
                }
                let evicted: Vec<crate::scheduler::Spill> =
                    plan.spills.iter().filter(|s| s.kind == SpillKind::Evicted).cloned().collect();
                // Past the device memory spills may wait in, evictions are dropped (the tier misses them).
                if !evicted.is_empty() && sp.has_room(evicted.len(), self.block_bytes as usize) {
                    let blocks: Vec<u32> = evicted.iter().map(|s| s.block).collect();
                    sp.start(kv.gather_blocks(&blocks)?, evicted)?;
                }
                plan.spills.iter().filter(|s| s.kind != SpillKind::Evicted).collect()
            }
            None => plan.spills.iter().collect(),
        };
        #[cfg(not(feature = "cuda"))]
        let sync_spills: Vec<&crate::scheduler::Spill> = plan.spills.iter().collect();
        if let Some(cold) = self.cold.as_ref().filter(|_| !sync_spills.is_empty()) {
            let blocks: Vec<u32> = sync_spills.iter().map(|s| s.block).collect();
            for (s, data) in sync_spills.iter().zip(kv.read_blocks(&blocks)?) {
                let m = &s.meta;
                let rec = BlockRecord { hash: m.hash, parent: m.parent, tokens: m.tokens.clone(), data };
                match s.kind {
                    SpillKind::Flush => cold.spill_waiting(rec),
                    kind => cold.spill(rec, kind == SpillKind::Idle),
                }
            }
        }
        for c in &plan.copies {
            kv.copy_block(c.src, c.dst)?;
        }
        let mut report = RestoreReport::default();
        match self.restorer.as_mut() {
            Some(r) => {
                report.failed.extend(plan.restores.iter().filter_map(|x| r.submit(x.block, x.meta.clone()).err()))
            }
            None => report.failed.extend(plan.restores.iter().map(|x| x.block)),
        }
        self.upload_restored(plan.rows.is_empty(), &mut report);
        Ok(report)
    }

    fn flush(&mut self) -> Option<std::sync::mpsc::Receiver<()>> {
        self.finish_spills();
        self.cold.as_ref().map(|c| c.flush())
    }

    fn run(&mut self, plan: &StepPlan) -> Result<StepOutput> {
        self.step(plan, None)
    }

    fn run_masked(&mut self, plan: &StepPlan, masks: &mut Masks) -> Result<StepOutput> {
        self.step(plan, Some(masks))
    }

    fn idle(&mut self) {
        self.finish_spills();
        if let Some(c) = &self.cold {
            c.set_busy(false);
        }
        #[cfg(feature = "cuda")]
        if let Some(t) = self.timer.as_mut() {
            t.idle();
        }
    }

    fn reset(&mut self) {
        self.kv.storage_mut().clear_tables();
        // Reads in flight were for a pool that no longer exists.
        self.restorer = self.cold.clone().map(Restorer::new);
    }

    fn add_stats(&self, s: &mut EngineStats) {
        s.step_issue_ms_total = self.times.issue_ms;
        s.step_wait_ms_total = self.times.wait_ms;
        s.step_device_ms_total = self.times.device_ms;
        s.step_gap_ms_total = self.times.gap_ms;
        s.step_gaps_total = self.times.gaps;
        s.prompt_cache.bytes = s.prompt_cache.blocks as u64 * self.block_bytes;
        s.prompt_cache.max_bytes = self.cache_max_blocks as u64 * self.block_bytes;
        s.ssd_cache = self.cold.as_ref().map(|c| c.stats());
    }
}
