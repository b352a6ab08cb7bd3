//! How the paged KV cache stores a head's row of K or V (`--kv-cache-dtype`): a float dtype, or `q8_0`, int8 values
//! with one f16 scale per [`Q8_BLOCK`] values. A q8_0 head row of D values is D int8 values then D / 64 f16
//! scales (little-endian), D + D/32 bytes: 1.94× the tokens of an f16 cache in the same bytes. A value is
//! `q · scale`, exact in f32, so a kernel that widens on load computes what it would over those values in f32.
//!
//! q8_0 keys are rotated before they are quantized ([`rotate`]: fixed random signs, then a normalized
//! Walsh–Hadamard transform, per head), and so is every query that reads them: the rotation is orthogonal, so
//! scores are unchanged, but a key's few huge channels (Qwen2's key biases reach hundreds where the rest are units)
//! are spread over all of them, and a block's scale no longer drowns its small values. Values are not rotated.

use candle_core::DType;
use half::f16;

/// Values per q8_0 scale.
pub const Q8_BLOCK: usize = 64;

/// The encoding of the KV cache's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvEncoding {
    F32,
    F16,
    BF16,
    /// int8 values, an f16 scale per [`Q8_BLOCK`] values.
    Q8_0,
}

impl KvEncoding {
    /// `--kv-cache-dtype`'s value: None for `auto` (the model's dtype on this device).
    pub fn parse(s: &str) -> Result<Option<Self>, String> {
        Ok(Some(match s.trim().to_ascii_lowercase().as_str() {
            "auto" => return Ok(None),
            "f32" => Self::F32,
            "f16" => Self::F16,
            "bf16" => Self::BF16,
            "q8_0" | "q8" => Self::Q8_0,
            other => return Err(format!("unknown KV cache dtype {other:?} (auto, f32, f16, bf16 or q8_0)")),
        }))
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
            Self::Q8_0 => "q8_0",
        }
    }

    /// The element type of the buffers that hold it (bytes for an encoded cache).
    pub fn storage_dtype(&self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::F16 => DType::F16,
            Self::BF16 => DType::BF16,
            Self::Q8_0 => DType::U8,
        }
    }

    /// Whether the rows are quantized (not a float dtype).
    pub fn is_quantized(&self) -> bool {
        matches!(self, Self::Q8_0)
    }

    /// Whether keys (and the queries that read them) are rotated ([`rotate`]) before they are stored.
    pub fn rotates_keys(&self) -> bool {
        matches!(self, Self::Q8_0)
    }

    /// Buffer elements of one head row of `head_dim` values.
    pub fn head_units(&self, head_dim: usize) -> usize {
        match self {
            Self::Q8_0 => head_dim + 2 * head_dim.div_ceil(Q8_BLOCK),
            _ => head_dim,
        }
    }

    /// Bytes of one head row of `head_dim` values.
    pub fn head_bytes(&self, head_dim: usize) -> usize {
        self.head_units(head_dim) * self.storage_dtype().size_in_bytes()
    }

    /// Why a model with heads of `head_dim` values cannot keep its KV in this encoding (None: it can).
    pub fn unfit(&self, head_dim: usize) -> Option<String> {
        match self {
            Self::Q8_0 if !head_dim.is_multiple_of(Q8_BLOCK) || !head_dim.is_power_of_two() => Some(format!(
                "a q8_0 KV cache needs a head size that is a power of two and at least {Q8_BLOCK}; this model's is \
                 {head_dim}"
            )),
            _ => None,
        }
    }
}

impl From<DType> for KvEncoding {
    /// A model's compute dtype as a cache encoding: f16 and bf16 as they are, anything else f32.
    fn from(d: DType) -> Self {
        match d {
            DType::F16 => Self::F16,
            DType::BF16 => Self::BF16,
            _ => Self::F32,
        }
    }
}

/// Rotate one head vector in place (its length a power of two): multiply by fixed pseudo-random signs, then by the
/// Walsh–Hadamard matrix scaled by 1/√len — an orthogonal map, the same for every head, layer and model, so
/// `rotate(q) · rotate(k) = q · k` up to rounding. A fixed sequence of f32 operations: the same input gives the
/// same bits anywhere.
pub fn rotate(x: &mut [f32]) {
    flip_signs(x);
    hadamard(x);
}

/// Negate the values at a fixed pseudo-random half of the indices (bit 25 of a multiplicative hash).
fn flip_signs(x: &mut [f32]) {
    for (i, v) in x.iter_mut().enumerate() {
        if (i as u32).wrapping_mul(0x9E37_79B9).rotate_left(7) & 1 == 1 {
            *v = -*v;
        }
    }
}

/// The Walsh–Hadamard transform scaled by 1/√len (its own inverse), in place.
fn hadamard(x: &mut [f32]) {
    let n = x.len();
    debug_assert!(n.is_power_of_two());
    let mut h = 1;
    while h < n {
        for block in x.chunks_exact_mut(2 * h) {
            let (a, b) = block.split_at_mut(h);
            for (u, w) in a.iter_mut().zip(b.iter_mut()) {
                let (s, t) = (*u + *w, *u - *w);
                *u = s;
                *w = t;
            }
        }
        h *= 2;
    }
    let scale = 1.0 / (n as f32).sqrt();
    x.iter_mut().for_each(|v| *v *= scale);
}

/// Encode `rows` (each `d` values) as q8_0 head rows into `out` (`rows.len() / d` rows of `d + d/32` bytes).
/// Per block of [`Q8_BLOCK`] values: scale = max |x| / 127 (stored as f16), q = round(x / scale).
pub fn q8_encode(rows: &[f32], d: usize, out: &mut Vec<u8>) {
    let units = KvEncoding::Q8_0.head_units(d);
    out.clear();
    out.resize(rows.len() / d.max(1) * units, 0);
    for (x, o) in rows.chunks_exact(d).zip(out.chunks_exact_mut(units)) {
        let (qs, scales) = o.split_at_mut(d);
        for (b, (xb, qb)) in x.chunks(Q8_BLOCK).zip(qs.chunks_mut(Q8_BLOCK)).enumerate() {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = f16::from_f32(amax / 127.0);
            let s = scale.to_f32();
            let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
            for (q, &v) in qb.iter_mut().zip(xb) {
                *q = (v * inv).round().clamp(-127.0, 127.0) as i8 as u8;
            }
            scales[2 * b..2 * b + 2].copy_from_slice(&scale.to_bits().to_le_bytes());
        }
    }
}

/// Value `i` of a q8_0 head row of `d` values.
#[inline(always)]
pub fn q8_value(row: &[u8], i: usize, d: usize) -> f32 {
    let b = d + 2 * (i / Q8_BLOCK);
    let scale = f16::from_bits(u16::from_le_bytes([row[b], row[b + 1]])).to_f32();
    (row[i] as i8) as f32 * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_rows_round_trip_within_half_a_step_of_their_block_scale() {
        let d = 128;
        let rows: Vec<f32> = (0..3 * d).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013 * (1 + i / d) as f32).collect();
        let mut enc = Vec::new();
        q8_encode(&rows, d, &mut enc);
        let units = KvEncoding::Q8_0.head_units(d);
        assert_eq!((units, enc.len()), (d + d / 32, 3 * units));
        for (r, x) in rows.chunks(d).enumerate() {
            let row = &enc[r * units..(r + 1) * units];
            for (b, xb) in x.chunks(Q8_BLOCK).enumerate() {
                let step = xb.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
                for (j, &v) in xb.iter().enumerate() {
                    let got = q8_value(row, b * Q8_BLOCK + j, d);
                    assert!((got - v).abs() <= 0.5 * step * 1.01, "row {r} value {j}: {got} vs {v}");
                }
            }
        }
        // a block of zeros stays zeros (no division by a zero scale)
        q8_encode(&[0.0; 64], 64, &mut enc);
        assert!((0..64).all(|i| q8_value(&enc, i, 64) == 0.0));
    }

    /// The rotation is orthogonal (dot products and norms kept), its own inverse up to the signs, and spreads one
    /// huge channel over every channel.
    #[test]
    fn the_rotation_keeps_dot_products_and_spreads_an_outlier() {
        let d = 128;
        let q: Vec<f32> = (0..d).map(|i| ((i * 13 % 29) as f32 - 14.0) * 0.1).collect();
        let mut k: Vec<f32> = (0..d).map(|i| ((i * 7 % 17) as f32 - 8.0) * 0.2).collect();
        k[5] = 300.0;
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let (mut rq, mut rk) = (q.clone(), k.clone());
        rotate(&mut rq);
        rotate(&mut rk);
        assert!((dot(&rq, &rk) - dot(&q, &k)).abs() < 1e-3 * dot(&q, &k).abs().max(1.0));
        assert!((dot(&rk, &rk) - dot(&k, &k)).abs() < 1e-3 * dot(&k, &k));
        let peak = rk.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(peak < 40.0, "the outlier's 300 is spread: largest channel {peak}");
    }

    #[test]
    fn encodings_parse_size_and_refuse_heads_they_cannot_hold() {
        assert_eq!(KvEncoding::parse("auto"), Ok(None));
        assert_eq!(KvEncoding::parse("Q8_0"), Ok(Some(KvEncoding::Q8_0)));
        assert!(KvEncoding::parse("q3").is_err());
        assert_eq!(KvEncoding::F16.head_bytes(64), 128);
        assert_eq!(KvEncoding::Q8_0.head_bytes(64), 66);
        assert!(KvEncoding::Q8_0.unfit(96).is_some());
        assert!(KvEncoding::Q8_0.unfit(192).is_some());
        assert!(KvEncoding::Q8_0.unfit(128).is_none());
        // tokens per byte against f16: at least 1.9x
        assert!(KvEncoding::F16.head_bytes(128) as f64 / KvEncoding::Q8_0.head_bytes(128) as f64 >= 1.9);
    }
}
