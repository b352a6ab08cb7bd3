//! The arithmetic of the quantized row codes ([`super::encoding::RowCode`]): the rotation applied before
//! encoding, the encoders (once per token, layer and head on write) and the scalar decoders the portable kernels
//! and the tests read with. The x86 kernels decode the same bits eight values at a time
//! (`attention::paged::cpu_inplace::elem`).
//!
//! Layouts of a head row of D values (all little-endian):
//! - **q8_0**: D int8 values, then an f16 scale per [`Q8_BLOCK`] values. Value = q · scale.
//! - **q4_0**: D 4-bit codes packed eight to four bytes, then an f16 scale per [`Q4_BLOCK`] values. Value =
//!   (code − 8) · scale, llama.cpp's q4_0 rounding (the value of largest magnitude maps to −8).
//! - **Lloyd–Max b-bit** (b = 2, 3, 4; TurboQuant's scalar codebooks): D b-bit codes packed eight to b bytes,
//!   then one f16 scale for the row. Value = [`codebook`]\[code\] · scale. A rotated row's coordinates are close
//!   to Gaussian with variance |x|²/D, which the codebooks (Lloyd–Max levels of the standard normal) are optimal
//!   for; the scale is the least-squares one for the chosen codes.
//!
//! Packing: the codes of values 8g..8g+8 are the b bytes at g·b read as one little-endian word, value 8g+j at
//! bits b·j..b·j+b.

use half::f16;

/// Values per q8_0 scale.
pub const Q8_BLOCK: usize = 64;
/// Values per q4_0 scale.
pub const Q4_BLOCK: usize = 32;

/// The Lloyd–Max levels of the standard normal for 2, 3 and 4 bits, ascending (the test below checks each is the
/// mean of the normal over its cell).
pub const LM2: [f32; 4] = [-1.5104, -0.4528, 0.4528, 1.5104];
pub const LM3: [f32; 8] = [-2.1519, -1.3439, -0.7560, -0.2451, 0.2451, 0.7560, 1.3439, 2.1519];
pub const LM4: [f32; 16] = [
    -2.7326, -2.0690, -1.6181, -1.2562, -0.9424, -0.6568, -0.3881, -0.1284, 0.1284, 0.3881, 0.6568, 0.9424, 1.2562,
    1.6181, 2.0690, 2.7326,
];

/// The codebook of `bits`-bit Lloyd–Max rows (2, 3 or 4).
pub fn codebook(bits: usize) -> &'static [f32] {
    match bits {
        2 => &LM2,
        3 => &LM3,
        _ => &LM4,
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

/// The inverse of [`rotate`] (the transform, then the signs): turns an output computed from rotated values back.
pub fn unrotate(x: &mut [f32]) {
    hadamard(x);
    flip_signs(x);
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

fn put_f16(out: &mut [u8], at: usize, v: f16) {
    out[at..at + 2].copy_from_slice(&v.to_bits().to_le_bytes());
}

fn get_f16(row: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([row[at], row[at + 1]])).to_f32()
}

/// Encode one head row `x` as q8_0 into `o` (D + D/32 bytes). Per block: scale = max |x| / 127 (as f16),
/// q = round(x / scale).
pub fn q8_encode_row(x: &[f32], o: &mut [u8]) {
    let d = x.len();
    for (b, xb) in x.chunks(Q8_BLOCK).enumerate() {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = f16::from_f32(amax / 127.0);
        let s = scale.to_f32();
        let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
        for (q, &v) in o[b * Q8_BLOCK..].iter_mut().zip(xb) {
            *q = (v * inv).round().clamp(-127.0, 127.0) as i8 as u8;
        }
        put_f16(o, d + 2 * b, scale);
    }
}

/// Value `i` of a q8_0 head row of `d` values.
#[inline(always)]
pub fn q8_value(row: &[u8], i: usize, d: usize) -> f32 {
    (row[i] as i8) as f32 * get_f16(row, d + 2 * (i / Q8_BLOCK))
}

/// Store code `c` (of `bits` bits) of value `i` in a packed row.
fn put_code(o: &mut [u8], i: usize, bits: usize, c: u32) {
    let bit = (i / 8) * 8 * bits + (i % 8) * bits;
    for k in 0..bits {
        if c >> k & 1 == 1 {
            o[(bit + k) / 8] |= 1 << ((bit + k) % 8);
        }
    }
}

/// Code of value `i` in a packed row of `bits`-bit codes.
#[inline(always)]
pub fn code_of(row: &[u8], i: usize, bits: usize) -> usize {
    let at = (i / 8) * bits;
    let mut w = 0u32;
    for k in 0..bits {
        w |= (row[at + k] as u32) << (8 * k);
    }
    ((w >> (bits * (i % 8))) & ((1 << bits) - 1)) as usize
}

/// Encode one head row `x` as q4_0 into `o` (D/2 + D/16 bytes). Per block the value of largest magnitude maps to
/// −8: scale = it / −8 (as f16), code = round(x / scale) + 8, clamped to 0..15.
pub fn q4_encode_row(x: &[f32], o: &mut [u8]) {
    let d = x.len();
    o.iter_mut().for_each(|b| *b = 0);
    for (b, xb) in x.chunks(Q4_BLOCK).enumerate() {
        let peak = xb.iter().fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let scale = f16::from_f32(peak / -8.0);
        let s = scale.to_f32();
        let inv = if s != 0.0 { 1.0 / s } else { 0.0 };
        for (j, &v) in xb.iter().enumerate() {
            put_code(o, b * Q4_BLOCK + j, 4, ((v * inv).round() + 8.0).clamp(0.0, 15.0) as u32);
        }
        put_f16(o, d / 2 + 2 * b, scale);
    }
}

/// Value `i` of a q4_0 head row of `d` values.
#[inline(always)]
pub fn q4_value(row: &[u8], i: usize, d: usize) -> f32 {
    (code_of(row, i, 4) as f32 - 8.0) * get_f16(row, d / 2 + 2 * (i / Q4_BLOCK))
}

/// Encode one (rotated) head row `x` with the `bits`-bit Lloyd–Max codebook into `o` (D·bits/8 + 2 bytes): each
/// value's code is the level nearest x / σ (σ = |x| / √D), then the row's scale is the least-squares one for
/// those codes, Σ x·c / Σ c², stored as f16.
pub fn lm_encode_row(x: &[f32], bits: usize, o: &mut [u8]) {
    let d = x.len();
    let book = codebook(bits);
    o.iter_mut().for_each(|b| *b = 0);
    let norm = x.iter().map(|v| v * v).sum::<f32>().sqrt();
    let inv_sigma = if norm > 0.0 { (d as f32).sqrt() / norm } else { 0.0 };
    let (mut xc, mut cc) = (0f32, 0f32);
    for (i, &v) in x.iter().enumerate() {
        let c = nearest(book, v * inv_sigma);
        put_code(o, i, bits, c as u32);
        xc += v * book[c];
        cc += book[c] * book[c];
    }
    let scale = if cc > 0.0 { xc / cc } else { 0.0 };
    put_f16(o, d * bits / 8, f16::from_f32(scale));
}

/// The index of the level of `book` (ascending) nearest `v`.
fn nearest(book: &[f32], v: f32) -> usize {
    // the levels below v's cell boundary (midpoints between neighbours)
    book.windows(2).filter(|w| v > 0.5 * (w[0] + w[1])).count()
}

/// Value `i` of a `bits`-bit Lloyd–Max head row of `d` values.
#[inline(always)]
pub fn lm_value(row: &[u8], i: usize, d: usize, bits: usize) -> f32 {
    codebook(bits)[code_of(row, i, bits)] * get_f16(row, d * bits / 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` standard-normal-like values (Box–Muller over a fixed LCG).
    fn gaussian(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut uniform = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        (0..n).map(|_| ((-2.0 * uniform().ln()).sqrt() * (std::f64::consts::TAU * uniform()).cos()) as f32).collect()
    }

    fn sample(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i + seed) * 37 % 101) as f32 - 50.0) * 0.013 * (1 + (i * 7 + seed) % 5) as f32).collect()
    }

    #[test]
    fn q8_rows_round_trip_within_half_a_step_of_their_block_scale() {
        let d = 128;
        let x = sample(d, 1);
        let mut o = vec![0u8; d + d / 32];
        q8_encode_row(&x, &mut o);
        for (b, xb) in x.chunks(Q8_BLOCK).enumerate() {
            let step = xb.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            for (j, &v) in xb.iter().enumerate() {
                let got = q8_value(&o, b * Q8_BLOCK + j, d);
                assert!((got - v).abs() <= 0.5 * step * 1.01, "value {j}: {got} vs {v}");
            }
        }
        // a block of zeros stays zeros (no division by a zero scale)
        let mut z = vec![0u8; 66];
        q8_encode_row(&[0.0; 64], &mut z);
        assert!((0..64).all(|i| q8_value(&z, i, 64) == 0.0));
    }

    #[test]
    fn q4_rows_round_trip_within_half_a_step_and_keep_their_peak() {
        let d = 64;
        let x = sample(d, 3);
        let mut o = vec![0u8; d / 2 + d / 16];
        q4_encode_row(&x, &mut o);
        for (b, xb) in x.chunks(Q4_BLOCK).enumerate() {
            let peak = xb.iter().fold(0f32, |m, &v| m.max(v.abs()));
            let step = peak / 8.0;
            for (j, &v) in xb.iter().enumerate() {
                let got = q4_value(&o, b * Q4_BLOCK + j, d);
                assert!((got - v).abs() <= 0.5 * step * 1.01, "block {b} value {j}: {got} vs {v}");
            }
            // the value of largest magnitude is kept to f16's rounding of the scale
            let at = xb.iter().position(|v| v.abs() == peak).unwrap();
            assert!((q4_value(&o, b * Q4_BLOCK + at, d).abs() - peak).abs() < 1e-2 * peak);
        }
    }

    /// Each level of each codebook is the mean of the standard normal over its cell (the Lloyd–Max condition),
    /// by numerical integration.
    #[test]
    fn the_codebooks_are_lloyd_max_for_the_normal() {
        for bits in [2, 3, 4] {
            let book = codebook(bits);
            assert_eq!(book.len(), 1 << bits);
            let edges: Vec<f32> = book.windows(2).map(|w| 0.5 * (w[0] + w[1])).collect();
            for (i, &level) in book.iter().enumerate() {
                let lo = if i == 0 { -9.0 } else { edges[i - 1] as f64 };
                let hi = if i == book.len() - 1 { 9.0 } else { edges[i] as f64 };
                let steps = 20000;
                let (mut mass, mut first) = (0f64, 0f64);
                for s in 0..steps {
                    let x = lo + (hi - lo) * (s as f64 + 0.5) / steps as f64;
                    let p = (-0.5 * x * x).exp();
                    mass += p;
                    first += p * x;
                }
                let centroid = first / mass;
                assert!((centroid - level as f64).abs() < 2e-3, "{bits} bits, level {i}: {level} vs {centroid}");
            }
        }
    }

    /// Rows of Gaussian values come back with the relative error the codebooks promise (RMS 0.34, 0.19, 0.097 of
    /// the values' for 2, 3, 4 bits); a row of zeros stays zeros.
    #[test]
    fn lloyd_max_rows_round_trip_with_the_codebooks_error() {
        let d = 128;
        let x: Vec<f32> = gaussian(64 * d, 9).iter().map(|v| v * 0.3).collect();
        for (bits, worst) in [(2, 0.40), (3, 0.22), (4, 0.12)] {
            let mut o = vec![0u8; d * bits / 8 + 2];
            let (mut err, mut norm) = (0f32, 0f32);
            for x in x.chunks(d) {
                lm_encode_row(x, bits, &mut o);
                err += (0..d).map(|i| (lm_value(&o, i, d, bits) - x[i]).powi(2)).sum::<f32>();
                norm += x.iter().map(|v| v * v).sum::<f32>();
            }
            let (err, norm) = (err.sqrt(), norm.sqrt());
            assert!(err / norm < worst, "{bits} bits: relative error {}", err / norm);
            assert!(err / norm > 0.3 * worst, "{bits} bits: the rounding is visible ({})", err / norm);
            let mut z = vec![0u8; d * bits / 8 + 2];
            lm_encode_row(&[0.0; 128], bits, &mut z);
            assert!((0..d).all(|i| lm_value(&z, i, d, bits) == 0.0));
        }
    }

    #[test]
    fn packed_codes_read_back_for_every_width() {
        for bits in [2, 3, 4] {
            let n = 64;
            let mut o = vec![0u8; n * bits / 8 + 2];
            let codes: Vec<u32> = (0..n).map(|i| (i as u32 * 5 + 3) % (1 << bits)).collect();
            for (i, &c) in codes.iter().enumerate() {
                put_code(&mut o, i, bits, c);
            }
            assert!((0..n).all(|i| code_of(&o, i, bits) == codes[i] as usize), "{bits} bits");
        }
    }

    /// The rotation is orthogonal (dot products and norms kept), undone by [`unrotate`], and spreads one huge
    /// channel over every channel.
    #[test]
    fn the_rotation_keeps_dot_products_is_undone_and_spreads_an_outlier() {
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
        unrotate(&mut rq);
        assert!(rq.iter().zip(&q).all(|(a, b)| (a - b).abs() < 1e-5));
    }
}
