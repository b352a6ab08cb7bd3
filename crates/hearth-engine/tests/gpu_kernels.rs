//! GPU kernel tests (the `cuda` feature; needs an NVIDIA GPU, so CI, which has none, never builds them). Built by
//! `scripts/build-cuda --tests` and run on the device machine by `bench/gpu/device_final.sh` /
//! `bench/gpu/device_levers.sh`; model parity on the GPU is in `gpu_parity.rs`.
//!
//! * the paged-attention kernels (the CUDA paged backend) against the portable f32 attention on random data (f32
//!   and bf16 caches, head dims 64/128/256, GQA, scattered block tables, prefill pieces and decode tokens in one
//!   launch, sliding window, soft-capping), the tensor-core prompt kernel included (16-bit caches, G a power of
//!   two), and the cluster decode kernel (decode-only steps: rope, attention and split merge in one launch) against
//!   the default path;
//! * the fused residual add + RMSNorm against a CPU computation;
//! * the one-row decode matmuls (`gpu::gemv`) against a CPU matmul, and the one-row kernel that computes its input
//!   from the residual add + RMSNorm against the separate kernels it replaces;
//! * greedy sampling on the device (`gpu::argmax`) against the CPU sampler's argmax, ties included;
//! * prompt-cache blocks moving VRAM -> host bytes -> SSD file -> VRAM bit for bit, in the CPU build's format.
#![cfg(feature = "cuda")]

use candle_core::{DType, Device, Tensor};
use hearth_engine::attention::{portable, AttnParams, BatchContext};
use hearth_engine::kv::PagedKv;

mod gpu_support;
use gpu_support::*;

/// Two steps over three sequences with scattered blocks: step 1 prefills 37, 51 and 5 tokens; step 2 decodes one
/// token of the first, a 6-token piece of the second and one of the third. Every output row is checked against
/// the portable attention over that sequence's whole k/v computed on the CPU in f32.
fn kernel_case(h: usize, kvh: usize, d: usize, dtype: DType, p: AttnParams, tol: f32) {
    kernel_case_len(h, kvh, d, dtype, p, tol, [37, 51, 5]);
}

/// `kernel_case` with prompts of `lens` tokens: long ones (hundreds of keys) make the decode tokens of step 2
/// take the split (flash-decoding) path, whose partials a second launch merges. Each step runs two layers on the
/// same inputs, which must agree bit for bit.
fn kernel_case_len(h: usize, kvh: usize, d: usize, dtype: DType, p: AttnParams, tol: f32, lens: [usize; 3]) {
    kernel_case_steps(h, kvh, d, dtype, p, tol, lens, [1, 6, 1], Steps::default());
}

/// How `kernel_case_steps` runs its layers.
#[derive(Clone, Copy, Default)]
struct Steps {
    /// The second layer of each step forced through the cluster decode kernel where it applies (the first forced
    /// off; fused path only): the two must agree within `tol` (their key splits differ, so their sums' order does),
    /// and both match the CPU.
    cluster_layer1: bool,
    /// Through the backend's fused path (`attend_qkv`: q|k|v in one tensor, rotated by the rope kernel — identity
    /// tables here, so the CPU reference is unchanged — and k/v written by it under PDL) instead of `attend`
    /// (k/v written by write_kv, a plain launch).
    fused: bool,
}

/// `kernel_case_len` with step 2's token counts `next` (all 1: a decode-only step), run as `how` says.
#[allow(clippy::too_many_arguments)]
fn kernel_case_steps(
    h: usize,
    kvh: usize,
    d: usize,
    dtype: DType,
    p: AttnParams,
    tol: f32,
    lens: [usize; 3],
    next: [usize; 3],
    how: Steps,
) {
    use hearth_engine::attention::cuda::decode::launches;
    use hearth_engine::attention::{Heads, RopeTables};
    let dev = gpu();
    let bs = 16;
    // Scattered tables: block ids taken from a fixed permutation of the pool.
    let need: Vec<usize> = lens.iter().zip(next).map(|(l, extra)| (l + extra).div_ceil(bs)).collect();
    let (total, tables) = scattered_tables(&need, 3);
    let mut kv = PagedKv::new(2, total, bs, kvh, d, dtype, &dev).unwrap();
    let mut cuda = backend(&dev, h, kvh, d, dtype);
    kv.set_tables(tables.iter().enumerate().map(|(slot, t)| (slot, t.as_slice())));
    let mut hist_k: Vec<Vec<f32>> = vec![Vec::new(); 3];
    let mut hist_v: Vec<Vec<f32>> = vec![Vec::new(); 3];
    let mut seed = 1;
    let [a, b, c] = lens;
    let [na, nb, nc] = next;
    for step in [[(0usize, 0usize, a), (1, 0, b), (2, 0, c)], [(0, a, na), (1, b, nb), (2, c, nc)]] {
        let t: usize = step.iter().map(|r| r.2).sum();
        let q = noise(t * h * d, seed);
        let k = noise(t * kvh * d, seed + 1);
        let v = noise(t * kvh * d, seed + 2);
        seed += 3;
        // Round through the cache dtype so the CPU reference sees the values the kernel sees.
        let round = |x: Vec<f32>, shape: (usize, usize, usize)| {
            Tensor::from_vec(x, shape, &Device::Cpu).unwrap().to_dtype(dtype).unwrap().to_dtype(DType::F32).unwrap()
        };
        let (qc, kc, vc) = (round(q, (t, h, d)), round(k, (t, kvh, d)), round(v, (t, kvh, d)));
        let ctx = BatchContext::new(&step, false, &dev).unwrap();
        let to_dev = |x: &Tensor| x.to_dtype(dtype).unwrap().to_device(&dev).unwrap();
        let (qd, kd, vd) = (to_dev(&qc), to_dev(&kc), to_dev(&vc));
        // `cluster`: the most tokens a decode-only step may carry to take the cluster kernel, for this layer on.
        let mut run = |layer: usize, cluster: Option<usize>| -> Vec<Vec<f32>> {
            if let Some(n) = cluster {
                cuda.set_decode_cluster(n);
            }
            let out = if how.fused {
                let qkv = Tensor::cat(
                    &[
                        qd.reshape((t, h * d)).unwrap(),
                        kd.reshape((t, kvh * d)).unwrap(),
                        vd.reshape((t, kvh * d)).unwrap(),
                    ],
                    1,
                )
                .unwrap();
                let (cos, sin) = (
                    Tensor::ones((t, d / 2), DType::F32, &dev).unwrap(),
                    Tensor::zeros((t, d / 2), DType::F32, &dev).unwrap(),
                );
                let rope = RopeTables { cos: &cos, sin: &sin, interleaved: false };
                cuda.attend_qkv(&kv, layer, &qkv, &rope, Heads { q: h, kv: kvh, dim: d }, &ctx, &p).unwrap()
            } else {
                cuda.attend(&kv, layer, &qd, &kd, &vd, &ctx, &p).unwrap()
            };
            out.to_dtype(DType::F32).unwrap().to_vec2().unwrap()
        };
        let out = run(0, how.cluster_layer1.then_some(0));
        // A second layer with the same inputs must give the same bits: its launches reuse the step's metadata
        // (with `cluster_layer1`, the cluster kernel where it applies: then within tol).
        let before = launches();
        let out1 = run(1, how.cluster_layer1.then_some(usize::MAX));
        // The forced layer of a decode-only step must have taken the cluster kernel (where the GPU has clusters).
        if how.cluster_layer1 && how.fused && step.iter().all(|r| r.2 == 1) && clusters_available(&dev) {
            assert_eq!(
                launches(),
                before + 1,
                "h{h} kv{kvh} d{d} {dtype:?}: the decode step did not take the cluster kernel"
            );
        }
        let bits = |o: &Vec<Vec<f32>>| o.iter().flatten().map(|x| x.to_bits()).collect::<Vec<u32>>();
        if how.cluster_layer1 {
            let diff = max_abs_diff(&out.concat(), &out1.concat());
            assert!(diff < tol, "h{h} kv{kvh} d{d} {dtype:?} {p:?}: the cluster kernel's layer differs by {diff}");
        } else {
            assert!(
                bits(&out) == bits(&out1),
                "h{h} kv{kvh} d{d} {dtype:?} {p:?}: layer 1 differs from layer 0 (max-abs {})",
                max_abs_diff(&out.concat(), &out1.concat())
            );
        }
        let mut start = 0;
        for &(slot, pos0, len) in &step {
            hist_k[slot].extend(kc.narrow(0, start, len).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap());
            hist_v[slot].extend(vc.narrow(0, start, len).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap());
            let n = pos0 + len;
            let kv_pos0 = p.window.map_or(0, |w| (pos0 + 1).saturating_sub(w));
            let all_k = Tensor::from_vec(hist_k[slot].clone(), (n, kvh, d), &Device::Cpu).unwrap();
            let all_v = Tensor::from_vec(hist_v[slot].clone(), (n, kvh, d), &Device::Cpu).unwrap();
            let kr = all_k.narrow(0, kv_pos0, n - kv_pos0).unwrap().transpose(0, 1).unwrap().contiguous().unwrap();
            let vr = all_v.narrow(0, kv_pos0, n - kv_pos0).unwrap().transpose(0, 1).unwrap().contiguous().unwrap();
            let want =
                portable::attend_row(&qc.narrow(0, start, len).unwrap(), &kr, &vr, (pos0, kv_pos0), &[], &p).unwrap();
            let want: Vec<Vec<f32>> = want.to_vec2().unwrap();
            for i in 0..len {
                for (layer, o) in [&out, &out1].into_iter().enumerate() {
                    let diff = max_abs_diff(&o[start + i], &want[i]);
                    assert!(
                        diff < tol,
                        "h{h} kv{kvh} d{d} {dtype:?} {p:?}: layer {layer} slot {slot} position {}: max-abs {diff}",
                        pos0 + i
                    );
                }
            }
            start += len;
        }
    }
}

#[test]
fn paged_kernel_matches_portable_attention() {
    let plain = AttnParams { scale: 0.125, window: None, softcap: None, sinks: None };
    for (h, kvh, d) in [(9, 3, 64), (32, 8, 128), (4, 1, 256), (8, 8, 128)] {
        kernel_case(h, kvh, d, DType::F32, plain.clone(), 2e-5);
        // bf16 caches and outputs: the output's own rounding (8 bits of mantissa) dominates.
        kernel_case(h, kvh, d, DType::BF16, plain.clone(), 1.6e-2);
    }
    kernel_case(4, 1, 256, DType::F32, AttnParams { scale: 0.0625, window: Some(8), softcap: None, sinks: None }, 2e-5);
    kernel_case(
        4,
        2,
        64,
        DType::F32,
        AttnParams { scale: 0.3, window: Some(20), softcap: Some(5.0), sinks: None },
        2e-5,
    );
    kernel_case(9, 3, 64, DType::F16, plain.clone(), 2e-3);
    // Hundreds of keys: step 2's 8 tokens x kv heads are too few blocks to fill the GPU, so their keys split.
    for (h, kvh, d) in [(32, 8, 128), (4, 1, 256), (9, 3, 64)] {
        assert!(hearth_engine::attention::cuda::split_keys(8, kvh, 700).is_some(), "the split path must be exercised");
        kernel_case_len(h, kvh, d, DType::F32, plain.clone(), 2e-5, [700, 333, 150]);
        kernel_case_len(h, kvh, d, DType::BF16, plain.clone(), 1.6e-2, [700, 333, 150]);
    }
    kernel_case_len(
        4,
        2,
        64,
        DType::F32,
        AttnParams { scale: 0.3, window: Some(200), softcap: Some(5.0), sinks: None },
        2e-5,
        [700, 333, 150],
    );
    // The tensor-core prompt kernel (bf16/f16, G a power of two): step 1's 37- and 51-token prompts are query
    // tiles (the 5-token one stays on CUDA cores in the same launch); with G = 8 and 16 the tiles are 8 and 4
    // tokens, so step 2's 6-token piece is tiled too, over keys already in the cache. Window and soft-cap in
    // 16-bit as well.
    use hearth_engine::attention::cuda::prefill::tile_tokens;
    assert_eq!(tile_tokens(32, 8, 128, DType::BF16), Some(16), "Llama-8B's shape takes the tensor cores");
    assert_eq!(tile_tokens(9, 3, 64, DType::BF16), None, "G = 3 is not a power of two");
    assert_eq!(tile_tokens(32, 8, 128, DType::F32), None, "f32 stays on CUDA cores");
    assert_eq!(hearth_engine::attention::cuda::prefill::smem_bytes(128), 113_408, "mirrors prefill_tc.cu");
    for (h, kvh, d) in [(16, 2, 128), (16, 1, 64), (8, 1, 128)] {
        assert!(tile_tokens(h, kvh, d, DType::BF16).is_some());
        kernel_case(h, kvh, d, DType::BF16, plain.clone(), 1.6e-2);
        kernel_case(h, kvh, d, DType::F16, plain.clone(), 2e-3);
    }
    kernel_case(
        4,
        1,
        256,
        DType::BF16,
        AttnParams { scale: 0.0625, window: Some(8), softcap: None, sinks: None },
        1.6e-2,
    );
    kernel_case(
        4,
        2,
        64,
        DType::BF16,
        AttnParams { scale: 0.3, window: Some(20), softcap: Some(5.0), sinks: None },
        1.6e-2,
    );
    kernel_case_len(
        4,
        2,
        64,
        DType::BF16,
        AttnParams { scale: 0.3, window: Some(200), softcap: Some(5.0), sinks: None },
        1.6e-2,
        [700, 333, 150],
    );
    kernel_case(32, 8, 128, DType::F16, plain.clone(), 2e-3);
    // Short pieces over long contexts (a prompt-cache hit): step 2's tiles are too few blocks to fill the GPU, so
    // the tensor-core kernel splits their keys and a second launch merges the splits. The 32-token piece at 2,000
    // keys has four non-empty splits; with G = 16 (4-token tiles) the 6-token piece at 339 keys leaves its second
    // split empty, next to the 700-key row's tiles.
    use hearth_engine::attention::cuda::prefill::split_keys as tc_split;
    assert_eq!(tc_split(2, 8, 2033), Some((512, 4)), "a 32-token piece at 2k keys splits four ways");
    assert_eq!(tc_split(100, 8, 2033), None, "a step of many tiles fills the GPU without splitting");
    kernel_case_steps(32, 8, 128, DType::BF16, plain.clone(), 1.6e-2, [2000, 333, 150], [1, 32, 1], Steps::default());
    kernel_case_steps(32, 8, 128, DType::F16, plain.clone(), 2e-3, [2000, 333, 150], [3, 32, 40], Steps::default());
    kernel_case_steps(16, 1, 64, DType::BF16, plain.clone(), 1.6e-2, [700, 333, 150], [1, 6, 1], Steps::default());
    // The cluster decode kernel (HEARTH_CUDA_DECODE_CLUSTER; fused path, decode-only steps) against the default
    // path and the CPU: short contexts (one split), hundreds of keys (several splits, some past a short row's last
    // key), G = 1, 3 (rounded to 4), 4, 8 and 16, f32/bf16/f16, a window with soft-capping, decode positions 1, 32
    // (the newest key alone in its tile) and 63 (the last of a full tile), and 128 kv heads (one split each).
    let cl = Steps { cluster_layer1: true, fused: true };
    for (h, kvh, d, dtype, tol) in [
        (32, 8, 128, DType::BF16, 1.6e-2),
        (9, 3, 64, DType::F16, 2e-3),
        (8, 8, 128, DType::BF16, 1.6e-2),
        (16, 1, 64, DType::F32, 2e-5),
        (4, 1, 256, DType::BF16, 1.6e-2),
    ] {
        kernel_case_steps(h, kvh, d, dtype, plain.clone(), tol, [37, 51, 5], [1, 1, 1], cl);
        kernel_case_steps(h, kvh, d, dtype, plain.clone(), tol, [700, 333, 150], [1, 1, 1], cl);
        kernel_case_steps(h, kvh, d, dtype, plain.clone(), tol, [1, 32, 63], [1, 1, 1], cl);
    }
    kernel_case_steps(
        4,
        2,
        64,
        DType::BF16,
        AttnParams { scale: 0.3, window: Some(200), softcap: Some(5.0), sinks: None },
        1.6e-2,
        [700, 333, 150],
        [1, 1, 1],
        cl,
    );
    kernel_case_steps(128, 128, 64, DType::BF16, plain.clone(), 1.6e-2, [700, 333, 150], [1, 1, 1], cl);
    // One token of one kv head over a very long context: the split count stays within the merge's 256.
    let per = hearth_engine::attention::cuda::split_keys(1, 1, 100_000).expect("a lone long row splits");
    assert!(100_000usize.div_ceil(per) <= 256, "{per} keys per split");
}

/// The cluster decode kernel's rotary embedding against `qkv_rope`'s, with random (non-identity) rope tables in both
/// layouts: three steps over three sequences (a prefill, then two decode-only steps), layer 0 through `qkv_rope` and
/// the split attention, layer 1 through the cluster kernel, on the same inputs. Step 2's outputs compare q's
/// rotation and the own key's; step 3's also read the k/v rows that step 2 wrote (layer 1: the cluster kernel's).
#[test]
fn decode_cluster_rope_matches_qkv_rope() {
    use hearth_engine::attention::cuda::decode::launches;
    use hearth_engine::attention::{Heads, RopeTables};
    let dev = gpu();
    let plain = AttnParams { scale: 0.125, window: None, softcap: None, sinks: None };
    for (h, kvh, d, dtype, tol) in [
        (32usize, 8usize, 128usize, DType::F32, 2e-5f32),
        (32, 8, 128, DType::BF16, 1.6e-2),
        (9, 3, 64, DType::F16, 2e-3),
    ] {
        for interleaved in [false, true] {
            let bs = 16;
            let lens = [700usize, 40, 5];
            let need: Vec<usize> = lens.iter().map(|l| (l + 2).div_ceil(bs)).collect();
            let total: usize = need.iter().sum();
            let mut kv = PagedKv::new(2, total, bs, kvh, d, dtype, &dev).unwrap();
            let mut cuda = backend(&dev, h, kvh, d, dtype);
            let mut at = 0u32;
            let tables: Vec<Vec<u32>> = need
                .iter()
                .map(|&n| {
                    at += n as u32;
                    (at - n as u32..at).rev().collect()
                })
                .collect();
            kv.set_tables(tables.iter().enumerate().map(|(slot, t)| (slot, t.as_slice())));
            let mut seed = 7000;
            let mut pos = [0usize; 3];
            for step in 0..3 {
                let rows: Vec<(usize, usize, usize)> =
                    (0..3).map(|r| (r, pos[r], if step == 0 { lens[r] } else { 1 })).collect();
                let t: usize = rows.iter().map(|r| r.2).sum();
                let ctx = BatchContext::new(&rows, false, &dev).unwrap();
                let mk = |n: usize, shape: (usize, usize), seed: u64, dt: DType| {
                    Tensor::from_vec(noise(n, seed), shape, &Device::Cpu)
                        .unwrap()
                        .to_dtype(dt)
                        .unwrap()
                        .to_device(&dev)
                        .unwrap()
                };
                let qkv = mk(t * (h + 2 * kvh) * d, (t, (h + 2 * kvh) * d), seed, dtype);
                // Angles of a unit circle: cos² + sin² = 1, as rope tables are.
                let ang = mk(t * d / 2, (t, d / 2), seed + 1, DType::F32);
                let ang = (ang * 3.0).unwrap();
                let (cos, sin) = (ang.cos().unwrap(), ang.sin().unwrap());
                seed += 2;
                let rope = RopeTables { cos: &cos, sin: &sin, interleaved };
                let heads = Heads { q: h, kv: kvh, dim: d };
                let mut run = |layer: usize, cluster: bool| -> Vec<f32> {
                    cuda.set_decode_cluster(if cluster { usize::MAX } else { 0 });
                    let out = cuda.attend_qkv(&kv, layer, &qkv, &rope, heads, &ctx, &plain).unwrap();
                    out.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap()
                };
                let before = launches();
                let (a, b) = (run(0, false), run(1, true));
                if step > 0 && clusters_available(&dev) {
                    assert_eq!(
                        launches(),
                        before + 1,
                        "{dtype:?} step {step}: the decode step did not take the cluster kernel"
                    );
                }
                assert!(a.iter().chain(&b).all(|v| v.is_finite()), "{dtype:?} step {step}: non-finite output");
                let diff = max_abs_diff(&a, &b);
                assert!(diff < tol, "h{h} kv{kvh} d{d} {dtype:?} interleaved {interleaved} step {step}: cluster vs qkv_rope + split attention max-abs {diff}");
                for (r, row) in rows.iter().enumerate() {
                    pos[r] += row.2;
                }
            }
        }
    }
}

/// The copy-on-write of a prompt-cache hit (and of forked choices) on the device: `copy_block` copies one block's
/// K/V in every layer, byte for byte, and nothing else.
#[test]
fn copy_block_copies_one_block_exactly() {
    let dev = gpu();
    for dtype in [DType::BF16, DType::F32] {
        let (layers, blocks, bs, kvh, d) = (3, 6, 16, 2, 64);
        let mut kv = PagedKv::new(layers, blocks, bs, kvh, d, dtype, &dev).unwrap();
        let data: Vec<Vec<u8>> = (0..blocks)
            .map(|b| {
                let n = layers * 2 * bs * kvh * d;
                let v: Vec<f32> = (0..n).map(|i| ((i * 7 + b * 131) % 1000) as f32 / 100.0 - 5.0).collect();
                let t = Tensor::from_vec(v, n, &Device::Cpu).unwrap().to_dtype(dtype).unwrap();
                let bytes: Vec<u8> = match dtype {
                    DType::F32 => t.to_vec1::<f32>().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect(),
                    _ => t.to_vec1::<half::bf16>().unwrap().iter().flat_map(|x| x.to_le_bytes()).collect(),
                };
                bytes
            })
            .collect();
        for (b, bytes) in data.iter().enumerate() {
            kv.write_block(b as u32, bytes).unwrap();
        }
        kv.copy_block(1, 4).unwrap();
        for b in 0..blocks {
            let want = if b == 4 { &data[1] } else { &data[b] };
            assert_eq!(&kv.read_block(b as u32).unwrap(), want, "{dtype:?} block {b}");
        }
    }
}

/// Grammar-masked greedy sampling on the device (`gpu::argmax::argmax_rows_masked`) against the host's rule:
/// the best allowed token, lowest index on ties, NaN never winning, and NONE_ALLOWED for an empty mask.
#[test]
fn masked_argmax_matches_the_host_rule() {
    use hearth_engine::gpu::argmax::{argmax_rows_masked, NONE_ALLOWED};
    let dev = gpu();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for (rows, v) in [(1usize, 49_152usize), (32, 128_256), (5, 1000), (3, 33)] {
        let w = v.div_ceil(32);
        // Few distinct values: many ties. A NaN here and there; row 1 allows nothing; row 2 allows a few tokens.
        let mut x: Vec<f32> = (0..rows * v).map(|_| (next() % 50) as f32 - 25.0).collect();
        for i in (7..x.len()).step_by(997) {
            x[i] = f32::NAN;
        }
        let mut m: Vec<u32> = (0..rows * w).map(|_| (next() as u32) & (next() as u32)).collect();
        if rows > 1 {
            m[w..2 * w].iter_mut().for_each(|b| *b = 0);
        }
        if rows > 2 {
            m[2 * w..3 * w].iter_mut().enumerate().for_each(|(i, b)| *b = if i % 9 == 0 { 1 << (i % 32) } else { 0 });
        }
        let want: Vec<u32> = (0..rows)
            .map(|r| {
                let mut best: Option<(usize, f32)> = None;
                for c in 0..v {
                    let allowed = (m[r * w + c / 32] >> (c % 32)) & 1 == 1;
                    let val = x[r * v + c];
                    if allowed && !val.is_nan() && best.is_none_or(|(_, b)| val > b) {
                        best = Some((c, val));
                    }
                }
                best.map_or(NONE_ALLOWED, |(c, _)| c as u32)
            })
            .collect();
        let logits = Tensor::from_vec(x, (rows, v), &dev).unwrap();
        let masks = Tensor::from_vec(m, (rows, w), &dev).unwrap();
        assert_eq!(argmax_rows_masked(&logits, &masks).unwrap(), want, "rows {rows} v {v}");
    }
}

/// Greedy sampling on the device (`gpu::argmax`) against the CPU sampler's argmax: random rows of the vocabulary
/// widths served (49,152 SmolLM2, 262,144 Gemma 3) and odd ones, with the maximum planted twice (the lower index
/// must win, as on the CPU), rows of only -inf (index 0), NaN at index 0 and inside a row, and bf16 logits.
#[test]
fn argmax_matches_cpu_argmax() {
    use hearth_engine::sampling::sampler::argmax;
    let dev = gpu();
    let mut seed = 900;
    for v in [49152usize, 262144, 4097, 7, 1] {
        for rows in [1usize, 33] {
            seed += 1;
            let mut x = noise(rows * v, seed);
            for r in 0..rows {
                let row = &mut x[r * v..(r + 1) * v];
                match r % 4 {
                    1 if v > 2 => {
                        let (a, b) = ((r * 7919) % v, (r * 104729 + 1) % v);
                        row[a] = 3.0;
                        row[b] = 3.0;
                    }
                    2 => row.iter_mut().for_each(|y| *y = f32::NEG_INFINITY),
                    // NaN first: the CPU argmax keeps index 0; NaN elsewhere never wins.
                    3 if v > 2 => {
                        row[0] = f32::NAN;
                        row[v / 2] = f32::NAN;
                    }
                    _ => {}
                }
            }
            let want: Vec<u32> = x.chunks(v).map(|row| argmax(row) as u32).collect();
            let t = Tensor::from_vec(x.clone(), (rows, v), &dev).unwrap();
            assert_eq!(hearth_engine::gpu::argmax::argmax_rows(&t).unwrap(), want, "f32 v{v} rows{rows}");
            let tb = t.to_dtype(DType::BF16).unwrap();
            let xb: Vec<f32> = tb.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let want_b: Vec<u32> = xb.chunks(v).map(|row| argmax(row) as u32).collect();
            assert_eq!(hearth_engine::gpu::argmax::argmax_rows(&tb).unwrap(), want_b, "bf16 v{v} rows{rows}");
        }
    }
}

/// The fused residual add + RMSNorm (`gpu::fused::add_rms_norm`) against the same arithmetic on the CPU in f32
/// (the sum rounded to the stream's dtype first, as the model stores it), for the row widths of the supported
/// models (576 SmolLM2, 640 Gemma 3 270M, 4096 Llama-8B) and odd ones, one row (decode) and several.
#[test]
fn add_rmsnorm_matches_cpu() {
    let dev = gpu();
    let mut seed = 500;
    // f32: the sum of 4096 squares in another order and rsqrtf move y by ~1e-6 relative (measured 1.1e-6).
    for (dtype, tol) in [(DType::F32, 1e-5f32), (DType::BF16, 1.6e-2), (DType::F16, 2e-3)] {
        for c in [576usize, 640, 4096, 5000, 31, 16384] {
            for rows in [1usize, 7] {
                seed += 3;
                let mk = |v: Vec<f32>, shape: (usize, usize)| {
                    Tensor::from_vec(v, shape, &Device::Cpu).unwrap().to_dtype(dtype).unwrap()
                };
                let h = mk(noise(rows * c, seed), (rows, c));
                let a = mk(noise(rows * c, seed + 1), (rows, c));
                let w = mk(noise(c, seed + 2), (1, c)).reshape(c).unwrap();
                let (ho, y) = hearth_engine::gpu::fused::add_rms_norm(
                    &h.to_device(&dev).unwrap(),
                    &a.to_device(&dev).unwrap(),
                    &w.to_device(&dev).unwrap(),
                    1e-5,
                )
                .unwrap();
                let f = |t: &Tensor| -> Vec<f32> {
                    t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap()
                };
                let sum = (h.to_dtype(DType::F32).unwrap() + a.to_dtype(DType::F32).unwrap())
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                assert_eq!(f(&ho), f(&sum), "{dtype:?} c{c} rows{rows}: h + a");
                let (sv, wv) = (f(&sum), f(&w));
                let got = f(&y);
                for r in 0..rows {
                    let row = &sv[r * c..(r + 1) * c];
                    let ms = row.iter().map(|x| x * x).sum::<f32>() / c as f32;
                    let scale = 1.0 / (ms + 1e-5).sqrt();
                    for i in 0..c {
                        let want = row[i] * scale * wv[i];
                        let d = (got[r * c + i] - want).abs();
                        assert!(
                            d <= tol * want.abs().max(1.0),
                            "{dtype:?} c{c} rows{rows}: y[{r},{i}] {} vs {want}",
                            got[r * c + i]
                        );
                    }
                }
            }
        }
    }
}

/// The skinny decode matmul (`gpu::gemv`) against a CPU f32 matmul of the same (dtype-rounded) values, for output
/// widths that are not a multiple of its 4 columns per block and widths K that are not a multiple of one chunk (32
/// lanes x 16 loads): one row with K <= 4096 (2048 f32) takes the one-row kernel, K up to 4x that its split form;
/// poisoned outputs would show as a large error. Longer K and several rows are not its shape: it must decline (the
/// caller then uses cuBLAS).
#[test]
fn gemv_matches_cpu_matmul() {
    let dev = gpu();
    let mut seed = 100;
    for (dtype, tol) in [(DType::F32, 1e-5f64), (DType::BF16, 8e-3), (DType::F16, 2e-3)] {
        // (5000, 1024): more columns than the one-row kernel's persistent grid has warps (each walks several);
        // (4096, 14336), (301, 6000), (3001, 6000), (700, 8200), (700, 4104): one row splits each column over 2 or
        // 4 warps (routing asserted below), odd column counts leave a block's last slot empty, 3001 columns make the
        // split grid loop, K 8200 (16-bit) and 4104 (f32) split into unequal parts.
        for (n, k) in [
            (1003usize, 4096usize),
            (64, 136),
            (4096, 14336),
            (7, 8),
            (5000, 1024),
            (301, 6000),
            (3001, 6000),
            (700, 8200),
            (700, 4104),
        ] {
            for m in [1usize, 2] {
                seed += 2;
                let round = |v: Vec<f32>, shape: (usize, usize)| {
                    Tensor::from_vec(v, shape, &Device::Cpu).unwrap().to_dtype(dtype).unwrap()
                };
                let x = round(noise(m * k, seed), (m, k));
                let w = round(noise(n * k, seed + 1), (n, k));
                let got =
                    hearth_engine::gpu::gemv::matmul(&x.to_device(&dev).unwrap(), &w.to_device(&dev).unwrap()).unwrap();
                let takes = m == 1 && hearth_engine::gpu::gemv::one_row_split(k, dtype).is_some();
                let Some(got) = got else {
                    assert!(!takes, "{dtype:?} n{n} k{k}: one row must take the one-row kernel");
                    continue;
                };
                assert!(takes, "{dtype:?} m{m} n{n} k{k}: only one row of K within 4 warps' rows takes the kernel");
                assert_eq!(got.dims(), &[m, n]);
                let want =
                    x.to_dtype(DType::F32).unwrap().matmul(&w.to_dtype(DType::F32).unwrap().t().unwrap()).unwrap();
                let got: Vec<f32> = got.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap();
                let want: Vec<f32> = want.flatten_all().unwrap().to_vec1().unwrap();
                let err: f64 = got.iter().zip(&want).map(|(a, b)| ((a - b) as f64).powi(2)).sum::<f64>().sqrt();
                let norm: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum::<f64>().sqrt();
                assert!(got.iter().all(|v| v.is_finite()), "{dtype:?} m{m} n{n} k{k}: non-finite output");
                assert!(err / norm < tol, "{dtype:?} m{m} n{n} k{k}: relative error {}", err / norm);
            }
        }
    }
    // Which one-row kernel the cases above took: warps per column (1 = gemv_row), None = cuBLAS.
    use hearth_engine::gpu::gemv::one_row_split as split;
    assert_eq!(
        (split(4096, DType::BF16), split(14336, DType::BF16), split(14336, DType::F16)),
        (Some(1), Some(4), Some(4))
    );
    assert_eq!(
        (split(6000, DType::BF16), split(6000, DType::F32), split(8200, DType::BF16)),
        (Some(2), Some(4), Some(4))
    );
    assert_eq!((split(4104, DType::F32), split(14336, DType::F32), split(2048, DType::F32)), (Some(4), None, Some(1)));
}

/// The one-row kernel that computes its own input row from the residual add + RMSNorm (`gemv::matmul_add_norm`),
/// against the separate kernels it replaces: h + a bit for bit as `fused::add_rms_norm` writes it, and y against
/// `add_rms_norm` then the plain kernel within a stated tolerance (the norm's sum of squares is added in another
/// order, which can move a normalized value by one rounding step of the dtype); without the addend, against
/// candle's RMSNorm then the plain kernel. Its gated-activation epilogue on a fused gate|up matrix against the same
/// kernel's plain output through `fused::act_mul`: bit for bit.
#[test]
fn gemv_add_norm_matches_separate_kernels() {
    use hearth_engine::gpu::{fused, gemv};
    let dev = gpu();
    let mut seed = 900;
    let f = |t: &Tensor| -> Vec<f32> { t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap() };
    // y tolerance (relative RMS) for the norm-fused kernel: f32 the sum order only; 16-bit values may move a step.
    for (dtype, tol) in [(DType::F32, 1e-5f64), (DType::BF16, 8e-3), (DType::F16, 2e-3)] {
        let mk = |v: Vec<f32>, shape: (usize, usize)| {
            Tensor::from_vec(v, shape, &Device::Cpu).unwrap().to_dtype(dtype).unwrap().to_device(&dev).unwrap()
        };
        // The norm-fused kernel holds the whole row per warp: K up to 4096 (2048 f32). 576 = SmolLM2's hidden size.
        for (n, k) in [(6144usize, 4096usize), (1000, 2048), (49, 576), (7, 8)] {
            if gemv::one_row_split(k, dtype) != Some(1) {
                continue;
            }
            seed += 4;
            let h = mk(noise(k, seed), (1, k));
            let a = mk(noise(k, seed + 1), (1, k));
            let wn = (mk(noise(k, seed + 2), (1, k)).reshape(k).unwrap() + 1.0).unwrap();
            let w = mk(noise(n * k, seed + 3), (n, k));
            let eps = 1e-5;
            let (h_want, x_want) = fused::add_rms_norm(&h, &a, &wn, eps).unwrap();
            let y_want = gemv::matmul(&x_want, &w).unwrap().expect("one row");
            let (h_got, y_got) = gemv::matmul_add_norm(&h, Some(&a), &wn, eps, &w)
                .unwrap()
                .expect("one row takes the norm-fused kernel");
            assert_eq!((h_got.dims(), y_got.dims()), (&[1usize, k][..], &[1usize, n][..]));
            let (hg, hw) = (f(&h_got), f(&h_want));
            assert!(hg.iter().zip(&hw).all(|(a, b)| a.to_bits() == b.to_bits()), "{dtype:?} n{n} k{k}: h + a differs");
            let rel = |got: &[f32], want: &[f32]| {
                assert!(got.iter().all(|v| v.is_finite()), "{dtype:?} n{n} k{k}: non-finite output");
                let err: f64 = got.iter().zip(want).map(|(a, b)| ((a - b) as f64).powi(2)).sum::<f64>().sqrt();
                err / want.iter().map(|b| (*b as f64).powi(2)).sum::<f64>().sqrt()
            };
            let e = rel(&f(&y_got), &f(&y_want));
            assert!(e < tol, "{dtype:?} n{n} k{k}: add+norm+gemv relative error {e} against the separate kernels");
            // No addend (the first layer's input norm): h comes back as it is.
            let x_plain = candle_nn::ops::rms_norm(&h, &wn, eps).unwrap();
            let y_plain = gemv::matmul(&x_plain, &w).unwrap().expect("one row");
            let (h_same, y_got) =
                gemv::matmul_add_norm(&h, None, &wn, eps, &w).unwrap().expect("one row takes the norm-fused kernel");
            assert_eq!(f(&h_same), f(&h));
            let e = rel(&f(&y_got), &f(&y_plain));
            assert!(e < tol, "{dtype:?} n{n} k{k}: norm+gemv relative error {e} against candle's rms_norm + gemv");
        }
    }
    // The gated epilogue, against the norm-fused kernel's own output run through act_mul: the same column sums
    // rounded the same way, so the same bits.
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let mk = |v: Vec<f32>, shape: (usize, usize)| {
            Tensor::from_vec(v, shape, &Device::Cpu).unwrap().to_dtype(dtype).unwrap().to_device(&dev).unwrap()
        };
        let same = |got: &Tensor, want: &Tensor, what: &str| {
            let (g, w) = (f(got), f(want));
            assert_eq!(g.len(), w.len(), "{dtype:?} {what}: sizes");
            assert!(
                g.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{dtype:?} {what}: differs by up to {}",
                max_abs_diff(&g, &w)
            );
        };
        let eps = 1e-5;
        // Gated activation over a fused gate|up matrix (2I, K).
        for (i, k) in [(1536usize, 576usize), (300, 2048), (3, 8)] {
            seed += 5;
            let h = mk(noise(k, seed), (1, k));
            let a = mk(noise(k, seed + 1), (1, k));
            let wn = (mk(noise(k, seed + 2), (1, k)).reshape(k).unwrap() + 1.0).unwrap();
            let w = (mk(noise(2 * i * k, seed + 3), (2 * i, k)) * 3.0).unwrap();
            let (_, gu) = gemv::matmul_add_norm(&h, Some(&a), &wn, eps, &w).unwrap().expect("one row");
            for act in [fused::Act::Silu, fused::Act::GeluTanh] {
                let want = fused::act_mul(&gu, act).unwrap();
                let (h_got, got) = gemv::matmul_add_norm_gated(&h, Some(&a), &wn, eps, &w, act)
                    .unwrap()
                    .expect("one row takes the gated epilogue");
                assert_eq!(got.dims(), &[1, i]);
                same(&got, &want, &format!("gated {act:?} i{i} k{k}"));
                same(
                    &h_got,
                    &(h.to_dtype(DType::F32).unwrap() + a.to_dtype(DType::F32).unwrap())
                        .unwrap()
                        .to_dtype(dtype)
                        .unwrap(),
                    "gated h + a",
                );
            }
        }
    }
    // Shapes the fused kernel does not take: declined, not an error (the caller runs the separate kernels).
    let t = |shape: (usize, usize)| Tensor::zeros(shape, DType::BF16, &dev).unwrap();
    let wn = Tensor::ones(8192, DType::BF16, &dev).unwrap();
    assert!(
        gemv::matmul_add_norm(&t((1, 8192)), None, &wn, 1e-5, &t((16, 8192))).unwrap().is_none(),
        "K beyond one warp's row"
    );
    let wn = Tensor::ones(64, DType::BF16, &dev).unwrap();
    assert!(gemv::matmul_add_norm(&t((3, 64)), None, &wn, 1e-5, &t((16, 64))).unwrap().is_none(), "three rows");
}

/// The prompt cache's tiers on the GPU: a bf16 block read out of VRAM, spilled to an SSD store, read back after a
/// "restart" and written into another block is bit-identical, and a CPU pool reads the same bytes the same way.
#[test]
fn kv_blocks_move_between_vram_host_and_ssd() {
    use hearth_engine::kv::ssd::{BlockLayout, BlockRecord, SsdConfig, SsdStore};
    use hearth_engine::kv::BlockHash;
    let (layers, kvh, d, bs) = (3, 2, 64, 16);
    let dev = Device::new_cuda(0).expect("a CUDA device");
    let mut gpu = PagedKv::new(layers, 4, bs, kvh, d, DType::BF16, &dev).unwrap();
    // Any bit pattern must survive (the copies are bytewise): fill block 1 with pseudo-random bf16 bits.
    let n = 2 * layers * bs * kvh * d * 2;
    let bytes: Vec<u8> = (0..n).map(|i| ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).collect();
    gpu.write_block(1, &bytes).unwrap();
    assert_eq!(gpu.read_block(1).unwrap(), bytes, "VRAM round trip");
    assert!(gpu.read_block(0).unwrap().iter().all(|&b| b == 0), "a neighbouring block was written");
    let dir = std::env::temp_dir().join(format!("hearth-gpu-ssd-{}", std::process::id()));
    let cfg = || SsdConfig {
        dir: dir.clone(),
        max_bytes: 1 << 30,
        verify: true,
        fingerprint: 42,
        layout: BlockLayout { layers, kv_heads: kvh, head_dim: d, block_size: bs, dtype: "bf16".into(), dtype_size: 2 },
    };
    let (root, tokens) = (BlockHash::root(b"gpu-test"), (0..bs as u32).collect::<Vec<_>>());
    let hash = root.child(&tokens);
    let store = SsdStore::open(cfg());
    let data = gpu.read_block(1).unwrap();
    store.spill(BlockRecord { hash, parent: root, tokens: tokens.clone(), data }, false);
    store.flush().recv().unwrap();
    store.shutdown();
    drop(store);
    let store = SsdStore::open(cfg());
    let back = store.restore(hash, root, &tokens).expect("restored after a restart");
    gpu.write_block(3, &back).unwrap();
    assert_eq!(gpu.read_block(3).unwrap(), bytes, "VRAM -> SSD -> VRAM");
    // Several blocks in one upload (restores), in any order.
    let other: Vec<u8> = bytes.iter().map(|b| b.wrapping_add(1)).collect();
    gpu.write_blocks(&[(2, &other), (0, &back)]).unwrap();
    assert_eq!(gpu.read_blocks(&[0, 2, 3]).unwrap(), vec![bytes.clone(), other, bytes.clone()]);
    // Evictions: the gather on the compute stream, the copy on the second stream, the bytes picked up later.
    let mut sp = hearth_engine::gpu::spill::AsyncSpiller::new(&dev).unwrap().expect("a CUDA device");
    let spill = |block: u32| hearth_engine::kv::Spill {
        block,
        meta: hearth_engine::kv::CachedBlock { hash, parent: root, tokens: tokens.clone() },
        kind: hearth_engine::kv::SpillKind::Evicted,
    };
    sp.start(gpu.gather_blocks(&[2, 0]).unwrap(), vec![spill(2), spill(0)]).unwrap();
    let got = sp.collect(true).unwrap();
    assert!(sp.is_idle());
    let got: Vec<(u32, Vec<u8>)> = got.into_iter().map(|(s, d)| (s.block, d)).collect();
    assert_eq!(got, vec![(2, gpu.read_block(2).unwrap()), (0, bytes.clone())], "second-stream spill copies");
    // A ring of one-block chunks: two steps' evictions (6 blocks) are more chunks than the ring's buffers, so some
    // wait in device memory and go to the copy stream as buffers come back; every block arrives intact, in order.
    let mut sp =
        hearth_engine::gpu::spill::AsyncSpiller::new(&dev).unwrap().expect("a CUDA device").with_chunk_bytes(n);
    sp.start(gpu.gather_blocks(&[3, 2, 0]).unwrap(), vec![spill(3), spill(2), spill(0)]).unwrap();
    sp.start(gpu.gather_blocks(&[1, 2, 3]).unwrap(), vec![spill(1), spill(2), spill(3)]).unwrap();
    let early = sp.collect(false).unwrap();
    let mut got: Vec<(u32, Vec<u8>)> = early.into_iter().map(|(s, d)| (s.block, d)).collect();
    got.extend(sp.collect(true).unwrap().into_iter().map(|(s, d)| (s.block, d)));
    assert!(sp.is_idle());
    let want: Vec<(u32, Vec<u8>)> = [3, 2, 0, 1, 2, 3].iter().map(|&b| (b, gpu.read_block(b).unwrap())).collect();
    assert_eq!(got, want, "chunked spill copies");
    // With a sink, a thread splits the chunks and hands each block over; `collect(true)` returns once all are.
    let sunk = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let to = sunk.clone();
    let mut sp = hearth_engine::gpu::spill::AsyncSpiller::new(&dev)
        .unwrap()
        .expect("a CUDA device")
        .with_chunk_bytes(n)
        .with_sink(move |s, d| to.lock().unwrap().push((s.block, d)))
        .unwrap();
    for _ in 0..3 {
        sp.start(gpu.gather_blocks(&[3, 2, 0]).unwrap(), vec![spill(3), spill(2), spill(0)]).unwrap();
    }
    assert!(sp.collect(true).unwrap().is_empty(), "the sink takes the blocks");
    assert!(sp.is_idle());
    assert_eq!(*sunk.lock().unwrap(), [want[..3].to_vec(), want[..3].to_vec(), want[..3].to_vec()].concat());
    let mut host = PagedKv::new(layers, 4, bs, kvh, d, DType::BF16, &Device::Cpu).unwrap();
    host.write_block(2, &back).unwrap();
    assert_eq!(host.read_block(2).unwrap(), bytes, "the CPU pool reads the same format");
    let _ = std::fs::remove_dir_all(&dir);
}
