//! Notifications: preferences, the in-app list, webhooks and their deliveries, and the
//! notifier's cursor over the job events. Every insert that tells of one job event is
//! `ON CONFLICT DO NOTHING` on a unique key, so telling twice is impossible whatever the
//! notifier does after a restart.

use super::*;
use crate::domain::notify::Channels;

#[derive(Clone, Debug, PartialEq)]
pub struct NotificationRow {
    pub id: String,
    pub job_id: String,
    pub event: String,
    pub at: DateTime<Utc>,
    pub message: String,
    pub browser: bool,
    pub read: bool,
}

/// A webhook as stored. The secret signs deliveries; it is never logged (no `Debug`).
#[derive(Clone)]
pub struct WebhookRow {
    pub id: String,
    pub user: Option<String>,
    pub team: Option<String>,
    pub url: String,
    pub kind: String,
    pub secret: String,
    pub events: Vec<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DeliveryRow {
    pub id: String,
    pub webhook_id: String,
    pub event: String,
    pub job_id: String,
    pub payload: String,
    pub state: String,
    pub attempts: u32,
    pub next_at: DateTime<Utc>,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// One job event, as the notifier reads them in order.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEventRow {
    pub id: String,
    pub job_id: String,
    pub at: DateTime<Utc>,
    pub kind: String,
    pub reason: String,
}

fn webhook_from(r: &AnyRow) -> Result<WebhookRow> {
    Ok(WebhookRow {
        id: r.try_get("webhook_id")?,
        user: r.try_get("user_id")?,
        team: r.try_get("team_id")?,
        url: r.try_get("url")?,
        kind: r.try_get("kind")?,
        secret: r.try_get("secret")?,
        events: serde_json::from_str(&r.try_get::<String, _>("events")?)?,
        created_by: r.try_get("created_by")?,
        created_at: from_ms(r.try_get("created_at")?),
    })
}

fn delivery_from(r: &AnyRow) -> Result<DeliveryRow> {
    Ok(DeliveryRow {
        id: r.try_get("delivery_id")?,
        webhook_id: r.try_get("webhook_id")?,
        event: r.try_get("event")?,
        job_id: r.try_get("job_id")?,
        payload: r.try_get("payload")?,
        state: r.try_get("state")?,
        attempts: r.try_get::<i64, _>("attempts")? as u32,
        next_at: from_ms(r.try_get("next_at")?),
        last_status: r
            .try_get::<Option<i64>, _>("last_status")?
            .map(|s| s as u16),
        last_error: r.try_get("last_error")?,
        created_at: from_ms(r.try_get("created_at")?),
        delivered_at: r.try_get::<Option<i64>, _>("delivered_at")?.map(from_ms),
    })
}

const WEBHOOK_COLUMNS: &str =
    "webhook_id, user_id, team_id, url, kind, secret, events, created_by, created_at";
const DELIVERY_COLUMNS: &str = "delivery_id, webhook_id, event, job_id, payload, state, attempts, next_at, last_status, last_error, created_at, delivered_at";

impl Db {
    /// A user's channels per event (events never set are absent: the defaults apply).
    pub async fn notification_prefs(&self, user: &str) -> Result<HashMap<String, Channels>> {
        let rows = sqlx::query(
            "SELECT event, in_app, browser, webhook FROM notification_pref WHERE user_id = $1",
        )
        .bind(user)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("event")?,
                    Channels {
                        in_app: r.try_get::<i64, _>("in_app")? != 0,
                        browser: r.try_get::<i64, _>("browser")? != 0,
                        webhook: r.try_get::<i64, _>("webhook")? != 0,
                    },
                ))
            })
            .collect()
    }

    pub async fn set_notification_prefs(
        &self,
        user: &str,
        prefs: &[(String, Channels)],
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM notification_pref WHERE user_id = $1")
            .bind(user)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        for (event, c) in prefs {
            sqlx::query("INSERT INTO notification_pref (user_id, event, in_app, browser, webhook) VALUES ($1, $2, $3, $4, $5)")
                .bind(user)
                .bind(event)
                .bind(c.in_app as i64)
                .bind(c.browser as i64)
                .bind(c.webhook as i64)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
        }
        self.commit(tx).await?;
        Ok(())
    }

    /// Where the notifier stopped; on its first start, the newest job event (history is
    /// not told again).
    pub async fn notifier_cursor(&self) -> Result<String> {
        if let Some(r) =
            sqlx::query("SELECT last_event_id FROM notifier_cursor WHERE notifier_cursor_id = 1")
                .fetch_optional(&self.pool)
                .await
                .map_err(map_err)?
        {
            return Ok(r.try_get("last_event_id")?);
        }
        let newest: Option<String> =
            sqlx::query("SELECT MAX(job_event_id) AS newest FROM job_event")
                .fetch_one(&self.pool)
                .await
                .map_err(map_err)?
                .try_get("newest")?;
        let newest = newest.unwrap_or_default();
        self.set_notifier_cursor(&newest).await?;
        Ok(newest)
    }

    pub async fn set_notifier_cursor(&self, last: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO notifier_cursor (notifier_cursor_id, last_event_id) VALUES (1, $1) \
             ON CONFLICT (notifier_cursor_id) DO UPDATE SET last_event_id = excluded.last_event_id",
        )
        .bind(last)
        .execute(&*self.write())
        .await
        .map_err(map_err)?;
        Ok(())
    }

    /// Job events after `cursor` in the order written (UUIDv7 ids sort so).
    pub async fn job_events_after(&self, cursor: &str, limit: i64) -> Result<Vec<JobEventRow>> {
        let rows = sqlx::query(
            "SELECT job_event_id, job_id, at, kind, reason FROM job_event WHERE job_event_id > $1 ORDER BY job_event_id LIMIT $2",
        )
        .bind(cursor)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                Ok(JobEventRow {
                    id: r.try_get("job_event_id")?,
                    job_id: r.try_get("job_id")?,
                    at: from_ms(r.try_get("at")?),
                    kind: r.try_get("kind")?,
                    reason: r.try_get("reason")?,
                })
            })
            .collect()
    }

    /// Adds one in-app notification; `false` when this user was told of this event already.
    #[allow(clippy::too_many_arguments)]
    pub async fn insert_notification(
        &self,
        user: &str,
        job_id: &str,
        event: &str,
        event_key: &str,
        at: DateTime<Utc>,
        message: &str,
        browser: bool,
    ) -> Result<bool> {
        let n = sqlx::query(
            "INSERT INTO notification (notification_id, user_id, job_id, event, event_key, at, message, browser) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (user_id, event_key) DO NOTHING",
        )
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(user)
        .bind(job_id)
        .bind(event)
        .bind(event_key)
        .bind(ms(at))
        .bind(message)
        .bind(browser as i64)
        .execute(&*self.write())
        .await
        .map_err(map_err)?
        .rows_affected();
        Ok(n > 0)
    }

    /// A user's newest notifications, and how many are unread.
    pub async fn notifications(
        &self,
        user: &str,
        limit: i64,
    ) -> Result<(Vec<NotificationRow>, u32)> {
        // One statement, so the items and the count come from one snapshot (two read apart
        // could list none of a notification the count already holds). No row means the user
        // has no notification at all, so none unread.
        let rows = sqlx::query(
            "SELECT notification_id, job_id, event, at, message, browser, read_at, \
             (SELECT COUNT(*) FROM notification WHERE user_id = $1 AND read_at IS NULL) AS unread \
             FROM notification \
             WHERE user_id = $1 ORDER BY at DESC, notification_id DESC LIMIT $2",
        )
        .bind(user)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        let unread: i64 = match rows.first() {
            Some(r) => r.try_get("unread")?,
            None => 0,
        };
        let items = rows
            .iter()
            .map(|r| {
                Ok(NotificationRow {
                    id: r.try_get("notification_id")?,
                    job_id: r.try_get("job_id")?,
                    event: r.try_get("event")?,
                    at: from_ms(r.try_get("at")?),
                    message: r.try_get("message")?,
                    browser: r.try_get::<i64, _>("browser")? != 0,
                    read: r.try_get::<Option<i64>, _>("read_at")?.is_some(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((items, unread as u32))
    }

    /// Marks a user's notifications read: these ids, or all of them.
    pub async fn mark_read(
        &self,
        user: &str,
        ids: Option<&[String]>,
        at: DateTime<Utc>,
    ) -> Result<()> {
        match ids {
            None => {
                sqlx::query(
                    "UPDATE notification SET read_at = $1 WHERE user_id = $2 AND read_at IS NULL",
                )
                .bind(ms(at))
                .bind(user)
                .execute(&*self.write())
                .await
                .map_err(map_err)?;
            }
            Some(ids) => {
                for id in ids {
                    sqlx::query("UPDATE notification SET read_at = $1 WHERE user_id = $2 AND notification_id = $3 AND read_at IS NULL")
                        .bind(ms(at))
                        .bind(user)
                        .bind(id)
                        .execute(&*self.write())
                        .await
                        .map_err(map_err)?;
                }
            }
        }
        Ok(())
    }

    pub async fn insert_webhook(&self, w: &WebhookRow) -> Result<()> {
        sqlx::query(&format!(
            "INSERT INTO webhook ({WEBHOOK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(&w.id)
        .bind(&w.user)
        .bind(&w.team)
        .bind(&w.url)
        .bind(&w.kind)
        .bind(&w.secret)
        .bind(serde_json::to_string(&w.events)?)
        .bind(&w.created_by)
        .bind(ms(w.created_at))
        .execute(&*self.write())
        .await
        .map_err(map_err)?;
        Ok(())
    }

    /// A user's own webhooks and those of the given teams.
    pub async fn webhooks_of(&self, user: &str, teams: &[String]) -> Result<Vec<WebhookRow>> {
        // The user's own, and those of their teams (placeholders $2.. for the teams).
        let marks: Vec<String> = (0..teams.len()).map(|i| format!("${}", i + 2)).collect();
        let team_clause = if marks.is_empty() {
            String::new()
        } else {
            format!(" OR team_id IN ({})", marks.join(", "))
        };
        let sql = format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhook WHERE user_id = $1{team_clause} ORDER BY created_at, webhook_id"
        );
        let mut q = sqlx::query(&sql).bind(user);
        for t in teams {
            q = q.bind(t);
        }
        let rows = q.fetch_all(&self.pool).await.map_err(map_err)?;
        rows.iter().map(webhook_from).collect()
    }

    pub async fn get_webhook(&self, id: &str) -> Result<WebhookRow> {
        let r = sqlx::query(&format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhook WHERE webhook_id = $1"
        ))
        .bind(id)
        .fetch_one(&self.pool)
        .await
        .map_err(map_err)?;
        webhook_from(&r)
    }

    pub async fn delete_webhook(&self, id: &str) -> Result<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM webhook_delivery WHERE webhook_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        sqlx::query("DELETE FROM webhook WHERE webhook_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        self.commit(tx).await?;
        Ok(())
    }

    /// Queues one delivery; `false` when this webhook has one for this event already.
    #[allow(clippy::too_many_arguments)]
    pub async fn insert_delivery(
        &self,
        id: &str,
        webhook_id: &str,
        event_key: &str,
        event: &str,
        job_id: &str,
        payload: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let n = sqlx::query(
            "INSERT INTO webhook_delivery (delivery_id, webhook_id, event_key, event, job_id, payload, state, attempts, next_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 'pending', 0, $7, $7) ON CONFLICT (webhook_id, event_key) DO NOTHING",
        )
        .bind(id)
        .bind(webhook_id)
        .bind(event_key)
        .bind(event)
        .bind(job_id)
        .bind(payload)
        .bind(ms(now))
        .execute(&*self.write())
        .await
        .map_err(map_err)?
        .rows_affected();
        Ok(n > 0)
    }

    /// Pending deliveries due at `now`, the oldest first.
    pub async fn due_deliveries(&self, now: DateTime<Utc>, limit: i64) -> Result<Vec<DeliveryRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_delivery WHERE state = 'pending' AND next_at <= $1 ORDER BY next_at, delivery_id LIMIT $2"
        ))
        .bind(ms(now))
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter().map(delivery_from).collect()
    }

    /// Records an attempt: delivered, or failed with its status or error and the next try
    /// (`None`: given up).
    pub async fn record_attempt(
        &self,
        id: &str,
        delivered: bool,
        status: Option<u16>,
        error: Option<&str>,
        next_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let state = match (delivered, next_at) {
            (true, _) => "delivered",
            (false, Some(_)) => "pending",
            (false, None) => "failed",
        };
        sqlx::query(
            "UPDATE webhook_delivery SET state = $1, attempts = attempts + 1, last_status = $2, last_error = $3, \
             next_at = COALESCE($4, next_at), delivered_at = CASE WHEN $1 = 'delivered' THEN $5 ELSE delivered_at END \
             WHERE delivery_id = $6 AND state = 'pending'",
        )
        .bind(state)
        .bind(status.map(i64::from))
        .bind(error)
        .bind(next_at.map(ms))
        .bind(ms(now))
        .bind(id)
        .execute(&*self.write())
        .await
        .map_err(map_err)?;
        Ok(())
    }

    /// A webhook's deliveries, the newest first.
    pub async fn deliveries_of(&self, webhook_id: &str, limit: i64) -> Result<Vec<DeliveryRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_delivery WHERE webhook_id = $1 ORDER BY created_at DESC, delivery_id DESC LIMIT $2"
        ))
        .bind(webhook_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
        rows.iter().map(delivery_from).collect()
    }
}
