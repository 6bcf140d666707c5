//! Brings the database into agreement with the cluster: writes every state change the
//! cluster reports, re-sends jobs that were stored but never reached it, and keeps the sim
//! clock saved so a restart resumes where it stopped.

use std::sync::Arc;
use std::time::Duration;

use app::model::JobState;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::cluster::{Change, Cluster, ClusterEvent, WorkloadPhase};
use crate::db::{Db, Transition};
use crate::service::{LiveChange, Portal};

/// How often the event writer compares the database with the cluster's own list.
#[derive(Clone, Copy, Debug)]
pub struct SyncEvery {
    /// A full comparison at least this often.
    pub period: Duration,
    /// After a batch of events, at most this often.
    pub after_events: Duration,
}

pub const SYNC_EVERY: SyncEvery = SyncEvery {
    period: Duration::from_secs(5),
    after_events: Duration::from_secs(1),
};

/// Asks the event writer for a comparison with the cluster. The first request turns the
/// comparisons on: before it the cluster may not hold what it will (the sim is restored from
/// the database after the writer starts).
#[derive(Clone)]
pub struct SyncHandle(Arc<tokio::sync::Notify>);

impl SyncHandle {
    pub fn request(&self) {
        self.0.notify_one();
    }
}

/// Writes cluster events to the database in order, then marks them applied; compares the
/// database with the cluster when asked, every few seconds and after each batch of events,
/// and repairs the database where it drifted (see [`SyncEvery`]).
pub fn spawn_event_writer(
    db: Db,
    cluster: Arc<dyn Cluster>,
    events: mpsc::UnboundedReceiver<ClusterEvent>,
    applied: watch::Sender<u64>,
    live: tokio::sync::broadcast::Sender<LiveChange>,
) -> (JoinHandle<()>, SyncHandle) {
    spawn_event_writer_every(db, cluster, events, applied, live, SYNC_EVERY)
}

pub fn spawn_event_writer_every(
    db: Db,
    cluster: Arc<dyn Cluster>,
    mut events: mpsc::UnboundedReceiver<ClusterEvent>,
    applied: watch::Sender<u64>,
    live: tokio::sync::broadcast::Sender<LiveChange>,
    every: SyncEvery,
) -> (JoinHandle<()>, SyncHandle) {
    let requests = Arc::new(tokio::sync::Notify::new());
    let handle = SyncHandle(requests.clone());
    let task = tokio::spawn(async move {
        let mut w = Writer {
            db,
            cluster,
            applied,
            live,
            last: 0,
        };
        let mut enabled = false;
        let mut due = false;
        let mut events_since = false;
        let mut last_sync = tokio::time::Instant::now();
        let mut tick = tokio::time::interval(every.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                ev = events.recv() => {
                    let Some(ev) = ev else { break };
                    if w.write(&ev).await == Written::Refused {
                        due = true;
                    }
                    events_since = true;
                }
                _ = requests.notified() => {
                    enabled = true;
                    due = true;
                }
                _ = tick.tick() => due = true,
            }
            // A batch ends when no event is waiting.
            if !enabled || !events.is_empty() {
                continue;
            }
            if due || (events_since && last_sync.elapsed() >= every.after_events) {
                w.sync_pass(&mut events).await;
                due = false;
                events_since = false;
                last_sync = tokio::time::Instant::now();
            }
        }
    });
    (task, handle)
}

#[derive(Debug, PartialEq, Eq)]
enum Written {
    Applied,
    /// The row was not in a state the event moves on from: the database and the cluster
    /// disagree, and a comparison is due.
    Refused,
}

struct Writer {
    db: Db,
    cluster: Arc<dyn Cluster>,
    applied: watch::Sender<u64>,
    live: tokio::sync::broadcast::Sender<LiveChange>,
    /// The sequence number of the last event written.
    last: u64,
}

impl Writer {
    /// Writes one event, retrying until the database takes it, and marks it applied.
    async fn write(&mut self, ev: &ClusterEvent) -> Written {
        // A database outage must not lose the event: retry until it is written.
        let mut delay = Duration::from_millis(100);
        let out = loop {
            match apply(&self.db, ev).await {
                Ok(Outcome::Moved(change)) => {
                    let _ = self.live.send(change);
                    break Written::Applied;
                }
                Ok(Outcome::AlreadyEnded) => break Written::Applied,
                Ok(Outcome::Refused) => break Written::Refused,
                Err(e) => {
                    tracing::error!(job.id = %ev.job_id, seq = ev.seq, error = %e, "could not store a cluster event; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        };
        self.last = self.last.max(ev.seq);
        self.applied.send_replace(ev.seq);
        out
    }

    /// Takes the cluster's list at a moment no event was being sent, writes every event up
    /// to that moment, then repairs the database wherever it disagrees with that list. No
    /// event is written during the comparison, so a change in flight is never mistaken for
    /// drift.
    async fn sync_pass(&mut self, events: &mut mpsc::UnboundedReceiver<ClusterEvent>) {
        if !self.cluster.listed() {
            tracing::debug!("the cluster's list is not complete yet; comparison deferred");
            return;
        }
        for _ in 0..3 {
            let seq = self.cluster.last_seq();
            let held = match self.cluster.workloads().await {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(error = %e, "could not list the cluster's workloads to compare with the database");
                    return;
                }
            };
            if self.cluster.last_seq() != seq {
                continue; // the cluster moved while listing; take it again
            }
            while self.last < seq {
                match tokio::time::timeout(Duration::from_secs(5), events.recv()).await {
                    Ok(Some(ev)) => {
                        self.write(&ev).await;
                    }
                    Ok(None) => return,
                    Err(_) => {
                        tracing::warn!(
                            applied = self.last,
                            seq,
                            "cluster events up to the listed moment did not arrive; comparison deferred"
                        );
                        return;
                    }
                }
            }
            match correct_from_cluster(&self.db, self.cluster.as_ref(), &held).await {
                Ok(changes) => {
                    if !changes.is_empty() {
                        tracing::warn!(
                            count = changes.len(),
                            "corrected the database from the cluster"
                        );
                    }
                    for c in changes {
                        let _ = self.live.send(c);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not compare the database with the cluster")
                }
            }
            return;
        }
        tracing::debug!("the cluster kept moving; comparison deferred");
    }
}

fn nodes_text(nodes: &[String]) -> String {
    if nodes.is_empty() {
        "no named nodes".to_string()
    } else {
        nodes.join(", ")
    }
}

fn same_nodes(a: &[String], b: &[String]) -> bool {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort();
    b.sort();
    a == b
}

/// Compares every active job in the database with `held`, the cluster's own list at a
/// moment whose events are all written, and repairs the database where they differ (the
/// cluster is the truth), each repair with an event saying so. Queued jobs the cluster
/// does not hold are the resender's; admitted or running ones it does not hold are queued
/// again, for the resender to send. Returns the live changes of the repairs.
pub async fn correct_from_cluster(
    db: &Db,
    cluster: &dyn Cluster,
    held: &[(String, WorkloadPhase)],
) -> Result<Vec<LiveChange>, crate::db::DbError> {
    use JobState::*;
    let held: std::collections::HashMap<&str, &WorkloadPhase> =
        held.iter().map(|(id, p)| (id.as_str(), p)).collect();
    let now = cluster.now();
    let mut out = Vec::new();
    for row in db.active_jobs().await? {
        let said = row.state;
        let mut moves: Vec<(Transition<'_>, String)> = Vec::new();
        let mut admission = None;
        let empty: &[String] = &[];
        match (said, held.get(row.id.as_str())) {
            (Queued, None | Some(WorkloadPhase::Pending)) => {}
            (Queued, Some(WorkloadPhase::Admitted { at, nodes, running })) => {
                moves.push((
                    Transition {
                        job_id: &row.id,
                        from: &[Queued],
                        to: Admitted,
                        at: *at,
                        reason: "",
                        node_names: Some(nodes.as_slice()),
                        kind: None,
                    },
                    format!(
                        "Corrected from the cluster: admitted on {} (the database said queued)",
                        nodes_text(nodes)
                    ),
                ));
                if *running {
                    moves.push((
                        Transition {
                            job_id: &row.id,
                            from: &[Admitted],
                            to: Running,
                            at: now.max(*at),
                            reason: "",
                            node_names: None,
                            kind: None,
                        },
                        "Corrected from the cluster: all pods are running (the database said queued)"
                            .to_string(),
                    ));
                }
            }
            (Admitted | Running, None | Some(WorkloadPhase::Pending)) => {
                let reason = if held.contains_key(row.id.as_str()) {
                    format!("Corrected from the cluster: queued (the database said {said})")
                } else {
                    tracing::warn!(job.id = %row.id, state = %said, "the cluster does not hold a job the database says it holds; queued again for the resender");
                    format!("Corrected from the cluster: the cluster does not hold it (the database said {said}); it will be sent again")
                };
                moves.push((
                    Transition {
                        job_id: &row.id,
                        from: &[Admitted, Running],
                        to: Queued,
                        at: now,
                        reason: "",
                        node_names: Some(empty),
                        kind: None,
                    },
                    reason,
                ));
            }
            (Admitted | Running, Some(WorkloadPhase::Admitted { at, nodes, running })) => {
                let same_time = row.admitted_at.map(crate::db::ms) == Some(crate::db::ms(*at));
                if !same_time || !same_nodes(nodes, &row.node_names) {
                    admission = Some((
                        *at,
                        nodes.clone(),
                        format!(
                            "Corrected from the cluster: admitted at {} on {} (the database said {} on {})",
                            at.to_rfc3339(),
                            nodes_text(nodes),
                            row.admitted_at
                                .map(|t| t.to_rfc3339())
                                .unwrap_or_else(|| "no time".into()),
                            nodes_text(&row.node_names)
                        ),
                    ));
                }
                if said == Admitted && *running {
                    moves.push((
                        Transition {
                            job_id: &row.id,
                            from: &[Admitted],
                            to: Running,
                            at: now.max(*at),
                            reason: "",
                            node_names: None,
                            kind: None,
                        },
                        "Corrected from the cluster: all pods are running (the database said admitted)"
                            .to_string(),
                    ));
                }
                // Running in the database, pods no longer all ready in the cluster: the job
                // still holds its GPUs and its run interval stays open; nothing to repair.
            }
            (Succeeded | Failed | Cancelled, _) => {}
        }
        let mut to = None;
        if let Some((at, nodes, reason)) = admission {
            match db
                .correct_admission(&row.id, at, &nodes, cluster.now(), &reason)
                .await
            {
                Ok(true) => {
                    tracing::info!(job.id = %row.id, %reason, "corrected from the cluster");
                    to = Some((said, at));
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(job.id = %row.id, error = %e, "could not correct the job from the cluster")
                }
            }
        }
        for (t, reason) in moves {
            let t = Transition {
                reason: &reason,
                ..t
            };
            match db.transition(&t).await {
                Ok(true) => {
                    tracing::info!(job.id = %row.id, state = %t.to, %reason, "corrected from the cluster");
                    to = Some((t.to, t.at));
                }
                // Moved meanwhile (a cancel): the next comparison sees it.
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(job.id = %row.id, error = %e, "could not correct the job from the cluster");
                    break;
                }
            }
        }
        if let Some((state, at)) = to {
            out.push(LiveChange {
                job_id: row.id.clone(),
                team: row.team.clone(),
                pool: row.pool.clone(),
                state,
                at,
            });
        }
    }
    Ok(out)
}

enum Outcome {
    Moved(LiveChange),
    /// The end of a job that had already ended (the cluster's report of a cancel stored first).
    AlreadyEnded,
    /// The stored state does not fit the event: logged, and a comparison is due.
    Refused,
}

async fn apply(db: &Db, ev: &ClusterEvent) -> Result<Outcome, crate::db::DbError> {
    use JobState::*;
    let none: &[String] = &[];
    let mut kind = None;
    let (from, to, reason, nodes): (&[JobState], JobState, String, Option<&[String]>) =
        match &ev.change {
            Change::Admitted { nodes } => (
                &[Queued],
                Admitted,
                if nodes.is_empty() {
                    format!("Admitted: quota reserved in {}", ev.pool)
                } else {
                    format!(
                        "Admitted: quota reserved in {} on {}",
                        ev.pool,
                        nodes.join(", ")
                    )
                },
                Some(nodes.as_slice()),
            ),
            Change::Running => (
                &[Admitted],
                Running,
                "All pods are running".to_string(),
                None,
            ),
            Change::Succeeded { reason } => (&[Admitted, Running], Succeeded, reason.clone(), None),
            Change::Failed { reason } => (&[Admitted, Running], Failed, reason.clone(), None),
            Change::Cancelled { reason } => (
                &[Queued, Admitted, Running],
                Cancelled,
                reason.clone(),
                None,
            ),
            Change::Preempted { reason } => {
                kind = Some("preempted");
                (&[Admitted, Running], Queued, reason.clone(), Some(none))
            }
        };
    let applied = db
        .transition(&Transition {
            job_id: &ev.job_id,
            from,
            to,
            at: ev.at,
            reason: &reason,
            node_names: nodes,
            kind,
        })
        .await?;
    if !applied {
        let now = match db.get_job(&ev.job_id).await {
            Ok(row) => row.state.as_str().to_string(),
            Err(crate::db::DbError::NotFound) => "not stored".to_string(),
            Err(e) => return Err(e),
        };
        let ended = !matches!(
            now.as_str(),
            "queued" | "admitted" | "running" | "not stored"
        );
        let ends = matches!(
            ev.change,
            Change::Succeeded { .. } | Change::Failed { .. } | Change::Cancelled { .. }
        );
        if ended && ends {
            // The usual end of a cancel: the database first, then the cluster's own report.
            tracing::debug!(job.id = %ev.job_id, change = ?ev.change, state = %now, "the job had already ended");
            return Ok(Outcome::AlreadyEnded);
        }
        tracing::warn!(job.id = %ev.job_id, seq = ev.seq, change = ?ev.change, state = %now, "a cluster event does not fit the stored state; comparing with the cluster");
        return Ok(Outcome::Refused);
    }
    let row = db.get_job(&ev.job_id).await?;
    tracing::info!(job.id = %ev.job_id, state = %to, pool = %ev.pool, "job moved");
    Ok(Outcome::Moved(LiveChange {
        job_id: row.id,
        team: row.team,
        pool: row.pool,
        state: to,
        at: ev.at,
    }))
}

/// Seconds a sent job may stay unseen by the cluster before it is sent again.
pub const RESEND_AFTER_S: i64 = 120;

/// Brings the cluster in line with the database: sends queued jobs the cluster does not know
/// (stored, then the server stopped or the cluster was unreachable before it was sent) and
/// deletes workloads of jobs that already ended in the database (a cancel the cluster missed).
/// Run at start and every few seconds.
///
/// The cluster is read before the database, and a workload is deleted only when its job's
/// row, read again just before, has ended: a launch is stored before it is sent, so a
/// workload whose row is missing or still active is a launch in flight (or not Gantry's) and
/// is left alone. One job's error is logged and the pass goes on.
pub async fn resend_unsent(portal: &Portal) -> anyhow::Result<usize> {
    let held = portal.cluster.workloads().await?;
    let active: std::collections::HashSet<String> = portal
        .db
        .active_jobs()
        .await?
        .into_iter()
        .map(|r| r.id)
        .collect();
    for (id, _) in &held {
        if active.contains(id) {
            continue;
        }
        if let Err(e) = delete_if_ended(portal, id).await {
            tracing::warn!(job.id = %id, error = %e, "could not check or delete a workload whose job may have ended");
        }
    }
    let known: std::collections::HashSet<String> = portal
        .cluster
        .workloads()
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let mut sent = 0;
    let now = portal.cluster.now();
    for row in portal.db.active_jobs().await? {
        if row.state != JobState::Queued || known.contains(&row.id) {
            continue;
        }
        // Sent but not seen yet: a real cluster lists it a moment later. Only a job it still
        // lacks after a while is sent again (the same object name: nothing doubles).
        if row
            .sent_at
            .is_some_and(|at| now - at < chrono::Duration::seconds(RESEND_AFTER_S))
        {
            continue;
        }
        match resend(portal, &row).await {
            Ok(()) => sent += 1,
            Err(e) => tracing::warn!(job.id = %row.id, error = %e, "could not send a stored job"),
        }
    }
    Ok(sent)
}

/// Deletes the workload of job `id` if its row says the job has ended.
async fn delete_if_ended(portal: &Portal, id: &str) -> anyhow::Result<()> {
    let row = match portal.db.get_job(id).await {
        Ok(row) => row,
        Err(crate::db::DbError::NotFound) => {
            tracing::warn!(job.id = %id, "the cluster holds a workload with no stored job; left alone");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    if row.state.is_active() {
        // Stored and sent between the two reads: a live launch, not a leftover.
        return Ok(());
    }
    tracing::info!(job.id = %id, state = %row.state, "deleting a workload whose job has ended");
    portal.cluster.cancel(id).await?;
    Ok(())
}

async fn resend(portal: &Portal, row: &crate::db::JobRow) -> anyhow::Result<()> {
    let spec = crate::service::workload_of(&portal.db, row).await?;
    portal.cluster.submit(spec).await?;
    portal.db.mark_sent(&row.id, portal.cluster.now()).await?;
    Ok(())
}

/// How often the resender runs.
pub const RESEND_EVERY: Duration = Duration::from_secs(10);

pub fn spawn_resender(portal: Arc<Portal>) -> JoinHandle<()> {
    spawn_resender_every(portal, RESEND_EVERY)
}

/// The resender on its own period (tests run it far more often than production does).
pub fn spawn_resender_every(portal: Arc<Portal>, period: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            match resend_unsent(&portal).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(count = n, "sent stored jobs the cluster did not have"),
                Err(e) => tracing::warn!(error = %e, "could not re-send stored jobs"),
            }
        }
    })
}

/// Saves the cluster clock every few seconds (the sim resumes from it after a restart).
pub fn spawn_clock_saver(db: Db, cluster: Arc<dyn Cluster>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(2));
        loop {
            every.tick().await;
            if let Err(e) = db.save_sim_clock(cluster.now()).await {
                tracing::warn!(error = %e, "could not save the sim clock");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use app::model::{JobState, LaunchRequest};
    use chrono::Utc;

    use super::SyncEvery;
    use crate::cluster::{Cluster, WorkloadPhase};
    use crate::db::{NewJob, Transition};
    use crate::testkit::{Fixture, TestDb};

    /// Comparisons only when asked (or when an event is refused).
    const ONLY_WHEN_ASKED: SyncEvery = SyncEvery {
        period: Duration::from_secs(3600),
        after_events: Duration::from_secs(3600),
    };

    async fn launch(f: &Fixture, user: &str, gpus: u32, pool: &str) -> String {
        let viewer = f.viewer(user).await;
        let req = LaunchRequest {
            template: "llama-3.1-8b-fsdp".into(),
            gpus,
            pool: Some(pool.into()),
            params: Default::default(),
            max_runtime_s: Some(3600),
            name: None,
            priority: None,
            team: None,
        };
        f.portal
            .launch(&viewer, req, None)
            .await
            .expect("launched")
            .0
            .id
    }

    /// Moves a job in the database only, as a lost or misapplied event would leave it.
    async fn drift(f: &Fixture, id: &str, from: JobState, to: JobState, nodes: &[String]) {
        let moved =
            f.db.transition(&Transition {
                job_id: id,
                from: &[from],
                to,
                at: f.cluster.now(),
                reason: "test: drift",
                node_names: Some(nodes),
                kind: None,
            })
            .await
            .unwrap();
        assert!(moved, "{id} was {from}");
    }

    /// Waits (at most 10 s) for an event of the job whose text contains `text`.
    async fn event_saying(f: &Fixture, id: &str, text: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let events = f.db.events_for(&[id]).await.unwrap();
            if let Some(e) = events
                .get(id)
                .into_iter()
                .flatten()
                .find(|e| e.reason.contains(text))
            {
                return e.reason.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no event of {id} says '{text}': {events:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn phase(f: &Fixture, id: &str) -> Option<WorkloadPhase> {
        f.cluster
            .workloads()
            .await
            .unwrap()
            .into_iter()
            .find(|(j, _)| j == id)
            .map(|(_, p)| p)
    }

    /// The database drifts three ways from the cluster; each comparison puts it back as the
    /// cluster has it, with an event saying so, and the run intervals follow.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drift_in_the_database_is_corrected_from_the_cluster() {
        let db = TestDb::sqlite();
        let f = Fixture::start_with(&db, ONLY_WHEN_ASKED).await;

        // 1. Queued in the database, admitted in the cluster.
        let a = launch(&f, "alice", 16, "hgx-h100").await;
        let Some(WorkloadPhase::Admitted { at, nodes, .. }) = phase(&f, &a).await else {
            panic!("an empty pool admits at once");
        };
        drift(&f, &a, JobState::Admitted, JobState::Queued, &[]).await;
        f.resync.request();
        let said = event_saying(&f, &a, "Corrected from the cluster: admitted on").await;
        assert_eq!(
            said,
            format!(
                "Corrected from the cluster: admitted on {} (the database said queued)",
                nodes.join(", ")
            )
        );
        let row = f.db.get_job(&a).await.unwrap();
        assert_eq!(row.state, JobState::Admitted);
        assert_eq!(row.admitted_at.map(crate::db::ms), Some(crate::db::ms(at)));
        assert_eq!(row.node_names, nodes);
        let open = f.db.open_interval_starts().await.unwrap();
        assert_eq!(
            open.get(&a).map(|t| crate::db::ms(*t)),
            Some(crate::db::ms(at)),
            "the run interval is open again from the cluster's admission time"
        );

        // 2. Admitted in the database, pending in the cluster (nlp's 16 + 8 in hgx-h200 are
        // taken by the first).
        launch(&f, "alice", 16, "hgx-h200").await;
        let b = launch(&f, "alice", 16, "hgx-h200").await;
        assert_eq!(phase(&f, &b).await, Some(WorkloadPhase::Pending));
        drift(
            &f,
            &b,
            JobState::Queued,
            JobState::Admitted,
            &["hgx-h200-node-01".into()],
        )
        .await;
        f.resync.request();
        event_saying(
            &f,
            &b,
            "Corrected from the cluster: queued (the database said admitted)",
        )
        .await;
        let row = f.db.get_job(&b).await.unwrap();
        assert_eq!(row.state, JobState::Queued);
        assert!(row.node_names.is_empty());
        assert!(!f.db.open_interval_starts().await.unwrap().contains_key(&b));

        // 3. Admitted in the database, unknown to the cluster: queued again, and sent again.
        let params = serde_json::Map::new();
        let c = uuid::Uuid::now_v7().to_string();
        f.db.insert_job(
            &NewJob {
                id: &c,
                name: "never-sent",
                template: "llama-3.1-8b-fsdp",
                template_version: 1,
                team: "nlp",
                user: "alice",
                pool: "hgx-h100",
                gpus: 8,
                priority: Default::default(),
                params: &params,
                max_runtime_s: 3600,
                idempotency_key: None,
                request_body: "{}",
                created_at: Utc::now(),
            },
            "test: stored",
        )
        .await
        .unwrap();
        drift(
            &f,
            &c,
            JobState::Queued,
            JobState::Admitted,
            &["hgx-h100-node-09".into()],
        )
        .await;
        f.resync.request();
        event_saying(
            &f,
            &c,
            "Corrected from the cluster: the cluster does not hold it (the database said admitted)",
        )
        .await;
        assert_eq!(f.db.get_job(&c).await.unwrap().state, JobState::Queued);
        assert_eq!(super::resend_unsent(&f.portal).await.unwrap(), 1);
        assert!(phase(&f, &c).await.is_some(), "sent again");
        f.stop().await;
    }

    /// An event the stored state refuses (the database lost the admission; the cluster says
    /// the pods run) is not dropped in silence: it sets off a comparison that repairs the job.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_event_sets_off_a_repair() {
        let db = TestDb::sqlite();
        let f = Fixture::start_with(&db, ONLY_WHEN_ASKED).await;
        let a = launch(&f, "alice", 16, "hgx-h100").await;
        drift(&f, &a, JobState::Admitted, JobState::Queued, &[]).await;
        // The sim's pods start: its Running event finds the job queued and is refused.
        f.cluster.sim.advance(chrono::Duration::seconds(120));
        event_saying(
            &f,
            &a,
            "Corrected from the cluster: all pods are running (the database said queued)",
        )
        .await;
        let row = f.db.get_job(&a).await.unwrap();
        assert_eq!(row.state, JobState::Running);
        assert!(f.db.open_interval_starts().await.unwrap().contains_key(&a));
        f.stop().await;
    }
}
