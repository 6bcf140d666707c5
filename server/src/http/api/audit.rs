//! `GET /api/v1/audit` (admins), as JSON or CSV.

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    actor: Option<String>,
    action: Option<String>,
    target: Option<String>,
    format: Option<String>,
    limit: Option<i64>,
}

pub(super) async fn audit_log(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> ApiResult<Response> {
    let entries = state
        .portal
        .audit_log(
            &v,
            crate::domain::audit::AuditFilter {
                actor: q.actor,
                action: q.action,
                target: q.target,
                limit: q.limit.unwrap_or(1000),
            },
        )
        .await?;
    match q.format.as_deref() {
        None | Some("json") => Ok(Json(entries).into_response()),
        Some("csv") => {
            let mut out = String::from("at,actor,action,target,before,after,address\n");
            let cell = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
            for e in entries {
                let json = |v: &Option<serde_json::Value>| {
                    v.as_ref().map(|v| v.to_string()).unwrap_or_default()
                };
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
            Ok((
                [
                    (http::header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                    (
                        http::header::CONTENT_DISPOSITION,
                        "attachment; filename=\"gantry-audit.csv\"",
                    ),
                ],
                out,
            )
                .into_response())
        }
        Some(other) => {
            Err(ApiError::invalid("format", format!("'{other}' is not json or csv")).into())
        }
    }
}
