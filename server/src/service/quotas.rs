//! Quotas: each team × pool cell with its live use, edits checked and audited (with the
//! version check), and the what-if preview of a draft.

use super::*;

/// The pools, their live use, the quotas and the queues a quota cell is figured from.
struct QuotaContext {
    pools: Vec<crate::db::PoolRow>,
    status: Vec<crate::cluster::PoolStatus>,
    quotas: Vec<crate::db::QuotaRow>,
    queues: HashMap<String, Arc<Vec<PendingWorkload>>>,
}

/// Logs an internal failure with the request id and returns what the user may see.
/// A quota change: the nominal quota as given; the borrowing and lending limits and the
/// queueing strategy only where `Some` (`Some(None)`: no borrowing limit / Kueue's default,
/// lend all / the pool's default). A field left out keeps its value.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QuotaEdit {
    pub nominal: u32,
    pub borrowing_limit: Option<Option<u32>>,
    pub lending_limit: Option<Option<u32>>,
    pub strategy: Option<Option<crate::cluster::QueueingStrategy>>,
}

impl QuotaEdit {
    /// From the Quotas page's draft: every field set.
    pub fn from_draft(d: &app::model::QuotaDraft) -> Result<Self, Error> {
        Ok(QuotaEdit {
            nominal: d.nominal_gpus,
            borrowing_limit: Some(d.borrowing_limit_gpus),
            lending_limit: Some(d.lending_limit_gpus),
            strategy: Some(Some(parse_strategy(&d.queueing_strategy)?)),
        })
    }
    /// The quota this edit gives, on top of `before`.
    pub fn apply(&self, before: &crate::cluster::QuotaSpec) -> crate::cluster::QuotaSpec {
        crate::cluster::QuotaSpec {
            nominal: self.nominal,
            borrowing_limit: self.borrowing_limit.unwrap_or(before.borrowing_limit),
            lending_limit: self.lending_limit.unwrap_or(before.lending_limit),
            strategy: self.strategy.unwrap_or(before.strategy),
        }
    }
}

/// `BestEffortFIFO` or `StrictFIFO`, or a 422 naming `queueing_strategy`.
pub fn parse_strategy(s: &str) -> Result<crate::cluster::QueueingStrategy, Error> {
    crate::cluster::QueueingStrategy::parse(s).ok_or_else(|| {
        Error::invalid(
            "queueing_strategy",
            format!("must be BestEffortFIFO or StrictFIFO (got {s:?})"),
        )
    })
}

/// What a quota may be in a pool of `capacity` GPUs, checked the same for a save and for a
/// preview: a 422 naming the field.
fn check_quota(pool: &str, capacity: u32, quota: &crate::cluster::QuotaSpec) -> Result<(), Error> {
    if quota.nominal > capacity {
        return Err(Error::invalid(
            "nominal_gpus",
            format!("{pool} has {capacity} GPUs; a nominal quota can be 0 to {capacity}"),
        ));
    }
    if quota.borrowing_limit.is_some_and(|b| b > capacity) {
        return Err(Error::invalid(
            "borrowing_limit_gpus",
            format!("{pool} has {capacity} GPUs; a borrowing limit can be 0 to {capacity}, or null for no limit"),
        ));
    }
    if quota.lending_limit.is_some_and(|l| l > quota.nominal) {
        return Err(Error::invalid(
            "lending_limit_gpus",
            format!(
                "a lending limit can be 0 to the nominal quota ({} GPUs), or null to lend all of it",
                quota.nominal
            ),
        ));
    }
    Ok(())
}

impl Portal {
    /// Every team's quota in every pool with live use and queued demand (admins only).
    pub async fn quota_cells(&self, viewer: &Viewer) -> Result<Vec<QuotaCell>, Error> {
        if !viewer.is_admin {
            return Err(Error::forbidden("only admins see every team's quotas"));
        }
        let ctx = self.quota_context().await?;
        let mut cells = Vec::new();
        for q in &ctx.quotas {
            if let Some(cell) = self.quota_cell(&q.team, &q.pool, &ctx).await? {
                cells.push(cell);
            }
        }
        Ok(cells)
    }

    /// What every quota cell is figured from, read once.
    async fn quota_context(&self) -> Result<QuotaContext, Error> {
        let pools = self.db.list_pools().await?;
        let mut queues = HashMap::new();
        for p in &pools {
            // A cluster that does not answer costs the queued figure, not the page.
            if let Ok(q) = self.cluster.pending(&p.name).await {
                queues.insert(p.name.clone(), q);
            }
        }
        Ok(QuotaContext {
            pools,
            status: self.cluster.pools().await?,
            quotas: self.db.list_quotas().await?,
            queues,
        })
    }

    async fn quota_cell(
        &self,
        team: &str,
        pool: &str,
        ctx: &QuotaContext,
    ) -> Result<Option<QuotaCell>, Error> {
        let Some((spec, version)) = self.db.quota(team, pool).await? else {
            return Ok(None);
        };
        let Some(p) = ctx.pools.iter().find(|p| p.name == pool) else {
            return Ok(None);
        };
        let pool_status = ctx.status.iter().find(|s| s.name == pool);
        let live = pool_status.and_then(|s| s.teams.iter().find(|t| t.team == team));
        let lent_gpus = pool_status.map_or(0, |s| {
            let idle = |t: &crate::cluster::TeamUse| t.quota.nominal.saturating_sub(t.used);
            let borrowed: u32 = s.teams.iter().map(|t| t.borrowed).sum();
            let idle_all: u32 = s.teams.iter().map(idle).sum();
            match live {
                Some(me) if borrowed > 0 && idle_all > 0 => {
                    ((borrowed as f64 * idle(me) as f64 / idle_all as f64).round() as u32)
                        .min(idle(me))
                }
                _ => 0,
            }
        });
        let nominal_sum = ctx
            .quotas
            .iter()
            .filter(|q| q.pool == pool)
            .map(|q| q.quota.nominal)
            .sum();
        let queued_gpus = ctx.queues.get(pool).map_or(0, |q| {
            q.iter().filter(|w| w.team == team).map(|w| w.gpus).sum()
        });
        Ok(Some(QuotaCell {
            team: team.to_string(),
            pool: pool.to_string(),
            nominal_gpus: spec.nominal,
            borrowing_limit_gpus: spec.borrowing_limit,
            lending_limit_gpus: spec.lending_limit,
            queueing_strategy: spec
                .strategy
                .or(live.and_then(|t| t.quota.strategy))
                .unwrap_or_else(|| {
                    crate::cluster::QueueingStrategy::parse(&p.strategy).unwrap_or_default()
                })
                .as_str()
                .to_string(),
            version,
            used_gpus: live.map_or(0, |t| t.used),
            borrowed_gpus: live.map_or(0, |t| t.borrowed),
            lent_gpus,
            queued_gpus,
            pool_gpus: p.nodes * app::model::GPUS_PER_NODE,
            pool_nominal_sum: nominal_sum,
        }))
    }

    /// One quota (admins only); 404 for an unknown team × pool.
    pub async fn quota_for(
        &self,
        viewer: &Viewer,
        team: &str,
        pool: &str,
    ) -> Result<QuotaCell, Error> {
        if !viewer.is_admin {
            return Err(Error::forbidden("only admins see every team's quotas"));
        }
        crate::input::single_line("team", team)?;
        crate::input::single_line("pool", pool)?;
        let ctx = self.quota_context().await?;
        self.quota_cell(team, pool, &ctx)
            .await?
            .ok_or_else(|| Error::not_found(format!("team {team} has no quota in {pool}")))
    }

    /// Sets a team's quota in a pool (admins only), if it is still at `if_match` (`None`:
    /// unconditionally). The version is checked and the change written in a database
    /// transaction, then applied to the cluster (on Kubernetes the ClusterQueue, never forcing
    /// fields others own), then committed; edits are one at a time.
    pub async fn set_quota(
        &self,
        viewer: &Viewer,
        team: &str,
        pool: &str,
        quota: QuotaEdit,
        if_match: Option<i64>,
        address: Option<String>,
    ) -> Result<QuotaCell, Error> {
        if !viewer.is_admin {
            return Err(Error::forbidden("only admins change quotas"));
        }
        crate::input::single_line("team", team)?;
        crate::input::single_line("pool", pool)?;
        let pools = self.db.list_pools().await?;
        let Some(p) = pools.iter().find(|p| p.name == pool) else {
            return Err(Error::not_found(format!("there is no pool named '{pool}'")));
        };
        let capacity = p.nodes * app::model::GPUS_PER_NODE;
        let _one_at_a_time = self.quota_edits.lock().await;
        let Some((before, version)) = self.db.quota(team, pool).await? else {
            return Err(Error::not_found(format!(
                "team {team} has no quota in {pool}"
            )));
        };
        if if_match.is_some_and(|v| v != version) {
            return Err(Error::conflict(format!(
                "this quota was changed by someone else since you loaded it (now version {version}); reload it and apply your change again"
            )));
        }
        // Fields the edit leaves out keep their stored values.
        let quota = quota.apply(&before);
        check_quota(pool, capacity, &quota)?;
        let now = self.cluster.now();
        // The audit log records when people acted: real time, not the (sim) cluster clock.
        let mut audit = crate::db::AuditEntry::new(
            &viewer.user,
            "quota.set",
            &format!("{team}/{pool}"),
            Utc::now(),
        );
        let shape = |q: &crate::cluster::QuotaSpec| {
            serde_json::json!({
                "nominal_gpus": q.nominal,
                "borrowing_limit_gpus": q.borrowing_limit,
                "lending_limit_gpus": q.lending_limit,
                "queueing_strategy": q.strategy.map(|s| s.as_str()),
            })
        };
        audit.before = Some(shape(&before));
        audit.after = Some(shape(&quota));
        audit.address = address;
        let row = crate::db::QuotaRow {
            team: team.to_string(),
            pool: pool.to_string(),
            quota,
        };
        // The version is checked and the change written in the database first, the cluster
        // changed next, the write committed last: a cluster that refuses leaves nothing
        // stored, and a commit that fails puts the cluster back.
        let Some(write) = self.db.begin_quota_update(&row, version, &audit).await? else {
            return Err(Error::conflict(
                "this quota was changed by someone else at the same moment; reload it and apply your change again",
            ));
        };
        if let Err(e) = self.cluster.set_quota(team, pool, quota).await {
            if let Err(db) = write.rollback().await {
                tracing::warn!(team, pool, error = %db, "could not roll back a quota write the cluster refused");
            }
            return Err(e.into());
        }
        if let Err(e) = write.commit().await {
            tracing::error!(team, pool, error = %e, "could not store a quota the cluster accepted; putting the cluster back");
            if let Err(back) = self.cluster.set_quota(team, pool, before).await {
                tracing::error!(team, pool, error = %back, nominal = before.nominal, borrowing_limit = ?before.borrowing_limit, "could not put the cluster's quota back: the cluster and the database disagree");
            }
            return Err(e.into());
        }
        tracing::info!(team, pool, by = %viewer.user, nominal = quota.nominal, borrowing_limit = ?quota.borrowing_limit, lending_limit = ?quota.lending_limit, strategy = ?quota.strategy, "quota set");
        // What the new quota admitted at once is in the database before the answer (the
        // test saw a race here: the job still queued for a moment after Save).
        self.sync().await;
        self.publish(LiveChange {
            job_id: String::new(),
            user: String::new(),
            notify: false,
            team: team.to_string(),
            pool: pool.to_string(),
            state: JobState::Queued,
            at: now,
            row: Default::default(),
            seq: 0,
        });
        self.quota_for(viewer, team, pool).await
    }

    /// What-if: the last `days` of real launches replayed under the current quotas and under
    /// the current ones with `changes` applied (admins only).
    pub async fn preview_quotas(
        &self,
        viewer: &Viewer,
        changes: Vec<(String, String, QuotaEdit)>,
        days: i64,
    ) -> Result<QuotaPreview, Error> {
        if !viewer.is_admin {
            return Err(Error::forbidden("only admins preview quota changes"));
        }
        // Each error names the change it is of: `changes[1].nominal_gpus`.
        let at = |i: usize| {
            move |e: Error| {
                let field = match &e.field {
                    Some(f) => format!("changes[{i}].{f}"),
                    None => format!("changes[{i}]"),
                };
                e.with_field(field)
            }
        };
        for (i, (team, pool, _)) in changes.iter().enumerate() {
            crate::input::single_line("team", team).map_err(at(i))?;
            crate::input::single_line("pool", pool).map_err(at(i))?;
        }
        let started = std::time::Instant::now();
        let rows = self.db.list_pools().await?;
        let capacity_of = |pool: &str| {
            rows.iter()
                .find(|p| p.name == pool)
                .map(|p| p.nodes * app::model::GPUS_PER_NODE)
        };
        let current: Vec<(String, String, crate::cluster::QuotaSpec)> = self
            .db
            .list_quotas()
            .await?
            .into_iter()
            .map(|q| (q.team, q.pool, q.quota))
            .collect();
        let mut draft = current.clone();
        for (i, (team, pool, q)) in changes.into_iter().enumerate() {
            match draft.iter_mut().find(|(t, p, _)| *t == team && *p == pool) {
                Some(slot) => {
                    let quota = q.apply(&slot.2);
                    let capacity = capacity_of(&pool).unwrap_or(0);
                    check_quota(&pool, capacity, &quota).map_err(at(i))?;
                    slot.2 = quota;
                }
                None => {
                    return Err(Error::invalid(
                        format!("changes[{i}]"),
                        format!("team {team} has no quota in {pool} to change"),
                    ))
                }
            }
        }
        let pools = crate::db::pool_specs(rows, &[]);
        let to = self.cluster.now();
        let from = to - chrono::Duration::days(days);
        let trace: Vec<crate::whatif::TraceJob> = self
            .db
            .launches_since(from)
            .await?
            .into_iter()
            .map(
                |(team, pool, gpus, priority, submitted_at, admitted, finished)| {
                    crate::whatif::TraceJob {
                        team,
                        pool,
                        gpus,
                        priority,
                        submitted_at,
                        runtime_s: (finished.unwrap_or(to) - admitted).num_seconds().max(1) as u64,
                    }
                },
            )
            .collect();
        let (now_out, draft_out) = tokio::task::spawn_blocking(move || {
            (
                crate::whatif::replay(&pools, &current, &trace),
                crate::whatif::replay(&pools, &draft, &trace),
            )
        })
        .await
        .map_err(internal)?;
        Ok(QuotaPreview {
            from,
            to,
            chart_svg: crate::whatif::wait_chart(&now_out, &draft_out),
            launches: now_out.iter().map(|o| o.jobs).sum(),
            current: now_out,
            draft: draft_out,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }
}
