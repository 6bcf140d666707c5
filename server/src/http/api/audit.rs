//! `GET /api/v1/audit` (admins), as JSON or CSV.

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    actor: Option<String>,
    action: Option<String>,
    target: Option<String>,
    format: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// `GET /api/v1/audit` (admins): a page of entries, newest first, as
/// `{"entries": [...], "total": N, "next_cursor": ...}`; `format=csv` downloads every entry the
/// filters select (up to 100,000, with `X-Gantry-Truncated: true` when there were more).
pub(super) async fn audit_log(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> ApiResult<Response> {
    let filter = crate::domain::audit::AuditFilter {
        actor: q.actor,
        action: q.action,
        target: q.target,
        ..Default::default()
    };
    let limit = page_limit(q.limit.as_deref())?;
    let (entries, truncated) = match q.format.as_deref() {
        None | Some("json") => {
            let page = state
                .portal
                .audit_log(&v, filter, q.cursor.as_deref(), limit)
                .await?;
            return Ok(Json(page).into_response());
        }
        Some("csv") => state.portal.audit_export(&v, filter).await?,
        Some(other) => {
            return Err(ApiError::invalid("format", format!("'{other}' is not json or csv")).into())
        }
    };
    let mut out = String::from("at,actor,action,target,before,after,address\n");
    let cell = |s: &str| crate::domain::csv::text(s, true);
    for e in entries {
        let json =
            |v: &Option<serde_json::Value>| v.as_ref().map(|v| v.to_string()).unwrap_or_default();
        out.push_str(
            &[
                e.at.to_rfc3339(),
                cell(&e.actor),
                cell(&e.action),
                cell(&e.target),
                cell(&json(&e.before)),
                cell(&json(&e.after)),
                cell(e.address.as_deref().unwrap_or_default()),
            ]
            .join(","),
        );
        out.push('\n');
    }
    let mut res = (
        [
            (http::header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                http::header::CONTENT_DISPOSITION,
                "attachment; filename=\"gantry-audit.csv\"",
            ),
        ],
        out,
    )
        .into_response();
    if truncated {
        res.headers_mut()
            .insert("x-gantry-truncated", http::HeaderValue::from_static("true"));
    }
    Ok(res)
}
