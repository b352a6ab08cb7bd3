//! The runner: owns the model, its device and the paged KV (storage + attention backend), and runs a
//! [`StepPlan`]: its block transfers first (handed to the block mover, [`BlockMover`]), then one packed forward
//! over every planned row, returning each row's logits, or each row's token when a greedy step can choose them on
//! the device. A step observer ([`StepObserver`]) times the steps.

use crate::attention::{BatchContext, PagedAttention};
use crate::gpu::profile::StepObserver;
use crate::kv::mover::BlockMover;
use crate::kv::ssd::SsdStore;
use crate::kv::RestoreReport;
use crate::models::Model;
use crate::scheduler::{StepOutput, StepPlan};
use crate::speculative::drafter::{DraftAsk, Drafter};
use crate::types::{EngineConfig, EngineStats};
use crate::Result;
use candle_core::{Device, Tensor};
use std::sync::Arc;

/// What the engine core needs from whatever executes its plans (the model runner; a fake in policy tests).
pub trait Runner {
    /// Make a plan's block transfers in order: spills (to the cold tier), copies, restores (from it; they may
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
    /// Drafts of the draft model for `asks` (in order; empty where it drafts nothing); `alive`: the slots still
    /// running. A runner without a draft model drafts nothing.
    fn draft(&mut self, asks: &[DraftAsk], alive: &[usize]) -> Result<Vec<Vec<u32>>> {
        let _ = alive;
        Ok(vec![Vec::new(); asks.len()])
    }
    /// A receiver that fires once everything spilled so far is durable (None: no cold tier).
    fn flush(&mut self) -> Option<std::sync::mpsc::Receiver<()>> {
        None
    }
    /// No step follows at once (the engine waits for work): timing must not count the wait as a gap.
    fn idle(&mut self) {}
    /// Everything was failed and the block pool started afresh.
    fn reset(&mut self) {}
    /// Add the runner's counters (step time, the prompt cache's bytes, the SSD tier) to a `/stats` snapshot.
    fn add_stats(&self, _stats: &mut EngineStats) {}
}

/// What [`Runner::run_masked`] calls for the rows' grammar masks.
pub type Masks<'a> = dyn FnMut() -> Vec<Option<Vec<u32>>> + 'a;

pub struct ModelRunner {
    model: Box<dyn Model>,
    device: Device,
    kv: PagedAttention,
    /// Greedy-only steps take each row's token from the device (`HEARTH_GPU_ARGMAX`).
    argmax_on_device: bool,
    mover: BlockMover,
    observer: StepObserver,
    /// The draft model, when speculation has one.
    drafter: Option<Drafter>,
    /// Image embeddings by content hash.
    encoder_cache: super::media::EncoderCache,
    /// Decode steps replayed as CUDA graphs (`HEARTH_CUDA_GRAPHS`), where they serve the model.
    #[cfg(feature = "cuda")]
    graphs: Option<crate::gpu::graphs::StepGraphs>,
}

impl ModelRunner {
    /// `cold`: the SSD tier's KV store; `state_cold`: its store of a hybrid model's recurrent-state snapshots.
    pub fn new(
        model: Box<dyn Model>,
        device: Device,
        cfg: &EngineConfig,
        cold: Option<Arc<SsdStore>>,
        state_cold: Option<Arc<SsdStore>>,
    ) -> Result<Self> {
        let c = model.config();
        let kv_dtype = model.kv_encoding();
        let mut kv = PagedAttention::new(
            c.kv_layers(),
            cfg.kv_blocks,
            cfg.kv_block_size,
            c.num_heads,
            c.num_kv_heads,
            c.head_dim,
            kv_dtype,
            &device,
        )?;
        tracing::info!(backend = kv.backend_name(), kv_dtype = ?kv_dtype, "paged attention");
        if let Some(lin) = &c.linear_attn {
            kv.states().set_model(lin, state_cold);
        }
        let block_bytes = crate::sizing::kv_bytes(model.as_ref(), 1, cfg.kv_block_size);
        let argmax_on_device = cfg!(feature = "cuda") && device.is_cuda() && crate::levers::get().gpu_argmax;
        #[cfg(feature = "cuda")]
        let graphs = crate::gpu::graphs::StepGraphs::choose(&device, model.as_ref(), &kv);
        #[cfg(feature = "cuda")]
        if graphs.is_some() {
            tracing::info!("decode steps replay CUDA graphs (HEARTH_CUDA_GRAPHS)");
        }
        Ok(Self {
            #[cfg(feature = "cuda")]
            graphs,
            mover: BlockMover::new(&device, cold, block_bytes, cfg.cache.max_blocks)?,
            observer: StepObserver::new(&device),
            model,
            device,
            kv,
            argmax_on_device,
            drafter: None,
            encoder_cache: Default::default(),
        })
    }

    /// Draft with `drafter` (a draft model with its own KV).
    pub fn with_drafter(mut self, drafter: Drafter) -> Self {
        self.drafter = Some(drafter);
        self
    }

    /// One packed forward; the rows' tokens picked on the device (greedy, with `masks` when given) or their logits.
    #[allow(unused_variables)]
    fn step(&mut self, plan: &StepPlan, masks: Option<&mut Masks>) -> Result<StepOutput> {
        self.mover.busy();
        self.observer.start(plan.rows.len(), plan.num_tokens(), plan.decode_only());
        self.kv.storage_mut().set_tables(plan.rows.iter().map(|r| (r.slot, r.blocks.as_slice())));
        let logits = match self.graph_step(plan)? {
            Some(l) => l,
            None => {
                let tokens: Vec<u32> = plan.rows.iter().flat_map(|r| r.tokens.iter().copied()).collect();
                let mut ctx = BatchContext::new(&plan.spans(), false, &self.device)?;
                ctx.mark_prompt(plan.rows.iter().map(|r| !r.decoding));
                ctx.set_logits(plan.rows.iter().map(|r| r.logits));
                let media = super::media::batch_media(plan, self.model.as_ref(), &mut self.encoder_cache, &self.device);
                ctx.media = media?;
                self.model.forward(&Tensor::new(tokens.as_slice(), &self.device)?, &ctx, &mut self.kv)?
            }
        };
        self.kv.states().end_step();
        self.observer.issued();
        let out = match masks {
            #[cfg(feature = "cuda")]
            Some(masks) if self.argmax_on_device => Self::output_masked(&logits, plan.per_output(masks()))?,
            _ => Self::output(&logits, self.argmax_on_device && plan.greedy_only())?,
        };
        self.observer.done();
        Ok(out)
    }

    /// A decode-only step of rows without images (a vision model's rows with images carry M-RoPE positions)
    /// through a CUDA graph; None: run it eagerly.
    #[allow(unused_variables)]
    fn graph_step(&mut self, plan: &StepPlan) -> Result<Option<Tensor>> {
        #[cfg(feature = "cuda")]
        if let Some(g) = self.graphs.as_mut() {
            if plan.decode_only() && plan.rows.iter().all(|r| r.logits == 1 && r.media.is_none()) {
                let rows: Vec<_> = plan.rows.iter().map(|r| (r.slot, r.pos0, r.tokens[0])).collect();
                return g.run(self.model.as_ref(), &mut self.kv, &rows);
            }
        }
        Ok(None)
    }

    /// Each output row's best allowed token, picked on the device (`masks`: each output row's mask words, None:
    /// every token).
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
        // the state orders are carried out whatever the block moves do, so the scheduler's ledger stays true
        let report = self.mover.transfer(self.kv.storage_mut(), &plan.transfers, plan.rows.is_empty());
        let states = self.kv.states().apply(&plan.states);
        let report = report?;
        states?;
        Ok(report)
    }

    fn flush(&mut self) -> Option<std::sync::mpsc::Receiver<()>> {
        let blocks = self.mover.flush();
        let Some(states) = self.kv.states().flush() else { return blocks };
        let Some(blocks) = blocks else { return Some(states) };
        // one marker for both stores: it fires once each has written what it was handed
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            if blocks.recv().is_ok() && states.recv().is_ok() {
                let _ = tx.send(());
            }
        });
        Some(rx)
    }

    fn run(&mut self, plan: &StepPlan) -> Result<StepOutput> {
        self.step(plan, None)
    }

    fn draft(&mut self, asks: &[DraftAsk], alive: &[usize]) -> Result<Vec<Vec<u32>>> {
        match self.drafter.as_mut() {
            Some(d) => d.draft(asks, alive),
            None => Ok(vec![Vec::new(); asks.len()]),
        }
    }

    fn run_masked(&mut self, plan: &StepPlan, masks: &mut Masks) -> Result<StepOutput> {
        self.step(plan, Some(masks))
    }

    fn idle(&mut self) {
        self.mover.idle();
        self.observer.idle();
    }

    fn reset(&mut self) {
        self.kv.storage_mut().clear_tables();
        self.kv.states().clear();
        self.mover.reset();
        if let Some(d) = self.drafter.as_mut() {
            d.reset();
        }
    }

    fn add_stats(&self, s: &mut EngineStats) {
        self.observer.add_stats(s);
        self.mover.add_stats(s);
        s.images = self.encoder_cache.stats();
    }
}
