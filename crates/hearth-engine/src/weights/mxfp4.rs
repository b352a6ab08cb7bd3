//! MXFP4 weights (the OCP microscaling 4-bit float, as gpt-oss publishes its experts): each output row's inputs in
//! blocks of 32 values sharing one power-of-two scale, stored as an E8M0 byte (exponent + 127), each value an E2M1
//! code (sign, then one of 0, 0.5, 1, 1.5, 2, 3, 4, 6), two codes a byte, low nibble first.
//!
//! Every MXFP4 value is an integer in ±{0, 1, 2, 3, 4, 6, 8, 12} times half its block's scale, so a block is
//! exactly a Q8_0 block (32 int8 values and an f16 scale) wherever that half-scale is an f16 number
//! (2^-24..2^15), and so is a Q5_0 block ((q - 16)·d, q in 0..32, holds -12..=12): on the CPU the experts become
//! Q5_0 (5.5 bits a value; `HEARTH_MXFP4_Q5=0`: Q8_0, 8.5 bits) without rounding anything and run on hearth's int8
//! kernels. A block outside that range, or any other device, gets the weights dequantized.

/// E2M1 codes as values.
const LUT: [f32; 16] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];

/// Bytes of one Q8_0 block: an f16 scale, then 32 int8 values.
const Q8_0_BYTES: usize = 34;
/// Bytes of one Q5_0 block: an f16 scale, the 32 values' fifth bits, then their low nibbles.
const Q5_0_BYTES: usize = 22;

/// Half an E8M0 scale as an f16 number (None outside f16's range, 2^-24..2^15).
fn half_scale(scale: u8) -> Option<half::f16> {
    let exp = scale as i32 - 127 - 1;
    (-24..=15).contains(&exp).then(|| half::f16::from_f32((exp as f32).exp2()))
}
/// Bytes of one GGML MXFP4 block: the scale, then 16 bytes of codes.
pub const GGML_BLOCK_BYTES: usize = 17;

/// How a file lays the blocks out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Hugging Face (gpt-oss's safetensors): the scales in their own tensor; a block's 16 bytes hold values 2j
    /// (low nibble) and 2j + 1 (high nibble).
    Hf,
    /// GGUF: each block is its scale byte, then 16 bytes holding values j (low nibble) and j + 16 (high nibble).
    Ggml,
}

/// One expert's MXFP4 matrix, as stored: `blocks` (out, groups, 16) and `scales` (out, groups) for [`Layout::Hf`],
/// `blocks` (out, groups, 17) for [`Layout::Ggml`] (`scales` empty).
pub struct Mxfp4<'a> {
    pub blocks: &'a [u8],
    pub scales: &'a [u8],
    pub groups: usize,
    pub layout: Layout,
}

impl Mxfp4<'_> {
    /// Block `g` of row `r`: its scale byte and its 32 codes in value order.
    fn block(&self, r: usize, g: usize) -> (u8, [u8; 32]) {
        let i = r * self.groups + g;
        let mut codes = [0u8; 32];
        let (scale, bytes) = match self.layout {
            Layout::Hf => (self.scales[i], &self.blocks[i * 16..][..16]),
            Layout::Ggml => {
                let b = &self.blocks[i * GGML_BLOCK_BYTES..][..GGML_BLOCK_BYTES];
                (b[0], &b[1..])
            }
        };
        for (j, &b) in bytes.iter().enumerate() {
            let (lo, hi) = match self.layout {
                Layout::Hf => (2 * j, 2 * j + 1),
                Layout::Ggml => (j, j + 16),
            };
            codes[lo] = b & 15;
            codes[hi] = b >> 4;
        }
        (scale, codes)
    }

    /// Rows `rows` as Q8_0 blocks (None where a block's half-scale is not an f16 number).
    pub fn to_q8_0(&self, rows: &[usize]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(rows.len() * self.groups * Q8_0_BYTES);
        for &r in rows {
            for g in 0..self.groups {
                let (scale, codes) = self.block(r, g);
                out.extend_from_slice(&half_scale(scale)?.to_le_bytes());
                // twice the E2M1 value: an exact integer
                out.extend(codes.iter().map(|&c| (2.0 * LUT[c as usize]) as i8 as u8));
            }
        }
        Some(out)
    }

    /// Rows `rows` as Q5_0 blocks, the same values at 5.5 bits a value (None where a block's half-scale is not an
    /// f16 number): twice an E2M1 value is an integer in -12..=12, which Q5_0's (q - 16)·d holds with q in 4..=28.
    pub fn to_q5_0(&self, rows: &[usize]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(rows.len() * self.groups * Q5_0_BYTES);
        for &r in rows {
            for g in 0..self.groups {
                let (scale, codes) = self.block(r, g);
                let d = half_scale(scale)?;
                let q = codes.map(|c| ((2.0 * LUT[c as usize]) as i32 + 16) as u8);
                let qh = q.iter().enumerate().fold(0u32, |h, (i, &v)| h | (u32::from(v >> 4) << i));
                out.extend_from_slice(&d.to_le_bytes());
                out.extend_from_slice(&qh.to_le_bytes());
                out.extend((0..16).map(|j| (q[j] & 15) | ((q[j + 16] & 15) << 4)));
            }
        }
        Some(out)
    }

    /// Rows `rows` as f32 values (rows × groups·32).
    pub fn dequantize(&self, rows: &[usize]) -> Vec<f32> {
        let mut out = Vec::with_capacity(rows.len() * self.groups * 32);
        for &r in rows {
            for g in 0..self.groups {
                let (scale, codes) = self.block(r, g);
                let scale = ((scale as i32 - 127) as f32).exp2();
                out.extend(codes.iter().map(|&c| LUT[c as usize] * scale));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_blocks_hold_the_mxfp4_values_exactly() {
        // two rows of one block each: every code once per row, scales 2^-3 and 2^2
        let blocks: Vec<u8> = (0..32u8).map(|i| (i % 16) | (((i + 5) % 16) << 4)).collect();
        let m = Mxfp4 { blocks: &blocks, scales: &[124, 129], groups: 1, layout: Layout::Hf };
        let want = m.dequantize(&[0, 1]);
        let q = m.to_q8_0(&[1, 0]).unwrap();
        for (k, (row, block)) in [(1, &q[..34]), (0, &q[34..])].into_iter().enumerate() {
            let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
            for (j, &v) in block[2..].iter().enumerate() {
                assert_eq!(d * (v as i8) as f32, want[row * 32 + j], "block {k} value {j}");
            }
        }
        assert_eq!(want[1], 0.375, "row 0's second value: code 5 (3.0) × 2^-3");
        // Q5_0: the same values, d·(q - 16) with q's fifth bit in qh
        let q5 = m.to_q5_0(&[0, 1]).unwrap();
        for row in 0..2 {
            let b = &q5[row * 22..][..22];
            let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            for j in 0..32 {
                let lo = if j < 16 { b[6 + j] & 15 } else { b[6 + j - 16] >> 4 };
                let q = i32::from(lo) | ((((qh >> j) & 1) as i32) << 4);
                assert_eq!(d * (q - 16) as f32, want[row * 32 + j], "Q5_0 row {row} value {j}");
            }
        }
        // a scale whose half is below f16's range: no Q8_0 form
        let low = Mxfp4 { blocks: &blocks[..16], scales: &[90], groups: 1, layout: Layout::Hf };
        assert!(low.to_q8_0(&[0]).is_none() && low.to_q5_0(&[0]).is_none());
        // the same values in GGML's layout: the scale inline, values j and j + 16 in byte j
        let mut ggml = Vec::new();
        for (row, scale) in [(0usize, 124u8), (1, 129)] {
            let hf = &blocks[row * 16..][..16];
            let code = |v: usize| if v.is_multiple_of(2) { hf[v / 2] & 15 } else { hf[v / 2] >> 4 };
            ggml.push(scale);
            ggml.extend((0..16).map(|j| code(j) | (code(j + 16) << 4)));
        }
        let g = Mxfp4 { blocks: &ggml, scales: &[], groups: 1, layout: Layout::Ggml };
        assert_eq!(g.dequantize(&[0, 1]), want);
        assert_eq!(g.to_q8_0(&[1, 0]).unwrap(), q);
        assert_eq!(g.to_q5_0(&[0, 1]).unwrap(), q5);
    }

    /// The Q5_0 and Q8_0 forms of the same MXFP4 matrix multiply to the same bits on hearth's int8 kernels: the
    /// same integer per block (Q5_0's q - 16 is Q8_0's value) and the same float steps after it.
    #[test]
    fn q5_0_and_q8_0_forms_multiply_to_the_same_bits() {
        use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
        use candle_core::{Device, Tensor};
        let (rows, groups) = (24, 8);
        let mut state = 12345u32;
        let mut next = || {
            state = state.wrapping_mul(1664525).wrapping_add(1013904223);
            (state >> 24) as u8
        };
        let blocks: Vec<u8> = (0..rows * groups * 16).map(|_| next()).collect();
        let scales: Vec<u8> = (0..rows * groups).map(|_| 118 + next() % 16).collect();
        let m = Mxfp4 { blocks: &blocks, scales: &scales, groups, layout: Layout::Hf };
        let all: Vec<usize> = (0..rows).collect();
        let weight = |bytes: Vec<u8>, t| {
            let q = QTensor::new(QStorage::from_data(bytes.into(), &Device::Cpu, t).unwrap(), (rows, groups * 32));
            crate::cpu_matmul::FastQMatMul::new(&QMatMul::QTensor(std::sync::Arc::new(q.unwrap())))
                .expect("hearth's int8 kernels (AVX2) read Q5_0 and Q8_0")
        };
        let q5 = weight(m.to_q5_0(&all).unwrap(), GgmlDType::Q5_0);
        let q8 = weight(m.to_q8_0(&all).unwrap(), GgmlDType::Q8_0);
        for n in [1usize, 5, 40] {
            let x: Vec<f32> = (0..n * groups * 32).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
            let x = Tensor::from_vec(x, (n, groups * 32), &Device::Cpu).unwrap();
            let bits = |w: &crate::cpu_matmul::FastQMatMul| -> Vec<u32> {
                let y: Vec<f32> = w.forward(&x).unwrap().flatten_all().unwrap().to_vec1().unwrap();
                y.iter().map(|v| v.to_bits()).collect()
            };
            assert_eq!(bits(&q5), bits(&q8), "{n} activation rows");
        }
    }
}
