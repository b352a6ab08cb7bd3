use super::*;
use crate::attention::paged::gather;
use crate::attention::test_util::{self, rnd, Attend};
use crate::kv::encoding::{q8_encode, q8_value, rotate};
use crate::kv::KvEncoding;
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
                let p = AttnParams { scale: 0.35, window, softcap };
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
    let p = AttnParams { scale: 0.35, window: None, softcap: None };
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

/// What a q8_0 cache keeps of `t` ((n, KvH, D)), decoded to f32.
fn q8_kept(t: &Tensor) -> Tensor {
    let (_, _, d) = t.dims3().unwrap();
    let mut enc = Vec::new();
    q8_encode(&t.flatten_all().unwrap().to_vec1::<f32>().unwrap(), d, &mut enc);
    let units = KvEncoding::Q8_0.head_units(d);
    let back: Vec<f32> = enc.chunks(units).flat_map(|row| (0..d).map(|i| q8_value(row, i, d))).collect();
    Tensor::from_vec(back, t.shape(), &Device::Cpu).unwrap()
}

/// A q8_0 cache (rows encoded once on write, keys rotated first; read in place, queries rotated) gives the same
/// bits as an f32 cache holding its decoded values read by the rotated queries — decoding is exact in f32 — for
/// prompt pieces (keys widened per chunk) and decode rows (keys decoded as they are read), past one chunk, with a
/// window and a soft cap; and its rounding is visible but small against the f32 cache of the exact values.
#[test]
fn a_q8_cache_reads_exactly_its_decoded_values() {
    let (h, kvh) = (4, 2);
    for d in [64, 128] {
        let n = 2 * chunk_keys(d) + 30;
        let (q, k, v) = (rnd((n, h, d), 0.1), rnd((n, kvh, d), 0.2), rnd((n, kvh, d), 0.3));
        let (qr, kr, vr) = (rotated(&q), q8_kept(&rotated(&k)), q8_kept(&v));
        for (window, softcap) in [(None, None), (Some(300), None), (None, Some(5.0))] {
            let p = AttnParams { scale: 0.2, window, softcap };
            let want = run_in(attend, DType::F32, [&qr, &kr, &vr], &[(0, n)], &p);
            let got = run_in(attend, KvEncoding::Q8_0, [&q, &k, &v], &[(0, n)], &p);
            assert_eq!(got, want, "d {d}, {window:?} {softcap:?}");
            let mut pieces = vec![(0, n - 24)];
            pieces.extend((n - 24..n).map(|i| (i, 1)));
            assert_eq!(run_in(attend, KvEncoding::Q8_0, [&q, &k, &v], &pieces, &p), got, "d {d}, decoded");
        }
        let p = AttnParams { scale: 0.2, window: None, softcap: None };
        let exact = run_in(attend, DType::F32, [&q, &k, &v], &[(0, n)], &p);
        let q8 = run_in(attend, KvEncoding::Q8_0, [&q, &k, &v], &[(0, n)], &p);
        let worst = exact.iter().flatten().zip(q8.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst > 1e-5 && worst < 0.05, "d {d}: largest difference {worst}");
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
            let p = AttnParams { scale: 0.4, window, softcap };
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
    let p = AttnParams { scale: 0.3, window: None, softcap: None };
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
