//! A walk over a GGUF header (metadata and tensor infos) for the one thing candle's reader cannot take: tensors of
//! the MXFP4 type (39, gpt-oss's experts), which candle 0.11 does not know and so refuses the whole file over. The
//! walk finds them and gives back a copy of the header with their type field set to one candle reads (Q4_0); the
//! caller reads those tensors itself (`super::mxfp4`) and never asks candle for them.

use crate::{Error, Result};

/// GGML's type id of MXFP4.
pub const MXFP4: u32 = 39;
/// What the patched header says instead (any type candle parses; never used to read the data).
const STAND_IN: u32 = 2;

/// The header bytes (up to the end of the tensor infos) with every MXFP4 tensor's type replaced, and those
/// tensors' names; None when the file has no MXFP4 tensor.
pub fn patch_mxfp4(file: &[u8]) -> Result<Option<(Vec<u8>, Vec<String>)>> {
    let mut r = Reader { buf: file, at: 0 };
    if r.take(4)? != b"GGUF" {
        return Err(r.bad("not a GGUF file"));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(r.bad(&format!("GGUF version {version}")));
    }
    let (tensors, kvs) = (r.u64()?, r.u64()?);
    for _ in 0..kvs {
        r.string()?;
        let t = r.u32()?;
        r.skip_value(t)?;
    }
    let (mut spots, mut names) = (Vec::new(), Vec::new());
    for _ in 0..tensors {
        let name = String::from_utf8_lossy(r.string()?).into_owned();
        let dims = r.u32()? as usize;
        r.take(dims.checked_mul(8).ok_or_else(|| r.bad("tensor dims"))?)?;
        let spot = r.at;
        if r.u32()? == MXFP4 {
            spots.push(spot);
            names.push(name);
        }
        r.u64()?; // offset
    }
    if spots.is_empty() {
        return Ok(None);
    }
    let mut header = file[..r.at].to_vec();
    for s in spots {
        header[s..s + 4].copy_from_slice(&STAND_IN.to_le_bytes());
    }
    Ok(Some((header, names)))
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bad(&self, what: &str) -> Error {
        Error::InvalidModel(format!("GGUF header: {what} (at byte {})", self.at))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| self.bad("truncated"))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| self.bad("u32"))?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| self.bad("u64"))?))
    }

    fn string(&mut self) -> Result<&'a [u8]> {
        let n = usize::try_from(self.u64()?).map_err(|_| self.bad("string length"))?;
        self.take(n)
    }

    /// Skip one metadata value of type `t`.
    fn skip_value(&mut self, t: u32) -> Result<()> {
        match t {
            0 | 1 | 7 => self.take(1).map(drop),
            2 | 3 => self.take(2).map(drop),
            4..=6 => self.take(4).map(drop),
            10..=12 => self.take(8).map(drop),
            8 => self.string().map(drop),
            9 => {
                let (et, n) = (self.u32()?, self.u64()?);
                let width = match et {
                    0 | 1 | 7 => Some(1),
                    2 | 3 => Some(2),
                    4..=6 => Some(4),
                    10..=12 => Some(8),
                    _ => None,
                };
                match width {
                    Some(w) => self.take((n as usize).checked_mul(w).ok_or_else(|| self.bad("array"))?).map(drop),
                    None => (0..n).try_for_each(|_| self.skip_value(et)),
                }
            }
            other => Err(self.bad(&format!("metadata value type {other}"))),
        }
    }
}
