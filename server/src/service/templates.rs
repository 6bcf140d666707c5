//! Templates: definitions admins write (checked with their line), immutable versions,
//! deprecation; the catalogue a viewer may launch from.

use super::*;

/// A template version as a viewer is shown it, with when their team last launched it.
fn shown(t: TemplateVersion, last_used_by_team: Option<DateTime<Utc>>) -> Template {
    Template {
        name: t.name,
        version: t.version,
        display_name: t.display_name,
        family: t.family,
        model_size: t.model_size,
        method: t.method,
        description: t.description,
        image: t.image,
        command: t.command,
        params: t.params,
        allowed_gpus: t.allowed_gpus,
        default_gpus: t.default_gpus,
        default_pool: t.default_pool,
        default_max_runtime_s: t.default_max_runtime_s,
        trainer_runtime: t.trainer_runtime,
        last_used_by_team,
    }
}

impl Portal {
    /// Creates a template (version 1) from its definition (admins only).
    pub(super) async fn create_template(
        &self,
        viewer: &Viewer,
        text: &str,
        address: Option<String>,
    ) -> Result<TemplateVersion, Error> {
        let t = self.parse_template(viewer, text).await?;
        if self.db.template_state(&t.name).await?.is_some() {
            return Err(Error::conflict(format!(
                "template '{}' exists; add a version with POST /api/v1/templates/{}/versions",
                t.name, t.name
            )));
        }
        let entry =
            Self::template_audit(viewer, "template.create", &t.name, None, Some(&t), address);
        self.db
            .insert_template(&t, Utc::now(), Some(&entry))
            .await?;
        Ok(t)
    }

    /// A new, immutable version of a template (admins only); jobs keep the version they ran.
    pub(super) async fn add_template_version(
        &self,
        viewer: &Viewer,
        name: &str,
        text: &str,
        address: Option<String>,
    ) -> Result<TemplateVersion, Error> {
        crate::input::single_line("name", name)?;
        let mut t = self.parse_template(viewer, text).await?;
        let Some((newest, deprecated)) = self.db.template_state(name).await? else {
            return Err(Error::not_found(format!("there is no template '{name}'")));
        };
        if t.name != name {
            return Err(Error::invalid(
                "template",
                format!("line 1: name: must be '{name}', the template in the address"),
            ));
        }
        if deprecated {
            return Err(Error::conflict(format!("template '{name}' is deprecated")));
        }
        let before = self.db.template_version(name, newest).await?;
        t.version = newest + 1;
        let entry = Self::template_audit(
            viewer,
            "template.version",
            name,
            before.as_ref(),
            Some(&t),
            address,
        );
        self.db
            .insert_template(&t, Utc::now(), Some(&entry))
            .await?;
        Ok(t)
    }

    /// Hides a template from Launch (admins only); old jobs still show it.
    pub async fn deprecate_template(
        &self,
        viewer: &Viewer,
        name: &str,
        address: Option<String>,
    ) -> Result<(), Error> {
        if !viewer.is_admin {
            return Err(Error::forbidden("only admins manage templates"));
        }
        crate::input::single_line("name", name)?;
        let Some((newest, _)) = self.db.template_state(name).await? else {
            return Err(Error::not_found(format!("there is no template '{name}'")));
        };
        let before = self.db.template_version(name, newest).await?;
        let mut entry =
            crate::db::AuditEntry::new(&viewer.user, "template.deprecate", name, Utc::now());
        entry.before =
            before.map(|t| serde_json::json!({"version": t.version, "deprecated": false}));
        entry.after = Some(serde_json::json!({"deprecated": true}));
        entry.address = address;
        if !self.db.deprecate_template(name, Some(&entry)).await? {
            return Err(Error::conflict(format!(
                "template '{name}' is already deprecated"
            )));
        }
        Ok(())
    }

    pub(super) async fn parse_template(
        &self,
        viewer: &Viewer,
        text: &str,
    ) -> Result<TemplateVersion, Error> {
        if !viewer.is_admin {
            return Err(Error::forbidden("only admins manage templates"));
        }
        let pools: Vec<(String, u32)> = self
            .db
            .list_pools()
            .await?
            .into_iter()
            .map(|p| (p.name, p.nodes * GPUS_PER_NODE))
            .collect();
        // Tab and newline belong to YAML; other control characters, written as they are or
        // as escapes (`"\0"`), are refused in every value, and newlines only in free text.
        crate::input::multi_line("template", text)?;
        let t = crate::domain::template_def::parse(text, &pools)
            .map_err(|why| Error::invalid("template", why))?;
        let fields = serde_json::to_value(&t).map_err(internal)?;
        crate::input::json_text("", &fields, &["description", "help"]).map_err(|e| {
            let at = e.field.unwrap_or_default();
            Error::invalid(
                "template",
                format!("{}: {}", at.trim_start_matches('.'), e.message),
            )
        })?;
        Ok(t)
    }

    pub async fn list_templates(&self, viewer: &Viewer) -> Result<Vec<Template>, Error> {
        let used = match viewer.primary_team() {
            Some(team) => self.db.last_used_by_team(team).await?,
            None => HashMap::new(),
        };
        Ok(self
            .db
            .list_templates()
            .await?
            .into_iter()
            .map(|t| {
                let last = used.get(&t.name).copied();
                shown(t, last)
            })
            .collect())
    }

    /// A page of the catalogue, by name: the whole catalogue is what Launch offers
    /// ([`Portal::list_templates`]); this is the same list a page at a time, searched on the
    /// server over name, display name and family (ASCII letters in either case).
    pub async fn templates_page(
        &self,
        viewer: &Viewer,
        q: Option<String>,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Result<TemplateList, Error> {
        crate::input::single_line_opt("q", q.as_deref())?;
        let limit = super::page::page_size(limit)? as usize;
        let after = match cursor.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
            None => None,
            Some(c) => Some(super::page::decode_name_cursor(c).ok_or_else(|| {
                Error::invalid(
                    "cursor",
                    "the next_cursor of an earlier page, as it was given",
                )
            })?),
        };
        let text = q
            .as_deref()
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty());
        let mut all: Vec<Template> = self
            .list_templates(viewer)
            .await?
            .into_iter()
            .filter(|t| {
                text.as_deref().is_none_or(|q| {
                    [&t.name, &t.display_name, &t.family]
                        .iter()
                        .any(|f| f.to_ascii_lowercase().contains(q))
                })
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        let total = all.len() as u64;
        let start = after.map_or(0, |name| all.partition_point(|t| t.name <= name));
        let mut templates: Vec<Template> = all.into_iter().skip(start).take(limit + 1).collect();
        let next_cursor = if templates.len() > limit {
            templates.truncate(limit);
            templates
                .last()
                .map(|t| super::page::encode_name_cursor(&t.name))
        } else {
            None
        };
        Ok(TemplateList {
            templates,
            total,
            next_cursor,
        })
    }

    pub async fn save_template(
        &self,
        viewer: &Viewer,
        name: Option<String>,
        definition: String,
    ) -> Result<Template, Error> {
        let address = crate::context::current_client_addr();
        let t = match name {
            None => self.create_template(viewer, &definition, address).await?,
            Some(n) => {
                self.add_template_version(viewer, &n, &definition, address)
                    .await?
            }
        };
        Ok(shown(t, None))
    }
}
