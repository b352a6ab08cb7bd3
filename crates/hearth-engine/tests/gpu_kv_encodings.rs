//! The CUDA kernels over an encoded KV cache (`--kv-cache-dtype q8_0 | q4_0 | turbo:k8vY`; the `cuda` feature,
//! an NVIDIA GPU: built by `scripts/build-cuda --tests`, run on the device machine), against the CPU's:
//!
//! * the rows the GPU writes — by the encode kernel (prompt pieces, larger steps) and by the cluster decode kernel
//!   (its own rows) — are byte for byte the rows the CPU's encoder writes from the same values;
//! * the attention over them matches the CPU's in-place attention over the same bytes, for prompt pieces (the
//!   tensor-core kernel where G is a power of two, the CUDA-core one where not) and decode tokens in one launch,
//!   split keys (hundreds of keys) on both, the cluster kernel, GQA, head sizes 64, 128 and 256, a sliding window
//!   with soft-capping;
//! * an encoding CUDA does not read is refused by name.
#![cfg(feature = "cuda")]

use candle_core::{DType, Device, Tensor};
use hearth_engine::attention::cuda::paged::CudaPaged;
use hearth_engine::attention::paged::PagedAttention;
use hearth_engine::attention::{AttnParams, BatchContext, Heads, KvStore, RopeTables};
use hearth_engine::kv::{KvEncoding, PagedKv};

mod gpu_support;
use gpu_support::*;

const BS: usize = 16;

/// The CUDA-served encodings.
fn served() -> Vec<KvEncoding> {
    ["q8_0", "turbo:k8v4", "turbo:k8v3", "turbo:k8v2", "q4_0"]
        .iter()
        .map(|s| KvEncoding::parse(s).unwrap().unwrap())
        .collect()
}

/// How a case runs its steps on the GPU.
#[derive(Clone, Copy)]
struct How {
    /// q|k|v through `attend_qkv` (identity rope tables) rather than `attend`.
    fused: bool,
    /// Decode-only steps of any size take the cluster kernel (fused only).
    cluster: bool,
}

/// Two steps over three sequences, GPU and CPU side by side on the same values (rounded to bf16): step 1 prefills
/// `lens`, step 2 runs `next` tokens of each. After each step the GPU's cache bytes must equal the CPU's, and its
/// outputs the CPU's within 3e-2 (prompt steps) or 2e-2 (decode steps). Returns what differed (every check runs, so one failing run tells all).
#[allow(clippy::too_many_arguments)]
fn case(
    enc: KvEncoding,
    h: usize,
    kvh: usize,
    d: usize,
    p: AttnParams,
    lens: [usize; 3],
    next: [usize; 3],
    how: How,
) -> Vec<String> {
    let mut failed = Vec::new();
    let dev = gpu();
    let dtype = DType::BF16;
    let need: Vec<usize> = lens.iter().zip(next).map(|(l, n)| (l + n).div_ceil(BS)).collect();
    let (total, tables) = scattered_tables(&need, 2);
    let mut kv = PagedKv::new(1, total, BS, kvh, d, enc, &dev).unwrap();
    kv.set_tables(tables.iter().enumerate().map(|(s, t)| (s, t.as_slice())));
    let mut cuda = CudaPaged::choose(&dev, h, kvh, d, enc).expect("CUDA serves this encoding and shape");
    cuda.set_decode_cluster(if how.cluster { usize::MAX } else { 0 });
    let mut cpu = PagedAttention::new(1, total, BS, h, kvh, d, enc, &Device::Cpu).unwrap();
    cpu.storage_mut().set_tables(tables.iter().enumerate().map(|(s, t)| (s, t.as_slice())));
    let name = enc.name();
    let mut seed = 11;
    let [a, b, c] = lens;
    for (si, step) in [[(0usize, 0usize, a), (1, 0, b), (2, 0, c)], [(0, a, next[0]), (1, b, next[1]), (2, c, next[2])]]
        .into_iter()
        .enumerate()
    {
        let t: usize = step.iter().map(|r| r.2).sum();
        let mk = |n: usize, shape: (usize, usize, usize), s: u64| {
            let x = Tensor::from_vec(noise(n, s), shape, &Device::Cpu).unwrap();
            (x * 2.0).unwrap().to_dtype(dtype).unwrap().to_dtype(DType::F32).unwrap()
        };
        let (q, k, v) = (
            mk(t * h * d, (t, h, d), seed),
            mk(t * kvh * d, (t, kvh, d), seed + 1),
            mk(t * kvh * d, (t, kvh, d), seed + 2),
        );
        seed += 3;
        let want = {
            let ctx = BatchContext::new(&step, false, &Device::Cpu).unwrap();
            let out = cpu.attend(0, &q, &k, &v, &ctx, &p).unwrap();
            out.to_vec2::<f32>().unwrap()
        };
        let ctx = BatchContext::new(&step, false, &dev).unwrap();
        let to_dev = |x: &Tensor| x.to_dtype(dtype).unwrap().to_device(&dev).unwrap();
        let got = if how.fused {
            let qkv = Tensor::cat(
                &[q.reshape((t, h * d)).unwrap(), k.reshape((t, kvh * d)).unwrap(), v.reshape((t, kvh * d)).unwrap()],
                1,
            )
            .unwrap();
            let (cos, sin) = (
                Tensor::ones((t, d / 2), DType::F32, &dev).unwrap(),
                Tensor::zeros((t, d / 2), DType::F32, &dev).unwrap(),
            );
            let rope = RopeTables { cos: &cos, sin: &sin, interleaved: false };
            cuda.attend_qkv(&kv, 0, &to_dev(&qkv), &rope, Heads { q: h, kv: kvh, dim: d }, &ctx, &p).unwrap()
        } else {
            cuda.attend(&kv, 0, &to_dev(&q), &to_dev(&k), &to_dev(&v), &ctx, &p).unwrap()
        };
        let got: Vec<Vec<f32>> = got.to_dtype(DType::F32).unwrap().to_vec2().unwrap();
        // The rows both wrote, byte for byte.
        let (gk, gv) = kv.layer(0).unwrap();
        let (ck, cv) = cpu.storage_mut().layer(0).unwrap();
        for (g, c, what) in [(gk, ck, "K"), (gv, cv, "V")] {
            let g = g.flatten_all().unwrap().to_vec1::<u8>().unwrap();
            let c = c.flatten_all().unwrap().to_vec1::<u8>().unwrap();
            let bad = g.iter().zip(&c).filter(|(x, y)| x != y).count();
            if bad > 0 {
                // Where: the first differing head rows, byte by byte (the rows' bytes say which part of the code).
                let units = g.len() / (total * BS * kvh);
                let rows: Vec<usize> = (0..g.len() / units)
                    .filter(|r| g[r * units..(r + 1) * units] != c[r * units..(r + 1) * units])
                    .take(3)
                    .collect();
                for r in rows {
                    let at: Vec<(usize, u8, u8)> = (0..units)
                        .filter(|i| g[r * units + i] != c[r * units + i])
                        .map(|i| (i, g[r * units + i], c[r * units + i]))
                        .collect();
                    eprintln!("{name} {what} head row {r} (of {units} bytes): (byte, gpu, cpu) {at:?}");
                }
            }
            if bad > 0 {
                failed.push(format!(
                    "{name} h{h} kv{kvh} d{d} step {si}: {bad} {what} cache bytes differ from the CPU's"
                ));
            }
        }
        // bf16 outputs: their own rounding (8 bits of mantissa) dominates. A prompt step's tensor-core kernel also
        // stages the decoded keys and values, and the probabilities, in bf16 (the float kernels get their K/V
        // in bf16 already): about twice the rounding (measured on an H100: up to 2.3e-2; decode steps, which
        // decode in f32, up to 5.6e-3).
        let tol = if si == 0 { 3e-2 } else { 2e-2 };
        let mut worst = 0f32;
        for (i, (x, y)) in got.iter().zip(&want).enumerate() {
            let diff = max_abs_diff(x, y);
            if !(diff.is_finite() && diff < tol) && worst < tol {
                failed.push(format!("{name} h{h} kv{kvh} d{d} {p:?} step {si} token {i}: max-abs {diff}"));
            }
            worst = if diff.is_finite() { worst.max(diff) } else { f32::INFINITY };
        }
        eprintln!("{name} h{h} kv{kvh} d{d} step {si} ({t} tokens): max-abs {worst:.2e} against the CPU");
    }
    failed
}

#[test]
fn encoded_caches_match_the_cpu() {
    let plain = AttnParams { scale: 0.125, window: None, softcap: None, sinks: None };
    let unfused = How { fused: false, cluster: false };
    let split = How { fused: true, cluster: false };
    let cluster = How { fused: true, cluster: true };
    let mut failed = Vec::new();
    for enc in served() {
        // prompt pieces and decode tokens in one launch; the encode kernel writes every row
        failed.extend(case(enc, 32, 8, 128, plain.clone(), [37, 51, 5], [1, 6, 1], unfused));
        failed.extend(case(enc, 9, 3, 64, plain.clone(), [37, 51, 5], [1, 6, 1], split));
        // hundreds of keys: decode tokens split their keys (a separate merge rotates the values back)
        failed.extend(case(enc, 32, 8, 128, plain.clone(), [700, 333, 150], [1, 1, 1], split));
        // the cluster kernel encodes its own rows and merges in the cluster
        failed.extend(case(enc, 32, 8, 128, plain.clone(), [700, 333, 150], [1, 1, 1], cluster));
        failed.extend(case(enc, 16, 1, 64, plain.clone(), [1, 32, 63], [1, 1, 1], cluster));
        failed.extend(case(enc, 4, 1, 256, plain.clone(), [700, 40, 5], [1, 1, 1], cluster));
    }
    let k8v3 = KvEncoding::parse("turbo:k8v3").unwrap().unwrap();
    let windowed = AttnParams { scale: 0.3, window: Some(200), softcap: Some(5.0), sinks: None };
    failed.extend(case(k8v3, 4, 2, 64, windowed.clone(), [700, 333, 150], [1, 1, 1], cluster));
    failed.extend(case(k8v3, 4, 2, 64, windowed.clone(), [700, 333, 150], [1, 9, 1], split));
    failed.extend(case(KvEncoding::Q8_0, 16, 1, 64, plain.clone(), [300, 20, 5], [1, 1, 1], split));
    // the tensor-core prompt kernel over encoded blocks, its keys split over a long context (a merge rotates the
    // values back)
    failed.extend(case(k8v3, 32, 8, 128, plain.clone(), [2000, 333, 150], [1, 32, 1], split));
    failed.extend(case(KvEncoding::Q8_0, 32, 8, 128, plain.clone(), [2000, 333, 150], [3, 32, 40], unfused));
    assert!(failed.is_empty(), "{} checks failed:\n{}", failed.len(), failed.join("\n"));
}

#[test]
fn encodings_cuda_does_not_read_are_refused_by_name() {
    let dev = gpu();
    let k4v3 = KvEncoding::parse("turbo:k4v3").unwrap().unwrap();
    assert!(CudaPaged::choose(&dev, 32, 8, 128, k4v3).is_none());
    let err = PagedAttention::new(1, 8, BS, 32, 8, 128, k4v3, &dev).err().expect("turbo:k4v3 is refused on CUDA");
    assert!(err.to_string().contains("turbo:k4v3") && err.to_string().contains("q8_0"), "{err}");
    let err = hearth_engine::attention::paged::kv_encoding(Some(k4v3), DType::BF16, &dev, 128).unwrap_err();
    assert!(err.to_string().contains("turbo:k8v3"), "{err}");
    let ok = hearth_engine::attention::paged::kv_encoding(Some(KvEncoding::Q8_0), DType::BF16, &dev, 128).unwrap();
    assert_eq!(ok, KvEncoding::Q8_0);
    let err = hearth_engine::attention::paged::kv_encoding(Some(KvEncoding::Q8_0), DType::F32, &dev, 128).unwrap_err();
    assert!(err.to_string().contains("bf16 or f16"), "{err}");
}
