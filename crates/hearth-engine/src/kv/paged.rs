//! Paged KV storage: per layer, one K and one V buffer of `blocks × block_size` token rows, and this step's block
//! tables. A sequence (slot) has a block table; its position p lives in row `table[p / bs] * bs + p % bs`. The
//! attention backends (`attention::paged`) read and write through it; the storage itself knows no attention.
//! Rows are kept in a [`KvEncoding`]: a float dtype, or bytes of a quantized code per buffer (K and V rows may
//! then differ in length).

use super::KvEncoding;
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;

pub struct PagedKv {
    block_size: usize,
    head_dim: usize,
    encoding: KvEncoding,
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    tables: HashMap<usize, Vec<u32>>,
}

impl PagedKv {
    pub fn new(
        num_layers: usize,
        num_blocks: usize,
        block_size: usize,
        kv_heads: usize,
        head_dim: usize,
        encoding: impl Into<KvEncoding>,
        device: &Device,
    ) -> Result<Self> {
        let encoding = encoding.into();
        if let Some(why) = encoding.unfit(head_dim) {
            return Err(Error::Unsupported(why));
        }
        let rows = num_blocks * block_size;
        let shape = |code: super::RowCode| (rows, kv_heads, code.units(head_dim));
        let mut k = Vec::with_capacity(num_layers);
        let mut v = Vec::with_capacity(num_layers);
        for _ in 0..num_layers {
            k.push(zeros(shape(encoding.key), encoding.storage_dtype(), device)?);
            v.push(zeros(shape(encoding.value), encoding.storage_dtype(), device)?);
        }
        Ok(Self { block_size, head_dim, encoding, k, v, tables: HashMap::new() })
    }

    /// Bytes one token takes in the KV cache across all layers.
    pub fn bytes_per_token(
        num_layers: usize,
        kv_heads: usize,
        head_dim: usize,
        encoding: impl Into<KvEncoding>,
    ) -> usize {
        num_layers * kv_heads * encoding.into().head_bytes(head_dim)
    }

    /// How the rows are kept.
    pub fn encoding(&self) -> KvEncoding {
        self.encoding
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Layer `layer`'s K and V buffers, (blocks × block_size, KvH, head units: D, or an encoded row's bytes).
    pub fn layer(&self, layer: usize) -> Result<(&Tensor, &Tensor)> {
        match (self.k.get(layer), self.v.get(layer)) {
            (Some(k), Some(v)) => Ok((k, v)),
            _ => Err(Error::InvalidRequest(format!("layer {layer} out of range ({} layers)", self.k.len()))),
        }
    }

    /// Replace every block table with this step's (slot, blocks).
    pub fn set_tables<'a>(&mut self, tables: impl IntoIterator<Item = (usize, &'a [u32])>) {
        self.tables.clear();
        for (slot, blocks) in tables {
            self.tables.insert(slot, blocks.to_vec());
        }
    }

    pub fn clear_tables(&mut self) {
        self.tables.clear();
    }

    /// The block table of `slot` in this step.
    pub fn table(&self, slot: usize) -> Result<&[u32]> {
        self.tables
            .get(&slot)
            .map(Vec::as_slice)
            .ok_or_else(|| Error::InvalidRequest(format!("slot {slot} has no block table")))
    }

    /// Copy every layer's k/v of block `src` into block `dst` (copy-on-write of a shared partial block).
    pub fn copy_block(&mut self, src: u32, dst: u32) -> Result<()> {
        let bs = self.block_size;
        for buf in self.k.iter().chain(self.v.iter()) {
            // A deep copy of just the block (`copy()` would clone the whole buffer): a narrow shares the storage
            // that slice_set is about to write.
            let data = buf.narrow(0, src as usize * bs, bs)?.force_contiguous()?;
            buf.slice_set(&data, 0, dst as usize * bs)?;
        }
        Ok(())
    }

    /// Block `b`'s data as bytes: for each layer its K rows then its V rows, in the buffers' dtype (the SSD
    /// tier's layout).
    pub fn read_block(&self, b: u32) -> Result<Vec<u8>> {
        Ok(self.read_blocks(&[b])?.pop().unwrap_or_default())
    }

    /// Several blocks' data (as [`PagedKv::read_block`]) with one gather and one device-to-host copy per layer and
    /// buffer, however many blocks: a step that evicts many blocks pays for them once.
    pub fn read_blocks(&self, blocks: &[u32]) -> Result<Vec<Vec<u8>>> {
        let mut out = vec![Vec::new(); blocks.len()];
        let mut bytes = Vec::new();
        for t in self.gather_blocks(blocks)? {
            bytes.clear();
            tensor_bytes(&t, &mut bytes)?;
            let part = bytes.len() / blocks.len().max(1);
            for (o, chunk) in out.iter_mut().zip(bytes.chunks_exact(part.max(1))) {
                o.extend_from_slice(chunk);
            }
        }
        Ok(out)
    }

    /// The rows of `blocks`, gathered on the device: per layer its K then its V, each (blocks × block_size, KvH,
    /// D) in `blocks`' order. Nothing for no blocks.
    pub fn gather_blocks(&self, blocks: &[u32]) -> Result<Vec<Tensor>> {
        let bs = self.block_size;
        let Some(first) = self.k.first().filter(|_| !blocks.is_empty()) else { return Ok(Vec::new()) };
        let rows: Vec<u32> = blocks.iter().flat_map(|&b| (0..bs as u32).map(move |o| b * bs as u32 + o)).collect();
        let ids = Tensor::new(rows.as_slice(), first.device())?;
        let mut out = Vec::with_capacity(2 * self.k.len());
        for (k, v) in self.k.iter().zip(&self.v) {
            out.push(k.index_select(&ids, 0)?);
            out.push(v.index_select(&ids, 0)?);
        }
        Ok(out)
    }

    /// Write `data` (laid out as [`PagedKv::read_block`] returns it) into block `b`.
    pub fn write_block(&mut self, b: u32, data: &[u8]) -> Result<()> {
        self.write_blocks(&[(b, data)])
    }

    /// Write several blocks: one host-to-device copy per layer and buffer for all of them, then a device-side
    /// copy into each block. Every block's data must have the layout's length (else nothing is written).
    pub fn write_blocks(&mut self, blocks: &[(u32, &[u8])]) -> Result<()> {
        let bs = self.block_size;
        let Some(first) = self.k.first() else { return Ok(()) };
        if blocks.is_empty() {
            return Ok(());
        }
        let (_, heads, _) = first.dims3()?;
        let dtype = first.dtype();
        // bytes of one block of one layer's K, and of its V
        let parts = [self.encoding.key, self.encoding.value]
            .map(|c| bs * heads * c.units(self.head_dim) * dtype.size_in_bytes());
        let whole = (parts[0] + parts[1]) * self.k.len();
        if let Some((_, bad)) = blocks.iter().find(|(_, d)| d.len() != whole) {
            return Err(Error::InvalidRequest(format!("a KV block holds {whole} bytes, got {}", bad.len())));
        }
        let mut staged = Vec::with_capacity(parts[0].max(parts[1]) * blocks.len());
        let mut at = 0;
        for (k, v) in self.k.iter().zip(&self.v) {
            for (buf, part) in [(k, parts[0]), (v, parts[1])] {
                staged.clear();
                for (_, data) in blocks {
                    staged.extend_from_slice(&data[at..at + part]);
                }
                let units = buf.dim(2)?;
                let t = Tensor::from_raw_buffer(&staged, dtype, &[blocks.len() * bs, heads, units], buf.device())?;
                for (n, (b, _)) in blocks.iter().enumerate() {
                    buf.slice_set(&t.narrow(0, n * bs, bs)?, 0, *b as usize * bs)?;
                }
                at += part;
            }
        }
        Ok(())
    }

    /// The buffer row of position `pos` under `table`.
    pub fn row_of(&self, table: &[u32], pos: usize) -> Result<usize> {
        let b = table.get(pos / self.block_size).ok_or_else(|| {
            Error::InvalidRequest(format!("position {pos} has no KV block (table of {} blocks)", table.len()))
        })?;
        Ok(*b as usize * self.block_size + pos % self.block_size)
    }
}

/// A zeroed buffer whose pages become resident only as they are written (`malloc::lazy_zeroed`): candle's CPU
/// zeros are `calloc`'d or filled element by element, either of which can make the whole KV budget resident at
/// start.
fn zeros(shape: (usize, usize, usize), dtype: DType, device: &Device) -> Result<Tensor> {
    use crate::malloc::lazy_zeroed;
    use half::vec::HalfBitsVecExt;
    let n = shape.0 * shape.1 * shape.2;
    if !device.is_cpu() {
        return Ok(Tensor::zeros(shape, dtype, device)?);
    }
    Ok(match dtype {
        DType::F32 => Tensor::from_vec(lazy_zeroed::<f32>(n), shape, device)?,
        DType::F16 => Tensor::from_vec(lazy_zeroed::<u16>(n).reinterpret_into::<half::f16>(), shape, device)?,
        DType::BF16 => Tensor::from_vec(lazy_zeroed::<u16>(n).reinterpret_into::<half::bf16>(), shape, device)?,
        DType::U8 => Tensor::from_vec(lazy_zeroed::<u8>(n), shape, device)?,
        _ => Tensor::zeros(shape, dtype, device)?,
    })
}

/// Append a tensor's values as little-endian bytes.
fn tensor_bytes(t: &Tensor, out: &mut Vec<u8>) -> Result<()> {
    let flat = t.flatten_all()?;
    match t.dtype() {
        DType::F32 => out.extend(flat.to_vec1::<f32>()?.iter().flat_map(|x| x.to_le_bytes())),
        DType::F16 => out.extend(flat.to_vec1::<half::f16>()?.iter().flat_map(|x| x.to_bits().to_le_bytes())),
        DType::BF16 => out.extend(flat.to_vec1::<half::bf16>()?.iter().flat_map(|x| x.to_bits().to_le_bytes())),
        DType::U8 => out.extend(flat.to_vec1::<u8>()?),
        other => return Err(Error::Unsupported(format!("KV blocks of dtype {other:?} cannot be spilled"))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_as_bytes_one_by_one_and_together() {
        let (layers, blocks, bs, kvh, d) = (2, 4, 4, 2, 3);
        let mut kv = PagedKv::new(layers, blocks, bs, kvh, d, DType::F32, &Device::Cpu).unwrap();
        let n = 2 * layers * bs * kvh * d * 4;
        for b in 0..blocks as u32 {
            let data: Vec<u8> = (0..n / 4).flat_map(|i| (i as f32 + 1000.0 * b as f32).to_le_bytes()).collect();
            kv.write_block(b, &data).unwrap();
            assert_eq!(kv.read_block(b).unwrap(), data);
        }
        let together = kv.read_blocks(&[2, 0, 3]).unwrap();
        let alone: Vec<Vec<u8>> = [2, 0, 3].iter().map(|&b| kv.read_block(b).unwrap()).collect();
        assert_eq!(together, alone);
        assert!(kv.write_block(1, &[0u8; 7]).is_err(), "a wrong length is an error, not a panic");
        // Several at once, in any order, equal one at a time.
        let mut two = PagedKv::new(layers, blocks, bs, kvh, d, DType::F32, &Device::Cpu).unwrap();
        two.write_blocks(&[(3, &alone[0]), (1, &alone[2])]).unwrap();
        assert_eq!(two.read_blocks(&[3, 1]).unwrap(), vec![alone[0].clone(), alone[2].clone()]);
        kv.copy_block(2, 1).unwrap();
        assert_eq!(kv.read_block(1).unwrap(), alone[0]);
    }

    /// An f16 cache starts as zeros and keeps what is written, bit for bit (the SSD tier's bytes are its bits).
    #[test]
    fn an_f16_cache_starts_zeroed_and_round_trips() {
        let (layers, blocks, bs, kvh, d) = (2, 3, 4, 2, 8);
        let mut kv = PagedKv::new(layers, blocks, bs, kvh, d, DType::F16, &Device::Cpu).unwrap();
        let n = 2 * layers * bs * kvh * d * 2;
        assert_eq!(kv.read_block(2).unwrap(), vec![0u8; n]);
        let data: Vec<u8> =
            (0..n / 2).flat_map(|i| half::f16::from_f32(i as f32 * 0.25 - 7.0).to_bits().to_le_bytes()).collect();
        kv.write_block(1, &data).unwrap();
        assert_eq!(kv.read_block(1).unwrap(), data);
        assert_eq!(kv.layer(0).unwrap().0.dtype(), DType::F16);
    }

    /// A q8_0 cache: D + D/32 bytes per head row, zeroed at start, its blocks moved (SSD bytes, copy-on-write)
    /// byte for byte; a head size it cannot hold is refused.
    #[test]
    fn a_q8_cache_sizes_its_rows_and_moves_blocks_byte_for_byte() {
        let (layers, blocks, bs, kvh, d) = (2, 3, 4, 2, 64);
        let mut kv = PagedKv::new(layers, blocks, bs, kvh, d, KvEncoding::Q8_0, &Device::Cpu).unwrap();
        assert_eq!(kv.layer(1).unwrap().0.dims3().unwrap(), (blocks * bs, kvh, d + d / 32));
        assert_eq!(PagedKv::bytes_per_token(layers, kvh, d, KvEncoding::Q8_0), 2 * layers * kvh * 66);
        let n = 2 * layers * bs * kvh * (d + d / 32);
        assert_eq!(kv.read_block(0).unwrap(), vec![0u8; n]);
        let data: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
        kv.write_block(2, &data).unwrap();
        kv.copy_block(2, 0).unwrap();
        assert_eq!(kv.read_blocks(&[0, 2]).unwrap(), vec![data.clone(), data]);
        assert!(PagedKv::new(1, 1, 4, 1, 96, KvEncoding::Q8_0, &Device::Cpu).is_err());
    }
}
