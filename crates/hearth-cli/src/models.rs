//! `hearth models`: what `--model` can resolve without a path.

use hearth_engine::models::bert::BertConfig;
use hearth_engine::weights::resolve::{hf_hub_cache, list_models, models_dir, ModelLocation};
use hearth_engine::weights::{GgufFile, ModelConfig};

fn size_of(loc: &ModelLocation) -> u64 {
    match loc {
        ModelLocation::Gguf(p) => std::fs::metadata(p).map(|m| m.len()).unwrap_or(0),
        ModelLocation::HfDir(d) => hearth_engine::weights::safetensors::shard_files(d)
            .map(|fs| fs.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum())
            .unwrap_or(0),
    }
}

fn arch_of(loc: &ModelLocation) -> String {
    // Embedding models (BERT encoders) are not generative configurations.
    if let ModelLocation::HfDir(d) = loc {
        let bert = std::fs::read_to_string(d.join("config.json")).ok().and_then(|t| BertConfig::from_json(&t).ok());
        if let Some(c) = bert {
            return format!("bert {}L h{} embed", c.num_hidden_layers, c.hidden_size);
        }
    }
    let cfg = match loc {
        ModelLocation::Gguf(p) => GgufFile::open(p).and_then(|g| ModelConfig::from_gguf(&g)),
        ModelLocation::HfDir(d) => std::fs::read_to_string(d.join("config.json"))
            .map_err(|e| hearth_engine::Error::io("config.json", e))
            .and_then(|t| ModelConfig::from_hf_json(&t)),
    };
    match cfg {
        Ok(c) => format!("{} {}L h{}", c.arch_name, c.num_layers, c.hidden_size),
        Err(e) => format!("unsupported ({e})"),
    }
}

pub fn run() -> anyhow::Result<()> {
    println!("{:<40} {:<22} {:>9}  LOCATION", "NAME", "ARCHITECTURE", "SIZE");
    for m in list_models() {
        match &m.location {
            Some(loc) => println!(
                "{:<40} {:<22} {:>7.1}MB  {}",
                m.name,
                arch_of(loc),
                size_of(loc) as f64 / 1e6,
                loc.path().display()
            ),
            None => println!("{:<40} {:<22} {:>9}  {}", m.name, "-", "-", m.note),
        }
    }
    eprintln!("model cache: {} | Hugging Face cache: {}", models_dir().display(), hf_hub_cache().display());
    Ok(())
}
