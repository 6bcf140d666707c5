//! `GET /api/v1/usage`: the GPU-hours report, as JSON or CSV.

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UsageQuery {
    from: Option<String>,
    to: Option<String>,
    group_by: Option<String>,
    bucket: Option<String>,
    team: Option<String>,
    format: Option<String>,
}

/// A date (`2026-11-01`, midnight in the accounting time zone) or an RFC 3339 time.
pub(super) fn usage_time(
    field: &str,
    v: &str,
    tz: chrono_tz::Tz,
) -> Result<chrono::DateTime<chrono::Utc>, ApiError> {
    use chrono::Datelike;
    let t = match v.parse::<chrono::NaiveDate>() {
        Ok(d) => crate::usage::local_midnight(d, tz),
        Err(_) => chrono::DateTime::parse_from_rfc3339(v)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|_| {
                ApiError::invalid(
                    field,
                    format!("'{v}' is neither a date (2026-11-01) nor an RFC 3339 time"),
                )
            })?,
    };
    // The years RFC 3339 can write; chrono reads dates up to ±262143, at whose ends a day
    // more or less (the report's default span, its buckets) would not exist.
    if !(1..=9999).contains(&t.year()) {
        return Err(ApiError::invalid(
            field,
            format!("'{v}' is outside the years 1 to 9999"),
        ));
    }
    Ok(t)
}

/// `GET /api/v1/usage`: GPU-hours allocated, used and idle, and efficiency, per bucket and
/// group (leads: their teams; admins: all). `format=csv` gives the same rows as CSV.
pub(super) async fn usage(
    State(state): State<AppState>,
    ApiViewer(v): ApiViewer,
    ApiQuery(q): ApiQuery<UsageQuery>,
) -> ApiResult<Response> {
    let tz = state.portal.usage_tz();
    let today = state.portal.now().with_timezone(&tz).date_naive();
    let to = match &q.to {
        Some(t) => usage_time("to", t, tz)?,
        None => crate::usage::local_midnight(today + chrono::Duration::days(1), tz),
    };
    let from = match &q.from {
        Some(f) => usage_time("from", f, tz)?,
        // The same local time 30 days before: across a clock change that is 719 or 721 hours,
        // and 720 would start the report an hour into (or before) its first day.
        None => {
            use chrono::TimeZone;
            let back = to.with_timezone(&tz).naive_local() - chrono::Duration::days(30);
            tz.from_local_datetime(&back)
                .earliest()
                .map(|t| t.with_timezone(&chrono::Utc))
                .unwrap_or(to - chrono::Duration::days(30))
        }
    };
    // The field the caller gave: `from` alone is measured against the default `to`.
    let field = if q.to.is_some() { "to" } else { "from" };
    if to <= from {
        let message = if q.to.is_some() {
            "must be after from"
        } else {
            "must be before today's end (the default to)"
        };
        return Err(ApiError::invalid(field, message).into());
    }
    if to - from > chrono::Duration::days(400) {
        return Err(ApiError::invalid(field, "a report spans at most 400 days").into());
    }
    let (group_by, bucket) = crate::service::grouping(
        q.group_by.as_deref().unwrap_or("team"),
        q.bucket.as_deref().unwrap_or("day"),
    )?;
    let csv = match q.format.as_deref().unwrap_or("json") {
        "json" => false,
        "csv" => true,
        other => {
            return Err(ApiError::invalid("format", format!("'{other}' is not json or csv")).into())
        }
    };
    let rows = state
        .portal
        .usage(
            &v,
            from,
            to,
            group_by,
            bucket,
            // `team=` (an emptied field) is every team the caller may see, as on /jobs.
            q.team.as_deref().filter(|t| !t.trim().is_empty()),
        )
        .await?;
    if csv {
        return Ok((
            [
                (http::header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    http::header::CONTENT_DISPOSITION,
                    "attachment; filename=\"gantry-usage.csv\"",
                ),
            ],
            crate::usage::to_csv(&rows, group_by),
        )
            .into_response());
    }
    let key = group_by.as_str();
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "bucket_start": r.bucket_start,
                key: r.key,
                "gpu_hours_allocated": r.gpu_hours_allocated,
                "gpu_hours_used": r.gpu_hours_used,
                "gpu_hours_idle": r.gpu_hours_idle,
                "gpu_hours_unmeasured": r.gpu_hours_unmeasured,
                "efficiency": r.efficiency,
            })
        })
        .collect();
    Ok(Json(serde_json::json!({
        "from": from,
        "to": to,
        "time_zone": tz.name(),
        "group_by": key,
        "bucket": bucket.as_str(),
        "rows": rows,
    }))
    .into_response())
}
