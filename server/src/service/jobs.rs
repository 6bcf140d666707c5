//! Jobs: the list and one job as a viewer may see them (with queue positions, reasons and
//! ETAs from the cluster), cancel, and the home page's summary.

use super::*;

impl Portal {
    /// The queue of every pool these rows wait in, in order (Kueue's visibility API).
    pub(super) async fn queues_for(
        &self,
        rows: &[(JobRow, Option<JobMore>)],
    ) -> Result<HashMap<String, std::sync::Arc<Vec<PendingWorkload>>>, Error> {
        let mut pools: Vec<&str> = rows
            .iter()
            .filter(|(r, _)| r.state == JobState::Queued)
            .map(|(r, _)| r.pool.as_str())
            .collect();
        pools.sort();
        pools.dedup();
        let mut out = HashMap::new();
        for pool in pools {
            // A cluster that does not answer costs the positions, not the page.
            match self.cluster.pending(pool).await {
                Ok(q) => {
                    out.insert(pool.to_string(), q);
                }
                Err(e) => tracing::warn!(pool, error = %e, "no queue positions from the cluster"),
            }
        }
        Ok(out)
    }

    /// The jobs ahead of `position` in a pool's queue, as `viewer` may see them.
    pub(super) async fn ahead_of(
        &self,
        viewer: &Viewer,
        queue: &[PendingWorkload],
        position: u32,
    ) -> Result<Vec<AheadJob>, Error> {
        let ahead = &queue[..(position.saturating_sub(1) as usize).min(queue.len())];
        let own: Vec<&str> = ahead
            .iter()
            .filter(|p| Self::may_see(viewer, &p.team))
            .map(|p| p.job_id.as_str())
            .collect();
        let names = if own.is_empty() {
            HashMap::new()
        } else {
            self.db.job_names(&own).await?
        };
        Ok(ahead
            .iter()
            .take(MAX_AHEAD)
            .map(|p| {
                let named = names.get(&p.job_id);
                AheadJob {
                    position: p.position_in_pool,
                    team: p.team.clone(),
                    gpus: p.gpus,
                    priority: p.priority,
                    submitted_at: p.submitted_at,
                    id: named.map(|_| p.job_id.clone()),
                    name: named.map(|n| n.name.clone()),
                    user: named.map(|n| n.user.clone()),
                }
            })
            .collect())
    }

    /// What a viewer may do with a job: cancel it (its owner, the team's lead or an admin,
    /// while it is active) and re-run or clone it (a member of its team).
    pub(super) fn may_act(
        viewer: &Viewer,
        team: &str,
        user: &str,
        state: JobState,
    ) -> (bool, bool) {
        let can_cancel = state.is_active()
            && (user == viewer.user || viewer.is_lead_of(team) || viewer.is_admin);
        (can_cancel, viewer.is_member_of(team))
    }

    /// The jobs of `rows` as a viewer sees them. A row with its [`JobMore`] (read by
    /// [`crate::db::Db::job_detail`]) is for the job's own page and drawn whole: what is
    /// ahead of it in the queue, its events and preemptions, its parameters, GPU-hours and
    /// clones. List rows (the Jobs page, the home page, live events) come without and leave
    /// those empty: no list shows them, and every row's events and parameters were most of
    /// the Jobs page's database time and half of its bytes.
    pub(super) async fn to_jobs(
        &self,
        viewer: &Viewer,
        rows: Vec<(JobRow, Option<JobMore>)>,
    ) -> Result<Vec<Job>, Error> {
        let queues = self.queues_for(&rows).await?;
        // A whole job's origin came with it; a list row's are read for the list at once.
        let origins: Vec<&str> = rows
            .iter()
            .filter(|(_, more)| more.is_none())
            .filter_map(|(r, _)| r.cloned_from.as_deref())
            .collect();
        let origin_names = if origins.is_empty() {
            HashMap::new()
        } else {
            self.db.job_names(&origins).await?
        };
        let mut jobs = Vec::with_capacity(rows.len());
        for (r, more) in rows {
            let whole = more.is_some();
            let more = more.unwrap_or_default();
            let queue = queues.get(&r.pool);
            let p = queue.and_then(|q| q.iter().find(|p| p.job_id == r.id));
            let ahead = match (whole, queue, p) {
                (true, Some(q), Some(p)) => self.ahead_of(viewer, q, p.position_in_pool).await?,
                _ => Vec::new(),
            };
            let (can_cancel, can_rerun) = Self::may_act(viewer, &r.team, &r.user, r.state);
            let events = more.events;
            let version_note = match more.template {
                Some(t) if whole && viewer.is_member_of(&r.team) => {
                    self.version_note(&r, t).await?
                }
                _ => None,
            };
            let gpu_hours = if whole && !r.state.is_active() && r.admitted_at.is_some() {
                let h = crate::domain::accounting::job_hours(&more.intervals, self.cluster.now());
                Some(JobGpuHours {
                    allocated: h.allocated,
                    used: h.used,
                    idle: h.idle,
                    unmeasured: h.unmeasured,
                    efficiency: h.efficiency,
                })
            } else {
                None
            };
            let clones = more
                .clones
                .into_iter()
                .map(|(id, name)| JobLink { id, name })
                .collect();
            // Another team's job is neither named nor linked: this job's readers need not be
            // that team's.
            let origin = r.cloned_from.as_ref().and_then(|id| origin_names.get(id));
            let elsewhere = more.origin_elsewhere || origin.is_some_and(|o| o.team != r.team);
            let cloned_from = r
                .cloned_from
                .as_ref()
                .filter(|_| !elsewhere)
                .map(|id| JobLink {
                    id: id.clone(),
                    name: more
                        .origin_name
                        .or_else(|| origin.map(|o| o.name.clone()))
                        .unwrap_or_else(|| id.clone()),
                });
            let preemptions = events
                .iter()
                .filter(|e| e.kind == "preempted")
                .map(|e| Preemption {
                    at: e.at,
                    reason: e.reason.clone(),
                })
                .collect();
            jobs.push(Job {
                events: events
                    .into_iter()
                    .map(|e| JobEvent {
                        at: e.at,
                        kind: e.kind,
                        reason: e.reason,
                    })
                    .collect(),
                preemptions,
                ahead,
                queue_position: p.map(|p| p.position_in_pool),
                queue_position_in_team: p.map(|p| p.position_in_team),
                eta: p.and_then(|p| p.eta),
                pending_reason: match (r.state, p) {
                    (JobState::Queued, Some(p)) => Some(p.reason.clone()),
                    (JobState::Queued, None) if r.sent_at.is_none() => Some(
                        "Stored, not yet sent: the cluster is unreachable; Gantry retries every 10 s"
                            .to_string(),
                    ),
                    (JobState::Queued, None) => Some(
                        "Sent to the cluster; waiting for Kueue to list it in the queue"
                            .to_string(),
                    ),
                    _ => None,
                },
                nodes: nodes_for(r.gpus),
                id: r.id,
                name: r.name,
                template: r.template,
                template_version: r.template_version,
                team: r.team,
                user: r.user,
                pool: r.pool,
                gpus: r.gpus,
                priority: r.priority,
                state: r.state,
                created_at: r.created_at,
                admitted_at: r.admitted_at,
                finished_at: r.finished_at,
                params: if whole { r.params } else { Default::default() },
                max_runtime_s: r.max_runtime_s,
                node_names: if r.state.holds_gpus() {
                    r.node_names
                } else {
                    Vec::new()
                },
                can_cancel,
                can_rerun,
                version_note,
                gpu_hours,
                failure: r.failure,
                cloned_from,
                clones,
                clone_count: more.clone_count,
            });
        }
        Ok(jobs)
    }

    /// Whether the viewer may see job `id` (false for another team's job or none at all).
    pub async fn may_see_job(&self, viewer: &Viewer, id: &str) -> Result<bool, Error> {
        match self.visible_row(viewer, id).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind == crate::error::Kind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A job the viewer may see; another team's job is "not found", not "forbidden".
    pub(super) async fn visible_row(&self, viewer: &Viewer, id: &str) -> Result<JobRow, Error> {
        Self::visible(viewer, id, self.db.get_job(id), |r| r).await
    }

    /// What `read` reads of job `id` (its [`JobRow`] as `row` finds it in the answer), if
    /// the viewer may see the job; `id` is checked before anything is read.
    pub(super) async fn visible<T>(
        viewer: &Viewer,
        id: &str,
        read: impl std::future::Future<Output = Result<T, DbError>>,
        row: impl Fn(&T) -> &JobRow,
    ) -> Result<T, Error> {
        crate::input::single_line("id", id)?;
        let not_found = || Error::not_found(format!("no job with id '{id}'"));
        let found = match read.await {
            Ok(r) => r,
            Err(DbError::NotFound) => return Err(not_found()),
            Err(e) => return Err(e.into()),
        };
        if !Self::may_see(viewer, &row(&found).team) {
            return Err(not_found());
        }
        Ok(found)
    }

    /// A job as its own page shows it, read in one statement ([`crate::db::Db::job_detail`]).
    pub async fn get_job(&self, viewer: &Viewer, id: &str) -> Result<Job, Error> {
        // The job page and the API read it on every load: answered from memory while nothing
        // was written (`db::memo`); who may see it is checked on every call.
        let detail = self
            .db
            .memo(format!("job {id:?}"), || self.db.job_detail(id));
        let d = Self::visible(viewer, id, detail, |d| &d.row).await?;
        Ok(self
            .to_jobs(viewer, vec![(d.row, Some(d.more))])
            .await?
            .remove(0))
    }

    /// A page of the jobs the viewer may see that `filter` selects, newest first, with how
    /// many there are in all and the cursor of the next page.
    pub async fn list_jobs(&self, viewer: &Viewer, filter: JobFilter) -> Result<JobList, Error> {
        for (field, v) in [
            ("team", &filter.team),
            ("user", &filter.user),
            ("pool", &filter.pool),
            ("q", &filter.q),
        ] {
            crate::input::single_line_opt(field, v.as_deref())?;
        }
        let limit = super::page::page_size(filter.limit)?;
        let text = filter.q.as_deref().map(str::trim).filter(|t| !t.is_empty());
        if text.is_some_and(|t| t.chars().count() > 200) {
            return Err(Error::invalid("q", "at most 200 characters"));
        }
        // Trimmed, as the query takes it: `team=nlp%20` is team nlp.
        if let Some(t) = filter
            .team
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            if !Self::may_see(viewer, t) {
                return Err(Error::forbidden(format!(
                    "you can list only your own team's jobs, not team '{t}'"
                ))
                .with_field("team"));
            }
        }
        let terms = filter
            .terms(viewer)
            .map_err(|(field, message)| Error::invalid(field, message))?;
        if let (Some(f), Some(u)) = (terms.from, terms.until) {
            if u <= f {
                return Err(Error::invalid("to", "must not be before 'from'"));
            }
        }
        let after = super::page::cursor_place(filter.cursor.as_deref())?;
        let start = after
            .clone()
            .map(|(created_at, id)| app::model::JobKey { created_at, id });
        let q = JobQuery {
            terms,
            after,
            // One more than a page: whether there is a next page.
            limit: i64::from(limit) + 1,
        };
        // Before the read: every change numbered up to this is in what it finds.
        let live_seq = self.live_seq();
        let crate::db::JobPageRows {
            mut rows,
            total,
            newest,
        } = self.db.page_of_jobs_memo(&q).await?;
        let next_cursor = if rows.len() > limit as usize {
            rows.truncate(limit as usize);
            rows.last()
                .map(|r| super::page::encode_cursor(r.created_at, &r.id))
        } else {
            None
        };
        Ok(JobList {
            jobs: self
                .to_jobs(viewer, rows.into_iter().map(|r| (r, None)).collect())
                .await?,
            total,
            next_cursor,
            now: self.cluster.now(),
            live_seq,
            newest: newest.map(|(created_at, id)| app::model::JobKey { created_at, id }),
            after: start,
        })
    }

    #[tracing::instrument(skip(self, viewer), fields(user = %viewer.user))]
    pub async fn cancel_job(&self, viewer: &Viewer, id: &str) -> Result<Job, Error> {
        let row = self.visible_row(viewer, id).await?;
        if !(row.user == viewer.user || viewer.is_lead_of(&row.team) || viewer.is_admin) {
            return Err(Error::forbidden(format!(
                "only {} (who launched it), a lead of team {} or an admin can cancel this job",
                row.user, row.team
            )));
        }
        if !row.state.is_active() {
            return Err(Error::conflict(format!(
                "the job has already {}; only queued, admitted or running jobs can be cancelled",
                row.state
            )));
        }
        // The database first, with who cancelled; then the cluster. Should the cluster not
        // answer, the reconciler deletes workloads of cancelled jobs when it can.
        let at = self.cluster.now();
        let reason = format!("Cancelled by {}", viewer.user);
        let by_admin = viewer.is_admin && row.user != viewer.user && !viewer.is_lead_of(&row.team);
        // An admin acting on another team's job is an admin action: audited, in the same
        // transaction as the cancel.
        let entry = by_admin.then(|| {
            let mut entry = crate::db::AuditEntry::new(&viewer.user, "job.cancel", id, Utc::now());
            entry.before = Some(
                serde_json::json!({"state": row.state.as_str(), "team": row.team, "user": row.user}),
            );
            entry.after = Some(serde_json::json!({"state": "cancelled"}));
            entry.address = crate::context::current_client_addr();
            entry
        });
        let applied = self
            .db
            .transition_audited(
                &Transition {
                    job_id: id,
                    from: &[JobState::Queued, JobState::Admitted, JobState::Running],
                    to: JobState::Cancelled,
                    at,
                    reason: &reason,
                    node_names: None,
                    kind: None,
                },
                entry.as_ref(),
            )
            .await?;
        if applied {
            self.publish(LiveChange {
                job_id: id.to_string(),
                user: row.user.clone(),
                notify: false,
                team: row.team.clone(),
                pool: row.pool.clone(),
                state: JobState::Cancelled,
                at,
                row: Default::default(),
                seq: 0,
            });
        }
        if let Err(e) = self.cluster.cancel(id).await {
            tracing::warn!(job.id = %id, error = %e, "cluster did not delete the job yet; it will be retried");
        }
        self.sync().await;
        self.get_job(viewer, id).await
    }

    pub async fn home(&self, viewer: &Viewer) -> Result<HomeView, Error> {
        let mine = self
            .list_jobs(
                viewer,
                JobFilter {
                    mine: true,
                    active: true,
                    limit: Some(HOME_ACTIVE_JOBS),
                    ..Default::default()
                },
            )
            .await?;
        // The pools once: the viewer's quota bars are their teams' rows of the same answer.
        let pools = self.list_pools(viewer).await?;
        let quotas = pools
            .iter()
            .flat_map(|p| p.teams.iter())
            .filter(|q| viewer.is_member_of(&q.team))
            .cloned()
            .collect();
        Ok(HomeView {
            viewer: viewer.clone(),
            active_jobs: mine.jobs,
            active_total: mine.total,
            quotas,
            pools,
            now: self.cluster.now(),
        })
    }
}

/// The active jobs the home page lists; it says how many more there are and links to Jobs.
pub const HOME_ACTIVE_JOBS: u32 = 20;
