//! `GET /v1/roles/{role}/history[?limit=N]`: a role's failover history, as
//! the control plane keeps it for the whole cluster (every change of its
//! holding, pauses and switchovers, with their causes), read through this
//! agent's control-plane client like the other cluster-wide reads. Any
//! member answers the same.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;

use crate::http::roles_api::control;
use crate::http::state::{ApiError, AppState};
use crate::view::HistoryView;

/// `?limit=N` of the history.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    /// At most the last N changes (default: every one kept).
    limit: Option<usize>,
}

/// The role's changes, oldest first: 404 when the control plane has no
/// such role, 409 without a control plane, 503 when no server answers.
pub(crate) async fn history(
    State(st): State<AppState>,
    Path(role): Path<String>,
    q: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<HistoryView>, ApiError> {
    let bad = |e: String| ApiError(StatusCode::BAD_REQUEST, e);
    let Query(q) = q.map_err(|e| bad(e.body_text()))?;
    if q.limit == Some(0) {
        return Err(bad("limit must be at least 1".into()));
    }
    let changes = control(&st)?
        .history(&role, q.limit)
        .await
        .map_err(|r| {
            ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the control plane's history cannot be read now ({r}); servers of 0.1.0 \
                     keep none"
                ),
            )
        })?
        .ok_or_else(|| {
            ApiError(
                StatusCode::NOT_FOUND,
                format!("no role {role:?}: the control plane has never heard of it"),
            )
        })?;
    Ok(Json(HistoryView { role, changes }))
}
