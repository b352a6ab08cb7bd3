//! BERT encoder (Hugging Face `BertModel`), as sentence-transformers models such as all-MiniLM-L6-v2 use it:
//! absolute position embeddings, token type 0 for every token, bidirectional attention with padded keys masked,
//! post-LayerNorm residual blocks, GELU (erf) feed-forward. It returns the last hidden states; pooling is the
//! embedder's. The pooler head (`pooler.dense`) is not loaded: sentence-transformers does not use it.

use super::layers::{LayerNorm, Linear};
use super::Encoder;
use crate::weights::Weights;
use crate::work_pool::KernelPool;
use crate::{Error, Result};
use candle_core::{DType, Device, Tensor};
use serde::Deserialize;
use std::cell::Cell;

/// `config.json` of a BERT checkpoint (the fields the encoder reads).
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default = "default_position_type")]
    pub position_embedding_type: String,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_position_type() -> String {
    "absolute".into()
}

impl BertConfig {
    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: Self = serde_json::from_str(text).map_err(|e| Error::InvalidModel(format!("config.json: {e}")))?;
        cfg.validate()
    }

    fn validate(self) -> Result<Self> {
        if self.model_type != "bert" {
            return Err(Error::Unsupported(format!(
                "embedding model type `{}`; hearth's encoder is BERT (`model_type: bert`)",
                self.model_type
            )));
        }
        if self.position_embedding_type != "absolute" {
            return Err(Error::Unsupported(format!(
                "BERT position_embedding_type `{}`; only `absolute` is implemented",
                self.position_embedding_type
            )));
        }
        if self.num_attention_heads == 0 || !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(Error::InvalidModel(format!(
                "hidden_size {} is not a multiple of {} attention heads",
                self.hidden_size, self.num_attention_heads
            )));
        }
        if self.num_hidden_layers == 0 || self.vocab_size == 0 || self.max_position_embeddings == 0 {
            return Err(Error::InvalidModel(
                "num_hidden_layers, vocab_size and max_position_embeddings must be non-zero".into(),
            ));
        }
        if self.type_vocab_size == 0 {
            return Err(Error::InvalidModel("type_vocab_size is 0: there is no token type 0 to embed".into()));
        }
        self.activation().map(|_| self)
    }

    fn activation(&self) -> Result<Act> {
        match self.hidden_act.as_str() {
            "gelu" => Ok(Act::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" => Ok(Act::GeluTanh),
            "relu" => Ok(Act::Relu),
            other => Err(Error::Unsupported(format!("BERT hidden_act `{other}`; supported: gelu, gelu_new, relu"))),
        }
    }

    fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}

#[derive(Debug, Clone, Copy)]
enum Act {
    GeluErf,
    GeluTanh,
    Relu,
}

/// Where the encoder's tensors are: `BertModel` checkpoints name them `embeddings.*`, `BertFor*` ones
/// `bert.embeddings.*`.
struct Names<'a> {
    weights: &'a Weights,
    prefix: &'static str,
    dtype: DType,
    device: &'a Device,
    /// The pool the encoder's CPU kernels run on, as the weights loaded so far decide.
    pool: Cell<KernelPool>,
}

impl Names<'_> {
    fn linear(&self, name: &str) -> Result<Linear> {
        let name = format!("{}{name}", self.prefix);
        let w = self.weights.matrix(&format!("{name}.weight"), self.dtype, self.device)?;
        let b = self.weights.vector(&format!("{name}.bias"), self.dtype, self.device)?;
        crate::cpu_matmul::note_weight(&self.pool, &w);
        Ok(Linear::new(w, Some(b)))
    }

    fn layer_norm(&self, name: &str, eps: f64) -> Result<LayerNorm> {
        LayerNorm::load(self.weights, &format!("{}{name}", self.prefix), eps, self.device)
    }

    fn table(&self, name: &str) -> Result<Tensor> {
        self.weights.vector(&format!("{}{name}", self.prefix), self.dtype, self.device)
    }
}

struct Embeddings {
    word: Tensor,
    position: Tensor,
    /// Row 0 of the token type table: every token is type 0.
    token_type0: Tensor,
    norm: LayerNorm,
}

struct SelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
    output: Linear,
    norm: LayerNorm,
    heads: usize,
    head_dim: usize,
}

struct FeedForward {
    intermediate: Linear,
    output: Linear,
    norm: LayerNorm,
    act: Act,
}

struct Layer {
    attention: SelfAttention,
    ffn: FeedForward,
}

pub struct Bert {
    cfg: BertConfig,
    embeddings: Embeddings,
    layers: Vec<Layer>,
    dtype: DType,
    /// The pool its CPU kernels run on (decided by its weights at load).
    kernel_pool: KernelPool,
}

impl Bert {
    /// Build the encoder; `dtype` is the activation dtype (f32 on the CPU).
    pub fn load(weights: &Weights, cfg: &BertConfig, device: &Device, dtype: DType) -> Result<Self> {
        let prefix = if weights.contains("bert.embeddings.word_embeddings.weight") { "bert." } else { "" };
        let n = Names { weights, prefix, dtype, device, pool: Cell::new(KernelPool::default()) };
        let eps = cfg.layer_norm_eps;
        let word = n.table("embeddings.word_embeddings.weight")?;
        let position = n.table("embeddings.position_embeddings.weight")?;
        let token_type0 = n.table("embeddings.token_type_embeddings.weight")?.get(0)?;
        check_rows("word embeddings", &word, cfg.vocab_size, cfg.hidden_size)?;
        check_rows("position embeddings", &position, cfg.max_position_embeddings, cfg.hidden_size)?;
        let embeddings = Embeddings { word, position, token_type0, norm: n.layer_norm("embeddings.LayerNorm", eps)? };
        let act = cfg.activation()?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let p = format!("encoder.layer.{i}");
                Ok(Layer {
                    attention: SelfAttention {
                        query: n.linear(&format!("{p}.attention.self.query"))?,
                        key: n.linear(&format!("{p}.attention.self.key"))?,
                        value: n.linear(&format!("{p}.attention.self.value"))?,
                        output: n.linear(&format!("{p}.attention.output.dense"))?,
                        norm: n.layer_norm(&format!("{p}.attention.output.LayerNorm"), eps)?,
                        heads: cfg.num_attention_heads,
                        head_dim: cfg.head_dim(),
                    },
                    ffn: FeedForward {
                        intermediate: n.linear(&format!("{p}.intermediate.dense"))?,
                        output: n.linear(&format!("{p}.output.dense"))?,
                        norm: n.layer_norm(&format!("{p}.output.LayerNorm"), eps)?,
                        act,
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { cfg: cfg.clone(), embeddings, layers, dtype, kernel_pool: n.pool.get() })
    }
}

/// A table must have at least `rows` rows of width `width`.
fn check_rows(what: &str, t: &Tensor, rows: usize, width: usize) -> Result<()> {
    let (r, w) = t.dims2()?;
    if r < rows || w != width {
        return Err(Error::InvalidModel(format!("{what} are {r}x{w}; the config needs at least {rows}x{width}")));
    }
    Ok(())
}

impl Embeddings {
    /// ids: (B, L) -> (B*L, hidden): word + position + token type 0, normalized.
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, l) = ids.dims2()?;
        let hidden = self.word.dim(1)?;
        let words = self.word.index_select(&ids.flatten_all()?, 0)?.reshape((b, l, hidden))?;
        // Right padding: every row's positions are 0..L.
        let positions = self.position.narrow(0, 0, l)?;
        let x = words.broadcast_add(&positions)?.broadcast_add(&self.token_type0)?;
        self.norm.forward(&x.reshape((b * l, hidden))?)
    }
}

impl SelfAttention {
    /// x: (B*L, hidden); mask_bias: (B, 1, 1, L) f32, 0 for real keys and a large negative for padding.
    fn forward(&self, x: &Tensor, b: usize, l: usize, mask_bias: &Tensor) -> Result<Tensor> {
        // 1. project, (B*L, hidden) -> (B, heads, L, head_dim); attention math in f32
        let heads = |t: Tensor| -> Result<Tensor> {
            let t = t.reshape((b, l, self.heads, self.head_dim))?;
            Ok(t.transpose(1, 2)?.contiguous()?.to_dtype(DType::F32)?)
        };
        let q = heads(self.query.forward(x)?)?;
        let k = heads(self.key.forward(x)?)?;
        let v = heads(self.value.forward(x)?)?;
        // 2. scores over every real key of the row, both directions
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let scores = (q.matmul(&k.t()?.contiguous()?)? * scale)?.broadcast_add(mask_bias)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        // 3. weighted values, heads merged back: (B*L, hidden)
        let ctx = probs.matmul(&v)?.transpose(1, 2)?.contiguous()?.reshape((b * l, self.heads * self.head_dim))?;
        let out = self.output.forward(&ctx.to_dtype(x.dtype())?)?;
        // 4. residual, then LayerNorm (post-norm)
        self.norm.forward(&(x + out)?)
    }
}

impl FeedForward {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.intermediate.forward(x)?;
        let h = match self.act {
            Act::GeluErf => h.gelu_erf()?,
            Act::GeluTanh => h.gelu()?,
            Act::Relu => h.relu()?,
        };
        let out = self.output.forward(&h)?;
        self.norm.forward(&(x + out)?)
    }
}

impl Encoder for Bert {
    fn hidden_size(&self) -> usize {
        self.cfg.hidden_size
    }

    fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }

    fn max_positions(&self) -> usize {
        self.cfg.max_position_embeddings
    }

    fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, l) = ids.dims2()?;
        if l > self.cfg.max_position_embeddings {
            return Err(Error::InvalidRequest(format!(
                "a batch of {l} positions exceeds the model's {} position embeddings",
                self.cfg.max_position_embeddings
            )));
        }
        // 0 for real keys, the most negative f32 for padding (as transformers' extended attention mask).
        let mask_bias = ((mask.to_dtype(DType::F32)?.affine(1.0, -1.0)? * f32::MAX as f64)?).reshape((b, 1, 1, l))?;
        self.kernel_pool.run(|| {
            let mut x = self.embeddings.forward(ids)?.to_dtype(self.dtype)?;
            for layer in &self.layers {
                x = layer.attention.forward(&x, b, l, &mask_bias)?;
                x = layer.ffn.forward(&x)?;
            }
            Ok(x.reshape((b, l, self.cfg.hidden_size))?)
        })
    }
}
