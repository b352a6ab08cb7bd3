//! Qwen2.5-VL's vision tower (`Qwen2_5_VisionTransformerPretrainedModel`): patches (from
//! [`crate::vision::qwen2_vl`]) embedded by a linear map (the published Conv3d, stride = kernel), blocks of
//! RMSNorm + attention with 2D rotary positions + SwiGLU MLP, where most blocks attend within windows of
//! `window_size` pixels and the blocks in `fullatt_block_indexes` over the whole image, then the merger: each
//! `merge x merge` group of patches (adjacent in the patch order) normalized, concatenated and mapped by a GELU
//! MLP to one LLM token. The window reordering is undone at the end, so the output is in the processor's order.

use super::vision_weights::VisionWeights;
use crate::{Error, Result};
use candle_core::{Device, Tensor, D};
use serde::Deserialize;

/// `vision_config` of a Qwen2.5-VL `config.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct VisionConfig {
    pub depth: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_heads: usize,
    #[serde(default = "default_in_channels")]
    pub in_channels: usize,
    pub patch_size: usize,
    pub spatial_merge_size: usize,
    pub temporal_patch_size: usize,
    pub window_size: usize,
    pub out_hidden_size: usize,
    #[serde(default)]
    pub fullatt_block_indexes: Vec<usize>,
    #[serde(default)]
    pub hidden_act: Option<String>,
}

fn default_in_channels() -> usize {
    3
}

/// The tensor Hugging Face names `visual.{name}`, in f32 (an mmproj's split q/k/v and its patch embedding split
/// into two frames are joined back).
fn tensor(w: VisionWeights, name: &str, device: &Device) -> Result<Tensor> {
    let g = match w {
        VisionWeights::Hf(hf) => {
            let names = [format!("visual.{name}"), format!("model.visual.{name}")];
            return VisionWeights::hf_first(hf, &names, &format!("visual.{name}"), device);
        }
        VisionWeights::Mmproj(g) => g,
    };
    let get = |n: &str| VisionWeights::mmproj(g, n, device);
    if name == "patch_embed.proj.weight" {
        let frames = [get("v.patch_embd.weight")?, get("v.patch_embd.weight.1")?];
        return Ok(Tensor::stack(&frames, 2)?);
    }
    if let Some((block, suffix)) = name.strip_prefix("blocks.").and_then(|r| r.split_once(".attn.qkv.")) {
        let [q, k, v] = ["q", "k", "v"].map(|p| get(&format!("v.blk.{block}.attn_{p}.{suffix}")));
        return Ok(Tensor::cat(&[q?, k?, v?], 0)?);
    }
    let mapped =
        mmproj_name(name).ok_or_else(|| Error::InvalidModel(format!("no mmproj tensor stands for `visual.{name}`")))?;
    get(&mapped)
}

/// llama.cpp's mmproj name of a Qwen2.5-VL tower tensor (Hugging Face's name under `visual.`), but for the
/// fused q/k/v and the patch embedding, which are split there.
fn mmproj_name(hf: &str) -> Option<String> {
    if hf == "merger.ln_q.weight" {
        return Some("v.post_ln.weight".into());
    }
    if let Some(rest) = hf.strip_prefix("merger.mlp.") {
        return Some(format!("mm.{rest}"));
    }
    let (block, param) = hf.strip_prefix("blocks.")?.split_once('.')?;
    let (module, suffix) = param.rsplit_once('.')?;
    let g = match module {
        "norm1" => "ln1",
        "norm2" => "ln2",
        "attn.proj" => "attn_out",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("v.blk.{block}.{g}.{suffix}"))
}

struct Linear {
    w: Tensor,
    b: Option<Tensor>,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = x.matmul(&self.w.t()?)?;
        Ok(match &self.b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

struct Block {
    norm1: Tensor,
    norm2: Tensor,
    qkv: Linear,
    proj: Linear,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// The loaded tower (f32, on the CPU or the model's device).
pub struct VisionTower {
    cfg: VisionConfig,
    patch_embed: Linear,
    blocks: Vec<Block>,
    ln_q: Tensor,
    merger_fc1: Linear,
    merger_fc2: Linear,
    /// (head_dim / 4) inverse frequencies of the 2D rope, theta 10 000.
    inv_freq: Vec<f32>,
    device: Device,
}

const EPS: f64 = 1e-6;

impl VisionTower {
    /// Load from a Hugging Face checkpoint (`visual.*` as published, `model.visual.*` as transformers 5 saves) or
    /// a llama.cpp `mmproj` GGUF.
    pub fn load(source: VisionWeights, cfg: VisionConfig, device: &Device) -> Result<Self> {
        let get = |name: &str| tensor(source, name, device);
        let linear = |name: &str, bias: bool| -> Result<Linear> {
            Ok(Linear {
                w: get(&format!("{name}.weight"))?,
                b: if bias { Some(get(&format!("{name}.bias"))?) } else { None },
            })
        };
        if cfg.num_heads == 0
            || !cfg.hidden_size.is_multiple_of(cfg.num_heads)
            || !(cfg.hidden_size / cfg.num_heads).is_multiple_of(4)
            || cfg.patch_size == 0
            || cfg.spatial_merge_size == 0
        {
            return Err(Error::InvalidModel(format!(
                "vision config: hidden size {} over {} heads needs a head size that is a multiple of 4, and patch \
                 size {} and merge size {} must be non-zero",
                cfg.hidden_size, cfg.num_heads, cfg.patch_size, cfg.spatial_merge_size
            )));
        }
        if let Some(act) = cfg.hidden_act.as_deref().filter(|a| *a != "silu") {
            return Err(Error::Unsupported(format!(
                "a Qwen2.5-VL vision tower with hidden_act `{act}` (its MLP is SiLU)"
            )));
        }
        let patch_dim = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size;
        let pw = get("patch_embed.proj.weight")?;
        let patch_embed = Linear { w: pw.reshape((cfg.hidden_size, patch_dim))?, b: None };
        let mut blocks = Vec::with_capacity(cfg.depth);
        for i in 0..cfg.depth {
            let p = format!("blocks.{i}");
            blocks.push(Block {
                norm1: get(&format!("{p}.norm1.weight"))?,
                norm2: get(&format!("{p}.norm2.weight"))?,
                qkv: linear(&format!("{p}.attn.qkv"), true)?,
                proj: linear(&format!("{p}.attn.proj"), true)?,
                gate: linear(&format!("{p}.mlp.gate_proj"), true)?,
                up: linear(&format!("{p}.mlp.up_proj"), true)?,
                down: linear(&format!("{p}.mlp.down_proj"), true)?,
            });
        }
        let head_dim = cfg.hidden_size / cfg.num_heads;
        let spatial = head_dim / 2;
        let inv_freq = (0..spatial).step_by(2).map(|i| 1.0 / 10000f64.powf(i as f64 / spatial as f64) as f32).collect();
        Ok(Self {
            ln_q: get("merger.ln_q.weight")?,
            merger_fc1: linear("merger.mlp.0", true)?,
            merger_fc2: linear("merger.mlp.2", true)?,
            patch_embed,
            blocks,
            inv_freq,
            device: device.clone(),
            cfg,
        })
    }

    pub fn config(&self) -> &VisionConfig {
        &self.cfg
    }

    /// One image's patches (grid_h * grid_w rows of the processor's values) to its LLM tokens' embeddings,
    /// (grid_h * grid_w / merge^2, out_hidden).
    pub fn encode(&self, patches: &[f32], grid: [usize; 3]) -> Result<Tensor> {
        let [t, gh, gw] = grid;
        let m = self.cfg.spatial_merge_size;
        let n = t * gh * gw;
        let patch_dim = self.patch_embed.w.dim(1)?;
        if t != 1 || gh % m != 0 || gw % m != 0 || patches.len() != n * patch_dim {
            return Err(Error::InvalidRequest(format!(
                "image patches of grid {grid:?} do not fit this vision tower ({patch_dim} values a patch, merge {m})"
            )));
        }
        let x = Tensor::from_slice(patches, (n, patch_dim), &self.device)?;
        let h = self.patch_embed.forward(&x)?;
        let (order, windows) = window_order(gh / m, gw / m, self.cfg.window_size / m / self.cfg.patch_size);
        let unit = m * m;
        // Token i of the windowed order is patch perm[i] of the processor's order.
        let perm: Vec<u32> = order.iter().flat_map(|&g| (0..unit).map(move |k| (g * unit + k) as u32)).collect();
        let perm_t = Tensor::from_vec(perm.clone(), n, &self.device)?;
        let mut h = h.index_select(&perm_t, 0)?;
        let (cos, sin) = self.rope_tables(gw, &perm)?;
        let full = [0, n];
        let windowed: Vec<usize> = windows.iter().map(|&w| w * unit).collect();
        for (i, b) in self.blocks.iter().enumerate() {
            let bounds = if self.cfg.fullatt_block_indexes.contains(&i) { &full[..] } else { &windowed[..] };
            h = self.block(b, &h, &cos, &sin, bounds)?;
        }
        let x = candle_nn::ops::rms_norm(&h, &self.ln_q, EPS as f32)?;
        let x = x.reshape((n / unit, unit * self.cfg.hidden_size))?;
        let x = self.merger_fc2.forward(&self.merger_fc1.forward(&x)?.gelu_erf()?)?;
        // Undo the window order: output row g is merged group g of the processor's order.
        let mut inverse = vec![0u32; order.len()];
        for (i, &g) in order.iter().enumerate() {
            inverse[g] = i as u32;
        }
        Ok(x.index_select(&Tensor::from_vec(inverse, order.len(), &self.device)?, 0)?)
    }

    /// cos and sin (n, head_dim) of each token (in the windowed order `perm`): its patch row turns the first
    /// quarter of the frequencies, its column the second, and the halves repeat (rotate_half).
    fn rope_tables(&self, gw: usize, perm: &[u32]) -> Result<(Tensor, Tensor)> {
        let m = self.cfg.spatial_merge_size;
        let q = self.inv_freq.len();
        let n = perm.len();
        let (mut cos, mut sin) = (Vec::with_capacity(n * 4 * q), Vec::with_capacity(n * 4 * q));
        for &p in perm {
            // Patch p of the processor's order: merge block (p / m^2), cell (p % m^2).
            let (blk, cell) = (p as usize / (m * m), p as usize % (m * m));
            let (by, bx) = (blk / (gw / m), blk % (gw / m));
            let (row, col) = (by * m + cell / m, bx * m + cell % m);
            let angles: Vec<f32> = (0..2 * q)
                .map(|j| if j < q { row as f32 * self.inv_freq[j] } else { col as f32 * self.inv_freq[j - q] })
                .collect();
            for _ in 0..2 {
                cos.extend(angles.iter().map(|a| a.cos()));
                sin.extend(angles.iter().map(|a| a.sin()));
            }
        }
        Ok((Tensor::from_vec(cos, (n, 4 * q), &self.device)?, Tensor::from_vec(sin, (n, 4 * q), &self.device)?))
    }

    fn block(&self, b: &Block, h: &Tensor, cos: &Tensor, sin: &Tensor, bounds: &[usize]) -> Result<Tensor> {
        let n = h.dim(0)?;
        let heads = self.cfg.num_heads;
        let hd = self.cfg.hidden_size / heads;
        let x = candle_nn::ops::rms_norm(h, &b.norm1, EPS as f32)?;
        let qkv = b.qkv.forward(&x)?.reshape((n, 3, heads, hd))?;
        let rot = |t: Tensor| -> Result<Tensor> {
            let (x1, x2) = (t.narrow(D::Minus1, 0, hd / 2)?, t.narrow(D::Minus1, hd / 2, hd / 2)?);
            let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
            Ok((t.broadcast_mul(&cos.unsqueeze(1)?)? + rotated.broadcast_mul(&sin.unsqueeze(1)?)?)?)
        };
        let q = rot(qkv.get_on_dim(1, 0)?)?.transpose(0, 1)?.contiguous()?; // (heads, n, hd)
        let k = rot(qkv.get_on_dim(1, 1)?)?.transpose(0, 1)?.contiguous()?;
        let v = qkv.get_on_dim(1, 2)?.transpose(0, 1)?.contiguous()?;
        let scale = (hd as f64).powf(-0.5);
        let mut outs = Vec::with_capacity(bounds.len());
        for w in bounds.windows(2) {
            let (s, len) = (w[0], w[1] - w[0]);
            if len == 0 {
                continue;
            }
            let (qs, ks, vs) = (q.narrow(1, s, len)?, k.narrow(1, s, len)?, v.narrow(1, s, len)?);
            let att = (qs.matmul(&ks.t()?)? * scale)?;
            let att = candle_nn::ops::softmax_last_dim(&att)?;
            outs.push(att.matmul(&vs)?);
        }
        let o = Tensor::cat(&outs, 1)?.transpose(0, 1)?.reshape((n, self.cfg.hidden_size))?;
        let h = (h + b.proj.forward(&o)?)?;
        let x = candle_nn::ops::rms_norm(&h, &b.norm2, EPS as f32)?;
        let mlp = b.down.forward(&(b.gate.forward(&x)?.silu()? * b.up.forward(&x)?)?)?;
        Ok((h + mlp)?)
    }
}

/// transformers' `get_vision_window_index` for one image of `lh x lw` merged groups and windows of `win x win`
/// groups: the groups in window order, and the window boundaries in groups (from 0, duplicates removed).
pub fn window_order(lh: usize, lw: usize, win: usize) -> (Vec<usize>, Vec<usize>) {
    let win = win.max(1);
    let (wh, ww) = (lh.div_ceil(win), lw.div_ceil(win));
    let mut order = Vec::with_capacity(lh * lw);
    let mut bounds = vec![0usize];
    for wy in 0..wh {
        for wx in 0..ww {
            for y in wy * win..((wy + 1) * win).min(lh) {
                for x in wx * win..((wx + 1) * win).min(lw) {
                    order.push(y * lw + x);
                }
            }
            if bounds.last() != Some(&order.len()) {
                bounds.push(order.len());
            }
        }
    }
    (order, bounds)
}
