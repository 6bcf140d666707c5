//! GPU accounting as the viewer may see it: the report, its chart, quota against use, top jobs.

use super::*;

/// A report's grouping and bucket from their names; a 422 naming the field otherwise.
pub fn grouping(
    group_by: &str,
    bucket: &str,
) -> Result<(crate::usage::GroupBy, crate::usage::Bucket), Error> {
    Ok((
        crate::usage::GroupBy::parse(group_by).map_err(|m| Error::invalid("group_by", m))?,
        crate::usage::Bucket::parse(bucket).map_err(|m| Error::invalid("bucket", m))?,
    ))
}

impl Portal {
    pub fn usage_tz(&self) -> chrono_tz::Tz {
        self.usage_tz
    }

    /// A usage report over `[from, to)`. Leads see the teams they lead, admins every team;
    /// `team` narrows it to one.
    pub async fn usage(
        &self,
        viewer: &Viewer,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        group_by: crate::usage::GroupBy,
        bucket: crate::usage::Bucket,
        team: Option<&str>,
    ) -> Result<Vec<crate::usage::UsageRow>, Error> {
        crate::input::single_line_opt("team", team)?;
        let teams = self.report_teams(viewer, team)?;
        Ok(crate::usage::from_database(
            &self.db,
            from,
            to,
            self.cluster.now(),
            group_by,
            bucket,
            self.usage_tz,
            teams.as_deref(),
        )
        .await?)
    }

    /// The teams a usage report covers: `team` if the viewer leads it (or is an admin);
    /// else every team for an admin (`None`), the teams they lead for a lead; else 403.
    pub(super) fn report_teams(
        &self,
        viewer: &Viewer,
        team: Option<&str>,
    ) -> Result<Option<Vec<String>>, Error> {
        let led: Vec<String> = viewer
            .teams
            .iter()
            .filter(|m| m.role == Role::Lead)
            .map(|m| m.team.clone())
            .collect();
        Ok(match team {
            Some(t) if viewer.is_admin || led.iter().any(|l| l == t) => Some(vec![t.to_string()]),
            Some(t) => {
                return Err(Error::forbidden(format!(
                    "only a lead of team '{t}' or an admin sees its usage"
                ))
                .with_field("team"))
            }
            None if viewer.is_admin => None,
            None if !led.is_empty() => Some(led),
            None => {
                return Err(Error::forbidden(
                    "usage reports are for team leads and admins",
                ))
            }
        })
    }

    pub async fn usage_view(
        &self,
        viewer: &Viewer,
        days: u32,
        group_by: String,
        bucket: String,
    ) -> Result<UsageView, Error> {
        use crate::usage::GroupBy;
        if !matches!(days, 1..=400) {
            return Err(Error::invalid("days", "must be 1 to 400"));
        }
        let (g, b) = grouping(&group_by, &bucket)?;
        let tz = self.usage_tz;
        let today = self.cluster.now().with_timezone(&tz).date_naive();
        let to_day = today + chrono::Duration::days(1);
        let from_day = to_day - chrono::Duration::days(days.into());
        let (from, to) = (
            crate::usage::local_midnight(from_day, tz),
            crate::usage::local_midnight(to_day, tz),
        );
        let rows = self.usage(viewer, from, to, g, b, None).await?;
        let teams = self.report_teams(viewer, None)?;
        let now = self.cluster.now();
        let top = |by_idle| {
            let teams = teams.clone();
            async move {
                Ok::<_, Error>(
                    self.db
                        .top_jobs(from, to, now, teams.as_deref(), by_idle, 10)
                        .await?
                        .into_iter()
                        .map(|(id, name, user, team, a, i)| TopJob {
                            id,
                            name,
                            user,
                            team,
                            gpu_hours_allocated: a / 3.6e6,
                            gpu_hours_idle: i / 3.6e6,
                        })
                        .filter(|j| !by_idle || j.gpu_hours_idle > 0.0)
                        .collect::<Vec<_>>(),
                )
            }
        };
        let top_allocated = top(false).await?;
        let top_idle = top(true).await?;
        // Quota against use: per team and pool, the nominal quota over the range's hours.
        let hours = (to.min(now) - from).num_milliseconds().max(0) as f64 / 3.6e6;
        let mut quota_use = Vec::new();
        // One report per team (grouped by pool), shared by that team's quotas.
        let mut by_team: std::collections::HashMap<String, Vec<crate::usage::UsageRow>> =
            std::collections::HashMap::new();
        for q in self.db.list_quotas().await? {
            if teams.as_ref().is_some_and(|t| !t.contains(&q.team)) {
                continue;
            }
            if !by_team.contains_key(&q.team) {
                let rows = self
                    .usage(viewer, from, to, GroupBy::Pool, b, Some(&q.team))
                    .await?;
                by_team.insert(q.team.clone(), rows);
            }
            let used = by_team[&q.team]
                .iter()
                .filter(|r| r.key == q.pool)
                .map(|r| r.gpu_hours_allocated)
                .sum::<f64>()
                + 0.0; // an empty float sum is -0.0
            quota_use.push(QuotaAgainstUse {
                team: q.team.clone(),
                pool: q.pool.clone(),
                quota_gpu_hours: f64::from(q.quota.nominal) * hours,
                gpu_hours_allocated: used,
            });
        }
        let view = |r: &crate::usage::UsageRow| UsageRowView {
            bucket_start: r.bucket_start.to_string(),
            key: r.key.clone(),
            gpu_hours_allocated: r.gpu_hours_allocated,
            gpu_hours_used: r.gpu_hours_used,
            gpu_hours_idle: r.gpu_hours_idle,
            gpu_hours_unmeasured: r.gpu_hours_unmeasured,
            efficiency: r.efficiency,
        };
        let mut total = UsageRowView {
            bucket_start: from_day.to_string(),
            key: "all".into(),
            gpu_hours_allocated: 0.0,
            gpu_hours_used: 0.0,
            gpu_hours_idle: 0.0,
            gpu_hours_unmeasured: 0.0,
            efficiency: None,
        };
        for r in &rows {
            total.gpu_hours_allocated += r.gpu_hours_allocated;
            total.gpu_hours_used += r.gpu_hours_used;
            total.gpu_hours_idle += r.gpu_hours_idle;
            total.gpu_hours_unmeasured += r.gpu_hours_unmeasured;
        }
        let measured = total.gpu_hours_used + total.gpu_hours_idle;
        total.efficiency = (measured > 0.0).then(|| total.gpu_hours_used / measured);
        Ok(UsageView {
            from: from_day.to_string(),
            to: to_day.to_string(),
            last_day: today.to_string(),
            time_zone: tz.name().to_string(),
            chart_svg: crate::usage::chart_svg(&rows, g, b),
            chart_svg_narrow: crate::usage::chart_svg_narrow(&rows, g, b),
            csv_url: format!(
                "/api/v1/usage?from={from_day}&to={to_day}&group_by={group_by}&bucket={bucket}&format=csv"
            ),
            group_by,
            bucket,
            rows: rows.iter().map(view).collect(),
            total,
            top_allocated,
            top_idle,
            quota_use,
        })
    }
}
