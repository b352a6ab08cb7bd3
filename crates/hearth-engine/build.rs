//! With the `cuda` feature: compile hearth's CUDA kernels (src/attention/cuda/{paged_attention,prefill_tc,decode_cluster}.cu, src/gpu/fused.cu,
//! src/gpu/gemv.cu, src/gpu/argmax.cu, src/gpu/qgemv.cu once per activation dtype, and src/attention/cuda/paged_encoded.cu once per encoded-cache module) to PTX
//! with the CUDA toolchain's nvcc
//! (`$CUDA_HOME/bin/nvcc`, else `nvcc` on PATH) for `CUDA_COMPUTE_CAP` (default 90). scripts/build-cuda sets both.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    println!("cargo:rerun-if-changed=src/gpu/common.cuh");
    println!("cargo:rerun-if-changed=src/attention/cuda/attn_common.cuh");
    println!("cargo:rerun-if-changed=src/attention/cuda/kv_codes.cuh");
    println!("cargo:rerun-if-changed=src/attention/cuda/prefill_tc.cuh");
    // The compute capability the PTX targets: gpu/launch.rs enables PDL only when the kernels' griddepcontrol
    // instructions are compiled in (sm_90+), whatever GPU the binary later runs on.
    println!("cargo:rustc-env=HEARTH_PTX_CAP={}", std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".into()));
    for src in [
        "src/attention/cuda/paged_attention.cu",
        "src/attention/cuda/prefill_tc.cu",
        "src/attention/cuda/decode_cluster.cu",
        "src/gpu/fused.cu",
        "src/gpu/gemv.cu",
        "src/gpu/argmax.cu",
    ] {
        ptx(src, None, &[]);
    }
    // The quantized matmuls, one module per activation dtype.
    for (t, sfx) in [("__nv_bfloat16", "bf16"), ("__half", "f16"), ("float", "f32")] {
        ptx("src/gpu/qgemv.cu", Some(&format!("qgemv_{sfx}")), &[format!("-DXT={t}"), format!("-DXSFX={sfx}")]);
    }
    // The encoded-cache modules (attention/cuda/encoded.rs lists the same), one per (key code, value code) — the
    // codes of kv_codes.cuh — and model dtype. Two nvcc processes at a time.
    const ENCODED: [(&str, u8, u8); 5] =
        [("q8_q8", 1, 1), ("q8_lm4", 1, 3), ("q8_lm3", 1, 4), ("q8_lm2", 1, 5), ("q4_q4", 2, 2)];
    let src = "src/attention/cuda/paged_encoded.cu";
    let all: Vec<(String, Vec<String>)> = ENCODED
        .iter()
        .flat_map(|(name, k, v)| {
            ["bf16", "f16"].map(|t| {
                let mut defs = vec![format!("-DKC={k}"), format!("-DVC={v}")];
                if t == "f16" {
                    defs.push("-DENC_F16".into());
                }
                (format!("paged_encoded_{name}_{t}"), defs)
            })
        })
        .collect();
    for pair in all.chunks(2) {
        std::thread::scope(|s| {
            for (name, defs) in pair {
                s.spawn(move || ptx(src, Some(name), defs));
            }
        });
    }
}

/// Compile `src` to `$OUT_DIR/<name>.ptx` (name: the file's stem unless given), with extra nvcc arguments.
fn ptx(src: &str, name: Option<&str>, extra: &[String]) {
    println!("cargo:rerun-if-changed={src}");
    let stem = std::path::Path::new(src).file_stem().expect("a file name").to_string_lossy().to_string();
    let name = name.map_or(stem, str::to_string);
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join(format!("{name}.ptx"));
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".into());
    let nvcc = match std::env::var_os("CUDA_HOME") {
        Some(h) => PathBuf::from(h).join("bin").join("nvcc"),
        None => PathBuf::from("nvcc"),
    };
    let status = Command::new(&nvcc)
        .args(["--ptx", &format!("-arch=sm_{cap}"), "-O3", "-std=c++17"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(src)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("nvcc failed ({s}) compiling {src}"),
        Err(e) => panic!(
            "cannot run {} ({e}): the `cuda` feature needs the CUDA toolchain; run scripts/build-cuda, which installs it",
            nvcc.display()
        ),
    }
}
