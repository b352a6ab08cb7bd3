//! What `serve` knows of a model's images: the vision spec from its directory or its GGUF and `--mmproj` file,
//! and the media fetch's policy from the flags.

use anyhow::Context;
use std::path::Path;

/// What the server knows of a model's images (its processor and placeholder, from its directory or its GGUF and
/// `--mmproj` file) and the media fetch's policy (`--allow-private-media`).
pub fn image_support(
    mmproj: Option<&Path>,
    allow_private_media: bool,
    location: &hearth_engine::weights::resolve::ModelLocation,
) -> anyhow::Result<hearth_server::chat::images::ImageSupport> {
    use hearth_engine::weights::resolve::ModelLocation;
    let vision = match location {
        ModelLocation::HfDir(dir) => {
            if let Some(p) = mmproj {
                anyhow::bail!(
                    "--mmproj {}: {} is a Hugging Face directory, which carries its own vision tower; --mmproj goes \
                     with a .gguf model",
                    p.display(),
                    dir.display()
                );
            }
            hearth_engine::vision::VisionSpec::from_hf_dir(dir)?
        }
        ModelLocation::Gguf(path) => match mmproj {
            None => None,
            Some(mm) => {
                let text = hearth_engine::weights::GgufFile::open(path)?;
                let proj =
                    hearth_engine::weights::GgufFile::open(mm).with_context(|| format!("--mmproj {}", mm.display()))?;
                Some(hearth_engine::vision::VisionSpec::from_gguf(&text, &proj, mm)?)
            }
        },
    };
    if let Some(v) = &vision {
        tracing::info!(arch = %v.arch, "the model takes images");
    }
    let mut limits = hearth_media::MediaLimits::default();
    limits.fetch.allow_private = allow_private_media;
    Ok(hearth_server::chat::images::ImageSupport {
        vision: vision.map(std::sync::Arc::new),
        limits: std::sync::Arc::new(limits),
        net: std::sync::Arc::new(hearth_media::SystemNet),
    })
}
