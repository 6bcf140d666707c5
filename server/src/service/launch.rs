//! A launch: checked against the template, the pool and the quotas, stored before it is sent,
//! sent to the cluster; what it would submit (the manifest) and whether it fits now.

use super::*;

/// A stored job as the cluster gets it (the reconciler re-sends these).
pub async fn workload_of(db: &crate::db::Db, row: &JobRow) -> anyhow::Result<WorkloadSpec> {
    let template = db
        .template_version(&row.template, row.template_version)
        .await?
        .ok_or_else(|| {
            anyhow::anyhow!(
                "job {} names template {} v{} that is not stored",
                row.id,
                row.template,
                row.template_version
            )
        })?;
    Ok(stored_workload(
        row,
        run_spec(&template, &row.name, &row.user, &row.params),
    ))
}

/// A stored job as a workload, with its submission time kept.
pub fn stored_workload(row: &JobRow, run: RunSpec) -> WorkloadSpec {
    WorkloadSpec {
        job_id: row.id.clone(),
        team: row.team.clone(),
        pool: row.pool.clone(),
        gpus: row.gpus,
        priority: row.priority,
        submitted_at: row.created_at,
        max_runtime_s: row.max_runtime_s,
        run,
    }
}

/// The longest job name a launch takes.
const MAX_NAME_CHARS: usize = 100;

/// The part of a name a re-run's name starts with: the name itself, or its first characters
/// when `"{base} · re-run N"` would be longer than a launch takes (room is kept for a number
/// of six digits, the same cut for every N, so that re-runs of one long name count on).
fn rerun_base(name: &str) -> String {
    // " · re-run " is 10 characters.
    const ROOM: usize = MAX_NAME_CHARS - 10 - 6;
    if name.chars().count() <= ROOM {
        return name.to_string();
    }
    name.chars()
        .take(ROOM)
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// A launch that passed every check, ready to store.
struct ValidLaunch {
    template: TemplateVersion,
    team: String,
    pool: String,
    gpus: u32,
    priority: Priority,
    params: Map<String, Value>,
    max_runtime_s: u64,
    name: Option<String>,
    /// The job it clones, checked visible to the viewer.
    from_job: Option<String>,
    /// That job's team.
    from_team: Option<String>,
}

impl ValidLaunch {
    /// The workload this launch is, as the cluster gets it.
    fn workload(&self, job_id: String, submitted_at: DateTime<Utc>, run: RunSpec) -> WorkloadSpec {
        WorkloadSpec {
            job_id,
            team: self.team.clone(),
            pool: self.pool.clone(),
            gpus: self.gpus,
            priority: self.priority,
            submitted_at,
            max_runtime_s: self.max_runtime_s,
            run,
        }
    }
}

impl Portal {
    async fn validate(&self, viewer: &Viewer, req: &LaunchRequest) -> Result<ValidLaunch, Error> {
        use crate::input::{json_single_line, single_line, single_line_opt};
        single_line("template", &req.template)?;
        single_line_opt("pool", req.pool.as_deref())?;
        single_line_opt("team", req.team.as_deref())?;
        single_line_opt("name", req.name.as_deref())?;
        for (key, value) in &req.params {
            let field = format!("params.{}", key.escape_debug());
            single_line(&field, key)?;
            json_single_line(&field, value)?;
        }
        let team = match &req.team {
            Some(t) if viewer.is_member_of(t) => t.clone(),
            Some(t) => {
                return Err(Error::forbidden(format!("you are not a member of team '{t}'")).with_field("team"))
            }
            None => viewer
                .primary_team()
                .ok_or_else(|| Error::invalid("team", "you are not a member of any team, so you cannot launch jobs yet; ask an admin to add you to one"))?
                .to_string(),
        };
        let templates = self.db.list_templates().await?;
        let exact = match req.template_version {
            None => None,
            Some(version) => {
                if let Some((_, true)) = self.db.template_state(&req.template).await? {
                    return Err(Error::invalid(
                        "template",
                        format!("template '{}' is deprecated: it takes no new launches; choose another template", req.template),
                    ));
                }
                Some(
                    self.db
                        .template_version(&req.template, version)
                        .await?
                        .ok_or_else(|| {
                            Error::invalid(
                                "template_version",
                                format!("template '{}' has no version {version}", req.template),
                            )
                        })?,
                )
            }
        };
        let template = exact
            .or_else(|| templates.iter().find(|t| t.name == req.template).cloned())
            .ok_or_else(|| {
                let known: Vec<&str> = templates.iter().map(|t| t.name.as_str()).collect();
                Error::invalid(
                    "template",
                    format!(
                        "unknown template '{}'; known templates: {}",
                        req.template,
                        known.join(", ")
                    ),
                )
            })?;
        let pools = self.cluster.pools().await?;
        let pool_name = req
            .pool
            .clone()
            .unwrap_or_else(|| template.default_pool.clone());
        let pool = pools.iter().find(|p| p.name == pool_name).ok_or_else(|| {
            let known: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            Error::invalid(
                "pool",
                format!("unknown pool '{pool_name}'; pools: {}", known.join(", ")),
            )
        })?;
        let gpus = req.gpus;
        if gpus == 0
            || (gpus <= GPUS_PER_NODE && !gpus.is_power_of_two())
            || (gpus > GPUS_PER_NODE && !gpus.is_multiple_of(GPUS_PER_NODE))
        {
            return Err(Error::invalid("gpus", format!("{gpus} GPUs is not a gang size: use 1, 2, 4 or 8 on one node, or a multiple of 8 for whole nodes")));
        }
        if !template.allowed_gpus.contains(&gpus) {
            let allowed: Vec<String> = template
                .allowed_gpus
                .iter()
                .map(|g| g.to_string())
                .collect();
            return Err(Error::invalid(
                "gpus",
                format!(
                    "template {} runs on {} GPUs, not {gpus}",
                    template.name,
                    allowed.join(", ")
                ),
            ));
        }
        if gpus > pool.gpus_total {
            return Err(Error::invalid(
                "gpus",
                format!(
                    "{} has {} GPUs in all: a {gpus}-GPU gang could never be admitted",
                    pool.name, pool.gpus_total
                ),
            ));
        }
        let mut params = Map::new();
        for (key, _) in req.params.iter() {
            if !template.params.iter().any(|p| &p.name == key) {
                let known: Vec<&str> = template.params.iter().map(|p| p.name.as_str()).collect();
                return Err(Error::invalid(
                    format!("params.{key}"),
                    format!(
                        "unknown parameter '{key}'; {} takes: {}",
                        template.name,
                        known.join(", ")
                    ),
                ));
            }
        }
        for spec in &template.params {
            let value = match req.params.get(&spec.name) {
                Some(v) => spec.check(v).map_err(|m| {
                    Error::invalid(
                        format!("params.{}", spec.name),
                        format!("{} {m}", spec.name),
                    )
                })?,
                None => spec.default.clone(),
            };
            params.insert(spec.name.clone(), value);
        }
        let max_runtime_s = req.max_runtime_s.unwrap_or(template.default_max_runtime_s);
        if !(MIN_RUNTIME_S..=MAX_RUNTIME_LIMIT_S).contains(&max_runtime_s) {
            return Err(Error::invalid("max_runtime_s", format!("must be between {MIN_RUNTIME_S} s (1 minute) and {MAX_RUNTIME_LIMIT_S} s (14 days), got {max_runtime_s}")));
        }
        let name = match req.name.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(n) if n.chars().count() > MAX_NAME_CHARS => {
                return Err(Error::invalid(
                    "name",
                    format!("must be at most {MAX_NAME_CHARS} characters"),
                ))
            }
            Some(n) if n.chars().any(char::is_control) => {
                return Err(Error::invalid(
                    "name",
                    "must not contain control characters",
                ))
            }
            Some(n) => Some(n.to_string()),
        };
        let (from_job, from_team) = match req.from_job.as_deref() {
            None => (None, None),
            Some(id) => {
                let row = self
                    .visible_row(viewer, id)
                    .await
                    .map_err(|e| e.with_field("from_job"))?;
                (Some(row.id), Some(row.team))
            }
        };
        Ok(ValidLaunch {
            from_job,
            from_team,
            template,
            team,
            pool: pool.name.clone(),
            gpus,
            priority: req.priority.unwrap_or_default(),
            params,
            max_runtime_s,
            name,
        })
    }

    #[tracing::instrument(skip(self, viewer, req, key), fields(user = %viewer.user, template = %req.template, gpus = req.gpus))]
    pub async fn launch_job(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
        key: Option<String>,
    ) -> Result<(Job, bool), Error> {
        self.launch(viewer, req, key, None).await
    }

    /// [`Self::launch_job`], holding `naming` (a re-run's lock on its name) until the job is
    /// stored or refused.
    async fn launch(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
        key: Option<String>,
        naming: Option<tokio::sync::MutexGuard<'_, ()>>,
    ) -> Result<(Job, bool), Error> {
        let body = serde_json::to_string(&req).map_err(internal)?;
        if let Some(key) = key.as_deref() {
            crate::input::single_line("Idempotency-Key", key)?;
            if key.is_empty() || key.len() > 200 {
                return Err(Error::invalid(
                    "Idempotency-Key",
                    "must be 1 to 200 characters",
                ));
            }
            if let Some(existing) = self.db.find_by_idempotency_key(&viewer.user, key).await? {
                return self.repeat(viewer, existing, &body).await;
            }
        }
        let v = self.validate(viewer, &req).await?;
        self.admissibility(&v).await?;
        let now = self.cluster.now();
        let id = uuid::Uuid::now_v7().to_string();
        let name = v
            .name
            .clone()
            .unwrap_or_else(|| format!("{}-{}", v.template.name, &id[id.len() - 6..]));
        let new = NewJob {
            id: &id,
            name: &name,
            template: &v.template.name,
            template_version: v.template.version,
            team: &v.team,
            user: &viewer.user,
            pool: &v.pool,
            gpus: v.gpus,
            priority: v.priority,
            params: &v.params,
            max_runtime_s: v.max_runtime_s,
            idempotency_key: key.as_deref(),
            request_body: &body,
            created_at: now,
            cloned_from: v.from_job.as_deref(),
        };
        // Another team's job is not named in this one's history: its readers need not be
        // that team's.
        let reason = match (&v.from_job, &v.from_team) {
            (Some(_), Some(from_team)) if *from_team != v.team => format!(
                "Launched by {} ({} v{}) from a job of team {from_team}",
                viewer.user, v.template.name, v.template.version
            ),
            (Some(from), _) => format!(
                "Launched by {} ({} v{}) from job {from}",
                viewer.user, v.template.name, v.template.version
            ),
            (None, _) => format!(
                "Launched by {} ({} v{})",
                viewer.user, v.template.name, v.template.version
            ),
        };
        let stored = self.db.insert_job(&new, &reason).await;
        drop(naming);
        match stored {
            Ok(()) => {}
            Err(DbError::Conflict) if key.is_some() => {
                // A concurrent request with the same key won the race: answer as a repeat.
                let existing = self
                    .db
                    .find_by_idempotency_key(&viewer.user, key.as_deref().unwrap_or_default())
                    .await?;
                return match existing {
                    Some(e) => self.repeat(viewer, e, &body).await,
                    None => Err(Error::conflict(
                        "a launch with this Idempotency-Key is in progress",
                    )),
                };
            }
            Err(e) => return Err(e.into()),
        }
        tracing::info!(job.id = %id, team = %v.team, pool = %v.pool, "job stored");
        // Stored first; now the cluster. If it is unreachable the job stays queued and the
        // reconciler sends it later.
        let spec = v.workload(
            id.clone(),
            now,
            run_spec(&v.template, &name, &viewer.user, &v.params),
        );
        match self.cluster.submit(spec).await {
            // The job is stored and the cluster has it: a failed note of that is not the
            // launch's failure (a 500 would have a client launch it again). Unnoted, the
            // resender sends it again, which the cluster takes as the same object.
            Ok(()) => {
                if let Err(e) = self.db.mark_sent(&id, self.cluster.now()).await {
                    tracing::warn!(job.id = %id, error = %e, "the job was sent but could not be noted as sent; the resender will send it again");
                }
            }
            Err(e) => {
                tracing::warn!(job.id = %id, error = %e, "cluster did not take the job yet; it will be retried")
            }
        }
        self.publish(LiveChange {
            job_id: id.clone(),
            user: viewer.user.clone(),
            notify: false,
            team: v.team,
            pool: v.pool,
            state: JobState::Queued,
            at: now,
            row: Default::default(),
            seq: 0,
        });
        self.sync().await;
        let job = self.get_job(viewer, &id).await?;
        Ok((job, true))
    }

    pub(super) async fn repeat(
        &self,
        viewer: &Viewer,
        existing: JobRow,
        body: &str,
    ) -> Result<(Job, bool), Error> {
        if existing.request_body.as_deref() != Some(body) {
            return Err(Error::invalid(
                "Idempotency-Key",
                "this key was already used for a different launch; use a new key for a new launch",
            ));
        }
        Ok((self.get_job(viewer, &existing.id).await?, false))
    }

    /// What the cluster would do with this launch now. A gang larger than the team may hold
    /// under the current quotas (`never`) is accepted and waits, as Kueue keeps it pending:
    /// quotas change and cohorts grow. (One larger than the pool is refused in `validate`.)
    async fn admissibility(&self, v: &ValidLaunch) -> Result<crate::cluster::Admissibility, Error> {
        let spec = v.workload(String::new(), self.cluster.now(), RunSpec::default());
        Ok(self.cluster.check(&spec).await?)
    }

    pub async fn check_launch(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
    ) -> Result<LaunchCheck, Error> {
        let v = self.validate(viewer, &req).await?;
        let a = self.admissibility(&v).await?;
        Ok(LaunchCheck {
            fits_now: a.fits_now,
            jobs_ahead: a.ahead,
            reason: a.reason,
            eta: a.eta,
            now: self.cluster.now(),
            cannot_start: a.never,
        })
    }

    /// The JobSet or TrainJob this launch would submit (Kubernetes back end only). The job id
    /// and name are placeholders until the launch.
    pub async fn launch_manifest(
        &self,
        viewer: &Viewer,
        req: LaunchRequest,
    ) -> Result<Option<String>, Error> {
        if !self.cluster.has_manifests() {
            return Ok(None);
        }
        let v = self.validate(viewer, &req).await?;
        let id = uuid::Uuid::nil().to_string();
        let name = v
            .name
            .clone()
            .unwrap_or_else(|| format!("{}-<id>", v.template.name));
        let w = v.workload(
            id,
            self.cluster.now(),
            run_spec(&v.template, &name, &viewer.user, &v.params),
        );
        Ok(self.cluster.manifest(&w).map(|yaml| {
            format!(
                "# What Launch submits (the job id, all zeros here, is assigned at launch)\n{yaml}"
            )
        }))
    }

    /// Launches a job again as it was: the same template version, parameters, GPUs, pool,
    /// priority and max runtime (or on the template's current version when asked), recorded
    /// as cloned from it. A repeated request with the same `Idempotency-Key` returns the
    /// first re-run.
    #[tracing::instrument(skip(self, viewer, key), fields(user = %viewer.user))]
    pub async fn rerun_job(
        &self,
        viewer: &Viewer,
        id: &str,
        opts: RerunRequest,
        key: Option<String>,
    ) -> Result<(Job, bool), Error> {
        let row = self.visible_row(viewer, id).await?;
        if !viewer.is_member_of(&row.team) {
            return Err(Error::forbidden(format!(
                "only members of team {} can re-run its jobs",
                row.team
            )));
        }
        // Held from before the key is looked up: a repeat sent together with the first waits
        // for it to be stored and then finds it (it was named one higher and refused).
        let naming = self.rerun_names.lock().await;
        if let Some(k) = key.as_deref() {
            crate::input::single_line("Idempotency-Key", k)?;
            if let Some(existing) = self.db.find_by_idempotency_key(&viewer.user, k).await? {
                if existing.cloned_from.as_deref() == Some(id) {
                    drop(naming);
                    return Ok((self.get_job(viewer, &existing.id).await?, false));
                }
            }
        }
        let mut params = row.params.clone();
        let template_version = if opts.use_current_version {
            // Parameters the current version no longer takes are dropped (listed on the page).
            if let Some(current) = self
                .db
                .list_templates()
                .await?
                .into_iter()
                .find(|t| t.name == row.template)
            {
                params.retain(|k, _| current.params.iter().any(|p| &p.name == k));
            }
            None
        } else {
            Some(row.template_version)
        };
        let base = match row.name.rsplit_once(" · re-run ") {
            Some((b, n)) if n.chars().all(|c| c.is_ascii_digit()) => b,
            _ => row.name.as_str(),
        };
        let base = rerun_base(base);
        let n = self.db.last_rerun_number(&row.team, &base).await? + 1;
        let req = LaunchRequest {
            template: row.template.clone(),
            gpus: row.gpus,
            pool: Some(row.pool.clone()),
            params,
            max_runtime_s: Some(row.max_runtime_s),
            name: Some(format!("{base} · re-run {n}")),
            priority: Some(row.priority),
            team: Some(row.team.clone()),
            template_version,
            from_job: Some(id.to_string()),
        };
        self.launch(viewer, req, key, Some(naming)).await
    }

    /// How a job's template version differs from the template's current one; `None` when it
    /// is the current one. Given the template's newest version and whether it is deprecated
    /// (as [`crate::db::JobMore`] reads them).
    pub(super) async fn version_note(
        &self,
        row: &JobRow,
        (newest, deprecated): (u32, bool),
    ) -> Result<Option<VersionNote>, Error> {
        if !deprecated && newest == row.template_version {
            return Ok(None);
        }
        let differences = match (
            deprecated,
            self.db
                .template_version(&row.template, row.template_version)
                .await?,
            self.db.template_version(&row.template, newest).await?,
        ) {
            (false, Some(old), Some(new)) => crate::domain::template::differences(&old, &new),
            _ => Vec::new(),
        };
        Ok(Some(VersionNote {
            current: (!deprecated).then_some(newest),
            deprecated,
            differences,
        }))
    }
}
