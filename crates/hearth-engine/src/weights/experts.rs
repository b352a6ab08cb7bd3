//! A routed feed-forward's experts, one at a time, in every layout hearth reads:
//! * Hugging Face, one tensor per expert (Qwen3-MoE): `model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight`;
//! * Hugging Face, stacked (gpt-oss): `model.layers.L.mlp.experts.gate_up_proj` (E, hidden, 2I) with gate and up
//!   interleaved along the last dimension (gate at even indices, up at odd), `down_proj` (E, I, hidden) — both
//!   stored input-major — and their biases `gate_up_proj_bias` (E, 2I), `down_proj_bias` (E, hidden);
//! * GGUF, stacked: index E of `blk.L.ffn_{gate,up,down}_exps.weight` (read in place, still quantized) and of
//!   `blk.L.ffn_{gate,up,down}_exps.bias`.

use super::mxfp4::{Layout, Mxfp4};
use super::{HfWeights, Weights};
use crate::{Error, Result};
use candle_core::quantized::QMatMul;
use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{DType, Device, Tensor};
use std::sync::Arc;

/// `gate_proj`, `up_proj` or `down_proj` as GGUF's `gate`, `up`, `down`.
fn kind(proj: &str) -> Result<&str> {
    proj.strip_suffix("_proj")
        .filter(|k| matches!(*k, "gate" | "up" | "down"))
        .ok_or_else(|| Error::InvalidModel(format!("no expert matrix `{proj}`")))
}

/// One expert of a layer, as the loader asks for it.
#[derive(Clone, Copy)]
pub struct ExpertPart<'a> {
    pub layer: usize,
    pub expert: usize,
    /// `gate_proj`, `up_proj` or `down_proj`.
    pub proj: &'a str,
}

impl Weights {
    /// The expert's matrix, as (out, in), kept quantized where the file is.
    pub fn expert_matrix(&self, at: ExpertPart, dtype: DType, device: &Device) -> Result<QMatMul> {
        let (ExpertPart { layer, expert, proj }, kind) = (at, kind(at.proj)?);
        match self {
            Weights::Gguf(g) => {
                let name = format!("blk.{layer}.ffn_{kind}_exps.weight");
                if let Some((blocks, rows, cols)) = g.mxfp4_part(&name, expert)? {
                    let m = Mxfp4 { blocks, scales: &[], groups: cols / 32, layout: Layout::Ggml };
                    return mxfp4_matrix(&m, &(0..rows).collect::<Vec<_>>(), dtype, device);
                }
                super::gguf_matmul(Arc::new(g.qtensor_part(&name, Some(expert), device)?))
            }
            Weights::Hf(h) => {
                let name = format!("model.layers.{layer}.mlp.experts.{expert}.{proj}.weight");
                if h.contains(&name) {
                    return Ok(QMatMul::Tensor(h.tensor(&name, dtype, device)?));
                }
                if let Some(w) = hf_mxfp4(h, at, kind, dtype, device)? {
                    return Ok(w);
                }
                Ok(QMatMul::Tensor(hf_stacked(h, at, kind, false, dtype, device)?.contiguous()?))
            }
        }
    }

    /// The expert's bias (models whose experts have biases: gpt-oss).
    pub fn expert_bias(&self, at: ExpertPart, dtype: DType, device: &Device) -> Result<Tensor> {
        let kind = kind(at.proj)?;
        match self {
            Weights::Gguf(g) => {
                // this expert's row alone (not the whole stack once per expert)
                let name = format!("blk.{}.ffn_{kind}_exps.bias", at.layer);
                Ok(g.qtensor_part(&name, Some(at.expert), device)?.dequantize(device)?.to_dtype(dtype)?)
            }
            Weights::Hf(h) => Ok(hf_stacked(h, at, kind, true, dtype, device)?.squeeze(1)?),
        }
    }
}

/// The expert's matrix from gpt-oss's published MXFP4 tensors (`{gate_up,down}_proj_blocks` (E, out, in/32, 16) and
/// `_scales` (E, out, in/32), rows = outputs, gate and up interleaved): Q8_0 on the CPU (exact), else dequantized
/// to `dtype`. None where the checkpoint has no such tensors.
fn hf_mxfp4(h: &HfWeights, at: ExpertPart, kind: &str, dtype: DType, device: &Device) -> Result<Option<QMatMul>> {
    let stacked = if kind == "down" { "down_proj" } else { "gate_up_proj" };
    let base = format!("model.layers.{}.mlp.experts.{stacked}", at.layer);
    if !h.contains(&format!("{base}_blocks")) {
        return Ok(None);
    }
    let (bt, bshape, blocks) = h.raw_part(&format!("{base}_blocks"), at.expert)?;
    let (st, sshape, scales) = h.raw_part(&format!("{base}_scales"), at.expert)?;
    let u8_ = safetensors::Dtype::U8;
    let (out, groups) = match (bshape.as_slice(), sshape.as_slice()) {
        (&[o, g, 16], &[so, sg]) if bt == u8_ && st == u8_ && (so, sg) == (o, g) => (o, g),
        _ => {
            return Err(Error::InvalidModel(format!(
                "{base}: MXFP4 blocks {bt:?} {bshape:?} and scales {st:?} {sshape:?} per expert; expected u8 \
                 (out, in/32, 16) and (out, in/32)"
            )))
        }
    };
    let rows: Vec<usize> = match kind {
        "down" => (0..out).collect(),
        _ if out % 2 != 0 => return Err(Error::InvalidModel(format!("{base}: an interleaved gate|up of {out} rows"))),
        _ => (usize::from(kind == "up")..out).step_by(2).collect(),
    };
    Ok(Some(mxfp4_matrix(&Mxfp4 { blocks, scales, groups, layout: Layout::Hf }, &rows, dtype, device)?))
}

/// Rows `rows` of an MXFP4 matrix as a weight: Q5_0 on the CPU (the same values; Q8_0 with `HEARTH_MXFP4_Q5=0`),
/// else dequantized to `dtype`.
fn mxfp4_matrix(m: &Mxfp4, rows: &[usize], dtype: DType, device: &Device) -> Result<QMatMul> {
    let shape = (rows.len(), m.groups * 32);
    if device.is_cpu() {
        let held = match crate::levers::get().mxfp4_q5 {
            true => m.to_q5_0(rows).map(|b| (b, GgmlDType::Q5_0)),
            false => m.to_q8_0(rows).map(|b| (b, GgmlDType::Q8_0)),
        };
        if let Some((bytes, t)) = held {
            let storage = QStorage::from_data(std::borrow::Cow::Owned(bytes), device, t)?;
            return Ok(QMatMul::from_arc(Arc::new(QTensor::new(storage, shape)?))?);
        }
    }
    Ok(QMatMul::Tensor(Tensor::from_vec(m.dequantize(rows), shape, device)?.to_dtype(dtype)?))
}

/// The expert's part of gpt-oss's stacked tensors, rows = outputs: the matrix (out, in), or the bias (out, 1);
/// gate or up taken from their interleaved rows.
fn hf_stacked(h: &HfWeights, at: ExpertPart, kind: &str, bias: bool, dtype: DType, device: &Device) -> Result<Tensor> {
    let stacked = if kind == "down" { "down_proj" } else { "gate_up_proj" };
    let name = format!("model.layers.{}.mlp.experts.{stacked}{}", at.layer, if bias { "_bias" } else { "" });
    let part = h.tensor_part(&name, at.expert, dtype, device)?;
    // a matrix is stored (in, out)
    let rows = if bias { part.unsqueeze(1)? } else { part.t()? };
    match kind {
        "down" => Ok(rows),
        _ => deinterleave(&rows, kind == "up"),
    }
}

/// The even (`odd` false) or odd rows of `w` (2n, ..): gpt-oss's gate and up, interleaved.
fn deinterleave(w: &Tensor, odd: bool) -> Result<Tensor> {
    let (rows, cols) = w.dims2()?;
    if rows % 2 != 0 {
        return Err(Error::InvalidModel(format!("an interleaved gate|up of {rows} rows (odd)")));
    }
    Ok(w.contiguous()?.reshape((rows / 2, 2, cols))?.narrow(1, usize::from(odd), 1)?.squeeze(1)?.contiguous()?)
}
