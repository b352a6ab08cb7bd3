use super::*;
use crate::attention::paged::gather;
use crate::attention::test_util::{self, rnd, Attend};
use crate::kv::codec::{rotate, unrotate};
use crate::kv::encoding::{decode_value, encode};
use crate::kv::{KvEncoding, RowCode};
use candle_core::Device;

/// Outputs of `f` over a cache kept in `dtype`, decode rows when every piece is one token.
fn run_in(
    f: Attend,
    dtype: impl Into<KvEncoding>,
    qkv: [&Tensor; 3],
    pieces: &[(usize, usize)],
    p: &AttnParams,
) -> Vec<Vec<f32>> {
    test_util::run_kv(f, dtype, qkv, pieces, p, pieces.iter().all(|&(_, l)| l == 1))
}

fn run(f: Attend, qkv: [&Tensor; 3], pieces: &[(usize, usize)], p: &AttnParams) -> Vec<Vec<f32>> {
    run_in(f, DType::F32, qkv, pieces, p)
}

/// What a cache in `dtype` keeps of `t`, as f32 (an f16 cache rounds each value to f16).
fn kept(dtype: DType, t: &Tensor) -> Tensor {
    t.to_dtype(dtype).and_then(|t| t.to_dtype(DType::F32)).unwrap()
}

/// Every output within f32 rounding (2e-5) of the reference's.
fn assert_close(got: &[Vec<f32>], want: &[Vec<f32>], case: &str) {
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 2e-5, "token {i}: {x} vs {y} ({case})");
        }
    }
}

/// Matches the gather backend (candle's matmul and softmax over f32) to f32 rounding, for full, sliding-window
/// and soft-capped attention, GQA and MHA, head sizes with and without a multiple of 8, with the cache in f32
/// and in f16 (against the gather backend given the f16-rounded keys and values: the f16 cache rounds on
/// write and computes in f32); and a token's result is bit-identical however its prompt was cut (one piece,
/// after a hit anywhere, or decoded one at a time).
#[test]
fn matches_the_gather_backend_and_is_the_same_for_any_cut() {
    for dtype in [DType::F32, DType::F16] {
        for (h, kvh, d) in [(4, 2, 16), (3, 3, 8), (2, 1, 12)] {
            let n = 70;
            let (q, k, v) = (rnd((n, h, d), 0.1), rnd((n, kvh, d), 0.2), rnd((n, kvh, d), 0.3));
            let (kr, vr) = (kept(dtype, &k), kept(dtype, &v));
            for (window, softcap) in [(None, None), (Some(20), None), (None, Some(5.0))] {
                let p = AttnParams { scale: 0.35, window, softcap, sinks: None };
                let want = run(gather::attend, [&q, &kr, &vr], &[(0, n)], &p);
                let got = run_in(attend, dtype, [&q, &k, &v], &[(0, n)], &p);
                assert_close(&got, &want, &format!("{dtype:?} {h}/{kvh}/{d}, {window:?} {softcap:?}"));
                let decoded: Vec<(usize, usize)> = (0..n).map(|i| (i, 1)).collect();
                for pieces in [vec![(0, 17), (17, 53)], vec![(0, 64), (64, 6)], decoded] {
                    assert_eq!(run_in(attend, dtype, [&q, &k, &v], &pieces, &p), got, "{dtype:?} {pieces:?}");
                }
            }
        }
    }
}

/// The f16 cache's rounding is visible (the test above would pass vacuously if the cache kept f32): its
/// outputs differ from the f32 cache's, by about f16's precision.
#[test]
fn an_f16_cache_rounds_its_keys_and_values() {
    let (h, kvh, d, n) = (4, 2, 16, 40);
    let (q, k, v) = (rnd((n, h, d), 0.1), rnd((n, kvh, d), 0.2), rnd((n, kvh, d), 0.3));
    let p = AttnParams { scale: 0.35, window: None, softcap: None, sinks: None };
    let f32s = run_in(attend, DType::F32, [&q, &k, &v], &[(0, n)], &p);
    let f16s = run_in(attend, DType::F16, [&q, &k, &v], &[(0, n)], &p);
    let worst = f32s.iter().flatten().zip(f16s.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst > 1e-6 && worst < 5e-3, "largest difference {worst}");
}

/// `t` ((n, heads, D)) with every head vector rotated.
fn rotated(t: &Tensor) -> Tensor {
    let (_, _, d) = t.dims3().unwrap();
    let mut x = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    x.chunks_exact_mut(d).for_each(rotate);
    Tensor::from_vec(x, t.shape(), &Device::Cpu).unwrap()
}

/// What a cache keeping `t` ((n, KvH, D)) as `code` holds, decoded to f32 (rotated values where it rotates).
fn kept_as(code: RowCode, key: bool, t: &Tensor) -> Tensor {
    let (_, _, d) = t.dims3().unwrap();
    let t = if code.rotated(key) { rotated(t) } else { t.clone() };
    let mut enc = Vec::new();
    encode(code, &t.flatten_all().unwrap().to_vec1::<f32>().unwrap(), d, &mut enc);
    let back: Vec<f32> =
        enc.chunks(code.units(d)).flat_map(|row| (0..d).map(|i| decode_value(code, row, i, d))).collect();
    Tensor::from_vec(back, t.shape(), &Device::Cpu).unwrap()
}

/// The encodings the tests read: every code as a key and as a value.
fn encodings() -> Vec<KvEncoding> {
    let mut all = vec![KvEncoding::Q8_0, KvEncoding::Q4_0];
    all.extend([(8, 4), (8, 3), (8, 2), (4, 4), (3, 2), (4, 8)].map(|(k, v)| KvEncoding::turbo(k, v).unwrap()));
    all
}

/// An encoded cache (rows encoded once on write, rotated first where the code rotates; read in place, queries
/// rotated, outputs rotated back where values were) gives the same bits as an f32 cache holding its decoded
/// values read the same way — decoding is exact in f32 — for prompt pieces (rows widened per chunk) and decode
/// rows (rows decoded as they are read), past one chunk, with a window and a soft cap; and its rounding is visible
/// against the f32 cache of the exact values, by about what its bits allow.
#[test]
fn an_encoded_cache_reads_exactly_its_decoded_values() {
    let (h, kvh) = (4, 2);
    let mut errors = Vec::new();
    for enc in encodings() {
        for d in [64, 128] {
            let n = 2 * chunk_keys(d) + 30;
            let (q, k, v) = (rnd((n, h, d), 0.1), rnd((n, kvh, d), 0.2), rnd((n, kvh, d), 0.3));
            let qr = if enc.key.rotated(true) { rotated(&q) } else { q.clone() };
            let (kr, vr) = (kept_as(enc.key, true, &k), kept_as(enc.value, false, &v));
            let back = |mut out: Vec<Vec<f32>>| {
                if enc.value.rotated(false) {
                    out.iter_mut().for_each(|o| o.chunks_exact_mut(d).for_each(unrotate));
                }
                out
            };
            for (window, softcap) in [(None, None), (Some(300), None), (None, Some(5.0))] {
                let p = AttnParams { scale: 0.2, window, softcap, sinks: None };
                let want = back(run_in(attend, DType::F32, [&qr, &kr, &vr], &[(0, n)], &p));
                let got = run_in(attend, enc, [&q, &k, &v], &[(0, n)], &p);
                let name = enc.name();
                assert_eq!(got, want, "{name} d {d}, {window:?} {softcap:?}");
                let mut pieces = vec![(0, n - 24)];
                pieces.extend((n - 24..n).map(|i| (i, 1)));
                assert_eq!(run_in(attend, enc, [&q, &k, &v], &pieces, &p), got, "{name} d {d}, decoded");
            }
            let p = AttnParams { scale: 0.2, window: None, softcap: None, sinks: None };
            let exact = run_in(attend, DType::F32, [&q, &k, &v], &[(0, n)], &p);
            let coded = run_in(attend, enc, [&q, &k, &v], &[(0, n)], &p);
            let diffs = || exact.iter().flatten().zip(coded.iter().flatten()).map(|(a, b)| (a - b).abs());
            let worst = diffs().fold(0f32, f32::max);
            let mean = diffs().sum::<f32>() / (n * h * d) as f32;
            errors.push((enc, d, mean));
            assert!(worst > 1e-5, "{} d {d}: largest difference {worst}", enc.name());
            if enc == KvEncoding::Q8_0 {
                assert!(worst < 0.05, "q8_0 d {d}: largest difference {worst}");
            }
        }
    }
    // fewer value bits under the same keys err more, on average
    let mean = |k, v, d| errors.iter().find(|e| e.0 == KvEncoding::turbo(k, v).unwrap() && e.1 == d).unwrap().2;
    for d in [64, 128] {
        assert!(mean(8, 8, d) < mean(8, 4, d) && mean(8, 4, d) < mean(8, 3, d) && mean(8, 3, d) < mean(8, 2, d));
    }
}

/// Every encoding `--kv-cache-dtype` accepts has a kernel (one missing would fail requests, not the start): each
/// attends, and differs from the f32 cache by its rounding.
#[test]
fn every_encoding_that_parses_attends() {
    let (h, kvh, d, n) = (4, 2, 64, 40);
    let (q, k, v) = (rnd((n, h, d), 0.1), rnd((n, kvh, d), 0.2), rnd((n, kvh, d), 0.3));
    let p = AttnParams { scale: 0.2, window: None, softcap: None, sinks: None };
    let exact = run_in(attend, DType::F32, [&q, &k, &v], &[(0, n)], &p);
    let mut names = vec!["q8_0".to_string(), "q4_0".to_string()];
    names.extend([8, 4, 3, 2].iter().flat_map(|k| [8, 4, 3, 2].map(|v| format!("turbo:k{k}v{v}"))));
    for name in names {
        let Ok(Some(enc)) = KvEncoding::parse(&name) else { continue };
        let got = run_in(attend, enc, [&q, &k, &v], &[(0, n)], &p);
        assert!(got != exact && got.iter().flatten().all(|x| x.is_finite()), "{name}");
    }
}

/// Past one chunk of keys: the partials folded in chunk order match the gather backend, and a token gets the
/// same bits whether its chunks were folded by one unit (a prompt piece) or split over threads and folded
/// afterwards (a row decoded alone), with and without a window that starts mid-chunk.
#[test]
fn chunked_softmax_matches_and_split_folds_are_bit_identical() {
    let (h, kvh, d) = (4, 2, 8);
    let n = 2 * chunk_keys(d) + 90;
    let (q, k, v) = (rnd((n, h, d), 0.7), rnd((n, kvh, d), 0.8), rnd((n, kvh, d), 0.9));
    for dtype in [DType::F32, DType::F16] {
        let (kr, vr) = (kept(dtype, &k), kept(dtype, &v));
        for (window, softcap) in [(None, None), (Some(700), None), (None, Some(4.0))] {
            let p = AttnParams { scale: 0.4, window, softcap, sinks: None };
            let want = run(gather::attend, [&q, &kr, &vr], &[(0, n)], &p);
            let got = run_in(attend, dtype, [&q, &k, &v], &[(0, n)], &p);
            assert_close(&got, &want, &format!("{dtype:?} {window:?} {softcap:?}"));
            // the last 40 tokens decoded one at a time (split path) after a prompt of the rest (fold path)
            let mut pieces = vec![(0, n - 40)];
            pieces.extend((n - 40..n).map(|i| (i, 1)));
            assert_eq!(run_in(attend, dtype, [&q, &k, &v], &pieces, &p), got, "{dtype:?} {window:?} {softcap:?}");
        }
    }
}

/// Rows packed together (a decode row between two prompt pieces) get what each gets alone.
#[test]
fn packed_rows_attend_their_own_blocks() {
    let dev = Device::Cpu;
    let (h, kvh, d, n) = (4, 2, 16, 40);
    let (q, k, v) = (rnd((n, h, d), 0.4), rnd((n, kvh, d), 0.5), rnd((n, kvh, d), 0.6));
    let p = AttnParams { scale: 0.3, window: None, softcap: None, sinks: None };
    let alone = run(attend, [&q, &k, &v], &[(0, n)], &p);
    let mut kv = PagedKv::new(1, 9, 16, kvh, d, DType::F32, &dev).unwrap();
    let (ta, tb, tc) = ([0u32, 1, 2], [5u32, 4, 3], [8u32, 7, 6]);
    kv.set_tables([(0usize, &ta[..]), (1, &tb[..]), (2, &tc[..])]);
    // Step 1: rows 0 and 2 compute 39 prompt tokens, row 1 computes 21.
    let part = |t: &Tensor, a: usize, l: usize| t.narrow(0, a, l).unwrap();
    let cat = |t: &Tensor, spans: &[(usize, usize)]| {
        Tensor::cat(&spans.iter().map(|&(a, l)| part(t, a, l)).collect::<Vec<_>>(), 0).unwrap()
    };
    let step1 = [(0, 39), (0, 21), (0, 39)];
    let ctx = BatchContext::new(&[(0, 0, 39), (1, 0, 21), (2, 0, 39)], false, &dev).unwrap();
    let o1 = attend(&kv, 0, &cat(&q, &step1), &cat(&k, &step1), &cat(&v, &step1), &ctx, &p).unwrap();
    // Step 2: row 0 decodes its last token, row 1 the rest of its prompt, row 2 its last token.
    let step2 = [(39, 1), (21, 19), (39, 1)];
    let ctx = BatchContext::new(&[(0, 39, 1), (1, 21, 19), (2, 39, 1)], false, &dev).unwrap();
    let o2 = attend(&kv, 0, &cat(&q, &step2), &cat(&k, &step2), &cat(&v, &step2), &ctx, &p).unwrap();
    let (o1, o2) = (o1.to_vec2::<f32>().unwrap(), o2.to_vec2::<f32>().unwrap());
    let row0: Vec<_> = o1[..39].iter().chain(&o2[..1]).cloned().collect();
    let row1: Vec<_> = o1[39..60].iter().chain(&o2[1..20]).cloned().collect();
    let row2: Vec<_> = o1[60..].iter().chain(&o2[20..]).cloned().collect();
    assert_eq!((&row0, &row1, &row2), (&alone, &alone, &alone));
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_vector_exp_is_close_to_libm() {
    if !chunk::fast() {
        eprintln!("no AVX2+FMA: the vector exp is not used on this CPU");
        return;
    }
    let mut x: Vec<f32> = (0..203).map(|i| -90.0 + i as f32 * 0.45).collect();
    let want: Vec<f32> = x.iter().map(|v| (v - 1.5).exp()).collect();
    // SAFETY: fast() checked AVX2 and FMA.
    let sum = unsafe { chunk::x86::exp_sub_sum(&mut x, 1.5) };
    for (a, b) in x.iter().zip(&want) {
        // Below e^-87.3 (subnormal results) the vector exp flushes to 0.
        assert!((a - b).abs() <= 4.0 * f32::EPSILON * b.abs() + 2e-38, "{a} vs {b}");
    }
    assert!((sum - want.iter().sum::<f32>()).abs() < 1e-5 * sum);
}
