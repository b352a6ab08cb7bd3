//! The block mover: makes a step's block transfers ([`Transfers`]) on the paged storage before its forward pass.
//! Spills read evicted (or flushed) blocks' data and hand it to the SSD tier; on CUDA, evictions are copied to the
//! host on a second stream and handed over from a thread (`gpu::spill`), so a step never waits for them. Copies
//! duplicate a block in place. Restores are read from the SSD tier by background threads ([`Restorer`]) and
//! uploaded a chunk at a time as they arrive, so they may resolve several transfers after the one that asked.

use super::paged::PagedKv;
use super::restorer::Restorer;
use super::ssd::{BlockRecord, SsdStore};
use super::transfer::{RestoreReport, Spill, SpillKind, Transfers};
use crate::types::EngineStats;
use crate::Result;
use candle_core::Device;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Blocks restored from the SSD tier per host-to-device copy (and at most per step that has rows to run).
const RESTORE_CHUNK: usize = 64;
/// How long a transfer with no rows to run waits for restores to arrive.
const RESTORE_WAIT: Duration = Duration::from_millis(100);

pub struct BlockMover {
    /// The SSD tier (`--ssd-cache`): spilled blocks go there, restores come from there.
    cold: Option<Arc<SsdStore>>,
    /// Reads from the SSD tier in the background.
    restorer: Option<Restorer>,
    /// Bytes of one KV block, and the prompt cache's cap in blocks (for `/stats`).
    block_bytes: u64,
    cache_max_blocks: usize,
    /// CUDA: evicted blocks are copied to the host on a second stream (`gpu::spill`).
    #[cfg(feature = "cuda")]
    spiller: Option<crate::gpu::spill::AsyncSpiller>,
}

/// Give a spilled block's bytes to the SSD tier.
fn hand_over(cold: &SsdStore, s: &Spill, data: Vec<u8>) {
    let m = &s.meta;
    let rec = BlockRecord { hash: m.hash, parent: m.parent, tokens: m.tokens.clone(), data };
    match s.kind {
        SpillKind::Flush => cold.spill_waiting(rec),
        kind => cold.spill(rec, kind == SpillKind::Idle),
    }
}

impl BlockMover {
    /// A mover for blocks of `block_bytes` on `device`, spilling to and restoring from `cold` when given.
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
    pub fn new(
        device: &Device,
        cold: Option<Arc<SsdStore>>,
        block_bytes: u64,
        cache_max_blocks: usize,
    ) -> Result<Self> {
        #[cfg(feature = "cuda")]
        // Evicted blocks' bytes go straight from the spill thread to the SSD tier.
        let spiller = match &cold {
            Some(c) => match crate::gpu::spill::AsyncSpiller::new(device)? {
                Some(sp) => {
                    let c = c.clone();
                    Some(sp.with_sink(move |s, data| hand_over(&c, &s, data))?)
                }
                None => None,
            },
            None => None,
        };
        Ok(Self {
            restorer: cold.clone().map(Restorer::new),
            cold,
            block_bytes,
            cache_max_blocks,
            #[cfg(feature = "cuda")]
            spiller,
        })
    }

    /// Make `t`'s transfers on `kv` in order: spills, copies, restores (started; they resolve in this transfer or
    /// a later one). Returns the restores resolved so far; `no_rows`: the step runs no rows, so this waits up to
    /// [`RESTORE_WAIT`] for one.
    pub fn transfer(&mut self, kv: &mut PagedKv, t: &Transfers, no_rows: bool) -> Result<RestoreReport> {
        let sync_spills = self.spill_async(kv, &t.spills)?;
        if let Some(cold) = self.cold.as_ref().filter(|_| !sync_spills.is_empty()) {
            let blocks: Vec<u32> = sync_spills.iter().map(|s| s.block).collect();
            for (s, data) in sync_spills.iter().zip(kv.read_blocks(&blocks)?) {
                hand_over(cold, s, data);
            }
        }
        for c in &t.copies {
            kv.copy_block(c.src, c.dst)?;
        }
        let mut report = RestoreReport::default();
        match self.restorer.as_mut() {
            Some(r) => report.failed.extend(t.restores.iter().filter_map(|x| r.submit(x.block, x.meta.clone()).err())),
            None => report.failed.extend(t.restores.iter().map(|x| x.block)),
        }
        self.upload_restored(kv, no_rows, &mut report);
        Ok(report)
    }

    /// Start the evictions' copies on the CUDA spill stream (handing over the copies done since the last step);
    /// returns the spills to read here and now. Idle demotions and flushes run while the engine is idle, and a
    /// flush must hold its blocks' bytes only a chunk at a time: they are read at once. Without CUDA, every spill.
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
    fn spill_async<'a>(&mut self, kv: &PagedKv, spills: &'a [Spill]) -> Result<Vec<&'a Spill>> {
        #[cfg(feature = "cuda")]
        if let Some(sp) = self.spiller.as_mut() {
            let done = sp.collect(false)?;
            if let Some(cold) = self.cold.as_deref() {
                for (s, data) in done {
                    hand_over(cold, &s, data);
                }
            }
            let evicted: Vec<Spill> = spills.iter().filter(|s| s.kind == SpillKind::Evicted).cloned().collect();
            // Past the device memory spills may wait in, evictions are dropped (the tier misses them).
            if !evicted.is_empty() && sp.has_room(evicted.len(), self.block_bytes as usize) {
                let blocks: Vec<u32> = evicted.iter().map(|s| s.block).collect();
                sp.start(kv.gather_blocks(&blocks)?, evicted)?;
            }
            return Ok(spills.iter().filter(|s| s.kind != SpillKind::Evicted).collect());
        }
        Ok(spills.iter().collect())
    }

    /// Upload the blocks the background reads have finished, a chunk at a time (one host-to-device copy per
    /// layer and buffer): one chunk in a step that runs rows, as many as arrive within [`RESTORE_WAIT`] in one
    /// that runs none.
    fn upload_restored(&mut self, kv: &mut PagedKv, no_rows: bool, report: &mut RestoreReport) {
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
            match kv.write_blocks(&refs) {
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
                    if let Some(cold) = self.cold.as_deref() {
                        for (s, data) in done {
                            hand_over(cold, &s, data);
                        }
                    }
                }
                Err(e) => tracing::warn!("spilling KV blocks: {e}"),
            }
        }
    }

    /// A step is about to run: the SSD tier's writer holds back (below its high-water mark) while the engine works.
    pub fn busy(&self) {
        if let Some(c) = &self.cold {
            c.set_busy(true);
        }
    }

    /// The engine waits for work: spills in flight are finished and the SSD tier's writer may write.
    pub fn idle(&mut self) {
        self.finish_spills();
        if let Some(c) = &self.cold {
            c.set_busy(false);
        }
    }

    /// A receiver that fires once everything spilled so far is durable (None: no SSD tier).
    pub fn flush(&mut self) -> Option<std::sync::mpsc::Receiver<()>> {
        self.finish_spills();
        self.cold.as_ref().map(|c| c.flush())
    }

    /// The block pool started afresh: reads in flight were for a pool that no longer exists.
    pub fn reset(&mut self) {
        self.restorer = self.cold.clone().map(Restorer::new);
    }

    /// The prompt cache's bytes and the SSD tier's counters, into a `/stats` snapshot.
    pub fn add_stats(&self, s: &mut EngineStats) {
        s.prompt_cache.bytes = s.prompt_cache.blocks as u64 * self.block_bytes;
        s.prompt_cache.max_bytes = self.cache_max_blocks as u64 * self.block_bytes;
        s.ssd_cache = self.cold.as_ref().map(|c| c.stats());
    }
}
