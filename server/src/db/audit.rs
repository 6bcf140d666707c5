//! The append-only audit log.

use super::*;

pub(super) async fn insert_audit(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    a: &AuditEntry,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit (audit_id, at, actor, action, target, before, after, address) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&a.id)
    .bind(ms(a.at))
    .bind(&a.actor)
    .bind(&a.action)
    .bind(&a.target)
    .bind(a.before.as_ref().map(Value::to_string))
    .bind(a.after.as_ref().map(Value::to_string))
    .bind(a.address.as_deref())
    .execute(&mut **tx)
    .await
    .map_err(map_err)?;
    Ok(())
}

/// The `WHERE` clause of an audit read and its arguments.
fn audit_where(f: &AuditFilter, with_cursor: bool) -> (String, Vec<String>) {
    let mut sql = " WHERE 1 = 1".to_string();
    let mut binds: Vec<String> = Vec::new();
    if let Some(a) = &f.actor {
        binds.push(a.clone());
        sql.push_str(&format!(" AND actor = ${}", binds.len()));
    }
    if let Some(a) = &f.action {
        binds.push(a.clone());
        sql.push_str(&format!(" AND action = ${}", binds.len()));
    }
    // A prefix, compared as it is on both databases: with `LIKE`, SQLite ignored ASCII case
    // and Postgres did not, and `_` matched any character on both.
    if let Some(t) = &f.target {
        binds.push(t.clone());
        sql.push_str(&format!(
            " AND SUBSTR(target, 1, {}) = ${}",
            t.chars().count(),
            binds.len()
        ));
    }
    if let (true, Some((at, id))) = (with_cursor, &f.after) {
        let at = ms(*at);
        binds.push(id.clone());
        sql.push_str(&format!(
            " AND (at < {at} OR (at = {at} AND audit_id < ${}))",
            binds.len()
        ));
    }
    (sql, binds)
}

impl Db {
    /// How many entries `f`'s filters select, on every page.
    pub async fn count_audit(&self, f: &AuditFilter) -> Result<u64> {
        let (filter, binds) = audit_where(f, false);
        let sql = format!("SELECT COUNT(*) AS n FROM audit{filter}");
        let mut q = sqlx::query(&sql);
        for b in &binds {
            q = q.bind(b);
        }
        let row = q.fetch_one(&self.pool).await.map_err(map_err)?;
        let n: i64 = row.try_get("n")?;
        Ok(n.max(0) as u64)
    }

    pub async fn append_audit(&self, a: &AuditEntry) -> Result<()> {
        let mut tx = self.begin_write().await?;
        insert_audit(&mut tx, a).await?;
        self.commit(tx).await?;
        Ok(())
    }

    /// The audit log, newest first, filtered by exact actor / action and target prefix, from
    /// the place `f.after` names.
    pub async fn audit(&self, f: &AuditFilter) -> Result<Vec<AuditEntry>> {
        let (filter, binds) = audit_where(f, true);
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit{filter} ORDER BY at DESC, audit_id DESC LIMIT {}",
            f.limit.clamp(1, 100_000)
        );
        let mut q = sqlx::query(&sql);
        for b in &binds {
            q = q.bind(b);
        }
        let rows = q.fetch_all(&self.pool).await.map_err(map_err)?;
        rows.iter().map(audit_entry).collect()
    }

    /// A page of [`Db::audit`] and how many entries the filters select on every page, read in
    /// one statement, so the two agree however the log grows meanwhile. The count is joined
    /// to the page, so an empty page (nothing selected, or past the last entry) is one row
    /// that carries the count alone.
    pub async fn audit_page(&self, f: &AuditFilter) -> Result<(Vec<AuditEntry>, u64)> {
        // The count's arguments are the first of the page's: the place's come after them.
        let (count_filter, _) = audit_where(f, false);
        let (filter, binds) = audit_where(f, true);
        let sql = format!(
            "SELECT c.n, a.* FROM (SELECT COUNT(*) AS n FROM audit{count_filter}) c \
             LEFT JOIN (SELECT {AUDIT_COLUMNS} FROM audit{filter} \
             ORDER BY at DESC, audit_id DESC LIMIT {}) a ON 1 = 1 \
             ORDER BY a.at DESC, a.audit_id DESC",
            f.limit.clamp(1, 100_000)
        );
        let mut q = sqlx::query(&sql);
        for b in &binds {
            q = q.bind(b);
        }
        let rows = q.fetch_all(&self.pool).await.map_err(map_err)?;
        let total = match rows.first() {
            Some(r) => r.try_get::<i64, _>("n")?.max(0) as u64,
            None => 0,
        };
        let mut entries = Vec::with_capacity(rows.len());
        for r in &rows {
            if r.try_get::<Option<String>, _>("audit_id")?.is_some() {
                entries.push(audit_entry(r)?);
            }
        }
        Ok((entries, total))
    }
}

const AUDIT_COLUMNS: &str = "audit_id, at, actor, action, target, before, after, address";

fn audit_entry(r: &sqlx::any::AnyRow) -> Result<AuditEntry> {
    let json = |col: &str| -> Result<Option<Value>> {
        Ok(r.try_get::<Option<String>, _>(col)?
            .map(|s| serde_json::from_str(&s))
            .transpose()?)
    };
    Ok(AuditEntry {
        id: r.try_get("audit_id")?,
        at: from_ms(r.try_get("at")?),
        actor: r.try_get("actor")?,
        action: r.try_get("action")?,
        target: r.try_get("target")?,
        before: json("before")?,
        after: json("after")?,
        address: r.try_get("address")?,
    })
}
