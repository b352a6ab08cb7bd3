//! llama-server's text utilities: `/tokenize`, `/detokenize`, and `/apply-template` (a chat request's prompt as
//! the template renders it). The text one `/tokenize` or `/detokenize` request holds is bounded by `--max-tokenize`.

use crate::chat::tools::Tools;
use crate::chat::{offload, template, FieldNames};
use crate::error::{ApiError, ApiResult};
use crate::http::body::JsonBody;
use crate::state::AppState;
use crate::wire::admin::{
    ApplyTemplateResponse, DetokenizeRequest, DetokenizeResponse, Piece, TokenizeRequest, TokenizeResponse, Tokens,
};
use crate::wire::chat::Conversation;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// Refuse a request whose text (`param`'s) is over `--max-tokenize`: a 413 naming the limit.
fn check_text_size(st: &AppState, param: &str, bytes: usize) -> ApiResult<()> {
    let cap = st.cfg.max_tokenize;
    if bytes <= cap {
        return Ok(());
    }
    let message = format!(
        "`{param}` holds {bytes} bytes of text; this server tokenizes and detokenizes at most {cap} bytes per request (--max-tokenize)"
    );
    Err(ApiError {
        param: Some(param.to_string()),
        ..ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "invalid_request_error", message)
    }
    .with_code("text_too_large"))
}

/// A JSON answer, serialized where it is called (on the blocking pool, for a large one).
fn json_bytes<T: Serialize>(value: &T) -> ApiResult<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| ApiError::internal(format!("writing the answer failed: {e}")))
}

fn json_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `{"content": "...", "add_special": false, "with_pieces": false}` -> `{"tokens": [...]}`. The text is tokenized
/// and the answer (which can be several times the text's size) written on the blocking pool.
pub async fn tokenize(State(st): State<AppState>, JsonBody(req): JsonBody<TokenizeRequest>) -> ApiResult<Response> {
    let r = st.ready()?;
    let content = req.content.ok_or_else(|| ApiError::param("content", "`content` is required"))?;
    check_text_size(&st, "content", content.len())?;
    let add_special = req.add_special.unwrap_or(false);
    let with_pieces = req.with_pieces.unwrap_or(false);
    let body = offload::run(move || {
        let tok = &r.tokenizer;
        let ids =
            tok.encode(&content, add_special).map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")))?;
        drop(content);
        let tokens = if with_pieces {
            let piece = |id: u32| String::from_utf8_lossy(tok.token_bytes(id)).into_owned();
            Tokens::Pieces(ids.into_iter().map(|id| Piece { id, piece: piece(id) }).collect())
        } else {
            Tokens::Ids(ids)
        };
        json_bytes(&TokenizeResponse { tokens })
    })
    .await?;
    Ok(json_response(body))
}

/// `{"tokens": [...]}` -> `{"content": "..."}` (special tokens are kept, as llama-server does), on the blocking pool.
pub async fn detokenize(State(st): State<AppState>, JsonBody(req): JsonBody<DetokenizeRequest>) -> ApiResult<Response> {
    let r = st.ready()?;
    let list = req.tokens.ok_or_else(|| ApiError::param("tokens", "`tokens` is required"))?;
    let ids = list.check("tokens", r.tokenizer.vocab_size())?;
    let bytes: usize = ids.iter().map(|&id| r.tokenizer.token_bytes(id).len()).sum();
    check_text_size(&st, "tokens", bytes)?;
    let body =
        offload::run(move || json_bytes(&DetokenizeResponse { content: r.tokenizer.decode(&ids, false) })).await?;
    Ok(json_response(body))
}

/// `{"messages": [...]}` -> `{"prompt": "..."}`: the chat template's rendering with the generation prompt (and the
/// tools, as a chat request would render them).
pub async fn apply_template(
    State(st): State<AppState>,
    JsonBody(conversation): JsonBody<Conversation>,
) -> ApiResult<Json<ApplyTemplateResponse>> {
    let r = st.ready()?;
    // The same prompt a chat request with these tools would get.
    let tools = Tools::resolve(&conversation, template::source(&r), &FieldNames::CHAT)?;
    let prompt = offload::run(move || template::render(&r, &conversation, tools.as_ref())).await?;
    Ok(Json(ApplyTemplateResponse { prompt }))
}
