//! Gemma 3's vision side (`SiglipVisionModel` + `Gemma3MultiModalProjector`): the image (from
//! [`crate::vision::gemma3`]) cut into `patch x patch` patches embedded by a linear map (the published Conv2d,
//! stride = kernel) plus a learned position embedding, SigLIP's encoder layers (LayerNorm, full attention with
//! biases, GELU-tanh MLP) and its final LayerNorm; then the projector: the patch grid average-pooled to
//! `mm_tokens_per_image` tokens, Gemma's RMSNorm (`1 + w`) and a projection to the text model's width.

use super::vision_weights::VisionWeights;
use crate::{Error, Result};
use candle_core::{Device, Tensor};
use serde::Deserialize;

/// `vision_config` of a Gemma 3 `config.json` (SigLIP).
#[derive(Clone, Debug, Deserialize)]
pub struct SiglipConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub image_size: usize,
    pub patch_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default = "default_channels")]
    pub num_channels: usize,
}

fn default_eps() -> f64 {
    1e-6
}

fn default_channels() -> usize {
    3
}

/// The tensor Hugging Face names `name` (as published), in f32; an mmproj's projector norm is stored as `1 + w` and
/// read back as `w`.
fn tensor(w: VisionWeights, name: &str, device: &Device) -> Result<Tensor> {
    match w {
        VisionWeights::Hf(hf) => {
            let flat = name.replacen("vision_tower.vision_model.", "vision_tower.", 1);
            let names = [name.to_string(), format!("model.{name}"), format!("model.{flat}"), flat];
            VisionWeights::hf_first(hf, &names, name, device)
        }
        VisionWeights::Mmproj(g) => {
            let mapped = mmproj_name(name)
                .ok_or_else(|| Error::InvalidModel(format!("no mmproj tensor stands for `{name}`")))?;
            let t = VisionWeights::mmproj(g, &mapped, device)?;
            Ok(if mapped == "mm.soft_emb_norm.weight" { (t - 1.0)? } else { t })
        }
    }
}

/// llama.cpp's mmproj name of a Gemma 3 vision tensor (named as published).
fn mmproj_name(hf: &str) -> Option<String> {
    let fixed = match hf {
        "multi_modal_projector.mm_input_projection_weight" => Some("mm.input_projection.weight"),
        "multi_modal_projector.mm_soft_emb_norm.weight" => Some("mm.soft_emb_norm.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.into());
    }
    let rest = hf.strip_prefix("vision_tower.vision_model.")?;
    if let Some(e) = rest.strip_prefix("embeddings.") {
        let (module, suffix) = e.rsplit_once('.')?;
        let g = match module {
            "patch_embedding" => "v.patch_embd",
            "position_embedding" => "v.position_embd",
            _ => return None,
        };
        return Some(format!("{g}.{suffix}"));
    }
    if let Some(s) = rest.strip_prefix("post_layernorm.") {
        return Some(format!("v.post_ln.{s}"));
    }
    let (layer, param) = rest.strip_prefix("encoder.layers.")?.split_once('.')?;
    let (module, suffix) = param.rsplit_once('.')?;
    let g = match module {
        "layer_norm1" => "ln1",
        "layer_norm2" => "ln2",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.out_proj" => "attn_out",
        "mlp.fc1" => "ffn_up",
        "mlp.fc2" => "ffn_down",
        _ => return None,
    };
    Some(format!("v.blk.{layer}.{g}.{suffix}"))
}

struct Linear {
    w: Tensor,
    b: Tensor,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.matmul(&self.w.t()?)?.broadcast_add(&self.b)?)
    }
}

struct LayerNorm {
    w: Tensor,
    b: Tensor,
}

struct Layer {
    ln1: LayerNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    ln2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

/// Queries attended at a time.
const ATTN_CHUNK: usize = 128;

/// The loaded tower and projector (f32, on the model's device).
pub struct Gemma3Vision {
    cfg: SiglipConfig,
    patch: Linear,
    position: Tensor,
    layers: Vec<Layer>,
    post_ln: LayerNorm,
    soft_norm: Tensor,
    projection: Tensor,
    /// Tokens per side after pooling.
    tokens_side: usize,
    eps: f64,
    device: Device,
}

impl Gemma3Vision {
    /// Load from a Hugging Face checkpoint (`vision_tower.vision_model.*` and `multi_modal_projector.*` as
    /// published, or under `model.` as transformers 5 saves them) or a llama.cpp `mmproj` file. `tokens` is
    /// `mm_tokens_per_image`.
    pub fn load(source: VisionWeights, cfg: SiglipConfig, tokens: usize, device: &Device) -> Result<Self> {
        let get = |name: &str| tensor(source, name, device);
        let linear = |name: &str| -> Result<Linear> {
            Ok(Linear { w: get(&format!("{name}.weight"))?, b: get(&format!("{name}.bias"))? })
        };
        let norm = |name: &str| -> Result<LayerNorm> {
            Ok(LayerNorm { w: get(&format!("{name}.weight"))?, b: get(&format!("{name}.bias"))? })
        };
        let side = cfg.image_size.checked_div(cfg.patch_size).unwrap_or(0);
        let tokens_side = (tokens as f64).sqrt().round() as usize;
        if cfg.num_attention_heads == 0
            || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads)
            || side == 0
            || tokens_side == 0
            || tokens_side * tokens_side != tokens
            || !side.is_multiple_of(tokens_side)
        {
            return Err(Error::InvalidModel(format!(
                "Gemma 3 vision config: {} heads over width {}, {}x{} patches pooled to {tokens} tokens (a square \
                 that divides the patch grid)",
                cfg.num_attention_heads, cfg.hidden_size, side, side
            )));
        }
        if let Some(act) = cfg.hidden_act.as_deref().filter(|a| !matches!(*a, "gelu_pytorch_tanh" | "gelu_new")) {
            return Err(Error::Unsupported(format!("a SigLIP tower with hidden_act `{act}` (its MLP is GELU-tanh)")));
        }
        let vm = "vision_tower.vision_model";
        let pw = get(&format!("{vm}.embeddings.patch_embedding.weight"))?;
        let patch_dim = cfg.num_channels * cfg.patch_size * cfg.patch_size;
        let patch = Linear {
            w: pw.reshape((cfg.hidden_size, patch_dim))?,
            b: get(&format!("{vm}.embeddings.patch_embedding.bias"))?,
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("{vm}.encoder.layers.{i}");
            layers.push(Layer {
                ln1: norm(&format!("{p}.layer_norm1"))?,
                q: linear(&format!("{p}.self_attn.q_proj"))?,
                k: linear(&format!("{p}.self_attn.k_proj"))?,
                v: linear(&format!("{p}.self_attn.v_proj"))?,
                out: linear(&format!("{p}.self_attn.out_proj"))?,
                ln2: norm(&format!("{p}.layer_norm2"))?,
                fc1: linear(&format!("{p}.mlp.fc1"))?,
                fc2: linear(&format!("{p}.mlp.fc2"))?,
            });
        }
        Ok(Self {
            position: get(&format!("{vm}.embeddings.position_embedding.weight"))?,
            post_ln: norm(&format!("{vm}.post_layernorm"))?,
            soft_norm: get("multi_modal_projector.mm_soft_emb_norm.weight")?,
            projection: get("multi_modal_projector.mm_input_projection_weight")?,
            patch,
            layers,
            tokens_side,
            eps: cfg.layer_norm_eps,
            device: device.clone(),
            cfg,
        })
    }

    /// One image's pixel values ((3, image_size, image_size), the processor's) to its LLM tokens' embeddings,
    /// (mm_tokens_per_image, text hidden).
    pub fn encode(&self, pixels: &[f32]) -> Result<Tensor> {
        let (c, s, p) = (self.cfg.num_channels, self.cfg.image_size, self.cfg.patch_size);
        let side = s / p;
        if pixels.len() != c * s * s {
            return Err(Error::InvalidRequest(format!(
                "{} pixel values do not fit this vision tower ({c}x{s}x{s})",
                pixels.len()
            )));
        }
        // (C, side, p, side, p) -> (side, side, C, p, p): each patch's values in the conv weight's order
        let x = Tensor::from_slice(pixels, (c, side, p, side, p), &self.device)?
            .permute((1, 3, 0, 2, 4))?
            .contiguous()?
            .reshape((side * side, c * p * p))?;
        let mut h = self.patch.forward(&x)?.broadcast_add(&self.position)?;
        for l in &self.layers {
            h = self.layer(l, &h)?;
        }
        let h = self.layer_norm(&h, &self.post_ln)?;
        // Average-pool the patch grid: (side, side) -> (t, t), each token the mean of a k x k square.
        let (t, k, hid) = (self.tokens_side, side / self.tokens_side, self.cfg.hidden_size);
        let pooled = h.reshape((t, k, t, k, hid))?.sum(3)?.sum(1)?.affine(1.0 / (k * k) as f64, 0.0)?;
        let pooled = pooled.reshape((t * t, hid))?;
        let normed = candle_nn::ops::rms_norm(&pooled, &(self.soft_norm.clone() + 1.0)?, self.eps as f32)?;
        Ok(normed.matmul(&self.projection)?)
    }

    fn layer_norm(&self, x: &Tensor, n: &LayerNorm) -> Result<Tensor> {
        Ok(candle_nn::ops::layer_norm(x, &n.w, &n.b, self.eps as f32)?)
    }

    fn layer(&self, l: &Layer, h: &Tensor) -> Result<Tensor> {
        let n = h.dim(0)?;
        let heads = self.cfg.num_attention_heads;
        let hd = self.cfg.hidden_size / heads;
        let x = self.layer_norm(h, &l.ln1)?;
        let split = |t: Tensor| -> Result<Tensor> { Ok(t.reshape((n, heads, hd))?.transpose(0, 1)?.contiguous()?) };
        let (q, k, v) = (split(l.q.forward(&x)?)?, split(l.k.forward(&x)?)?, split(l.v.forward(&x)?)?);
        let q = (q * (hd as f64).powf(-0.5))?;
        let kt = k.t()?.contiguous()?;
        // Queries in chunks: each chunk's scores (heads x ATTN_CHUNK x n) stay small enough to be reused from the
        // allocator and the caches, where one (heads x n x n) matrix is a GiB at 4,096 patches.
        let mut outs = Vec::with_capacity(n.div_ceil(ATTN_CHUNK));
        for c0 in (0..n).step_by(ATTN_CHUNK) {
            let scores = q.narrow(1, c0, ATTN_CHUNK.min(n - c0))?.matmul(&kt)?;
            outs.push(candle_nn::ops::softmax_last_dim(&scores)?.matmul(&v)?);
        }
        let o = Tensor::cat(&outs, 1)?.transpose(0, 1)?.reshape((n, self.cfg.hidden_size))?;
        let h = (h + l.out.forward(&o)?)?;
        let x = self.layer_norm(&h, &l.ln2)?;
        let m = l.fc2.forward(&l.fc1.forward(&x)?.gelu()?)?;
        Ok((h + m)?)
    }
}
