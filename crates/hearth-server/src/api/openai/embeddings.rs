//! `POST /v1/embeddings`: the embedding model's vectors for each input (text, tokenized with the model's own
//! tokenizer and special tokens, or token ids as given). Requests from many clients share forward passes on the
//! embedder's worker (`hearth_engine::embed`).

use crate::error::{ApiError, ApiResult};
use crate::http::body::JsonBody;
use crate::state::AppState;
use crate::wire::completions::Prompt;
use crate::wire::embeddings::{Embedding, EmbeddingsRequest, EmbeddingsResponse, EmbeddingsUsage, Inputs, Vector};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use hearth_engine::embed::EmbedError;

pub async fn handler(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<EmbeddingsRequest>,
) -> ApiResult<Json<EmbeddingsResponse>> {
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::param(
                "encoding_format",
                format!("`encoding_format` must be `float` or `base64`, got `{other}`"),
            ))
        }
    };
    let Some(Inputs(inputs)) = req.input else { return Err(ApiError::param("input", "`input` is required")) };
    let e = st.embedder()?;
    let info = e.handle.info();
    if let Some(d) = req.dimensions {
        if d != info.dimensions as i64 {
            let why = if info.supports_dimensions {
                format!("`dimensions` must be between 1 and {}", info.dimensions)
            } else {
                format!(
                    "`dimensions`: `{}` makes {}-dimensional vectors and cannot shorten them (it was not trained for it)",
                    e.model_id, info.dimensions
                )
            };
            return Err(ApiError::param("dimensions", why));
        }
    }
    let n = inputs.len();
    let mut ids = Vec::with_capacity(n);
    for (i, input) in inputs.into_iter().enumerate() {
        let at = if n == 1 { "input".to_string() } else { format!("input[{i}]") };
        let tokens = match input {
            Prompt::Text(t) if t.is_empty() => return Err(ApiError::param(&at, format!("`{at}` is empty"))),
            Prompt::Text(t) => e.handle.tokenize(&t).map_err(|err| error(&at, err))?,
            Prompt::Tokens(t) => t.check(&at, info.vocab_size)?,
        };
        ids.push(tokens);
    }
    let prompt_tokens = ids.iter().map(Vec::len).sum();
    let vectors = e.handle.embed(ids).await.map_err(|err| error("input", err))?;
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| Embedding {
            object: "embedding",
            index,
            embedding: if base64 { Vector::Base64(base64_f32(&v)) } else { Vector::Float(v) },
        })
        .collect();
    Ok(Json(EmbeddingsResponse {
        object: "list",
        data,
        model: e.model_id.clone(),
        usage: EmbeddingsUsage { prompt_tokens, total_tokens: prompt_tokens },
    }))
}

/// The embedder's refusal as the API's error.
fn error(param: &str, e: EmbedError) -> ApiError {
    let msg = e.to_string();
    match e {
        EmbedError::Invalid(_) => ApiError::param(param, msg),
        EmbedError::QueueFull { .. } => ApiError::from_status(StatusCode::TOO_MANY_REQUESTS, msg),
        EmbedError::Unavailable => {
            ApiError::from_status(StatusCode::SERVICE_UNAVAILABLE, msg).with_code("engine_stopped")
        }
        EmbedError::Failed(_) => ApiError::internal(msg),
    }
}

/// A vector's little-endian f32 bytes in standard base64 (what OpenAI's `encoding_format: "base64"` returns).
fn base64_f32(v: &[f32]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= chunk.len() {
                out.push(ABC[(n >> shift) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_of_floats() {
        // 1.0f32 = 00 00 80 3f; two of them: AACAPwAAgD8=
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, 1.0]), "AACAPwAAgD8=");
        assert_eq!(base64_f32(&[]), "");
        // Three floats: 12 bytes, no padding.
        assert_eq!(base64_f32(&[0.0, 0.0, 0.0]), "AAAAAAAAAAAAAAAA");
    }
}
