//! Image resizing exactly as Pillow resizes 8-bit RGB images (`Image.resize`, its `Resample.c`), which the
//! transformers image processors call: separable convolution, horizontal pass first, coefficients normalized per
//! output pixel and held in 22-bit fixed point, each pass rounded and clipped to 8 bits. Bit-exact against
//! Pillow, so that the pixel values a model sees equal the reference processor's.

/// A resampling filter, as Pillow defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// `Image.BILINEAR` (triangle, support 1).
    Bilinear,
    /// `Image.BICUBIC` (Keys cubic with a = -0.5, support 2).
    Bicubic,
    /// `Image.LANCZOS` (Lanczos-3, support 3).
    Lanczos,
}

impl Filter {
    fn support(self) -> f64 {
        match self {
            Filter::Bilinear => 1.0,
            Filter::Bicubic => 2.0,
            Filter::Lanczos => 3.0,
        }
    }
    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Bilinear => {
                let x = x.abs();
                if x < 1.0 {
                    1.0 - x
                } else {
                    0.0
                }
            }
            Filter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Filter::Lanczos => {
                let sinc = |x: f64| {
                    if x == 0.0 {
                        1.0
                    } else {
                        let px = x * std::f64::consts::PI;
                        px.sin() / px
                    }
                };
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

/// Pillow's fixed-point precision for 8-bit images: 32 - 8 - 2.
const PRECISION_BITS: u32 = 22;

/// One axis's taps: for each output pixel, the first input index and its fixed-point weights.
struct Taps {
    first: Vec<usize>,
    weights: Vec<Vec<i32>>,
}

/// Pillow's `precompute_coeffs` and `normalize_coeffs_8bpc` for `in_size` -> `out_size`.
fn taps(in_size: usize, out_size: usize, filter: Filter) -> Taps {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filter.support() * filterscale;
    let mut first = Vec::with_capacity(out_size);
    let mut weights = Vec::with_capacity(out_size);
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        // Pillow truncates toward zero after adding 0.5 (C's (int) cast), then clamps.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let n = xmax.saturating_sub(xmin);
        let k: Vec<f64> = (0..n).map(|x| filter.weight((x as f64 + xmin as f64 - center + 0.5) * ss)).collect();
        let ww: f64 = k.iter().sum();
        let fixed = k
            .iter()
            .map(|&w| {
                let w = if ww != 0.0 { w / ww } else { w };
                let v = w * (1u64 << PRECISION_BITS) as f64;
                (if v < 0.0 { v - 0.5 } else { v + 0.5 }) as i32
            })
            .collect();
        first.push(xmin);
        weights.push(fixed);
    }
    Taps { first, weights }
}

fn clip8(acc: i64) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Resize an RGB image (`w * h * 3` bytes, row-major) to `ow x oh` as Pillow does.
pub fn resize_rgb(src: &[u8], w: usize, h: usize, ow: usize, oh: usize, filter: Filter) -> Vec<u8> {
    assert_eq!(src.len(), w * h * 3, "resize_rgb: {w}x{h} RGB needs {} bytes", w * h * 3);
    let need_h = ow != w;
    let need_v = oh != h;
    let vtaps = need_v.then(|| taps(h, oh, filter));
    // The rows the vertical pass reads (Pillow's ybox): the horizontal pass computes only those.
    let (y0, y1) = match &vtaps {
        Some(t) => (t.first[0], t.first[oh - 1] + t.weights[oh - 1].len()),
        None => (0, h),
    };
    let mut cur: Vec<u8>;
    let (cw, ch) = if need_h {
        let t = taps(w, ow, filter);
        cur = vec![0u8; ow * (y1 - y0) * 3];
        for (ry, y) in (y0..y1).enumerate() {
            let row = &src[y * w * 3..(y + 1) * w * 3];
            let out = &mut cur[ry * ow * 3..(ry + 1) * ow * 3];
            for xx in 0..ow {
                let mut acc = [1i64 << (PRECISION_BITS - 1); 3];
                for (i, &k) in t.weights[xx].iter().enumerate() {
                    let p = &row[(t.first[xx] + i) * 3..];
                    for c in 0..3 {
                        acc[c] += p[c] as i64 * k as i64;
                    }
                }
                for c in 0..3 {
                    out[xx * 3 + c] = clip8(acc[c]);
                }
            }
        }
        (ow, y1 - y0)
    } else {
        cur = src[y0 * w * 3..y1 * w * 3].to_vec();
        (w, y1 - y0)
    };
    let Some(t) = vtaps else { return cur };
    debug_assert_eq!(ch, y1 - y0);
    let mut out = vec![0u8; cw * oh * 3];
    for yy in 0..oh {
        let base = t.first[yy] - y0;
        for x in 0..cw * 3 {
            let mut acc = 1i64 << (PRECISION_BITS - 1);
            for (i, &k) in t.weights[yy].iter().enumerate() {
                acc += cur[(base + i) * cw * 3 + x] as i64 * k as i64;
            }
            out[yy * cw * 3 + x] = clip8(acc);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_size_is_identity_and_constant_stays_constant() {
        let img: Vec<u8> = (0..5 * 4 * 3).map(|i| (i * 37 % 256) as u8).collect();
        for f in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos] {
            assert_eq!(resize_rgb(&img, 5, 4, 5, 4, f), img);
            let flat = vec![123u8; 7 * 3 * 3];
            assert!(resize_rgb(&flat, 7, 3, 11, 5, f).iter().all(|&v| v == 123), "{f:?}");
            assert!(resize_rgb(&flat, 7, 3, 2, 2, f).iter().all(|&v| v == 123), "{f:?}");
        }
    }
}
