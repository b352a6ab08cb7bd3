//! `GET /v1/models` and `GET /v1/models/{id}`: the one served model.

use crate::error::{ApiError, ApiResult};
use crate::state::{AppState, Ready};
use crate::wire::admin::{ModelList, ModelObject};
use axum::extract::{Path, State};
use axum::Json;

fn model_object(r: &Ready) -> ModelObject {
    ModelObject {
        id: r.model_id.clone(),
        object: "model",
        created: r.created,
        owned_by: "hearth",
        max_model_len: r.engine.info.max_positions,
    }
}

pub async fn list(State(st): State<AppState>) -> ApiResult<Json<ModelList>> {
    let r = st.ready()?;
    Ok(Json(ModelList { object: "list", data: vec![model_object(&r)] }))
}

pub async fn get(State(st): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<ModelObject>> {
    let r = st.ready()?;
    if id != r.model_id {
        return Err(ApiError::not_found(format!("model `{id}` does not exist; this server serves `{}`", r.model_id))
            .with_code("model_not_found"));
    }
    Ok(Json(model_object(&r)))
}
