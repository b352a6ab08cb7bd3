//! The pool a model's CPU kernels run on is the model's own: decided by its weights when it loads, in force while
//! its forward pass runs. Loading a model some of whose weights decode with candle's kernels (Q4_0 here) puts that
//! model's kernels on candle's pool and leaves every other model (a model pool's next model, the embedder) on
//! hearth's. The models are tiny Llama GGUF files written by the test.

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use hearth_engine::attention::{AttnParams, BatchContext, ContiguousKv, KvStore};
use hearth_engine::models::{load_model, LoadOptions, Model};
use hearth_engine::weights::{GgufFile, ModelConfig, Weights};
use hearth_engine::work_pool::KernelPool;
use std::path::Path;

const WIDTH: usize = 64;
const VOCAB: usize = 64;

/// A one-layer Llama whose matrices are all of `dtype`, written to `path`.
fn write_tiny_llama(path: &Path, dtype: GgmlDType) {
    let dev = Device::Cpu;
    let matrix = |seed: f64| {
        let t = Tensor::arange(0f32, (WIDTH * WIDTH) as f32, &dev).unwrap().reshape((WIDTH, WIDTH)).unwrap();
        let t = ((t * (0.37 * seed)).unwrap().sin().unwrap() * 0.1).unwrap();
        QTensor::quantize(&t, dtype).unwrap()
    };
    let norm = || QTensor::quantize(&Tensor::ones(WIDTH, DType::F32, &dev).unwrap(), GgmlDType::F32).unwrap();
    let names = [
        "token_embd.weight",
        "blk.0.attn_q.weight",
        "blk.0.attn_k.weight",
        "blk.0.attn_v.weight",
        "blk.0.attn_output.weight",
        "blk.0.ffn_gate.weight",
        "blk.0.ffn_up.weight",
        "blk.0.ffn_down.weight",
        "output.weight",
    ];
    let mut tensors: Vec<(String, QTensor)> =
        names.iter().enumerate().map(|(i, n)| (n.to_string(), matrix(i as f64 + 1.0))).collect();
    for n in ["blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"] {
        tensors.push((n.to_string(), norm()));
    }
    let u32s = [
        ("llama.embedding_length", WIDTH as u32),
        ("llama.feed_forward_length", WIDTH as u32),
        ("llama.attention.head_count", 2),
        ("llama.attention.head_count_kv", 2),
        ("llama.block_count", 1),
        ("llama.vocab_size", VOCAB as u32),
        ("llama.context_length", 64),
    ];
    let mut values: Vec<(&str, gguf_file::Value)> = u32s.iter().map(|&(k, v)| (k, gguf_file::Value::U32(v))).collect();
    values.push(("general.architecture", gguf_file::Value::String("llama".into())));
    let metadata: Vec<(&str, &gguf_file::Value)> = values.iter().map(|(k, v)| (*k, v)).collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut file = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut file, &metadata, &refs).unwrap();
}

fn load(dir: &Path, dtype: GgmlDType) -> Box<dyn Model> {
    let path = dir.join(format!("tiny-{dtype:?}.gguf"));
    write_tiny_llama(&path, dtype);
    let cfg = ModelConfig::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    let weights = Weights::Gguf(GgufFile::open(&path).unwrap());
    load_model(&weights, &cfg, &Device::Cpu, &LoadOptions::default()).unwrap()
}

/// A contiguous store that records the kernel pool in force whenever the model attends.
struct Probe {
    kv: ContiguousKv,
    seen: Vec<KernelPool>,
}

impl KvStore for Probe {
    fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        ctx: &BatchContext,
        p: &AttnParams,
    ) -> hearth_engine::Result<Tensor> {
        self.seen.push(KernelPool::current());
        self.kv.attend(layer, q, k, v, ctx, p)
    }
}

/// The model's last logits for a short prompt, and the pools in force while it attended.
fn run(model: &dyn Model) -> (Vec<f32>, Vec<KernelPool>) {
    let tokens = [1u32, 5, 9, 2];
    let ctx = BatchContext::new(&[(0, 0, tokens.len())], false, &Device::Cpu).unwrap();
    let mut probe = Probe { kv: ContiguousKv::new(1, tokens.len()), seen: Vec::new() };
    let t = Tensor::new(&tokens[..], &Device::Cpu).unwrap();
    let logits = model.forward(&t, &ctx, &mut probe).unwrap();
    (logits.flatten_all().unwrap().to_vec1::<f32>().unwrap(), probe.seen)
}

#[test]
fn a_model_that_needs_candle_decodes_leaves_other_models_on_hearths_pool() {
    let dir = tempfile::tempdir().unwrap();
    let hearth = load(dir.path(), GgmlDType::Q8_0);
    assert_eq!(hearth.kernel_pool(), KernelPool::Hearth);
    let (before, seen) = run(hearth.as_ref());
    assert_eq!(seen, [KernelPool::Hearth]);

    let candle = load(dir.path(), GgmlDType::Q4_0);
    assert_eq!(candle.kernel_pool(), KernelPool::Candle);
    let (_, seen) = run(candle.as_ref());
    assert_eq!(seen, [KernelPool::Candle]);

    // The first model keeps its choice, and computes the same logits, after the second one loaded and ran.
    assert_eq!(hearth.kernel_pool(), KernelPool::Hearth);
    let (after, seen) = run(hearth.as_ref());
    assert_eq!(seen, [KernelPool::Hearth]);
    assert_eq!(after, before);
    // Outside a forward pass no model's choice is in force.
    assert_eq!(KernelPool::current(), KernelPool::Hearth);
}
