//! Images in chat requests: the image parts of a conversation (OpenAI `image_url` parts; Anthropic's and the
//! Responses API's image inputs arrive translated into them) fetched under the server's media policy, decoded,
//! resized by the model's processor, and spliced into the prompt: each placeholder the chat template wrote becomes
//! the image's run of tokens, with the prompt's 3D rope positions. Errors name the part and say why.

use crate::error::{ApiError, ApiResult};
use crate::wire::chat::Conversation;
use hearth_engine::tokenizer::Tokenizer;
use hearth_engine::vision::qwen2_vl::rope_positions;
use hearth_engine::vision::{Image, ImageProcessor, MropePositions, PromptImage, RequestMedia, VisionSpec};
use hearth_media::{ImageBytes, MediaError, MediaLimits, Net, SystemNet};
use serde_json::Value;
use std::sync::Arc;

/// What a model's server knows of images: the model's processor and placeholder (None: a text model), and the
/// fetch policy and limits (`--allow-private-media`).
#[derive(Clone)]
pub struct ImageSupport {
    pub vision: Option<Arc<VisionSpec>>,
    pub limits: Arc<MediaLimits>,
    pub net: Arc<dyn Net>,
}

impl Default for ImageSupport {
    fn default() -> Self {
        ImageSupport { vision: None, limits: Arc::new(MediaLimits::default()), net: Arc::new(SystemNet) }
    }
}

/// An image part of the conversation: where it is (for errors) and its URL (`data:` or http(s)).
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePart {
    pub at: String,
    pub url: String,
}

/// The image parts of `c`'s messages, in order. An image part without a URL string is an error naming it.
pub fn collect(c: &Conversation) -> ApiResult<Vec<ImagePart>> {
    let mut out = Vec::new();
    for (i, m) in c.messages.as_deref().unwrap_or_default().iter().enumerate() {
        let Some(parts) = m.get("content").and_then(Value::as_array) else { continue };
        for (j, p) in parts.iter().enumerate() {
            if p.get("type").and_then(Value::as_str) != Some("image_url") {
                continue;
            }
            let at = p
                .get("_at")
                .and_then(Value::as_str)
                .map_or_else(|| format!("messages[{i}].content[{j}]"), str::to_string);
            let url = match p.get("image_url") {
                Some(Value::String(u)) => u.clone(),
                Some(Value::Object(o)) => match o.get("url") {
                    Some(Value::String(u)) => u.clone(),
                    _ => return Err(ApiError::param(&at, format!("`{at}.image_url.url` must be a string"))),
                },
                _ => return Err(ApiError::param(&at, format!("`{at}.image_url` must be an object with a `url`"))),
            };
            if let Some(d) = p.get("image_url").and_then(|v| v.get("detail")).filter(|d| !d.is_null()) {
                if !matches!(d.as_str(), Some("auto" | "low" | "high")) {
                    return Err(ApiError::param(
                        &at,
                        format!("`{at}.image_url.detail` must be `auto`, `low` or `high`"),
                    ));
                }
            }
            out.push(ImagePart { at, url });
        }
    }
    Ok(out)
}

/// A media error as a 400 on the part it came from, with its kind as the error's code.
fn media_error(at: &str, e: MediaError) -> ApiError {
    let code = e.code();
    ApiError::param(at, format!("`{at}`: {e}")).with_code(code)
}

/// An image part with its bytes.
pub struct FetchedImage {
    pub part: ImagePart,
    pub bytes: ImageBytes,
}

/// The conversation's image parts with their bytes (fetched one after another, each under the policy's limits),
/// refused at once when the model takes no images.
pub async fn fetch_all(support: &ImageSupport, model_id: &str, c: &Conversation) -> ApiResult<Vec<FetchedImage>> {
    let parts = collect(c)?;
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    if support.vision.is_none() {
        let at = &parts[0].at;
        return Err(ApiError::param(at, format!("`{at}`: the model `{model_id}` does not take images; send text"))
            .with_code("model_takes_no_images"));
    }
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        let loaded = hearth_media::load_url(&part.url, &support.limits, support.net.as_ref()).await;
        let bytes = loaded.map_err(|e| media_error(&part.at, e))?;
        out.push(FetchedImage { part, bytes });
    }
    Ok(out)
}

/// Decode and resize each fetched image (on the blocking pool: this is CPU work), with its token count; its place
/// in the prompt is set by [`splice`].
pub fn prepare(spec: &VisionSpec, limits: &MediaLimits, fetched: Vec<FetchedImage>) -> ApiResult<Vec<PromptImage>> {
    fetched
        .into_iter()
        .map(|FetchedImage { part: p, bytes: b }| {
            let bad = |e: hearth_engine::Error| ApiError::param(&p.at, format!("`{}`: {e}", p.at));
            let rgb = hearth_media::decode::decode(&b.bytes, limits.max_pixels).map_err(|e| media_error(&p.at, e))?;
            let img = Image::new(rgb.width as usize, rgb.height as usize, rgb.data).map_err(bad)?;
            let resized = spec.processor.resize(&img).map_err(bad)?;
            let tokens = spec.processor.tokens_for(img.width, img.height).map_err(bad)?;
            Ok(PromptImage {
                start: 0,
                tokens,
                hash: b.hash,
                width: resized.width,
                height: resized.height,
                rgb: resized.rgb,
            })
        })
        .collect()
}

/// The rendered prompt with each image marker the template wrote expanded as the model's processor expands it
/// in text before tokenizing (Gemma 3: `<start_of_image>` becomes `\n\n<start_of_image>`, the image's
/// `<image_soft_token>`s and `<end_of_image>\n\n`); other families' prompts are returned as they are.
pub fn expand_text(spec: &VisionSpec, tokenizer: &Tokenizer, text: &str) -> String {
    let ImageProcessor::Gemma3 { processor, boi, eoi } = &spec.processor else { return text.to_string() };
    let spell = |id: u32| tokenizer.decode(&[id], false);
    let boi = spell(*boi);
    if boi.is_empty() {
        return text.to_string();
    }
    let run = spell(spec.image_token).repeat(processor.tokens);
    text.replace(&boi, &format!("\n\n{boi}{run}{}\n\n", spell(*eoi)))
}

/// Each image's place in the prompt the template wrote (one per image part, in order): a Qwen2-VL placeholder
/// expanded to the image's tokens, with the 3D rope positions; a Gemma 3 run of image tokens (expanded in text,
/// [`expand_text`]) as it stands.
pub fn splice(spec: &VisionSpec, ids: &[u32], images: Vec<PromptImage>) -> ApiResult<(Vec<u32>, RequestMedia)> {
    let Some(qwen) = spec.processor.qwen2_vl() else { return place_runs(spec, ids, images) };
    let found = ids.iter().filter(|&&t| t == spec.image_token).count();
    if found != images.len() {
        return Err(placeholder_count(found, images.len()));
    }
    let extra: usize = images.iter().map(|p| p.tokens - 1).sum();
    let mut out = Vec::with_capacity(ids.len() + extra);
    let mut placed = Vec::with_capacity(images.len());
    let mut next = images.into_iter();
    for &t in ids {
        if t != spec.image_token {
            out.push(t);
            continue;
        }
        if let Some(mut p) = next.next() {
            p.start = out.len();
            out.extend(std::iter::repeat_n(t, p.tokens));
            placed.push(p);
        }
    }
    let grids: Vec<[usize; 3]> = placed.iter().map(|i| [1, i.height / qwen.patch, i.width / qwen.patch]).collect();
    let (rows, delta) = rope_positions(&out, spec.image_token, &grids, qwen.merge)
        .map_err(|e| ApiError::internal(format!("placing the images: {e}")))?;
    Ok((out, RequestMedia { images: placed, rope: Some(MropePositions { rows, delta }) }))
}

/// Images at the prompt's runs of image tokens, one run per image, each run as long as its image's tokens.
fn place_runs(spec: &VisionSpec, ids: &[u32], images: Vec<PromptImage>) -> ApiResult<(Vec<u32>, RequestMedia)> {
    let mut runs = Vec::new();
    for (i, &t) in ids.iter().enumerate() {
        match runs.last_mut() {
            Some((_, end)) if t == spec.image_token && *end == i => *end += 1,
            _ if t == spec.image_token => runs.push((i, i + 1)),
            _ => {}
        }
    }
    if runs.len() != images.len() {
        return Err(placeholder_count(runs.len(), images.len()));
    }
    let mut placed = Vec::with_capacity(images.len());
    for ((a, b), mut p) in runs.into_iter().zip(images) {
        if b - a != p.tokens {
            return Err(ApiError::bad_request(format!(
                "the prompt holds {} image tokens where an image of {} goes; write images as image parts, not \
                 as their tokens",
                b - a,
                p.tokens
            ))
            .with_code("template_error"));
        }
        p.start = a;
        placed.push(p);
    }
    Ok((ids.to_vec(), RequestMedia { images: placed, rope: None }))
}

fn placeholder_count(found: usize, images: usize) -> ApiError {
    ApiError::bad_request(format!(
        "the chat template wrote {found} image placeholders for {images} images; the model's template must write \
         one per image part"
    ))
    .with_code("template_error")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemma() -> (VisionSpec, Tokenizer) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-gemma3-vision");
        (VisionSpec::from_hf_dir(&dir).unwrap().unwrap(), Tokenizer::from_hf_dir(&dir).unwrap())
    }

    fn image(tokens: usize) -> PromptImage {
        PromptImage { start: 0, tokens, hash: [7; 32], width: 1, height: 1, rgb: vec![0, 0, 0] }
    }

    /// Gemma 3's `<start_of_image>` becomes the processor's full sequence in text; each run of image tokens takes
    /// its image, and a run of the wrong length or count is a template error.
    #[test]
    fn gemma3_images_are_expanded_in_text_and_placed_at_their_runs() {
        let (spec, tok) = gemma();
        let text = expand_text(&spec, &tok, "<start_of_turn>user\n<start_of_image>hi<start_of_image>");
        let run = "<image_soft_token>".repeat(16);
        let one = format!("\n\n<start_of_image>{run}<end_of_image>\n\n");
        assert_eq!(text, format!("<start_of_turn>user\n{one}hi{one}"));
        let ids = tok.encode_chat(&text).unwrap();
        let (out, media) = splice(&spec, &ids, vec![image(16), image(16)]).unwrap();
        assert_eq!(out, ids);
        let starts: Vec<usize> = media.images.iter().map(|i| i.start).collect();
        assert!(media.rope.is_none());
        for s in &starts {
            assert!(ids[*s..*s + 16].iter().all(|&t| t == spec.image_token) && ids[s - 1] != spec.image_token);
        }
        assert_eq!(splice(&spec, &ids, vec![image(16)]).unwrap_err().code, Some("template_error"));
        assert_eq!(splice(&spec, &ids, vec![image(16), image(8)]).unwrap_err().code, Some("template_error"));
    }
}
