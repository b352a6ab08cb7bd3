//! Micro-benchmark: candle's CPU `QMatMul` vs `hearth_engine::cpu_matmul` on SmolLM2-135M, Gemma 3 270M and Qwen2.5-Coder-1.5B shapes.
//!
//! `RAYON_NUM_THREADS=2 cargo run --release --example qmatmul_bench -p hearth-engine`
//!
//! Environment: `QBENCH_M=1,512` (activation rows to time), `QBENCH_SHAPES=smollm2|gemma|qwen15b|all`,
//! `QBENCH_MIN_S=0.3` (minimum seconds per measurement), `QBENCH_CLOCK=cpu` (time the calling thread's CPU
//! time instead of wall time: only meaningful with RAYON_NUM_THREADS=1, for comparing kernels on a busy machine).
//! Times are medians, in milliseconds.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use hearth_engine::cpu_matmul::{self, FastQMatMul, Isa, Path, Plan};
use std::sync::Arc;
use std::time::Instant;

struct Shape {
    model: &'static str,
    name: &'static str,
    n: usize,
    k: usize,
    dtype: GgmlDType,
    /// how many of these one token runs through (layers × uses), for the per-token total at m = 1
    per_token: usize,
}

fn shapes() -> Vec<Shape> {
    use GgmlDType::*;
    let s = |model, name, n, k, dtype, per_token| Shape { model, name, n, k, dtype, per_token };
    vec![
        s("smollm2", "attn_q/o", 576, 576, Q4_1, 60),
        s("smollm2", "attn_k/v", 192, 576, Q4_1, 60),
        s("smollm2", "ffn_gate/up", 1536, 576, Q4_1, 60),
        s("smollm2", "ffn_down", 576, 1536, Q4_1, 30),
        s("smollm2", "lm_head", 49152, 576, Q8_0, 1),
        s("gemma", "attn_q", 1024, 640, Q5_0, 18),
        s("gemma", "attn_k/v", 256, 640, Q5_0, 27),
        s("gemma", "attn_v", 256, 640, Q8_0, 9),
        s("gemma", "ffn_gate/up", 2048, 640, Q5_0, 36),
        s("gemma", "ffn_down", 640, 2048, Q6K, 9),
        s("gemma", "ffn_down", 640, 2048, Q4K, 9),
        s("gemma", "attn_output", 640, 1024, Q4K, 18),
        s("gemma", "lm_head", 262144, 640, Q8_0, 1),
        s("qwen15b", "attn_q/o", 1536, 1536, Q4K, 56),
        s("qwen15b", "attn_k/v", 256, 1536, Q4K, 42),
        s("qwen15b", "attn_v", 256, 1536, Q6K, 14),
        s("qwen15b", "ffn_gate/up", 8960, 1536, Q4K, 56),
        s("qwen15b", "ffn_down", 1536, 8960, Q4K, 14),
        s("qwen15b", "ffn_down", 1536, 8960, Q6K, 14),
        s("qwen15b", "lm_head", 151936, 1536, Q6K, 1),
    ]
}

fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}
extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// This thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID), immune to time slicing by other processes.
fn thread_cpu_s() -> f64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    unsafe { clock_gettime(3, &mut ts) };
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}

fn use_cpu_clock() -> bool {
    std::env::var("QBENCH_CLOCK").is_ok_and(|v| v == "cpu")
}

fn median_ms(min_s: f64, max_iters: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm-up (also builds candle's repacked tiles, where it uses them)
    let cpu = use_cpu_clock();
    let mut t = Vec::new();
    let start = Instant::now();
    while t.len() < max_iters && (t.len() < 5 || start.elapsed().as_secs_f64() < min_s) {
        if cpu {
            let s = thread_cpu_s();
            f();
            t.push((thread_cpu_s() - s) * 1e3);
        } else {
            let s = Instant::now();
            f();
            t.push(s.elapsed().as_secs_f64() * 1e3);
        }
    }
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    t[t.len() / 2]
}

fn rel_err(a: &Tensor, b: &Tensor) -> f32 {
    let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
    let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    a.iter().zip(&b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

fn main() -> hearth_engine::Result<()> {
    let ms: Vec<usize> = std::env::var("QBENCH_M")
        .unwrap_or_else(|_| "1,512".into())
        .split(',')
        .map(|s| s.trim().parse().expect("QBENCH_M: comma-separated integers"))
        .collect();
    let which = std::env::var("QBENCH_SHAPES").unwrap_or_else(|_| "all".into());
    let min_s: f64 = std::env::var("QBENCH_MIN_S").ok().and_then(|s| s.parse().ok()).unwrap_or(0.3);
    let isa = cpu_matmul::active_isa().expect("kernels disabled (HEARTH_FAST_QUANT=0) or no AVX2");
    let isas: Vec<Isa> = Isa::ALL.into_iter().filter(|&i| cpu_matmul::isa_supported(i)).collect();
    println!(
        "threads: {} (candle pool {} + caller); kernels ISA {:?}; clock: {}",
        candle_core::utils::get_num_threads(),
        candle_core::utils::barrier_pool().n_workers(),
        isa,
        if use_cpu_clock() { "thread CPU time" } else { "wall" }
    );
    println!(
        "{:<8} {:<12} {:>6} {:>5} {:<5} {:>5} | {:>9} {:>9} {:>9} {:>9} | {:<7} {:>9} {:>7} | {:>8}",
        "model",
        "tensor",
        "n",
        "k",
        "type",
        "m",
        "candle",
        "dec_avx2",
        "dec_vnni",
        "f32 gemm",
        "chosen",
        "ours",
        "speedup",
        "err"
    );
    let mut totals: std::collections::BTreeMap<(&str, usize), (f64, f64)> = Default::default();
    for s in shapes().into_iter().filter(|s| which == "all" || which == s.model) {
        let w = Tensor::from_vec(values(s.n * s.k, s.n as u64 ^ s.k as u64), (s.n, s.k), &Device::Cpu)?;
        let q = Arc::new(QTensor::quantize(&w, s.dtype)?);
        let candle = QMatMul::QTensor(q.clone());
        let fast = FastQMatMul::with_plan(q.clone(), isa, Plan::for_weight(s.dtype));
        // W dequantized once, for the f32 GEMM column (what a dequantize-then-GEMM prefill path would run per call,
        // without the dequantization)
        let wf = q.dequantize(&Device::Cpu)?.t()?;
        for &m in &ms {
            if s.name == "lm_head" && m > 16 {
                continue; // the head only sees the rows whose logits are wanted
            }
            let x = Tensor::from_vec(values(m * s.k, 7 + m as u64), (m, s.k), &Device::Cpu)?;
            let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
            let max_iters = if m >= 64 { 30 } else { 2000 };
            let t_candle = median_ms(min_s, max_iters, || {
                candle.forward(&x).unwrap();
            });
            let mut dec = Vec::new();
            let vnni = isas.iter().copied().find(|i| i.vnni()).unwrap_or(Isa::AvxVnni);
            for i in [Isa::Avx2, vnni] {
                if !isas.contains(&i) || !cpu_matmul::decode_supported(s.dtype) {
                    dec.push(None);
                    continue;
                }
                let mut out = vec![0f32; m * s.n];
                dec.push(Some(median_ms(min_s, max_iters, || {
                    cpu_matmul::decode_matmul(&q, i, &xs, m, &mut out).unwrap()
                })));
            }
            let t_f32 = (m >= 64).then(|| {
                median_ms(min_s, max_iters, || {
                    x.matmul(&wf).unwrap();
                })
            });
            let (path, t_ours, err) = match &fast {
                Some(f) => {
                    let y = f.forward(&x)?;
                    let reference = candle.forward(&x)?;
                    let t = median_ms(min_s, max_iters, || {
                        f.forward(&x).unwrap();
                    });
                    (f.path(m), t, rel_err(&y, &reference))
                }
                None => (Path::Candle, t_candle, 0.0),
            };
            let fmt = |t: Option<f64>| t.map(|t| format!("{t:9.3}")).unwrap_or_else(|| format!("{:>9}", "-"));
            println!(
                "{:<8} {:<12} {:>6} {:>5} {:<5} {:>5} | {:>9.3} {} {} {} | {:<7} {:>9.3} {:>6.2}x | {:>8.1e}",
                s.model,
                s.name,
                s.n,
                s.k,
                format!("{:?}", s.dtype),
                m,
                t_candle,
                fmt(dec[0]),
                fmt(dec[1]),
                fmt(t_f32),
                format!("{path:?}"),
                t_ours,
                t_candle / t_ours,
                err
            );
            let e = totals.entry((s.model, m)).or_default();
            e.0 += t_candle * s.per_token as f64;
            e.1 += t_ours * s.per_token as f64;
        }
    }
    println!("\nweighted total of the matmuls above per forward (count × median; lm_head once, only for m <= 16):");
    for ((model, m), (c, o)) in totals {
        println!("  {model:<8} m={m:<4} candle {c:9.2} ms   ours {o:9.2} ms   ({:.2}x)", c / o);
    }
    Ok(())
}
