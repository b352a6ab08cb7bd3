//! llama-server's text utilities: `/tokenize`, `/detokenize`, and `/apply-template` (a chat request's prompt as
//! the template renders it).

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
use axum::Json;

/// `{"content": "...", "add_special": false, "with_pieces": false}` -> `{"tokens": [...]}`.
pub async fn tokenize(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<TokenizeRequest>,
) -> ApiResult<Json<TokenizeResponse>> {
    let r = st.ready()?;
    let content = req.content.ok_or_else(|| ApiError::param("content", "`content` is required"))?;
    let tok = r.tokenizer.clone();
    let add_special = req.add_special.unwrap_or(false);
    let ids = offload::run(move || {
        tok.encode(&content, add_special).map_err(|e| ApiError::internal(format!("tokenizing failed: {e}")))
    })
    .await?;
    let tokens = if req.with_pieces.unwrap_or(false) {
        let piece = |id: u32| String::from_utf8_lossy(r.tokenizer.token_bytes(id)).into_owned();
        Tokens::Pieces(ids.into_iter().map(|id| Piece { id, piece: piece(id) }).collect())
    } else {
        Tokens::Ids(ids)
    };
    Ok(Json(TokenizeResponse { tokens }))
}

/// `{"tokens": [...]}` -> `{"content": "..."}` (special tokens are kept, as llama-server does).
pub async fn detokenize(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<DetokenizeRequest>,
) -> ApiResult<Json<DetokenizeResponse>> {
    let r = st.ready()?;
    let list = req.tokens.ok_or_else(|| ApiError::param("tokens", "`tokens` is required"))?;
    let ids = list.check("tokens", r.tokenizer.vocab_size())?;
    Ok(Json(DetokenizeResponse { content: r.tokenizer.decode(&ids, false) }))
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
