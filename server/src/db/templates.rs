//! Templates and their immutable versions.

use super::*;

pub(super) fn template_from_row(r: &AnyRow) -> Result<TemplateVersion> {
    let command: String = r.try_get("command")?;
    let params: String = r.try_get("params")?;
    let allowed: String = r.try_get("allowed_gpus")?;
    Ok(TemplateVersion {
        name: r.try_get("template_id")?,
        version: r.try_get::<i64, _>("version")? as u32,
        display_name: r.try_get("display_name")?,
        family: r.try_get("family")?,
        model_size: r.try_get("model_size")?,
        method: r.try_get("method")?,
        description: r.try_get("description")?,
        image: r.try_get("image")?,
        command: serde_json::from_str(&command)?,
        params: serde_json::from_str::<Vec<ParamSpec>>(&params)?,
        allowed_gpus: serde_json::from_str(&allowed)?,
        default_gpus: r.try_get::<i64, _>("default_gpus")? as u32,
        default_pool: r.try_get("default_pool")?,
        default_max_runtime_s: r.try_get::<i64, _>("default_max_runtime_s")? as u64,
        trainer_runtime: r.try_get::<Option<String>, _>("trainer_runtime")?,
    })
}

impl Db {
    /// Stores a template and its first version (or a new version of an existing one), with
    /// its audit entry in the same transaction: both are stored, or neither.
    pub async fn insert_template(
        &self,
        t: &TemplateVersion,
        at: DateTime<Utc>,
        audit: Option<&crate::domain::audit::AuditEntry>,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("INSERT INTO template (template_id, display_name, family, model_size, method, description, default_pool, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                     ON CONFLICT (template_id) DO UPDATE SET display_name = excluded.display_name, family = excluded.family, \
                     model_size = excluded.model_size, method = excluded.method, description = excluded.description, default_pool = excluded.default_pool")
            .bind(&t.name)
            .bind(&t.display_name)
            .bind(&t.family)
            .bind(&t.model_size)
            .bind(&t.method)
            .bind(&t.description)
            .bind(&t.default_pool)
            .bind(ms(at))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query("INSERT INTO template_version (template_id, version, image, command, params, allowed_gpus, default_gpus, default_max_runtime_s, created_at, trainer_runtime) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)")
            .bind(&t.name)
            .bind(t.version as i64)
            .bind(&t.image)
            .bind(serde_json::to_string(&t.command)?)
            .bind(serde_json::to_string(&t.params)?)
            .bind(serde_json::to_string(&t.allowed_gpus)?)
            .bind(t.default_gpus as i64)
            .bind(t.default_max_runtime_s as i64)
            .bind(ms(at))
            .bind(t.trainer_runtime.as_deref())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        if let Some(a) = audit {
            super::audit::insert_audit(&mut tx, a).await?;
        }
        self.commit(tx).await?;
        Ok(())
    }

    /// A template's newest version number and whether it is deprecated; `None` if unknown.
    pub async fn template_state(&self, id: &str) -> Result<Option<(u32, bool)>> {
        let row = sqlx::query(
            "SELECT t.deprecated, (SELECT MAX(v.version) FROM template_version v WHERE v.template_id = t.template_id) AS newest \
             FROM template t WHERE t.template_id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.map(|r| {
            Ok((
                r.try_get::<Option<i64>, _>("newest")?.unwrap_or(0) as u32,
                r.try_get::<i64, _>("deprecated")? != 0,
            ))
        })
        .transpose()
    }

    /// Hides a template from Launch; jobs keep showing the version they ran. The audit
    /// entry is written in the same transaction when it applies.
    pub async fn deprecate_template(
        &self,
        id: &str,
        audit: Option<&crate::domain::audit::AuditEntry>,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let changed = sqlx::query(
            "UPDATE template SET deprecated = 1 WHERE template_id = $1 AND deprecated = 0",
        )
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(map_err)?
        .rows_affected()
            > 0;
        if let (true, Some(a)) = (changed, audit) {
            super::audit::insert_audit(&mut tx, a).await?;
        }
        self.commit(tx).await?;
        Ok(changed)
    }

    /// One exact template version (deprecated or not): what a job ran.
    pub async fn template_version(
        &self,
        id: &str,
        version: u32,
    ) -> Result<Option<TemplateVersion>> {
        let row = sqlx::query(
            "SELECT t.template_id, t.display_name, t.family, t.model_size, t.method, t.description, t.default_pool, \
                    v.version, v.image, v.command, v.params, v.allowed_gpus, v.default_gpus, v.default_max_runtime_s, v.trainer_runtime \
             FROM template t JOIN template_version v ON v.template_id = t.template_id \
             WHERE t.template_id = $1 AND v.version = $2",
        )
        .bind(id)
        .bind(version as i64)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_err)?;
        row.as_ref().map(template_from_row).transpose()
    }

    /// The newest version of every template that is not deprecated.
    pub async fn list_templates(&self) -> Result<Vec<TemplateVersion>> {
        let rows = sqlx::query(
            "SELECT t.template_id, t.display_name, t.family, t.model_size, t.method, t.description, t.default_pool, \
                    v.version, v.image, v.command, v.params, v.allowed_gpus, v.default_gpus, v.default_max_runtime_s, v.trainer_runtime \
             FROM template t JOIN template_version v ON v.template_id = t.template_id \
             WHERE t.deprecated = 0 \
               AND v.version = (SELECT MAX(v2.version) FROM template_version v2 WHERE v2.template_id = t.template_id) \
             ORDER BY t.family, t.template_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter().map(template_from_row).collect()
    }

    /// template → when the team last launched it.
    pub async fn last_used_by_team(&self, team: &str) -> Result<HashMap<String, DateTime<Utc>>> {
        let rows = sqlx::query("SELECT template_id, MAX(created_at) AS last FROM job WHERE team_id = $1 GROUP BY template_id")
            .bind(team)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| Ok((r.try_get("template_id")?, from_ms(r.try_get("last")?))))
            .collect()
    }
}
