//! GGUF files: memory-mapped, metadata accessors, and tensors loaded by their Hugging Face names.
//!
//! The file is mapped once; each tensor's bytes are handed from the map to candle's block storage (one copy into
//! aligned blocks, no dequantization). Linear weights stay quantized; only norms and biases become f32 tensors.

use crate::{Error, Result};
use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Tensor types hearth loads from GGUF (everything candle 0.11 implements on every device).
pub const SUPPORTED_DTYPES: &[GgmlDType] = &[
    GgmlDType::F32,
    GgmlDType::F16,
    GgmlDType::BF16,
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
    GgmlDType::Q8K,
];

pub struct GgufFile {
    pub path: PathBuf,
    mmap: memmap2::Mmap,
    file: std::fs::File,
    pub content: gguf_file::Content,
    /// Tensors of the MXFP4 type (gpt-oss's experts), which candle cannot read: `content` lists them under a
    /// stand-in type, and [`GgufFile::mxfp4_part`] reads them.
    mxfp4: std::collections::HashSet<String>,
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        // SAFETY: the map is read-only; a file truncated underneath us is the same hazard llama.cpp accepts.
        let mmap = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| Error::io(format!("memory-mapping {}", path.display()), e))?;
        let unreadable = |e| Error::InvalidModel(format!("{}: not a readable GGUF v2/v3 file: {e}", path.display()));
        let (content, mxfp4) = match gguf_file::Content::read(&mut std::io::Cursor::new(&mmap[..])) {
            Ok(c) => (c, Default::default()),
            // candle refuses types it does not know: MXFP4 experts are read here instead
            Err(e) => match super::gguf_scan::patch_mxfp4(&mmap)? {
                Some((header, names)) => {
                    let c = gguf_file::Content::read(&mut std::io::Cursor::new(&header)).map_err(unreadable)?;
                    (c, names.into_iter().collect())
                }
                None => return Err(unreadable(e)),
            },
        };
        Ok(Self { path: path.to_path_buf(), mmap, file, content, mxfp4 })
    }

    /// Index `part` of an MXFP4 tensor's first dimension (one expert): its GGML blocks (a power-of-two scale byte,
    /// then 16 bytes of 4-bit codes, per 32 values) and its (rows, columns). None where `gguf_name` is not MXFP4.
    pub fn mxfp4_part(&self, gguf_name: &str, part: usize) -> Result<Option<(&[u8], usize, usize)>> {
        if !self.mxfp4.contains(gguf_name) {
            return Ok(None);
        }
        let info = &self.content.tensor_infos[gguf_name];
        let (n, rows, cols) = match info.shape.dims() {
            &[n, rows, cols] if cols % 32 == 0 && part < n => (n, rows, cols),
            dims => {
                return Err(Error::InvalidModel(format!(
                    "MXFP4 tensor `{gguf_name}` of shape {dims:?} has no expert {part} of whole blocks"
                )))
            }
        };
        // every size from the file, checked: a malformed header must not wrap an offset
        let per = rows.checked_mul(cols / 32).and_then(|b| b.checked_mul(super::mxfp4::GGML_BLOCK_BYTES));
        let base = (self.content.tensor_data_offset as usize).checked_add(info.offset as usize);
        let whole = base.zip(per).and_then(|(b, p)| b.checked_add(p.checked_mul(n)?));
        let range = base.zip(per).and_then(|(b, p)| Some(b.checked_add(p.checked_mul(part)?)?..b + p * (part + 1)));
        match range.filter(|_| whole.is_some_and(|w| w <= self.mmap.len())).and_then(|r| self.mmap.get(r)) {
            Some(bytes) => Ok(Some((bytes, rows, cols))),
            None => Err(Error::InvalidModel(format!("MXFP4 tensor `{gguf_name}` lies outside the file"))),
        }
    }

    pub fn metadata(&self) -> &HashMap<String, gguf_file::Value> {
        &self.content.metadata
    }

    pub fn get(&self, key: &str) -> Option<&gguf_file::Value> {
        self.content.metadata.get(key)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(|v| v.to_string().ok()).map(|s| s.as_str())
    }

    /// Any integer type as u64 (GGUF writers differ in which width they use).
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        use gguf_file::Value::*;
        match self.get(key)? {
            U8(v) => Some(*v as u64),
            I8(v) => u64::try_from(*v).ok(),
            U16(v) => Some(*v as u64),
            I16(v) => u64::try_from(*v).ok(),
            U32(v) => Some(*v as u64),
            I32(v) => u64::try_from(*v).ok(),
            U64(v) => Some(*v),
            I64(v) => u64::try_from(*v).ok(),
            _ => None,
        }
    }

    pub fn get_f64(&self, key: &str) -> Option<f64> {
        use gguf_file::Value::*;
        match self.get(key)? {
            F32(v) => Some(*v as f64),
            F64(v) => Some(*v),
            _ => self.get_u64(key).map(|v| v as f64),
        }
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(|v| v.to_bool().ok())
    }

    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
            .ok_or_else(|| Error::InvalidModel(format!("{}: no general.architecture", self.path.display())))
    }

    /// Whether the tensor is of the MXFP4 type (read by [`GgufFile::mxfp4_part`], not by candle).
    pub fn is_mxfp4(&self, gguf_name: &str) -> bool {
        self.mxfp4.contains(gguf_name)
    }

    pub fn has_tensor(&self, gguf_name: &str) -> bool {
        self.content.tensor_infos.contains_key(gguf_name)
    }

    /// Load one tensor by its GGUF name, still quantized.
    pub fn qtensor(&self, gguf_name: &str, device: &Device) -> Result<QTensor> {
        self.qtensor_part(gguf_name, None, device)
    }

    /// Load one tensor by its GGUF name, still quantized; with `part`, only that index of its first dimension (one
    /// expert's matrix of a stacked `ffn_*_exps` tensor), read in place from the file.
    pub fn qtensor_part(&self, gguf_name: &str, part: Option<usize>, device: &Device) -> Result<QTensor> {
        let info = self
            .content
            .tensor_infos
            .get(gguf_name)
            .ok_or_else(|| Error::InvalidModel(format!("{}: missing tensor `{gguf_name}`", self.path.display())))?;
        if self.mxfp4.contains(gguf_name) {
            return Err(Error::Unsupported(format!(
                "tensor `{gguf_name}` has type MXFP4, which hearth reads as a routed feed-forward's experts only"
            )));
        }
        if !SUPPORTED_DTYPES.contains(&info.ggml_dtype) {
            return Err(Error::Unsupported(format!(
                "tensor `{gguf_name}` has type {:?}; hearth supports {}",
                info.ggml_dtype,
                supported_names()
            )));
        }
        let elems = info.shape.elem_count();
        let block = info.ggml_dtype.block_size();
        if elems % block != 0 {
            return Err(Error::InvalidModel(format!(
                "tensor `{gguf_name}`: {elems} elements is not a multiple of the block size {block}"
            )));
        }
        let size = elems / block * info.ggml_dtype.type_size();
        let dims = info.shape.dims();
        let (skip, size, dims) = match part {
            None => (0, size, dims),
            Some(i) => {
                let n = dims.first().copied().unwrap_or(0);
                if i >= n || dims.len() < 2 || (elems / n) % block != 0 {
                    return Err(Error::InvalidModel(format!(
                        "tensor `{gguf_name}` (shape {dims:?}) has no part {i} of whole blocks"
                    )));
                }
                (i * (size / n), size / n, &dims[1..])
            }
        };
        let start = (self.content.tensor_data_offset as usize)
            .checked_add(info.offset as usize)
            .and_then(|s| s.checked_add(skip))
            .filter(|s| s.checked_add(size).is_some_and(|e| e <= self.mmap.len()))
            .ok_or_else(|| {
                Error::InvalidModel(format!(
                    "tensor `{gguf_name}` ({size} bytes) lies outside the file ({} bytes): truncated download?",
                    self.mmap.len()
                ))
            })?;
        if device.is_cpu() {
            if let Some(t) = self.read_cpu(info.ggml_dtype, start, dims)? {
                return Ok(t);
            }
        }
        let data = &self.mmap[start..start + size];
        let t = candle_core::quantized::ggml_file::qtensor_from_ggml(info.ggml_dtype, data, dims.to_vec(), device)?;
        self.release(start, size);
        Ok(t)
    }

    /// A CPU tensor read from the file straight into its typed block storage (one copy, no mapped pages in this
    /// process: copying out of the map would hold the file's pages and the copy resident at once, which for Gemma
    /// 3's 178 MB embedding table would set the load's peak memory). `None` for a type read through the map instead.
    fn read_cpu(&self, dtype: GgmlDType, start: usize, dims: &[usize]) -> Result<Option<QTensor>> {
        use candle_core::quantized::k_quants as k;
        let elems: usize = dims.iter().product();
        let storage = match dtype {
            GgmlDType::Q4_0 => self.read_blocks::<k::BlockQ4_0>(start, elems)?,
            GgmlDType::Q4_1 => self.read_blocks::<k::BlockQ4_1>(start, elems)?,
            GgmlDType::Q5_0 => self.read_blocks::<k::BlockQ5_0>(start, elems)?,
            GgmlDType::Q5_1 => self.read_blocks::<k::BlockQ5_1>(start, elems)?,
            GgmlDType::Q8_0 => self.read_blocks::<k::BlockQ8_0>(start, elems)?,
            GgmlDType::Q2K => self.read_blocks::<k::BlockQ2K>(start, elems)?,
            GgmlDType::Q3K => self.read_blocks::<k::BlockQ3K>(start, elems)?,
            GgmlDType::Q4K => self.read_blocks::<k::BlockQ4K>(start, elems)?,
            GgmlDType::Q5K => self.read_blocks::<k::BlockQ5K>(start, elems)?,
            GgmlDType::Q6K => self.read_blocks::<k::BlockQ6K>(start, elems)?,
            _ => return Ok(None),
        };
        Ok(Some(QTensor::new(storage, dims.to_vec())?))
    }

    /// `elems / T::BLCK_SIZE` blocks of `T` read from byte `start` of the file (bounds checked by the caller).
    fn read_blocks<T: candle_core::quantized::k_quants::GgmlType + 'static>(
        &self,
        start: usize,
        elems: usize,
    ) -> Result<candle_core::quantized::QStorage> {
        let n = elems / T::BLCK_SIZE;
        let mut blocks: Vec<T> = vec![T::zeros(); n];
        let bytes = std::mem::size_of_val(blocks.as_slice());
        // SAFETY: the block types are plain old data (f16 scales and integer arrays, `#[repr(C)]`, no padding
        // beyond what GGML's layout has, every bit pattern valid), so their storage may be filled from bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(blocks.as_mut_ptr() as *mut u8, bytes) };
        read_at(&self.file, buf, start as u64)
            .map_err(|e| Error::io(format!("reading {} at byte {start}", self.path.display()), e))?;
        Ok(candle_core::quantized::QStorage::Cpu(Box::new(blocks)))
    }

    /// Drop the mapped file pages of bytes `start..start + len` from this process once they are copied: the map
    /// would otherwise hold a second resident copy of every weight until the file is closed (the load's peak
    /// memory would be the file plus its copies). The pages stay in the page cache, so a later read of the same bytes
    /// (a tensor read twice, a neighbour sharing an edge page) costs a page-cache hit, not a disk read.
    fn release(&self, start: usize, len: usize) {
        #[cfg(unix)]
        {
            const PAGE: usize = 4096;
            let lo = start / PAGE * PAGE;
            let hi = (start + len).min(self.mmap.len());
            if hi <= lo {
                return;
            }
            // SAFETY: the map is a read-only private file mapping that nothing borrows across this call
            // (`qtensor` copied the bytes); MADV_DONTNEED on it only evicts pages, which fault back from the file.
            let r = unsafe { self.mmap.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, lo, hi - lo) };
            if let Err(e) = r {
                tracing::debug!("madvise(DONTNEED) on the weights map: {e}");
            }
        }
        #[cfg(not(unix))]
        let _ = (start, len);
    }

    /// Load one tensor by its GGUF name, dequantized to f32.
    pub fn tensor_f32(&self, gguf_name: &str, device: &Device) -> Result<Tensor> {
        Ok(self.qtensor(gguf_name, device)?.dequantize(device)?)
    }

    /// (elements, bytes as stored) over every tensor.
    pub fn sizes(&self) -> (u64, u64) {
        self.content.tensor_infos.iter().fold((0, 0), |(n, b), (name, info)| {
            let elems = info.shape.elem_count() as u64;
            let d = info.ggml_dtype;
            let (block, bytes) = match self.mxfp4.contains(name) {
                true => (32, super::mxfp4::GGML_BLOCK_BYTES),
                false => (d.block_size().max(1), d.type_size()),
            };
            (n + elems, b + elems / block as u64 * bytes as u64)
        })
    }

    /// Count of tensors per type, for `hearth models` and load logs.
    pub fn dtype_summary(&self) -> String {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for (tensor, info) in &self.content.tensor_infos {
            let name = if self.mxfp4.contains(tensor) { "MXFP4".into() } else { format!("{:?}", info.ggml_dtype) };
            match counts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, c)) => *c += 1,
                None => counts.push((name, 1)),
            }
        }
        counts.sort_by_key(|c| std::cmp::Reverse(c.1));
        counts.iter().map(|(n, c)| format!("{n}×{c}")).collect::<Vec<_>>().join(" ")
    }
}

/// Fill `buf` from byte `offset` of `file`.
fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            let n = std::os::windows::fs::FileExt::seek_read(file, &mut buf[done..], offset + done as u64)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            done += n;
        }
        Ok(())
    }
}

fn supported_names() -> String {
    SUPPORTED_DTYPES.iter().map(|d| format!("{d:?}")).collect::<Vec<_>>().join(", ")
}

/// Map a Hugging Face parameter name to its GGUF name (llama.cpp's naming), for the given GGUF architecture.
pub fn hf_to_gguf_name(arch: &str, hf: &str) -> Option<String> {
    match hf {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, param) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    match param {
        "self_attn.sinks" => return Some(format!("blk.{layer}.attn_sinks.weight")),
        // Qwen3.5's DeltaNet constants: llama.cpp keeps -exp(A_log) as ssm_a
        "linear_attn.A_log" => return Some(format!("blk.{layer}.ssm_a")),
        "linear_attn.dt_bias" => return Some(format!("blk.{layer}.ssm_dt.bias")),
        _ => {}
    }
    let (module, suffix) = param.rsplit_once('.')?; // suffix: weight | bias
    let gemma = arch.starts_with("gemma");
    let g = match module {
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "mlp.gate" => "ffn_gate_inp",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm"
            if gemma || arch == "gpt-oss" || arch.starts_with("qwen35") || arch == "qwen3next" =>
        {
            "post_attention_norm"
        }
        "linear_attn.in_proj_qkv" => "attn_qkv",
        "linear_attn.in_proj_z" => "attn_gate",
        "linear_attn.in_proj_a" => "ssm_alpha",
        "linear_attn.in_proj_b" => "ssm_beta",
        "linear_attn.in_proj_ba" => "ssm_ba",
        "linear_attn.out_proj" => "ssm_out",
        "linear_attn.norm" => "ssm_norm",
        "linear_attn.conv1d" => "ssm_conv1d",
        "mlp.shared_expert.gate_proj" => "ffn_gate_shexp",
        "mlp.shared_expert.up_proj" => "ffn_up_shexp",
        "mlp.shared_expert.down_proj" => "ffn_down_shexp",
        "mlp.shared_expert_gate" => "ffn_gate_inp_shexp",
        "mlp.router" => "ffn_gate_inp",
        "post_attention_layernorm" => "ffn_norm",
        "pre_feedforward_layernorm" => "ffn_norm",
        "post_feedforward_layernorm" => "post_ffw_norm",
        _ => return None,
    };
    Some(format!("blk.{layer}.{g}.{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::hf_to_gguf_name;

    #[test]
    fn maps_llama_and_gemma_norms_differently() {
        assert_eq!(
            hf_to_gguf_name("llama", "model.layers.3.post_attention_layernorm.weight").as_deref(),
            Some("blk.3.ffn_norm.weight")
        );
        assert_eq!(
            hf_to_gguf_name("gemma3", "model.layers.3.post_attention_layernorm.weight").as_deref(),
            Some("blk.3.post_attention_norm.weight")
        );
        assert_eq!(
            hf_to_gguf_name("gemma3", "model.layers.0.pre_feedforward_layernorm.weight").as_deref(),
            Some("blk.0.ffn_norm.weight")
        );
        assert_eq!(
            hf_to_gguf_name("qwen2", "model.layers.11.self_attn.q_proj.bias").as_deref(),
            Some("blk.11.attn_q.bias")
        );
        // llama.cpp's Qwen3.5 / Qwen3-Next name the feed-forward's norm as Gemma does, Qwen3-MoE as Llama does
        for (arch, norm) in
            [("qwen35", "post_attention_norm"), ("qwen3next", "post_attention_norm"), ("qwen3moe", "ffn_norm")]
        {
            assert_eq!(
                hf_to_gguf_name(arch, "model.layers.2.post_attention_layernorm.weight").as_deref(),
                Some(format!("blk.2.{norm}.weight").as_str()),
                "{arch}"
            );
        }
        assert_eq!(hf_to_gguf_name("qwen35", "model.layers.0.linear_attn.A_log").as_deref(), Some("blk.0.ssm_a"));
        assert_eq!(hf_to_gguf_name("llama", "lm_head.weight").as_deref(), Some("output.weight"));
        assert_eq!(hf_to_gguf_name("llama", "model.layers.x.mlp.up_proj.weight"), None);
    }
}
