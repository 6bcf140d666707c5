//! Pools and quotas (with the version a quota edit checks).

use super::*;

#[derive(Clone, Debug)]
pub struct QuotaRow {
    pub team: String,
    pub pool: String,
    pub quota: QuotaSpec,
}

/// A quota change written inside an open transaction (see [`Db::begin_quota_update`]).
pub struct QuotaWrite {
    tx: sqlx::Transaction<'static, sqlx::Any>,
    changes: Arc<AtomicU64>,
}

impl QuotaWrite {
    pub async fn commit(self) -> Result<()> {
        // Counted when the commit returns or is dropped on the way, as `Db::commit` is.
        let _counts = Counted(&self.changes);
        self.tx.commit().await.map_err(map_err)
    }
    pub async fn rollback(self) -> Result<()> {
        self.tx.rollback().await.map_err(map_err)
    }
}

#[derive(Clone, Debug)]
pub struct PoolRow {
    pub name: String,
    pub gpu_model: String,
    pub nodes: u32,
    pub strategy: String,
}

/// The stored pools, with the pools named in `strict_fifo` queueing in `StrictFIFO` order.
pub fn pool_specs(rows: Vec<PoolRow>, strict_fifo: &[String]) -> Vec<PoolSpec> {
    rows.into_iter()
        .map(|p| PoolSpec {
            strategy: if strict_fifo.contains(&p.name) {
                QueueingStrategy::StrictFifo
            } else {
                QueueingStrategy::parse(&p.strategy).unwrap_or_default()
            },
            name: p.name,
            gpu_model: p.gpu_model,
            nodes: p.nodes,
        })
        .collect()
}

/// A quota row's queueing strategy (`None`: the pool's default).
pub(super) fn strategy_of(
    r: &sqlx::any::AnyRow,
) -> std::result::Result<Option<QueueingStrategy>, sqlx::Error> {
    let s: Option<String> = r.try_get("queueing_strategy")?;
    Ok(s.and_then(|s| QueueingStrategy::parse(&s)))
}

impl Db {
    /// The pool, for benchmarks that load data in bulk.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub async fn insert_pool(&self, p: &PoolRow, at: DateTime<Utc>) -> Result<()> {
        sqlx::query("INSERT INTO pool (pool_id, gpu_model, node_count, gpus_per_node, queueing_strategy, created_at) VALUES ($1, $2, $3, 8, $4, $5) ON CONFLICT (pool_id) DO NOTHING")
            .bind(&p.name)
            .bind(&p.gpu_model)
            .bind(p.nodes as i64)
            .bind(&p.strategy)
            .bind(ms(at))
            .execute(&*self.write())
            .await
            .map_err(map_err)?;
        Ok(())
    }

    pub async fn list_pools(&self) -> Result<Vec<PoolRow>> {
        let rows = sqlx::query(
            "SELECT pool_id, gpu_model, node_count, queueing_strategy FROM pool ORDER BY pool_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                Ok(PoolRow {
                    name: r.try_get("pool_id")?,
                    gpu_model: r.try_get("gpu_model")?,
                    nodes: r.try_get::<i64, _>("node_count")? as u32,
                    strategy: r.try_get("queueing_strategy")?,
                })
            })
            .collect()
    }

    pub async fn set_quota(&self, q: &QuotaRow, at: DateTime<Utc>) -> Result<()> {
        sqlx::query(
            "INSERT INTO quota (team_id, pool_id, nominal_gpus, borrowing_limit_gpus, lending_limit_gpus, queueing_strategy, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (team_id, pool_id) DO UPDATE SET nominal_gpus = excluded.nominal_gpus, \
             borrowing_limit_gpus = excluded.borrowing_limit_gpus, lending_limit_gpus = excluded.lending_limit_gpus, \
             queueing_strategy = excluded.queueing_strategy, updated_at = excluded.updated_at",
        )
        .bind(&q.team)
        .bind(&q.pool)
        .bind(q.quota.nominal as i64)
        .bind(q.quota.borrowing_limit.map(i64::from))
        .bind(q.quota.lending_limit.map(i64::from))
        .bind(q.quota.strategy.map(|s| s.as_str()))
        .bind(ms(at))
        .execute(&*self.write())
        .await
        .map_err(map_err)?;
        Ok(())
    }

    /// One quota with its version (the ETag of the quota API).
    pub async fn quota(&self, team: &str, pool: &str) -> Result<Option<(QuotaSpec, i64)>> {
        let row = sqlx::query(
            "SELECT nominal_gpus, borrowing_limit_gpus, lending_limit_gpus, queueing_strategy, version FROM quota WHERE team_id = $1 AND pool_id = $2",
        )
        .bind(team)
        .bind(pool)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(|r| {
            Ok((
                QuotaSpec {
                    nominal: r.try_get::<i64, _>("nominal_gpus")? as u32,
                    borrowing_limit: r
                        .try_get::<Option<i64>, _>("borrowing_limit_gpus")?
                        .map(|v| v as u32),
                    lending_limit: r
                        .try_get::<Option<i64>, _>("lending_limit_gpus")?
                        .map(|v| v as u32),
                    strategy: strategy_of(&r)?,
                },
                r.try_get::<i64, _>("version")?,
            ))
        })
        .transpose()
    }

    /// Writes a quota change, only if the quota is still at `version`, with its audit entry,
    /// in a transaction left open: the caller applies the change to the cluster, then commits
    /// it (or drops it, which rolls it back). `None` (nothing written) when someone else
    /// changed the quota first. The row stays locked until the end, so no other save can
    /// slip in between the check and the commit.
    pub async fn begin_quota_update(
        &self,
        q: &QuotaRow,
        version: i64,
        audit: &AuditEntry,
    ) -> Result<Option<QuotaWrite>> {
        let mut tx = self.begin_write().await?;
        let changed = sqlx::query(
            "UPDATE quota SET nominal_gpus = $1, borrowing_limit_gpus = $2, lending_limit_gpus = $3, queueing_strategy = $4, \
             updated_at = $5, version = version + 1 \
             WHERE team_id = $6 AND pool_id = $7 AND version = $8",
        )
        .bind(q.quota.nominal as i64)
        .bind(q.quota.borrowing_limit.map(i64::from))
        .bind(q.quota.lending_limit.map(i64::from))
        .bind(q.quota.strategy.map(|s| s.as_str()))
        .bind(ms(audit.at))
        .bind(&q.team)
        .bind(&q.pool)
        .bind(version)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected()
            > 0;
        if !changed {
            tx.rollback().await.map_err(map_err)?;
            return Ok(None);
        }
        insert_audit(&mut tx, audit).await?;
        Ok(Some(QuotaWrite {
            tx,
            changes: self.changes.clone(),
        }))
    }

    pub async fn list_quotas(&self) -> Result<Vec<QuotaRow>> {
        let rows = sqlx::query(
            "SELECT team_id, pool_id, nominal_gpus, borrowing_limit_gpus, lending_limit_gpus, queueing_strategy FROM quota ORDER BY team_id, pool_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                Ok(QuotaRow {
                    team: r.try_get("team_id")?,
                    pool: r.try_get("pool_id")?,
                    quota: QuotaSpec {
                        nominal: r.try_get::<i64, _>("nominal_gpus")? as u32,
                        borrowing_limit: r
                            .try_get::<Option<i64>, _>("borrowing_limit_gpus")?
                            .map(|v| v as u32),
                        lending_limit: r
                            .try_get::<Option<i64>, _>("lending_limit_gpus")?
                            .map(|v| v as u32),
                        strategy: strategy_of(r)?,
                    },
                })
            })
            .collect()
    }

    pub async fn count_pools(&self) -> Result<i64> {
        let r = sqlx::query("SELECT COUNT(*) AS n FROM pool")
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(r.try_get::<i64, _>("n")?)
    }
}
