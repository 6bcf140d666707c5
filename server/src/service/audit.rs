//! The audit log: what each change records, and reading it (admins).

use super::*;

impl Portal {
    pub(super) async fn audit_change(
        &self,
        viewer: &Viewer,
        action: &str,
        target: &str,
        before: Option<&TemplateVersion>,
        after: Option<&TemplateVersion>,
        address: Option<String>,
    ) -> Result<(), Error> {
        let mut entry = crate::db::AuditEntry::new(&viewer.user, action, target, Utc::now());
        let shape = |t: &TemplateVersion| serde_json::to_value(t).unwrap_or_default();
        entry.before = before.map(shape);
        entry.after = after.map(shape);
        entry.address = address;
        self.audit(entry).await
    }

    /// Appends to the audit log (sign-ins of admins, admin actions).
    pub async fn audit(&self, entry: crate::db::AuditEntry) -> Result<(), Error> {
        Ok(self.db.append_audit(&entry).await?)
    }

    /// The audit log, newest first (admins only).
    pub async fn audit_log(
        &self,
        viewer: &Viewer,
        filter: crate::db::AuditFilter,
    ) -> Result<Vec<crate::db::AuditEntry>, Error> {
        if !viewer.is_admin {
            return Err(Error::forbidden("only admins read the audit log"));
        }
        crate::input::single_line_opt("actor", filter.actor.as_deref())?;
        crate::input::single_line_opt("action", filter.action.as_deref())?;
        crate::input::single_line_opt("target", filter.target.as_deref())?;
        Ok(self.db.audit(&filter).await?)
    }

    pub async fn audit_records(
        &self,
        viewer: &Viewer,
        actor: Option<String>,
        action: Option<String>,
        target: Option<String>,
    ) -> Result<Vec<AuditRecord>, Error> {
        let blank = |s: Option<String>| s.filter(|s| !s.trim().is_empty());
        let entries = self
            .audit_log(
                viewer,
                crate::db::AuditFilter {
                    actor: blank(actor),
                    action: blank(action),
                    target: blank(target),
                    limit: 500,
                },
            )
            .await?;
        Ok(entries
            .into_iter()
            .map(|e| AuditRecord {
                at: e.at,
                actor: e.actor,
                action: e.action,
                target: e.target,
                before: e.before,
                after: e.after,
                address: e.address,
            })
            .collect())
    }
}
