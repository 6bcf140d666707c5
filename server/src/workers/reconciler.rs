//! The event writer: brings the database into agreement with the cluster by writing every
//! state change the cluster reports, and by comparing the two every few seconds and repairing
//! the database where it drifted. The resender and the clock saver are in
//! [`super::resender`], re-exported here.

use std::sync::Arc;
use std::time::Duration;

use app::model::JobState;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use super::resender::{resend_unsent, spawn_clock_saver, spawn_resender, spawn_resender_every};
use crate::cluster::{Change, Cluster, ClusterEvent, WorkloadPhase};
use crate::db::{Db, Transition};
use crate::service::LiveChange;

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
pub struct SyncHandle {
    requests: Arc<tokio::sync::Notify>,
    /// How many comparisons have ended (done, or deferred).
    passes: watch::Receiver<u64>,
}

impl SyncHandle {
    pub fn request(&self) {
        self.requests.notify_one();
    }

    /// Waits until at least `n` comparisons have ended since the writer started. A test
    /// that changes the database behind the cluster's back waits for the first one, which
    /// would otherwise repair its change at some moment of its own.
    pub async fn passes(&self, n: u64) {
        let mut rx = self.passes.clone();
        // The writer is gone only when its task ended: nothing left to wait for.
        let _ = rx.wait_for(|p| *p >= n).await;
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
    live: crate::service::LiveTx,
) -> (JoinHandle<()>, SyncHandle) {
    spawn_event_writer_every(db, cluster, events, applied, live, SYNC_EVERY)
}

pub fn spawn_event_writer_every(
    db: Db,
    cluster: Arc<dyn Cluster>,
    mut events: mpsc::UnboundedReceiver<ClusterEvent>,
    applied: watch::Sender<u64>,
    live: crate::service::LiveTx,
    every: SyncEvery,
) -> (JoinHandle<()>, SyncHandle) {
    let requests = Arc::new(tokio::sync::Notify::new());
    let (passes, passes_rx) = watch::channel(0u64);
    let handle = SyncHandle {
        requests: requests.clone(),
        passes: passes_rx,
    };
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
        // The first periodic comparison one period from now: an interval's first tick is at
        // once, and taken after the first request it was a second comparison right after the
        // first, repairing whatever a caller changed meanwhile (a test that waits for the
        // first pass and then changes the database saw it, under load).
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + every.period, every.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                ev = events.recv() => {
                    let Some(ev) = ev else { break };
                    // A burst (a watch's list after a restart holds the history of every
                    // finished job the cluster keeps): which of its jobs have ended is read
                    // once, and their events are history, written nowhere.
                    let mut batch = vec![ev];
                    while batch.len() < BATCH {
                        match events.try_recv() {
                            Ok(ev) => batch.push(ev),
                            Err(_) => break,
                        }
                    }
                    let ended = w.ended_among(&batch).await;
                    for ev in &batch {
                        if ended.contains(ev.job_id.as_str()) {
                            w.passed(ev);
                        } else if w.write(ev).await == Written::Refused {
                            due = true;
                        }
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
                passes.send_modify(|p| *p += 1);
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
    live: crate::service::LiveTx,
    /// The sequence number of the last event written.
    last: u64,
}

/// The most events taken from the queue at once (see [`Writer::ended_among`]).
const BATCH: usize = 512;

impl Writer {
    /// Which jobs of a batch of events had ended before it: an event of one is history (its
    /// `apply` would find it ended and write nothing). Read for a batch of more than one
    /// event, in one statement per 200 jobs; on a database error none, and each event is
    /// applied as usual.
    async fn ended_among(&self, batch: &[ClusterEvent]) -> std::collections::HashSet<String> {
        if batch.len() < 2 {
            return Default::default();
        }
        let mut ids: Vec<&str> = batch.iter().map(|e| e.job_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        self.db.ended_among(&ids).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "could not read which jobs of a batch of cluster events had ended; applying each");
            Default::default()
        })
    }

    /// Marks an event of a job that had ended as applied: history, nothing to write.
    fn passed(&mut self, ev: &ClusterEvent) {
        tracing::debug!(job.id = %ev.job_id, change = ?ev.change, "the job had already ended");
        self.last = self.last.max(ev.seq);
        self.applied.send_replace(ev.seq);
    }

    /// Writes one event, retrying until the database takes it, and marks it applied.
    async fn write(&mut self, ev: &ClusterEvent) -> Written {
        // A database outage must not lose the event: retry until it is written.
        let mut delay = Duration::from_millis(100);
        let out = loop {
            match apply(&self.db, ev).await {
                Ok(Outcome::Moved(change)) => {
                    self.live.send(change);
                    break Written::Applied;
                }
                Ok(Outcome::AlreadyEnded | Outcome::AlreadyHeld) => break Written::Applied,
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
                        self.live.send(c);
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

/// The repair of a queued job the cluster admitted at `at` on `nodes` (and whose pods all
/// run, `running`): to admitted, then to running, each with its event's words.
fn admission_moves<'a>(
    job_id: &'a str,
    (at, nodes, running): (chrono::DateTime<chrono::Utc>, &'a [String], bool),
    now: chrono::DateTime<chrono::Utc>,
    admitted: String,
    all_running: &str,
) -> Vec<(Transition<'a>, String)> {
    use JobState::*;
    let mut moves = vec![(
        Transition {
            job_id,
            from: &[Queued],
            to: Admitted,
            at,
            reason: "",
            node_names: Some(nodes),
            kind: None,
        },
        admitted,
    )];
    if running {
        moves.push((
            Transition {
                job_id,
                from: &[Admitted],
                to: Running,
                at: now.max(at),
                reason: "",
                node_names: None,
                kind: None,
            },
            all_running.to_string(),
        ));
    }
    moves
}

/// The repair of an admitted job the cluster holds as admitted again at `at` (on `nodes`,
/// its pods all running or not), later than the database's admission: evicted and admitted
/// again while Gantry was not watching. The run it knew of ended; a new one began. When it
/// ended: its admitted time in the cluster's count (`past_run_s`, Kueue's
/// accumulatedPastExecutionTimeSeconds) less the runs the database already closed; without
/// that count, at the re-admission at the latest (an upper bound, and the event says so).
async fn readmission_moves<'a>(
    db: &Db,
    row: &'a crate::db::JobRow,
    (at, nodes, running): (chrono::DateTime<chrono::Utc>, &'a [String], bool),
    past_run_s: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<(Transition<'a>, String)>, crate::db::DbError> {
    use JobState::*;
    let since = row.admitted_at.unwrap_or(at);
    let closed_s = db.closed_run_s(&row.id).await?;
    // Both counts are in whole seconds, each run cut down: a second either way. A count that
    // does not cover the runs the database closed (a workload made anew) tells nothing of
    // this one.
    let missed_s = past_run_s - closed_s;
    let (ended, how) = if missed_s > 0 {
        let ended = (since + chrono::TimeDelta::seconds(missed_s)).min(at);
        (ended, format!("evicted at {}", ended.to_rfc3339()))
    } else {
        (
            at,
            "evicted at a time the cluster does not record (its run is counted until it was admitted again)".to_string(),
        )
    };
    let mut moves = vec![(
        Transition {
            job_id: &row.id,
            from: &[Admitted, Running],
            to: Queued,
            at: ended,
            reason: "",
            node_names: Some(&[]),
            kind: Some("evicted"),
        },
        format!(
            "Corrected from the cluster: {how} and queued again while Gantry was not watching (the database said {} since {})",
            row.state,
            since.to_rfc3339()
        ),
    )];
    moves.extend(admission_moves(
        &row.id,
        (at, nodes, running),
        now,
        format!(
            "Corrected from the cluster: admitted again at {} on {}",
            at.to_rfc3339(),
            nodes_text(nodes)
        ),
        "Corrected from the cluster: all pods are running again",
    ));
    Ok(moves)
}

/// What came after a run Gantry missed, at the time the repair is for.
#[derive(Clone, Copy, PartialEq)]
enum After {
    /// An admission: the missed run ended in an eviction before it.
    Admission,
    /// The job's end (Kueue deactivated its workload): the missed run ends with it, which the
    /// end's own transition records.
    End,
}

/// The repair of a queued job the cluster holds as admitted at `at`, or as ended at `at`
/// (deactivated), whose count of admitted seconds (`past_run_s`, Kueue's
/// accumulatedPastExecutionTimeSeconds) exceeds the runs the database closed: it was admitted
/// (and, before an admission, evicted) while Gantry was not watching, at times the cluster no
/// longer records. That run is recorded for its length, placed just before `at` (the total is
/// right; before an admission the place is not known), its events saying so. No moves when
/// the count covers what the database has.
async fn missed_run_moves<'a>(
    db: &Db,
    row: &'a crate::db::JobRow,
    at: chrono::DateTime<chrono::Utc>,
    past_run_s: i64,
    after: After,
) -> Result<Vec<(Transition<'a>, String)>, crate::db::DbError> {
    use JobState::*;
    if past_run_s <= 0 {
        return Ok(Vec::new());
    }
    let closed: Vec<i64> = db
        .job_intervals(&row.id)
        .await?
        .into_iter()
        .filter_map(|(_, start, end, _)| end.map(|e| (e - start).num_milliseconds()))
        .collect();
    let missed_s = past_run_s - closed.iter().sum::<i64>() / 1000;
    // Kueue counts each run from its `Admitted` time, kept to the second, to the moment it
    // saw the eviction: a second or two more per run than the database's own times. Less
    // than that is rounding, not a run.
    let slack_s = 2 * (closed.len() as i64 + 1);
    if missed_s <= slack_s {
        return Ok(Vec::new());
    }
    // Never before what the database already has: the job's creation, the runs it closed.
    let floor = db
        .last_interval(&row.id)
        .await?
        .and_then(|(_, end)| end)
        .map_or(row.created_at, |end| end.max(row.created_at));
    let start = (at - chrono::TimeDelta::seconds(missed_s))
        .max(floor)
        .min(at);
    let fits_s = (at - start).num_seconds();
    if fits_s <= slack_s {
        return Ok(Vec::new());
    }
    let length = if fits_s < missed_s {
        format!(
            "{} (of {} by Kueue's count: what fits after what Gantry recorded)",
            app::format::duration(fits_s),
            app::format::duration(missed_s)
        )
    } else {
        format!("{} by Kueue's count", app::format::duration(missed_s))
    };
    let admitted = Transition {
        job_id: &row.id,
        from: &[Queued],
        to: Admitted,
        at: start,
        reason: "",
        node_names: Some(&[]),
        kind: None,
    };
    if after == After::End {
        return Ok(vec![(
            admitted,
            format!("Corrected from the cluster: admitted while Gantry was not watching, for {length} until its end; when it was admitted is not recorded, so the run is placed to end there"),
        )]);
    }
    Ok(vec![
        (
            admitted,
            format!("Corrected from the cluster: admitted while Gantry was not watching, for {length}; when is not recorded, so the run is placed just before its next admission"),
        ),
        (
            Transition {
                job_id: &row.id,
                from: &[Admitted],
                to: Queued,
                at,
                reason: "",
                node_names: Some(&[]),
                kind: Some("evicted"),
            },
            "Corrected from the cluster: evicted while Gantry was not watching, at a time the cluster does not record".to_string(),
        ),
    ])
}

/// Compares every active job in the database with `held`, the cluster's own list at a
/// moment whose events are all written, and repairs the database where they differ (the
/// cluster is the truth), each repair with an event saying so. Queued jobs the cluster
/// does not hold are the resender's; admitted or running ones it does not hold end as
/// cancelled when they were sent (deleted while Gantry was not watching), and are queued
/// again for the resender when they never were. Returns the live changes of the repairs.
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
            (Queued, None | Some(WorkloadPhase::Pending { .. })) => {}
            (
                Queued,
                Some(WorkloadPhase::Admitted {
                    at,
                    nodes,
                    running,
                    past_run_s,
                }),
            ) => {
                moves.extend(missed_run_moves(db, &row, *at, *past_run_s, After::Admission).await?);
                moves.extend(admission_moves(
                    &row.id,
                    (*at, nodes, *running),
                    now,
                    format!(
                        "Corrected from the cluster: admitted on {} (the database said queued)",
                        nodes_text(nodes)
                    ),
                    "Corrected from the cluster: all pods are running (the database said queued)",
                ));
            }
            // Sent, and once admitted from its workload, which the cluster no longer holds: it
            // was deleted (or, finished, collected) while Gantry was not watching. It ends; it
            // is not sent again (that would start a finished training run over).
            (Admitted | Running, None) if row.sent_at.is_some() => {
                tracing::warn!(job.id = %row.id, state = %said, "the cluster no longer holds a job it admitted; the job ends as cancelled");
                moves.push((
                    Transition {
                        job_id: &row.id,
                        from: &[Admitted, Running],
                        to: Cancelled,
                        at: now,
                        reason: "",
                        node_names: None,
                        kind: None,
                    },
                    format!("Corrected from the cluster: its workload is gone from the cluster, deleted while Gantry was not watching (the database said {said}); it is not sent again"),
                ));
            }
            (Admitted | Running, None | Some(WorkloadPhase::Pending { .. })) => {
                // Evicted while Gantry was not watching, at a time the cluster recorded after
                // this admission: the run ends then, as a preemption (not when Gantry saw it).
                let evicted = match held.get(row.id.as_str()) {
                    Some(WorkloadPhase::Pending {
                        evicted_at: Some(e),
                    }) if row.admitted_at.is_some_and(|a| *e >= a) && *e <= now => Some(*e),
                    _ => None,
                };
                let reason = if let Some(e) = evicted {
                    format!(
                        "Corrected from the cluster: evicted at {} and queued again (the database said {said})",
                        e.to_rfc3339()
                    )
                } else if held.contains_key(row.id.as_str()) {
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
                        at: evicted.unwrap_or(now),
                        reason: "",
                        node_names: Some(empty),
                        // Evicted: whether to make room (a preemption) the cluster's list does
                        // not say.
                        kind: evicted.map(|_| "evicted"),
                    },
                    reason,
                ));
            }
            (
                Admitted | Running,
                Some(WorkloadPhase::Admitted {
                    at,
                    nodes,
                    running,
                    past_run_s,
                }),
            ) if row
                .admitted_at
                .is_some_and(|since| crate::db::ms(*at) > crate::db::ms(since)) =>
            {
                moves.extend(
                    readmission_moves(db, &row, (*at, nodes, *running), *past_run_s, now).await?,
                );
            }
            (
                Admitted | Running,
                Some(WorkloadPhase::Admitted {
                    at, nodes, running, ..
                }),
            ) => {
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
            out.push(moved(&row, state, at));
        }
    }
    Ok(out)
}

/// A job the database holds as admitted since before `ev.at`, which the cluster reports
/// admitted at `ev.at`: the run it knew of ended in an eviction nobody saw; it ends where the
/// cluster's count says, and the new admission is recorded (see [`readmission_moves`]).
async fn readmitted(
    db: &Db,
    row: &crate::db::JobRow,
    ev: &ClusterEvent,
    nodes: &[String],
    past_run_s: i64,
) -> Result<Outcome, crate::db::DbError> {
    let moves = readmission_moves(db, row, (ev.at, nodes, false), past_run_s, ev.at).await?;
    if !apply_moves(db, moves).await? {
        tracing::warn!(job.id = %ev.job_id, "the job moved while its missed eviction was repaired; comparing with the cluster");
        return Ok(Outcome::Refused);
    }
    Ok(Outcome::Moved(moved(row, JobState::Admitted, ev.at)))
}

/// Applies repair moves in order, each with its event's words; `false` when one did not fit
/// (the job moved meanwhile), the rest then left.
async fn apply_moves(
    db: &Db,
    moves: Vec<(Transition<'_>, String)>,
) -> Result<bool, crate::db::DbError> {
    for (t, reason) in moves {
        let t = Transition {
            reason: &reason,
            ..t
        };
        if !db.transition(&t).await? {
            return Ok(false);
        }
        tracing::info!(job.id = %t.job_id, state = %t.to, %reason, "corrected from the cluster");
    }
    Ok(true)
}

/// The live change of a job the database moved to `state` at `at`.
fn moved(
    row: &crate::db::JobRow,
    state: JobState,
    at: chrono::DateTime<chrono::Utc>,
) -> LiveChange {
    LiveChange {
        job_id: row.id.clone(),
        user: row.user.clone(),
        notify: false,
        team: row.team.clone(),
        pool: row.pool.clone(),
        state,
        at,
        row: Default::default(),
        seq: 0,
    }
}

/// What a job's end adds to its reason when the run it ends was admitted at that same
/// instant: the cluster no longer said when it was admitted (its Workload was gone, or
/// finished without its `Admitted` condition), so the run bills nothing, and the job page
/// says so rather than show a run of no length as if it were measured.
async fn unrecorded_run(db: &Db, ev: &ClusterEvent) -> Result<String, crate::db::DbError> {
    let admitted_at = match db.get_job(&ev.job_id).await {
        Ok(row) if matches!(row.state, JobState::Admitted | JobState::Running) => row.admitted_at,
        Ok(_) | Err(crate::db::DbError::NotFound) => None,
        Err(e) => return Err(e),
    };
    Ok(
        if admitted_at.is_some_and(|a| crate::db::ms(a) >= crate::db::ms(ev.at)) {
            " (it was admitted while Gantry was not watching, and the cluster no longer says when: its run time is not recorded, and it bills no GPU-hours)".to_string()
        } else {
            String::new()
        },
    )
}

enum Outcome {
    Moved(LiveChange),
    /// The end of a job that had already ended (the cluster's report of a cancel stored first).
    AlreadyEnded,
    /// An admission the database already holds, seen again.
    AlreadyHeld,
    /// The stored state does not fit the event: logged, and a comparison is due.
    Refused,
}

async fn apply(db: &Db, ev: &ClusterEvent) -> Result<Outcome, crate::db::DbError> {
    use JobState::*;
    let none: &[String] = &[];
    let mut kind = None;
    let (from, to, reason, nodes): (&[JobState], JobState, String, Option<&[String]>) =
        match &ev.change {
            Change::Admitted { nodes, .. } => (
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
            Change::Succeeded { reason } => (
                &[Admitted, Running],
                Succeeded,
                reason.clone() + &unrecorded_run(db, ev).await?,
                None,
            ),
            // From the queue too: a workload an admission check rejected never ran.
            Change::Failed { reason, .. } => (
                &[Queued, Admitted, Running],
                Failed,
                reason.clone() + &unrecorded_run(db, ev).await?,
                None,
            ),
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
            Change::Evicted { reason } => {
                kind = Some("evicted");
                (&[Admitted, Running], Queued, reason.clone(), Some(none))
            }
        };
    let mut at = ev.at;
    match &ev.change {
        // Admitted with a count of earlier admitted time the database never saw.
        Change::Admitted {
            past_run_s: Some(past),
            ..
        } if *past > 0 => {
            let row = match db.get_job(&ev.job_id).await {
                Ok(row) => Some(row),
                Err(crate::db::DbError::NotFound) => None,
                Err(e) => return Err(e),
            };
            if let Some(row) = row {
                if row.state == Queued {
                    apply_moves(
                        db,
                        missed_run_moves(db, &row, ev.at, *past, After::Admission).await?,
                    )
                    .await?;
                }
            }
        }
        // Deactivated with a count of admitted time the database never saw (admitted and run
        // to its max runtime, say, while Gantry was not watching): that run is recorded,
        // ending with the failure below.
        Change::Failed { past_run_s, .. } if *past_run_s > 0 => {
            let row = match db.get_job(&ev.job_id).await {
                Ok(row) => Some(row),
                Err(crate::db::DbError::NotFound) => None,
                Err(e) => return Err(e),
            };
            if let Some(row) = row.filter(|r| r.state == Queued) {
                apply_moves(
                    db,
                    missed_run_moves(db, &row, ev.at, *past_run_s, After::End).await?,
                )
                .await?;
            }
        }
        // An undated admission (a job object's resume, which may be left from an earlier
        // run) is never before the last run the database closed.
        Change::Admitted {
            past_run_s: None, ..
        } => {
            if let Some((_, Some(end))) = db.last_interval(&ev.job_id).await? {
                at = at.max(end);
            }
        }
        _ => {}
    }
    let applied = db
        .transition(&Transition {
            job_id: &ev.job_id,
            from,
            to,
            at,
            reason: &reason,
            node_names: nodes,
            kind,
        })
        .await?;
    if !applied {
        let row = match db.get_job(&ev.job_id).await {
            Ok(row) => Some(row),
            Err(crate::db::DbError::NotFound) => None,
            Err(e) => return Err(e),
        };
        let now = row
            .as_ref()
            .map_or("not stored", |r| r.state.as_str())
            .to_string();
        let ended = !matches!(
            now.as_str(),
            "queued" | "admitted" | "running" | "not stored"
        );
        if ended {
            // The usual end of a cancel: the database first, then the cluster's own report;
            // or the cluster's history of a job that ended (a finished JobSet seen again after
            // a restart). An ended job is not compared with the cluster: nothing to repair.
            tracing::debug!(job.id = %ev.job_id, change = ?ev.change, state = %now, "the job had already ended");
            return Ok(Outcome::AlreadyEnded);
        }
        if let (Some(row), Change::Admitted { nodes, past_run_s }) = (&row, &ev.change) {
            if let (Admitted | Running, Some(since)) = (row.state, row.admitted_at) {
                match (past_run_s, crate::db::ms(ev.at).cmp(&crate::db::ms(since))) {
                    // The admission it holds, seen again (a restart's list), or a stand-in at
                    // the job's end for an admission the cluster no longer dates: the run it
                    // knows of stands.
                    (None, _) | (Some(_), std::cmp::Ordering::Equal) => {
                        tracing::debug!(job.id = %ev.job_id, change = ?ev.change, "the admission is already held");
                        return Ok(Outcome::AlreadyHeld);
                    }
                    // Admitted again later: an eviction and an admission were missed (the
                    // job ended while Gantry was down, or between a watch's two lists).
                    (Some(past), std::cmp::Ordering::Greater) => {
                        return readmitted(db, row, ev, nodes, *past).await;
                    }
                    (Some(_), std::cmp::Ordering::Less) => {}
                }
            }
        }
        tracing::warn!(job.id = %ev.job_id, seq = ev.seq, change = ?ev.change, state = %now, "a cluster event does not fit the stored state; comparing with the cluster");
        return Ok(Outcome::Refused);
    }
    let row = db.get_job(&ev.job_id).await?;
    if to == Admitted && row.sent_at.is_none() {
        // The cluster admitted what it was sent, whether or not the send was recorded (an
        // apply that timed out after it landed): recorded now, so that a repair after its
        // workload is gone ends the job instead of sending it again.
        db.mark_sent(&ev.job_id, ev.at).await?;
    }
    tracing::info!(job.id = %ev.job_id, state = %to, pool = %ev.pool, "job moved");
    Ok(Outcome::Moved(moved(&row, to, ev.at)))
}

#[cfg(test)]
mod tests;
