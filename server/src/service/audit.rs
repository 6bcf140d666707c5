//! The audit log: what each change records, and reading it (admins).

use super::*;

impl Portal {
    pub(super) fn template_audit(
        viewer: &Viewer,
        action: &str,
        target: &str,
        before: Option<&TemplateVersion>,
        after: Option<&TemplateVersion>,
        address: Option<String>,
    ) -> crate::db::AuditEntry {
        let mut entry = crate::db::AuditEntry::new(&viewer.user, action, target, Utc::now());
        let shape = |t: &TemplateVersion| serde_json::to_value(t).unwrap_or_default();
        entry.before = before.map(shape);
        entry.after = after.map(shape);
        entry.address = address;
        entry
    }

    /// Appends to the audit log (sign-ins of admins, admin actions).
    pub async fn audit(&self, entry: crate::db::AuditEntry) -> Result<(), Error> {
        Ok(self.db.append_audit(&entry).await?)
    }

    /// A page of the audit log, newest first, from the place `cursor` names (admins only).
    pub async fn audit_log(
        &self,
        viewer: &Viewer,
        mut filter: crate::db::AuditFilter,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<AuditPage, Error> {
        self.may_read_audit(viewer, &filter)?;
        normalize(&mut filter);
        let limit = super::page::page_size(limit)?;
        filter.after = super::page::cursor_place(cursor)?;
        // One more than a page: whether there is a next page.
        filter.limit = i64::from(limit) + 1;
        let (mut entries, total) = self.db.audit_page(&filter).await?;
        let next_cursor = if entries.len() > limit as usize {
            entries.truncate(limit as usize);
            entries
                .last()
                .map(|e| super::page::encode_cursor(e.at, &e.id))
        } else {
            None
        };
        Ok(AuditPage {
            entries,
            total,
            next_cursor,
        })
    }

    /// Every entry the filters select, newest first, for a download: at most
    /// [`EXPORT_MAX`], and whether more were left out.
    pub async fn audit_export(
        &self,
        viewer: &Viewer,
        mut filter: crate::db::AuditFilter,
    ) -> Result<(Vec<crate::db::AuditEntry>, bool), Error> {
        self.may_read_audit(viewer, &filter)?;
        normalize(&mut filter);
        filter.after = None;
        filter.limit = EXPORT_MAX + 1;
        let mut entries = self.db.audit(&filter).await?;
        let cut = entries.len() > EXPORT_MAX as usize;
        entries.truncate(EXPORT_MAX as usize);
        Ok((entries, cut))
    }

    fn may_read_audit(
        &self,
        viewer: &Viewer,
        filter: &crate::db::AuditFilter,
    ) -> Result<(), Error> {
        if !viewer.is_admin {
            return Err(Error::forbidden("only admins read the audit log"));
        }
        crate::input::single_line_opt("actor", filter.actor.as_deref())?;
        crate::input::single_line_opt("action", filter.action.as_deref())?;
        crate::input::single_line_opt("target", filter.target.as_deref())?;
        Ok(())
    }

    pub async fn audit_records(
        &self,
        viewer: &Viewer,
        actor: Option<String>,
        action: Option<String>,
        target: Option<String>,
        cursor: Option<String>,
    ) -> Result<AuditList, Error> {
        let blank = |s: Option<String>| s.filter(|s| !s.trim().is_empty());
        let page = self
            .audit_log(
                viewer,
                crate::db::AuditFilter {
                    actor: blank(actor),
                    action: blank(action),
                    target: blank(target),
                    ..Default::default()
                },
                cursor.as_deref(),
                None,
            )
            .await?;
        Ok(AuditList {
            records: page
                .entries
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
                .collect(),
            total: page.total,
            next_cursor: page.next_cursor,
        })
    }
}

/// The most entries one download of the audit log holds.
pub const EXPORT_MAX: i64 = 100_000;

/// A page of the audit log as the API gives it.
#[derive(Debug, serde::Serialize)]
pub struct AuditPage {
    pub entries: Vec<crate::db::AuditEntry>,
    pub total: u64,
    pub next_cursor: Option<String>,
}

/// A blank filter (an empty `actor=` in a query, a field left with a space in it) is no
/// filter, as the jobs list takes it; a value is taken without the spaces around it.
fn normalize(filter: &mut crate::db::AuditFilter) {
    for f in [&mut filter.actor, &mut filter.action, &mut filter.target] {
        *f = f
            .take()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty());
    }
}
