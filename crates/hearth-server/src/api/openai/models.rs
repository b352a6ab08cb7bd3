//! `GET /v1/models` and `GET /v1/models/{id}`: the served models (the generative one, the embedding one, or both).

use crate::error::{ApiError, ApiResult};
use crate::model::{Embedding, Ready};
use crate::state::AppState;
use crate::wire::admin::{ModelList, ModelObject};
use axum::extract::{Path, State};
use axum::Json;

fn modalities(images: bool) -> Vec<&'static str> {
    if images {
        vec!["text", "image"]
    } else {
        vec!["text"]
    }
}

fn model_object(r: &Ready) -> ModelObject {
    ModelObject {
        id: r.model_id.clone(),
        object: "model",
        created: r.created,
        owned_by: "hearth",
        max_model_len: r.engine.info().max_positions,
        input_modalities: modalities(r.images.vision.is_some()),
        loaded: None,
    }
}

fn embedding_object(e: &Embedding) -> ModelObject {
    ModelObject {
        id: e.model_id.clone(),
        object: "model",
        created: e.created,
        owned_by: "hearth",
        max_model_len: e.handle.info().max_input_tokens,
        input_modalities: modalities(false),
        loaded: None,
    }
}

/// Every served model (503 while loading).
fn served(st: &AppState) -> ApiResult<Vec<ModelObject>> {
    if !st.is_loaded() {
        return Err(ApiError::loading());
    }
    let generative: Vec<ModelObject> = match st.pool() {
        // Every model of the pool, resident or not.
        Some(p) => p
            .states()
            .into_iter()
            .map(|s| match &s.ready {
                Some(r) => ModelObject { loaded: Some(true), ..model_object(r) },
                None => ModelObject {
                    id: s.model,
                    object: "model",
                    created: 0,
                    owned_by: "hearth",
                    max_model_len: s.max_positions,
                    input_modalities: modalities(s.images),
                    loaded: Some(false),
                },
            })
            .collect(),
        None => st.get().map(|r| model_object(&r)).into_iter().collect(),
    };
    Ok(generative.into_iter().chain(st.get_embedding().map(|e| embedding_object(&e))).collect())
}

pub async fn list(State(st): State<AppState>) -> ApiResult<Json<ModelList>> {
    Ok(Json(ModelList { object: "list", data: served(&st)? }))
}

pub async fn get(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<ModelObject>> {
    let all = served(&st)?;
    let names: Vec<String> = all.iter().map(|m| format!("`{}`", m.id)).collect();
    all.into_iter().find(|m| m.id == id).map(Json).ok_or_else(|| {
        ApiError::not_found(format!("model `{id}` does not exist; this server serves {}", names.join(" and ")))
            .with_code("model_not_found")
    })
}
