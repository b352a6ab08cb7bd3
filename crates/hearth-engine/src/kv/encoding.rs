//! How the paged KV cache stores a head's row of K and of V (`--kv-cache-dtype`): a float dtype for both, or a
//! quantized [`RowCode`] for each (the row layouts and their arithmetic are in [`super::codec`]).
//!
//! - `q8_0`: int8 values and an f16 scale per 64: D + D/32 bytes a row, 1.94× the tokens of an f16 cache.
//! - `q4_0`: 4-bit values and an f16 scale per 32 (llama.cpp's q4_0 rounding): D/2 + D/16 bytes, 3.56×.
//! - `turbo:kXvY` (TurboQuant): keys of X bits (8, 4 or 3) and values of Y bits (8, 4, 3 or 2); 8 bits is q8_0,
//!   fewer are codes of a Lloyd–Max codebook with one f16 scale a row (D·b/8 + 2 bytes). `turbo:k8v3`: 2.81×
//!   at D = 128.
//!
//! Every quantized key is rotated before it is encoded ([`super::codec::rotate`]: fixed random signs, then a
//! normalized Walsh–Hadamard transform, per head), and so is every query that reads it: the rotation is
//! orthogonal, so scores are unchanged, but a key's few huge channels (Qwen2's key biases reach hundreds where the
//! rest are units) are spread over all of them, and a block's scale no longer drowns its small values. Values
//! below 8 bits are rotated too (their codebooks assume the near-Gaussian coordinates a rotation gives), and the
//! attention output is rotated back once per head. q8_0 values are not rotated (it measured no better).

use candle_core::DType;

/// How one buffer (K or V) keeps a head row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowCode {
    F32,
    F16,
    BF16,
    /// int8 values, an f16 scale per 64.
    Q8_0,
    /// 4-bit values, an f16 scale per 32.
    Q4_0,
    /// 2-, 3- or 4-bit codes of a Lloyd–Max codebook, an f16 scale per row.
    LloydMax(u8),
}

impl RowCode {
    /// Whether the rows are quantized (not a float dtype).
    pub fn is_quantized(&self) -> bool {
        !matches!(self, Self::F32 | Self::F16 | Self::BF16)
    }

    /// Bits of one stored value (scales not counted).
    pub fn bits(&self) -> usize {
        match self {
            Self::F32 => 32,
            Self::F16 | Self::BF16 => 16,
            Self::Q8_0 => 8,
            Self::Q4_0 => 4,
            Self::LloydMax(b) => *b as usize,
        }
    }

    /// Buffer elements of one head row of `d` values (bytes for a quantized code).
    pub fn units(&self, d: usize) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => d,
            Self::Q8_0 => d + 2 * d.div_ceil(super::codec::Q8_BLOCK),
            Self::Q4_0 => d / 2 + 2 * d.div_ceil(super::codec::Q4_BLOCK),
            Self::LloydMax(b) => d * *b as usize / 8 + 2,
        }
    }

    /// Whether rows are rotated before they are encoded, as a key (`key`) or a value.
    pub fn rotated(&self, key: bool) -> bool {
        match self {
            Self::Q8_0 => key,
            c => c.is_quantized(),
        }
    }
}

/// The encoding of the KV cache's rows: one code for the keys, one for the values (both float, or both
/// quantized).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KvEncoding {
    pub key: RowCode,
    pub value: RowCode,
}

impl KvEncoding {
    pub const F32: Self = Self::both(RowCode::F32);
    pub const F16: Self = Self::both(RowCode::F16);
    pub const BF16: Self = Self::both(RowCode::BF16);
    pub const Q8_0: Self = Self::both(RowCode::Q8_0);
    pub const Q4_0: Self = Self::both(RowCode::Q4_0);

    const fn both(code: RowCode) -> Self {
        Self { key: code, value: code }
    }

    /// `turbo:kXvY`: keys of `k` bits (8: q8_0; 4 or 3: Lloyd–Max) and values of `v` bits (8, or 4, 3 or 2).
    pub fn turbo(k: u8, v: u8) -> Option<Self> {
        let code = |b, least| match b {
            8 => Some(RowCode::Q8_0),
            b if (least..=4).contains(&b) => Some(RowCode::LloydMax(b)),
            _ => None,
        };
        Some(Self { key: code(k, 3)?, value: code(v, 2)? })
    }

    /// `--kv-cache-dtype`'s value: None for `auto` (the model's dtype on this device).
    pub fn parse(s: &str) -> Result<Option<Self>, String> {
        const KNOWN: &str = "auto, f32, f16, bf16, q8_0, q4_0 or turbo:kXvY with X 8, 4 or 3 and Y 8, 4, 3 or 2";
        let s = s.trim().to_ascii_lowercase();
        Ok(Some(match s.as_str() {
            "auto" => return Ok(None),
            "f32" => Self::F32,
            "f16" => Self::F16,
            "bf16" => Self::BF16,
            "q8_0" | "q8" => Self::Q8_0,
            "q4_0" | "q4" => Self::Q4_0,
            other => {
                let bits = other.strip_prefix("turbo:k").and_then(|r| r.split_once('v'));
                let parsed = bits.and_then(|(k, v)| Self::turbo(k.parse().ok()?, v.parse().ok()?));
                return parsed.map(Some).ok_or_else(|| format!("unknown KV cache dtype {other:?} ({KNOWN})"));
            }
        }))
    }

    /// The name `--kv-cache-dtype` takes (`parse(name())` gives it back).
    pub fn name(&self) -> String {
        match (self.key, self.value) {
            (RowCode::F32, RowCode::F32) => "f32".into(),
            (RowCode::F16, RowCode::F16) => "f16".into(),
            (RowCode::BF16, RowCode::BF16) => "bf16".into(),
            (RowCode::Q8_0, RowCode::Q8_0) => "q8_0".into(),
            (RowCode::Q4_0, RowCode::Q4_0) => "q4_0".into(),
            (k, v) => format!("turbo:k{}v{}", k.bits(), v.bits()),
        }
    }

    /// The element type of the buffers that hold it (bytes for an encoded cache).
    pub fn storage_dtype(&self) -> DType {
        match self.key {
            RowCode::F32 => DType::F32,
            RowCode::F16 => DType::F16,
            RowCode::BF16 => DType::BF16,
            _ => DType::U8,
        }
    }

    /// Whether the rows are quantized (not a float dtype).
    pub fn is_quantized(&self) -> bool {
        self.key.is_quantized()
    }

    /// Bytes of one head row of K and one of V, of `head_dim` values each.
    pub fn head_bytes(&self, head_dim: usize) -> usize {
        (self.key.units(head_dim) + self.value.units(head_dim)) * self.storage_dtype().size_in_bytes()
    }

    /// Why a model with heads of `head_dim` values cannot keep its KV in this encoding (None: it can).
    pub fn unfit(&self, head_dim: usize) -> Option<String> {
        (self.is_quantized() && (head_dim < 64 || !head_dim.is_power_of_two())).then(|| {
            format!(
                "a {} KV cache needs a head size that is a power of two and at least 64; this model's is {head_dim}",
                self.name()
            )
        })
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

/// Encode `rows` (each `d` values, already rotated where the code rotates) with `code` into `out`
/// (`rows.len() / d` rows of `code.units(d)` bytes).
pub fn encode(code: RowCode, rows: &[f32], d: usize, out: &mut Vec<u8>) {
    use super::codec::*;
    let units = code.units(d);
    out.clear();
    out.resize(rows.len() / d.max(1) * units, 0);
    for (x, o) in rows.chunks_exact(d).zip(out.chunks_exact_mut(units)) {
        match code {
            RowCode::Q8_0 => q8_encode_row(x, o),
            RowCode::Q4_0 => q4_encode_row(x, o),
            RowCode::LloydMax(b) => lm_encode_row(x, b as usize, o),
            RowCode::F32 | RowCode::F16 | RowCode::BF16 => {}
        }
    }
}

/// Value `i` of a head row of `d` values kept in the quantized `code` (0 for a float code).
pub fn decode_value(code: RowCode, row: &[u8], i: usize, d: usize) -> f32 {
    use super::codec::*;
    match code {
        RowCode::Q8_0 => q8_value(row, i, d),
        RowCode::Q4_0 => q4_value(row, i, d),
        RowCode::LloydMax(b) => lm_value(row, i, d, b as usize),
        RowCode::F32 | RowCode::F16 | RowCode::BF16 => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_parse_name_size_and_refuse_heads_they_cannot_hold() {
        assert_eq!(KvEncoding::parse("auto"), Ok(None));
        assert_eq!(KvEncoding::parse("Q8_0"), Ok(Some(KvEncoding::Q8_0)));
        assert!(KvEncoding::parse("q3").is_err());
        for bad in ["turbo:k5v3", "turbo:k8", "turbo:kv", "turbo:k8v1", "turbo:k16v4", "turbo:k2v3"] {
            assert!(KvEncoding::parse(bad).is_err(), "{bad}");
        }
        for name in
            ["f32", "f16", "bf16", "q8_0", "q4_0", "turbo:k8v4", "turbo:k8v3", "turbo:k4v3", "turbo:k3v2", "turbo:k4v8"]
        {
            let enc = KvEncoding::parse(name).unwrap().unwrap();
            assert_eq!(enc.name(), name);
        }
        // turbo:k8v8 is q8_0 by another name
        assert_eq!(KvEncoding::parse("turbo:k8v8").unwrap().unwrap().name(), "q8_0");
        // bytes of a K row and a V row
        assert_eq!(KvEncoding::F16.head_bytes(64), 256);
        assert_eq!(KvEncoding::Q8_0.head_bytes(64), 132);
        assert_eq!(KvEncoding::Q4_0.head_bytes(128), 2 * 72);
        let k8v3 = KvEncoding::turbo(8, 3).unwrap();
        assert_eq!(k8v3.head_bytes(128), 132 + 50);
        assert!(KvEncoding::Q8_0.unfit(96).is_some());
        assert!(k8v3.unfit(192).is_some());
        assert!(KvEncoding::Q4_0.unfit(128).is_none());
        assert!(KvEncoding::F16.unfit(96).is_none());
        // tokens per byte against f16: q8_0 at least 1.9x, turbo:k8v3 at least 2.5x
        let ratio = |e: KvEncoding, d| KvEncoding::F16.head_bytes(d) as f64 / e.head_bytes(d) as f64;
        assert!(ratio(KvEncoding::Q8_0, 128) >= 1.9 && ratio(k8v3, 128) >= 2.5 && ratio(k8v3, 64) >= 2.5);
    }
}
