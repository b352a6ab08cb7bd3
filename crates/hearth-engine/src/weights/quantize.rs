//! `hearth quantize`: a GGUF rewritten with its matrices in another GGML type, as llama.cpp's `llama-quantize` does
//! for the common schemes: Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K and the Q4_K_M / Q5_K_M mixes (their Q6_K
//! output head and, in llama.cpp's choice of layers, Q6_K value and down projections). Matrices are dequantized
//! to f32 and quantized with candle's quantizers (llama.cpp's reference rounding), on several threads; vectors
//! (norms, biases) are copied as they are, and so is a matrix already in its target type. Rows that are not whole
//! 256-value blocks take llama.cpp's fallback for a k-quant (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0).
//! Metadata is copied, with `general.file_type` set to the scheme's llama.cpp file type.

use super::gguf::GgufFile;
use crate::{Error, Result};
use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::Device;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A quantization scheme: one type for every matrix, or a llama.cpp k-quant mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Every matrix in this type (the output head too).
    Plain(GgmlDType),
    /// Q4_K_M / Q5_K_M: matrices in `base`, the output head and some value / down projections in Q6_K.
    Mix { base: GgmlDType },
}

/// The names `--type` takes, with their schemes.
pub const SCHEMES: [(&str, Scheme); 9] = [
    ("q4_0", Scheme::Plain(GgmlDType::Q4_0)),
    ("q4_1", Scheme::Plain(GgmlDType::Q4_1)),
    ("q5_0", Scheme::Plain(GgmlDType::Q5_0)),
    ("q8_0", Scheme::Plain(GgmlDType::Q8_0)),
    ("q4_k", Scheme::Plain(GgmlDType::Q4K)),
    ("q5_k", Scheme::Plain(GgmlDType::Q5K)),
    ("q6_k", Scheme::Plain(GgmlDType::Q6K)),
    ("q4_k_m", Scheme::Mix { base: GgmlDType::Q4K }),
    ("q5_k_m", Scheme::Mix { base: GgmlDType::Q5K }),
];

impl std::str::FromStr for Scheme {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let s = s.to_ascii_lowercase();
        SCHEMES
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, sc)| *sc)
            .ok_or_else(|| format!("unknown quantization type `{s}`; one of {}", SCHEMES.map(|(n, _)| n).join(", ")))
    }
}

impl Scheme {
    /// llama.cpp's `general.file_type` for the scheme (its LLAMA_FTYPE_MOSTLY_* numbers).
    pub fn file_type(self) -> u32 {
        match self {
            Scheme::Plain(GgmlDType::Q4_0) => 2,
            Scheme::Plain(GgmlDType::Q4_1) => 3,
            Scheme::Plain(GgmlDType::Q8_0) => 7,
            Scheme::Plain(GgmlDType::Q5_0) => 8,
            Scheme::Plain(GgmlDType::Q4K) => 14, // Q4_K_S: every matrix Q4_K
            Scheme::Mix { base: GgmlDType::Q4K } => 15,
            Scheme::Plain(GgmlDType::Q5K) => 16, // Q5_K_S
            Scheme::Mix { .. } => 17,
            Scheme::Plain(_) => 18, // Q6_K
        }
    }
}

/// llama.cpp's choice of layers that get more bits in a k-quant mix: the first and last eighth, and every third
/// layer between them.
fn more_bits(layer: usize, layers: usize) -> bool {
    layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2
}

/// The layer index of a `blk.N.` tensor.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// Where a model is: its layer count, and whether it has an output head of its own (else the embedding table is
/// the head, and takes the head's type in a mix).
#[derive(Clone, Copy)]
struct Shape {
    layers: usize,
    own_head: bool,
}

/// The type a matrix named `name` with rows of `width` values takes under `scheme`.
fn target(scheme: Scheme, name: &str, width: usize, m: Shape) -> GgmlDType {
    let t = match scheme {
        Scheme::Plain(t) => t,
        Scheme::Mix { base } => {
            let mixed = name.contains("attn_v.weight") || name.contains("ffn_down");
            let head = name == "output.weight" || (!m.own_head && name == "token_embd.weight");
            if head || (mixed && layer_of(name).is_some_and(|l| more_bits(l, m.layers))) {
                GgmlDType::Q6K
            } else {
                base
            }
        }
    };
    if width.is_multiple_of(t.block_size()) {
        return t;
    }
    match t {
        GgmlDType::Q4K => GgmlDType::Q5_0,
        GgmlDType::Q5K => GgmlDType::Q5_1,
        _ => GgmlDType::Q8_0,
    }
}

/// What a run did: tensors by their output type, and the bytes in and out.
#[derive(Debug, Default)]
pub struct Report {
    pub tensors: usize,
    pub requantized: usize,
    pub by_type: BTreeMap<String, usize>,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Quantize `input` (a GGUF) into `output` under `scheme` on `threads` threads, calling `progress(done, total,
/// name)` after each tensor. The output is written to `output` with a `.part` suffix and renamed when complete.
pub fn quantize(
    input: &Path,
    output: &Path,
    scheme: Scheme,
    threads: usize,
    progress: &(dyn Fn(usize, usize, &str) + Sync),
) -> Result<Report> {
    let g = GgufFile::open(input)?;
    let layers = g.get_u64(&format!("{}.block_count", g.architecture()?)).unwrap_or(0) as usize;
    let shape = Shape { layers, own_head: g.has_tensor("output.weight") };
    let mut names: Vec<&String> = g.content.tensor_infos.keys().collect();
    names.sort_by_key(|n| (g.content.tensor_infos[*n].offset, n.to_string()));
    if let Some(n) = names.iter().find(|n| g.is_mxfp4(n)) {
        return Err(Error::Unsupported(format!("quantizing a GGUF with MXFP4 tensors (`{n}`)")));
    }
    let done = AtomicUsize::new(0);
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<(QTensor, bool)>>> = names.iter().map(|_| Mutex::new(None)).collect();
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= names.len() || failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                    return;
                }
                match convert(&g, names[i], scheme, shape) {
                    Ok(t) => {
                        if let Ok(mut slot) = slots[i].lock() {
                            *slot = Some(t);
                        }
                        progress(done.fetch_add(1, Ordering::Relaxed) + 1, names.len(), names[i]);
                    }
                    Err(e) => {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(e);
                        }
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    let mut report = Report { tensors: names.len(), ..Default::default() };
    let mut tensors = Vec::with_capacity(names.len());
    for (name, slot) in names.iter().zip(slots) {
        let Some((t, requantized)) = slot.into_inner().ok().flatten() else {
            return Err(Error::InvalidModel(format!("{}: tensor `{name}` was not converted", input.display())));
        };
        report.requantized += requantized as usize;
        *report.by_type.entry(format!("{:?}", t.dtype())).or_default() += 1;
        tensors.push((name.as_str(), t));
    }
    let file_type = gguf_file::Value::U32(scheme.file_type());
    let mut metadata: Vec<(&str, &gguf_file::Value)> =
        g.metadata().iter().filter(|(k, _)| *k != "general.file_type").map(|(k, v)| (k.as_str(), v)).collect();
    metadata.sort_by_key(|(k, _)| *k);
    metadata.push(("general.file_type", &file_type));
    let part = output.with_extension("gguf.part");
    let io = |what: &str, e| Error::io(format!("{what} {}", part.display()), e);
    let file = std::fs::File::create(&part).map_err(|e| io("creating", e))?;
    let mut w = std::io::BufWriter::new(file);
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    gguf_file::write(&mut w, &metadata, &refs)?;
    drop(w);
    std::fs::rename(&part, output).map_err(|e| io("renaming", e))?;
    report.bytes_in = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0);
    report.bytes_out = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
    Ok(report)
}

/// One tensor under the scheme, and whether it was requantized (false: copied as stored).
fn convert(g: &GgufFile, name: &str, scheme: Scheme, shape: Shape) -> Result<(QTensor, bool)> {
    let q = g.qtensor(name, &Device::Cpu)?;
    let dims = q.shape().dims().to_vec();
    let width = dims.last().copied().unwrap_or(0);
    // Vectors (norms, biases, per-head values) keep their type.
    if dims.len() < 2 || dims.iter().product::<usize>() == width {
        return Ok((q, false));
    }
    let t = target(scheme, name, width, shape);
    if t == q.dtype() || !width.is_multiple_of(t.block_size()) {
        return Ok((q, false));
    }
    let f = q.dequantize(&Device::Cpu)?;
    Ok((QTensor::quantize(&f, t)?, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_parse_and_name_llama_cpp_file_types() {
        assert_eq!("Q4_K_M".parse::<Scheme>(), Ok(Scheme::Mix { base: GgmlDType::Q4K }));
        assert_eq!("q8_0".parse::<Scheme>().map(Scheme::file_type), Ok(7));
        assert_eq!("q4_k_m".parse::<Scheme>().map(Scheme::file_type), Ok(15));
        assert_eq!("q5_k_m".parse::<Scheme>().map(Scheme::file_type), Ok(17));
        let e = "q3_k".parse::<Scheme>().unwrap_err();
        assert!(e.contains("q3_k") && e.contains("q4_k_m"), "{e}");
    }

    #[test]
    fn a_mix_gives_more_bits_where_llama_cpp_does() {
        // 32 layers: the first 4, the last 4, and every third from layer 6.
        let more: Vec<usize> = (0..32).filter(|l| more_bits(*l, 32)).collect();
        assert_eq!(more, [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]);
        let mix = Scheme::Mix { base: GgmlDType::Q4K };
        let m = Shape { layers: 32, own_head: true };
        assert_eq!(target(mix, "output.weight", 4096, m), GgmlDType::Q6K);
        assert_eq!(target(mix, "blk.0.attn_v.weight", 4096, m), GgmlDType::Q6K);
        assert_eq!(target(mix, "blk.4.attn_v.weight", 4096, m), GgmlDType::Q4K);
        assert_eq!(target(mix, "blk.6.ffn_down.weight", 14336, m), GgmlDType::Q6K);
        assert_eq!(target(mix, "blk.6.attn_q.weight", 4096, m), GgmlDType::Q4K);
        assert_eq!(target(mix, "token_embd.weight", 4096, m), GgmlDType::Q4K);
        // a tied head: the embedding table is the head
        assert_eq!(target(mix, "token_embd.weight", 4096, Shape { layers: 32, own_head: false }), GgmlDType::Q6K);
        // rows of 576 values are not whole 256-value blocks: llama.cpp's fallbacks
        let small = Shape { layers: 30, own_head: true };
        assert_eq!(target(mix, "blk.4.attn_q.weight", 576, small), GgmlDType::Q5_0);
        assert_eq!(target(mix, "output.weight", 576, small), GgmlDType::Q8_0);
        assert_eq!(target(Scheme::Plain(GgmlDType::Q5K), "blk.1.attn_k.weight", 576, small), GgmlDType::Q5_1);
    }
}
