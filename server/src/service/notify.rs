//! Notifications: each user picks, per event (started, succeeded, failed, preempted, idle for
//! 30 minutes), how to be told — in Gantry (the list in the top bar), the browser's
//! notifications, their webhooks. A team lead may add a team webhook for the team's failures
//! and idle jobs. The notifier reads the job events in order from a stored cursor and turns
//! each into notifications and deliveries, each at most once (unique keys); the sender posts
//! due deliveries with retries and backoff and keeps a log a user can read.

use super::*;
use crate::db::{DeliveryRow, WebhookRow};
use crate::domain::notify::{self, Channels, Message, EVENTS, TEAM_EVENTS};

fn webhook_info(w: &WebhookRow) -> WebhookInfo {
    WebhookInfo {
        id: w.id.clone(),
        url: notify::redact_webhook_url(&w.url),
        kind: w.kind.clone(),
        events: w.events.clone(),
        team: w.team.clone(),
        created_by: w.created_by.clone(),
        created_at: w.created_at,
    }
}

fn delivery_info(d: &DeliveryRow) -> DeliveryInfo {
    DeliveryInfo {
        id: d.id.clone(),
        event: d.event.clone(),
        job_id: d.job_id.clone(),
        state: d.state.clone(),
        attempts: d.attempts,
        last_status: d.last_status,
        last_error: d.last_error.clone(),
        created_at: d.created_at,
        delivered_at: d.delivered_at,
        next_at: (d.state == "pending").then_some(d.next_at),
    }
}

/// The most notification ids one "mark read" takes.
pub const MAX_READ_IDS: usize = 100;

impl Portal {
    /// The viewer's channels per event, their webhooks and their teams' webhooks.
    pub async fn notification_settings(
        &self,
        viewer: &Viewer,
    ) -> Result<NotificationSettings, Error> {
        let prefs = self.db.notification_prefs(&viewer.user).await?;
        let teams: Vec<String> = viewer.teams.iter().map(|m| m.team.clone()).collect();
        let hooks = self.db.webhooks_of(&viewer.user, &teams).await?;
        Ok(NotificationSettings {
            prefs: EVENTS
                .iter()
                .map(|e| {
                    let c = prefs.get(*e).copied().unwrap_or_default();
                    NotificationPref {
                        event: e.to_string(),
                        in_app: c.in_app,
                        browser: c.browser,
                        webhook: c.webhook,
                    }
                })
                .collect(),
            webhooks: hooks.iter().map(webhook_info).collect(),
            lead_of: viewer
                .teams
                .iter()
                .filter(|m| m.role == Role::Lead)
                .map(|m| m.team.clone())
                .collect(),
        })
    }

    pub async fn save_notification_prefs(
        &self,
        viewer: &Viewer,
        prefs: Vec<NotificationPref>,
    ) -> Result<NotificationSettings, Error> {
        let mut out = Vec::new();
        for (i, p) in prefs.iter().enumerate() {
            if !EVENTS.contains(&p.event.as_str()) {
                return Err(Error::invalid(
                    format!("prefs[{i}].event"),
                    format!("one of {}", EVENTS.join(", ")),
                ));
            }
            if out.iter().any(|(e, _)| e == &p.event) {
                return Err(Error::invalid(
                    format!("prefs[{i}].event"),
                    format!("'{}' is given twice", p.event),
                ));
            }
            out.push((
                p.event.clone(),
                Channels {
                    in_app: p.in_app,
                    browser: p.browser,
                    webhook: p.webhook,
                },
            ));
        }
        self.db.set_notification_prefs(&viewer.user, &out).await?;
        self.notification_settings(viewer).await
    }

    /// Adds a webhook: the viewer's own, or (`team`) a team's, for its leads. The secret that
    /// signs its deliveries is shown once, here.
    pub async fn create_webhook(
        &self,
        viewer: &Viewer,
        req: NewWebhook,
    ) -> Result<CreatedWebhook, Error> {
        crate::input::single_line("url", &req.url)?;
        let url = url::Url::parse(req.url.trim()).map_err(|e| {
            Error::invalid(
                "url",
                format!("not a URL ({e}); e.g. https://hooks.slack.com/services/…"),
            )
        })?;
        if !matches!(url.scheme(), "https" | "http") || url.host_str().is_none() {
            return Err(Error::invalid("url", "an http:// or https:// address"));
        }
        // An address written out is checked now; a name, on each delivery (it may resolve
        // elsewhere by then).
        if let Some(ip) = literal_ip(&url) {
            if !notify::webhook_may_reach(ip, &self.webhook_networks) {
                return Err(Error::invalid("url", notify::unreachable_address(ip)));
            }
        }
        if !matches!(req.kind.as_str(), "slack" | "generic") {
            return Err(Error::invalid(
                "kind",
                "'slack' (Slack-compatible JSON) or 'generic' (JSON signed with HMAC-SHA256)",
            ));
        }
        let allowed: &[&str] = if req.team.is_some() {
            &TEAM_EVENTS
        } else {
            &EVENTS
        };
        if req.events.is_empty() {
            return Err(Error::invalid(
                "events",
                format!("pick at least one of {}", allowed.join(", ")),
            ));
        }
        for e in &req.events {
            if !allowed.contains(&e.as_str()) {
                return Err(Error::invalid(
                    "events",
                    format!("'{e}' is not one of {}", allowed.join(", ")),
                ));
            }
        }
        if let Some(team) = &req.team {
            crate::input::single_line("team", team)?;
            if !viewer.is_lead_of(team) {
                return Err(Error::forbidden(format!(
                    "only a lead of team {team} can set its webhook"
                ))
                .with_field("team"));
            }
        }
        let secret = crate::domain::token::random_secret();
        let row = WebhookRow {
            id: uuid::Uuid::now_v7().to_string(),
            user: req.team.is_none().then(|| viewer.user.clone()),
            team: req.team.clone(),
            url: url.to_string(),
            kind: req.kind.clone(),
            secret: secret.clone(),
            events: req.events.clone(),
            created_by: viewer.user.clone(),
            created_at: Utc::now(),
        };
        self.db.insert_webhook(&row).await?;
        tracing::info!(webhook.id = %row.id, team = ?row.team, user = %viewer.user, "webhook added");
        Ok(CreatedWebhook {
            webhook: webhook_info(&row),
            secret,
        })
    }

    /// A webhook the viewer may manage: their own, or their team's when they lead it.
    async fn own_webhook(&self, viewer: &Viewer, id: &str) -> Result<WebhookRow, Error> {
        crate::input::single_line("id", id)?;
        let w = match self.db.get_webhook(id).await {
            Ok(w) => w,
            Err(DbError::NotFound) => {
                return Err(Error::not_found(format!("no webhook with id '{id}'")))
            }
            Err(e) => return Err(e.into()),
        };
        let mine = w.user.as_deref() == Some(viewer.user.as_str());
        let team_member = w.team.as_ref().is_some_and(|t| viewer.is_member_of(t));
        if !(mine || team_member) {
            return Err(Error::not_found(format!("no webhook with id '{id}'")));
        }
        Ok(w)
    }

    pub async fn delete_webhook(&self, viewer: &Viewer, id: &str) -> Result<(), Error> {
        let w = self.own_webhook(viewer, id).await?;
        if let Some(team) = &w.team {
            if !viewer.is_lead_of(team) {
                return Err(Error::forbidden(format!(
                    "only a lead of team {team} can remove its webhook"
                )));
            }
        }
        self.db.delete_webhook(id).await?;
        Ok(())
    }

    /// A webhook's delivery log, the newest first (its team's members may read a team's).
    pub async fn webhook_deliveries(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<Vec<DeliveryInfo>, Error> {
        self.own_webhook(viewer, id).await?;
        Ok(self
            .db
            .deliveries_of(id, app::model::NEWEST_DELIVERIES as i64)
            .await?
            .iter()
            .map(delivery_info)
            .collect())
    }

    /// The viewer's newest notifications and how many are unread.
    pub async fn notifications(&self, viewer: &Viewer) -> Result<NotificationList, Error> {
        let (items, unread) = self
            .db
            .notifications(&viewer.user, app::model::NEWEST_NOTIFICATIONS as i64)
            .await?;
        Ok(NotificationList {
            unread,
            items: items
                .into_iter()
                .map(|n| NotificationItem {
                    id: n.id,
                    job_id: n.job_id,
                    event: n.event,
                    at: n.at,
                    message: n.message,
                    browser: n.browser,
                    read: n.read,
                })
                .collect(),
        })
    }

    pub async fn mark_notifications_read(
        &self,
        viewer: &Viewer,
        ids: Option<Vec<String>>,
    ) -> Result<NotificationList, Error> {
        if let Some(ids) = &ids {
            // Each id is a write; the list shows the 50 newest.
            if ids.len() > MAX_READ_IDS {
                return Err(Error::invalid(
                    "ids",
                    format!(
                        "at most {MAX_READ_IDS} ids at a time, got {}; or {{\"all\": true}}",
                        ids.len()
                    ),
                ));
            }
            for id in ids {
                crate::input::single_line("ids", id)?;
            }
        }
        self.db
            .mark_read(&viewer.user, ids.as_deref(), Utc::now())
            .await?;
        self.notifications(viewer).await
    }

    /// Tells of one job event: the owner per their channels, and the team's webhooks.
    async fn tell(
        &self,
        row: &JobRow,
        event: &str,
        event_key: &str,
        at: DateTime<Utc>,
        text: &str,
    ) -> Result<usize, Error> {
        let prefs = self.db.notification_prefs(&row.user).await?;
        let c = prefs.get(event).copied().unwrap_or_default();
        let mut told = 0;
        if c.in_app
            && self
                .db
                .insert_notification(&row.user, &row.id, event, event_key, at, text, c.browser)
                .await?
        {
            told += 1;
            // The owner's open pages refetch their notification list on a live change.
            self.publish(LiveChange {
                job_id: row.id.clone(),
                user: row.user.clone(),
                notify: true,
                team: row.team.clone(),
                pool: row.pool.clone(),
                state: row.state,
                at: self.cluster.now(),
                row: Default::default(),
                seq: 0,
            });
        }
        let hooks = self
            .db
            .webhooks_of(&row.user, std::slice::from_ref(&row.team))
            .await?;
        let url = format!(
            "{}/jobs/{}",
            self.public_url().trim_end_matches('/'),
            row.id
        );
        for w in hooks {
            let wanted = w.events.iter().any(|e| e == event)
                && match (&w.user, &w.team) {
                    (Some(u), _) => u == &row.user && c.webhook,
                    (None, Some(t)) => t == &row.team,
                    _ => false,
                };
            if !wanted {
                continue;
            }
            let delivery_id = uuid::Uuid::now_v7().to_string();
            let body = notify::payload(
                &w.kind,
                &Message {
                    event,
                    delivery_id: &delivery_id,
                    job_id: &row.id,
                    job_name: &row.name,
                    team: &row.team,
                    user: &row.user,
                    pool: &row.pool,
                    gpus: row.gpus,
                    at,
                    text,
                    url: &url,
                },
            );
            if self
                .db
                .insert_delivery(
                    &delivery_id,
                    &w.id,
                    event_key,
                    event,
                    &row.id,
                    &body,
                    Utc::now(),
                )
                .await?
            {
                told += 1;
            }
        }
        Ok(told)
    }

    /// One round of the notifier: the job events after the cursor.
    pub async fn notify_once(&self) -> Result<usize, Error> {
        let cursor = self.db.notifier_cursor().await?;
        let events = self.db.job_events_after(&cursor, 200).await?;
        let mut told = 0;
        for e in &events {
            if let Some(event) = notify::event_of_kind(&e.kind) {
                let row = self.db.get_job(&e.job_id).await?;
                let text = match event {
                    "started" => format!(
                        "Job {} started: {} in {}",
                        row.name,
                        app::format::gpus_nodes(row.gpus),
                        row.pool
                    ),
                    "succeeded" => format!("Job {} succeeded", row.name),
                    "failed" => format!(
                        "Job {} failed: {}",
                        row.name,
                        e.reason.trim_start_matches("Failed:").trim()
                    ),
                    _ if e.kind == "evicted" => {
                        format!(
                            "Job {}: {}",
                            row.name,
                            e.reason.trim_end_matches("; queued again")
                        ) + "; it is queued again"
                    }
                    _ => format!(
                        "Job {} was preempted ({}); it is queued again",
                        row.name, e.reason
                    ),
                };
                told += self.tell(&row, event, &e.id, e.at, &text).await?;
            }
            self.db.set_notifier_cursor(&e.id).await?;
        }
        Ok(told)
    }

    /// Running jobs whose every GPU has been under 5 % for 30 minutes: told once per run.
    pub async fn notify_idle(&self) -> Result<usize, Error> {
        let Some(metrics) = &self.metrics else {
            return Ok(0);
        };
        let now = self.cluster.now();
        let rows = self.db.active_jobs().await?;
        let mut told = 0;
        for row in rows.iter().filter(|r| r.state == JobState::Running) {
            let Some(admitted) = row.admitted_at else {
                continue;
            };
            if now - admitted < crate::metrics::IDLE_FOR {
                continue;
            }
            let job = crate::domain::workload::JobGpus {
                job_id: row.id.clone(),
                team: row.team.clone(),
                gpus: row.gpus,
                since: admitted,
            };
            let step = chrono::TimeDelta::seconds(60);
            let from = now - crate::metrics::IDLE_FOR - step;
            let Ok(series) = metrics.series(&job, from, now, step).await else {
                continue;
            };
            let samples: Vec<(DateTime<Utc>, Vec<f64>)> = series
                .times
                .iter()
                .enumerate()
                .filter_map(|(i, t)| {
                    let r: Option<Vec<f64>> = series
                        .gpus
                        .iter()
                        .map(|g| g.readings[i].map(|r| r.util_pct))
                        .collect();
                    r.filter(|v| !v.is_empty()).map(|v| (*t, v))
                })
                .collect();
            if crate::metrics::is_idle(&samples, now) {
                let key = format!("idle:{}:{}", row.id, admitted.timestamp_millis());
                let text = format!(
                    "Job {} has been idle for 30 minutes: every one of its {} GPUs under 5 %",
                    row.name, row.gpus
                );
                told += self.tell(row, "idle", &key, now, &text).await?;
            }
        }
        Ok(told)
    }

    /// One round of the sender: posts every due delivery once; a 2xx is delivered, anything
    /// else is tried again after a backoff, and given up after `MAX_ATTEMPTS`.
    pub async fn deliver_once(&self, http: &reqwest::Client) -> Result<usize, Error> {
        let now = Utc::now();
        let due = self.db.due_deliveries(now, 20).await?;
        let mut sent = 0;
        for d in due {
            let hook = match self.db.get_webhook(&d.webhook_id).await {
                Ok(h) => h,
                Err(DbError::NotFound) => continue,
                Err(e) => return Err(e.into()),
            };
            // Stored before the rule, or before its network was taken off the allowed list.
            let refused = url::Url::parse(&hook.url)
                .ok()
                .and_then(|u| literal_ip(&u))
                .filter(|ip| !notify::webhook_may_reach(*ip, &self.webhook_networks));
            if let Some(ip) = refused {
                tracing::warn!(delivery.id = %d.id, webhook.id = %hook.id, "webhook delivery refused: its address is internal");
                self.db
                    .record_attempt(
                        &d.id,
                        false,
                        None,
                        Some(&notify::unreachable_address(ip)),
                        None,
                        Utc::now(),
                    )
                    .await?;
                sent += 1;
                continue;
            }
            let mut req = http
                .post(&hook.url)
                .header("content-type", "application/json")
                .header("user-agent", "Gantry-Webhook/1")
                .header("x-gantry-event", &d.event)
                .header("x-gantry-delivery", &d.id)
                .timeout(std::time::Duration::from_secs(10))
                .body(d.payload.clone());
            if hook.kind == "generic" {
                req = req.header(
                    "x-gantry-signature",
                    notify::signature(&hook.secret, d.payload.as_bytes()),
                );
            }
            let (ok, status, error) = match req.send().await {
                Ok(res) if res.status().is_success() => (true, Some(res.status().as_u16()), None),
                Ok(res) => (
                    false,
                    Some(res.status().as_u16()),
                    Some(format!("the receiver answered {}", res.status())),
                ),
                // Without the URL: it may be the credential itself (Slack). The source of a
                // refusal by the resolver (an internal address) says which and why.
                Err(e) => {
                    let why = std::error::Error::source(&e).and_then(|s| {
                        let mut s: Option<&(dyn std::error::Error + 'static)> = Some(s);
                        while let Some(inner) = s {
                            if let Some(r) = inner.downcast_ref::<InternalOnly>() {
                                return Some(r.to_string());
                            }
                            s = inner.source();
                        }
                        None
                    });
                    let text = why.unwrap_or_else(|| format!("no answer: {}", e.without_url()));
                    (false, None, Some(text))
                }
            };
            let attempts = d.attempts + 1;
            let next = (!ok && attempts < notify::MAX_ATTEMPTS)
                .then(|| Utc::now() + chrono::TimeDelta::seconds(notify::backoff_s(attempts)));
            if !ok {
                tracing::warn!(delivery.id = %d.id, webhook.id = %hook.id, attempts, status = ?status, "webhook delivery failed; {}", if next.is_some() { "will retry" } else { "giving up" });
            }
            self.db
                .record_attempt(&d.id, ok, status, error.as_deref(), next, Utc::now())
                .await?;
            sent += 1;
        }
        Ok(sent)
    }
}

/// The address of a URL whose host is written as one.
fn literal_ip(url: &url::Url) -> Option<std::net::IpAddr> {
    match url.host()? {
        url::Host::Ipv4(ip) => Some(ip.into()),
        url::Host::Ipv6(ip) => Some(ip.into()),
        url::Host::Domain(_) => None,
    }
}

/// A webhook's host name resolved only to addresses webhooks may not reach.
#[derive(Debug)]
pub struct InternalOnly {
    name: String,
}

/// Without the addresses: the delivery log is the webhook owner's to read, and listing what
/// an internal name resolves to would map the internal network for them (the server's log
/// has the addresses).
impl std::fmt::Display for InternalOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} resolves only to private, loopback or link-local addresses, which webhooks may not reach; an admin may allow their network in server.webhook_networks",
            self.name,
        )
    }
}

impl std::error::Error for InternalOnly {}

/// Resolves webhook hosts and keeps only the addresses webhooks may reach. The check is made
/// as each delivery connects, so a name that answers differently after the webhook was
/// created (DNS rebinding) reaches no internal address either.
struct WebhookResolver {
    allowed: Arc<[ipnet::IpNet]>,
}

impl reqwest::dns::Resolve for WebhookResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allowed = self.allowed.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let (reachable, refused): (Vec<_>, Vec<_>) = found
                .into_iter()
                .partition(|a| notify::webhook_may_reach(a.ip(), &allowed));
            if reachable.is_empty() && !refused.is_empty() {
                let addresses: Vec<std::net::IpAddr> = refused.iter().map(|a| a.ip()).collect();
                tracing::warn!(host = %name, ?addresses, "webhook delivery refused: the host resolves only to internal addresses");
                return Err(
                    Box::new(InternalOnly { name }) as Box<dyn std::error::Error + Send + Sync>
                );
            }
            Ok(Box::new(reachable.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The HTTP client webhooks are posted with: no redirects (a receiver cannot send a
/// delivery on to an internal address), and only addresses webhooks may reach.
pub fn webhook_client(allowed: Arc<[ipnet::IpNet]>) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        // Through a proxy (reqwest reads HTTP_PROXY and the like by default) the proxy would
        // resolve and connect, and no address would be checked.
        .no_proxy()
        .dns_resolver(Arc::new(WebhookResolver { allowed }))
        .build()
        .unwrap_or_default()
}
