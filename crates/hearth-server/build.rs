//! Embeds the built web chat (`web/dist/`, committed; `npm --prefix web run build` makes it) into the binary:
//! writes `$OUT_DIR/ui_assets.rs`, a table of every file with `include_bytes!` of it and of its precompressed
//! `.gz` / `.br` siblings, and an ETag from its content. No `web/dist/` gives an empty table (the server then
//! says the UI is not in this build).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let dist = manifest.join("../../web/dist");
    println!("cargo:rerun-if-changed={}", dist.display());
    let mut files = Vec::new();
    if dist.is_dir() {
        walk(&dist, &mut files);
    }
    files.sort();
    let mut out = String::from("pub(crate) static ASSETS: &[Asset] = &[\n");
    for file in &files {
        let name = file.to_string_lossy();
        if name.ends_with(".gz") || name.ends_with(".br") {
            continue;
        }
        let Ok(rel) = file.strip_prefix(&dist) else { continue };
        let url = format!("/{}", rel.to_string_lossy().replace('\\', "/"));
        let body = std::fs::read(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let sibling = |ext: &str| {
            let p = PathBuf::from(format!("{name}.{ext}"));
            if p.is_file() {
                format!("Some(include_bytes!({:?}))", p.to_string_lossy())
            } else {
                "None".to_string()
            }
        };
        let _ = writeln!(
            out,
            "    Asset {{ path: {url:?}, body: include_bytes!({name:?}), gzip: {}, brotli: {}, etag: \"\\\"{:016x}\\\"\" }},",
            sibling("gz"),
            sibling("br"),
            fnv1a(&body)
        );
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("ui_assets.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.is_file() {
            files.push(path);
        }
    }
}

/// 64-bit FNV-1a: a content hash for ETags (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}
