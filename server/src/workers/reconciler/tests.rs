//! The event writer and the resender against the sim behind a wrapper that misbehaves on
//! demand, on SQLite and Postgres.

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
        ..Default::default()
    };
    f.portal
        .launch_job(&viewer, req, None)
        .await
        .expect("launched")
        .0
        .id
}

/// A job stored straight into the database (the cluster never told of it).
async fn store(
    f: &Fixture,
    params: &serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> String {
    let id = uuid::Uuid::now_v7().to_string();
    f.db.insert_job(
        &NewJob {
            id: &id,
            name,
            template: "llama-3.1-8b-fsdp",
            template_version: 1,
            team: "nlp",
            user: "alice",
            pool: "hgx-h100",
            gpus: 8,
            priority: Default::default(),
            params,
            max_runtime_s: 3600,
            idempotency_key: None,
            request_body: "{}",
            created_at: Utc::now(),
            cloned_from: None,
        },
        "test: stored",
    )
    .await
    .unwrap();
    id
}

/// A job's run intervals, (start, end), in order.
async fn runs(
    f: &Fixture,
    id: &str,
) -> Vec<(chrono::DateTime<Utc>, Option<chrono::DateTime<Utc>>)> {
    f.db.job_intervals(id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.1, r.2))
        .collect()
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
    assert_eq!(
        phase(&f, &b).await,
        Some(WorkloadPhase::Pending { evicted_at: None })
    );
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
    let c = store(&f, &params, "never-sent").await;
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

    // 4. Running in the database, sent, and no longer held by the cluster: its workload was
    // deleted (or, finished, collected) while nobody watched. It ends, and is not sent again:
    // a finished training run must not start over. It was queued and sent again.
    let d = store(&f, &params, "gone").await;
    f.db.mark_sent(&d, f.cluster.now()).await.unwrap();
    drift(
        &f,
        &d,
        JobState::Queued,
        JobState::Admitted,
        &["hgx-h100-node-10".into()],
    )
    .await;
    drift(&f, &d, JobState::Admitted, JobState::Running, &[]).await;
    f.resync.request();
    event_saying(
        &f,
        &d,
        "Corrected from the cluster: its workload is gone from the cluster, deleted while Gantry was not watching (the database said running); it is not sent again",
    )
    .await;
    let row = f.db.get_job(&d).await.unwrap();
    assert_eq!(row.state, JobState::Cancelled);
    assert!(!f.db.open_interval_starts().await.unwrap().contains_key(&d));
    assert_eq!(super::resend_unsent(&f.portal).await.unwrap(), 0);
    assert!(phase(&f, &d).await.is_none(), "not sent again");
    f.stop().await;
}

/// A job the cluster took though its send was not recorded (the apply timed out after it
/// landed, or the record failed) is known to have been sent once the cluster lists or admits
/// it: a repair after its workload is gone then ends it instead of sending it again (it was
/// queued again and re-sent, and the training run started over).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_the_cluster_took_unrecorded_is_known_as_sent() {
    let db = TestDb::sqlite();
    let f = Fixture::start_with(&db, ONLY_WHEN_ASKED).await;
    let forget = |id: String| {
        let db = f.db.clone();
        async move {
            sqlx::query("UPDATE job SET sent_at = NULL WHERE job_id = $1")
                .bind(id)
                .execute(&*db.write())
                .await
                .unwrap();
        }
    };
    // Listed by the cluster, not admitted (hgx-h200 is full), its send not recorded: the
    // resender records it and sends nothing.
    let blocker = launch(&f, "alice", 16, "hgx-h200").await;
    let waiting = launch(&f, "alice", 16, "hgx-h200").await;
    assert_eq!(
        phase(&f, &waiting).await,
        Some(WorkloadPhase::Pending { evicted_at: None })
    );
    forget(waiting.clone()).await;
    assert_eq!(super::resend_unsent(&f.portal).await.unwrap(), 0);
    assert!(f.db.get_job(&waiting).await.unwrap().sent_at.is_some());
    // Admitted from the cluster's event, its send not recorded: the admission records it.
    forget(waiting.clone()).await;
    let alice = f.viewer("alice").await;
    f.portal.cancel_job(&alice, &blocker).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let row = f.db.get_job(&waiting).await.unwrap();
        if row.state != JobState::Queued {
            assert!(row.sent_at.is_some(), "admitted, and not known as sent");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not admitted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

/// A run the cluster evicted while Gantry was not watching (Kueue's `Evicted` condition says
/// when) ends at that time, as a preemption; it once ended when Gantry next compared, and the
/// whole gap was counted as GPU-hours. An eviction recorded before this admission is not it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_evicted_while_nobody_watched_ends_at_the_eviction() {
    let db = TestDb::sqlite();
    let f = Fixture::start_with(&db, ONLY_WHEN_ASKED).await;
    let params = serde_json::Map::new();
    let admitted = f.cluster.now();
    let a = store(&f, &params, "evicted").await;
    drift(
        &f,
        &a,
        JobState::Queued,
        JobState::Admitted,
        &["hgx-h100-node-03".into()],
    )
    .await;
    let b = store(&f, &params, "evicted-before").await;
    drift(
        &f,
        &b,
        JobState::Queued,
        JobState::Admitted,
        &["hgx-h100-node-04".into()],
    )
    .await;
    f.cluster.sim.advance(chrono::Duration::minutes(30));
    let evicted = admitted + chrono::Duration::minutes(10);
    let held = [
        (
            a.clone(),
            WorkloadPhase::Pending {
                evicted_at: Some(evicted),
            },
        ),
        (
            b.clone(),
            WorkloadPhase::Pending {
                evicted_at: Some(admitted - chrono::Duration::minutes(5)),
            },
        ),
    ];
    super::correct_from_cluster(&f.db, &*f.cluster, &held)
        .await
        .unwrap();
    let intervals = f.db.job_intervals(&a).await.unwrap();
    assert_eq!(intervals.len(), 1);
    assert_eq!(
        intervals[0].2.map(crate::db::ms),
        Some(crate::db::ms(evicted)),
        "ends at the eviction"
    );
    let events = f.db.events_for(&[a.as_str(), b.as_str()]).await.unwrap();
    let last = events[&a].last().unwrap();
    assert_eq!(last.kind, "evicted");
    assert!(
        last.reason
            .starts_with("Corrected from the cluster: evicted at "),
        "{}",
        last.reason
    );
    assert_eq!(f.db.get_job(&a).await.unwrap().state, JobState::Queued);
    // b's eviction was before its admission: ended when seen, not a preemption of this run.
    let end_b = f.db.job_intervals(&b).await.unwrap()[0].2.unwrap();
    assert!(end_b > evicted, "{end_b}");
    assert_ne!(events[&b].last().unwrap().kind, "evicted");
    f.stop().await;
}

/// Evicted and admitted again while nobody watched (Gantry down, or its watch listing anew):
/// the cluster shows an admission later than the database's. The run the database knew of
/// ended, at the time the cluster's count of past admitted seconds gives (Kueue's
/// accumulatedPastExecutionTimeSeconds, less the runs already closed), and a new run began.
/// It was one run moved to start at the re-admission: the hours before the eviction were
/// never billed, nor the preemption recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_evicted_and_admitted_again_while_nobody_watched_is_two_runs() {
    let db = TestDb::sqlite();
    let f = Fixture::start_with(&db, ONLY_WHEN_ASKED).await;
    let params = serde_json::Map::new();
    let minutes = chrono::Duration::minutes;
    // To the millisecond, as the database keeps times.
    let t0 = chrono::DateTime::from_timestamp_millis(f.cluster.now().timestamp_millis()).unwrap();
    let node = |n: &str| vec![n.to_string()];
    // a and b admitted at t0; c admitted at t0, preempted at +5 min (seen), admitted at +5.
    let a = store(&f, &params, "readmitted").await;
    drift(
        &f,
        &a,
        JobState::Queued,
        JobState::Admitted,
        &node("hgx-h100-node-03"),
    )
    .await;
    drift(&f, &a, JobState::Admitted, JobState::Running, &[]).await;
    let b = store(&f, &params, "readmitted-uncounted").await;
    drift(
        &f,
        &b,
        JobState::Queued,
        JobState::Admitted,
        &node("hgx-h100-node-04"),
    )
    .await;
    let c = store(&f, &params, "readmitted-twice").await;
    drift(
        &f,
        &c,
        JobState::Queued,
        JobState::Admitted,
        &node("hgx-h100-node-05"),
    )
    .await;
    let d = store(&f, &params, "readmitted-made-anew").await;
    drift(
        &f,
        &d,
        JobState::Queued,
        JobState::Admitted,
        &node("hgx-h100-node-09"),
    )
    .await;
    f.cluster.sim.advance(minutes(5));
    drift(&f, &d, JobState::Admitted, JobState::Queued, &[]).await;
    drift(
        &f,
        &d,
        JobState::Queued,
        JobState::Admitted,
        &node("hgx-h100-node-09"),
    )
    .await;
    drift(&f, &c, JobState::Admitted, JobState::Queued, &[]).await;
    drift(
        &f,
        &c,
        JobState::Queued,
        JobState::Admitted,
        &node("hgx-h100-node-05"),
    )
    .await;
    f.cluster.sim.advance(minutes(30));
    let admitted = |at, n: &str, past_run_s| WorkloadPhase::Admitted {
        at,
        nodes: node(n),
        running: true,
        past_run_s,
    };
    let held = [
        // Ran 10 min, evicted, admitted again at +20 min.
        (
            a.clone(),
            admitted(t0 + minutes(20), "hgx-h100-node-06", 600),
        ),
        // The same, with no count from the cluster.
        (b.clone(), admitted(t0 + minutes(20), "hgx-h100-node-07", 0)),
        // 5 min (closed in the database) + 10 min (missed), admitted again at +25 min.
        (
            c.clone(),
            admitted(t0 + minutes(25), "hgx-h100-node-08", 900),
        ),
        // A count that does not cover the 5 min the database closed (its workload made
        // anew): it tells nothing of the missed run, which is counted to the re-admission.
        (
            d.clone(),
            admitted(t0 + minutes(25), "hgx-h100-node-10", 120),
        ),
    ];
    super::correct_from_cluster(&f.db, &*f.cluster, &held)
        .await
        .unwrap();
    // Each run in minutes from t0.
    let minutes_of = |runs: Vec<(chrono::DateTime<Utc>, Option<chrono::DateTime<Utc>>)>| {
        runs.into_iter()
            .map(|(start, end)| {
                (
                    (start - t0).num_minutes(),
                    end.map(|e| (e - t0).num_minutes()),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(minutes_of(runs(&f, &a).await), [(0, Some(10)), (20, None)]);
    assert_eq!(minutes_of(runs(&f, &b).await), [(0, Some(20)), (20, None)]);
    assert_eq!(
        minutes_of(runs(&f, &c).await),
        [(0, Some(5)), (5, Some(15)), (25, None)]
    );
    assert_eq!(
        minutes_of(runs(&f, &d).await),
        [(0, Some(5)), (5, Some(25)), (25, None)]
    );
    for (id, nodes) in [(&a, "hgx-h100-node-06"), (&b, "hgx-h100-node-07")] {
        let row = f.db.get_job(id).await.unwrap();
        assert_eq!(row.state, JobState::Running);
        assert_eq!(row.node_names, node(nodes));
        assert_eq!(
            row.admitted_at.map(crate::db::ms),
            Some(crate::db::ms(t0 + minutes(20)))
        );
    }
    let events = f.db.events_for(&[a.as_str(), b.as_str()]).await.unwrap();
    let preempted = |id: &str| {
        events[id]
            .iter()
            .find(|e| e.kind == "evicted")
            .map(|e| e.reason.clone())
            .unwrap_or_default()
    };
    assert!(
        preempted(&a).starts_with("Corrected from the cluster: evicted at "),
        "{}",
        preempted(&a)
    );
    assert!(
        preempted(&b).contains("a time the cluster does not record"),
        "{}",
        preempted(&b)
    );
    f.stop().await;
}

/// What the event writer makes of an admission for a job the database holds as admitted: the
/// same admission seen again (a restart's list) and an undated one (the admission a job
/// object's verdict implies) are held, quietly, and nothing moves; an earlier one does not
/// fit and is refused (a comparison follows). A later one is a missed eviction (the kube flow
/// test `a_run_preempted_readmitted_and_finished_while_gantry_was_down_is_two_runs`). The end
/// of a run admitted at that same instant says its run time is not recorded; an end after a
/// dated admission says nothing of the kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admissions_already_held_are_quiet_and_undated_runs_say_so() {
    use super::{apply, Outcome};
    use crate::cluster::{Change, ClusterEvent};
    let db = TestDb::sqlite();
    let f = Fixture::start_with(&db, ONLY_WHEN_ASKED).await;
    let params = serde_json::Map::new();
    let ev = |id: &str, at, change| ClusterEvent {
        seq: 0,
        job_id: id.to_string(),
        pool: "hgx-h100".into(),
        at,
        change,
    };
    let admitted = |past_run_s| Change::Admitted {
        nodes: vec![],
        past_run_s,
    };
    let held = store(&f, &params, "held").await;
    drift(&f, &held, JobState::Queued, JobState::Admitted, &[]).await;
    let since = f.db.get_job(&held).await.unwrap().admitted_at.unwrap();
    let hour = chrono::Duration::hours(1);
    for (at, past, what) in [
        (since, Some(0), "the same admission"),
        (since + hour, None, "an undated one"),
    ] {
        let out = apply(&f.db, &ev(&held, at, admitted(past))).await.unwrap();
        assert!(matches!(out, Outcome::AlreadyHeld), "{what}");
    }
    let out = apply(&f.db, &ev(&held, since - hour, admitted(Some(0))))
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Refused), "an earlier admission");
    let runs = f.db.job_intervals(&held).await.unwrap();
    assert_eq!(
        runs.iter().map(|r| (r.1, r.2)).collect::<Vec<_>>(),
        vec![(since, None)],
        "the run it knew of stands"
    );

    // Undated: admitted at its end. Dated: admitted an hour before it.
    let t = since + hour;
    let undated = store(&f, &params, "undated").await;
    let dated = store(&f, &params, "dated").await;
    for (id, admitted_at) in [(&undated, t), (&dated, t - hour)] {
        let out = apply(&f.db, &ev(id, admitted_at, admitted(None)))
            .await
            .unwrap();
        assert!(matches!(out, Outcome::Moved(_)));
        let end = Change::Succeeded {
            reason: "The JobSet completed".into(),
        };
        let out = apply(&f.db, &ev(id, t, end)).await.unwrap();
        assert!(matches!(out, Outcome::Moved(_)));
    }
    let said = |id: &String| {
        let f = &f;
        let id = id.clone();
        async move {
            f.db.events_for(&[id.as_str()]).await.unwrap()[&id]
                .iter()
                .map(|e| e.reason.clone())
                .collect::<Vec<_>>()
                .join(" | ")
        }
    };
    let undated_said = said(&undated).await;
    assert!(
        undated_said.contains("its run time is not recorded"),
        "{undated_said}"
    );
    let dated_said = said(&dated).await;
    assert!(!dated_said.contains("not recorded"), "{dated_said}");
    // Any later event for an ended job is its history: quiet, nothing moves.
    let out = apply(&f.db, &ev(&dated, t + hour, admitted(Some(0))))
        .await
        .unwrap();
    assert!(matches!(out, Outcome::AlreadyEnded));
}

/// A queued job the cluster reports admitted with Kueue's count of earlier admitted time that
/// the database never saw: it was admitted and evicted while Gantry was not watching. That
/// run is recorded for its length (placed just before the admission, which the events say),
/// by the event writer and by the comparison alike; a count within rounding of what the
/// database has is no run. And an undated admission is never placed before the end of the
/// last run the database closed. Before, the missed run was not billed at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_missed_while_queued_is_billed_for_kueues_count() {
    use super::{apply, Outcome};
    use crate::cluster::{Change, ClusterEvent};
    let db = TestDb::sqlite();
    let f = Fixture::start_with(&db, ONLY_WHEN_ASKED).await;
    let params = serde_json::Map::new();
    // An hour after the jobs are stored (the missed run comes after their creation).
    let t = chrono::DateTime::from_timestamp_millis(f.cluster.now().timestamp_millis()).unwrap()
        + chrono::Duration::hours(1);
    let minutes = chrono::Duration::minutes;
    let admitted_at = |at, past_run_s, id: &str| ClusterEvent {
        seq: 0,
        job_id: id.to_string(),
        pool: "hgx-h100".into(),
        at,
        change: Change::Admitted {
            nodes: vec![],
            past_run_s,
        },
    };
    // By the event writer: 10 min counted, none closed.
    let a = store(&f, &params, "missed-by-event").await;
    let out = apply(&f.db, &admitted_at(t, Some(600), &a)).await.unwrap();
    assert!(matches!(out, Outcome::Moved(_)));
    assert_eq!(
        runs(&f, &a).await,
        vec![(t - minutes(10), Some(t)), (t, None)]
    );
    let said = event_saying(&f, &a, "for 10 min by Kueue's count").await;
    assert!(said.contains("when is not recorded"), "{said}");
    // By the comparison: the same.
    let b = store(&f, &params, "missed-by-comparison").await;
    let held = vec![(
        b.clone(),
        WorkloadPhase::Admitted {
            at: t,
            nodes: vec![],
            running: false,
            past_run_s: 600,
        },
    )];
    super::correct_from_cluster(&f.db, &*f.cluster, &held)
        .await
        .unwrap();
    assert_eq!(
        runs(&f, &b).await,
        vec![(t - minutes(10), Some(t)), (t, None)]
    );
    // Within rounding (2 s for a job with no closed run): no run made of it.
    let c = store(&f, &params, "rounding").await;
    apply(&f.db, &admitted_at(t, Some(2), &c)).await.unwrap();
    assert_eq!(runs(&f, &c).await, vec![(t, None)]);
    // A count longer than the job has existed: the run starts no earlier than its creation.
    let e = store(&f, &params, "longer-than-its-life").await;
    let created = f.db.get_job(&e).await.unwrap().created_at;
    apply(&f.db, &admitted_at(t, Some(3 * 3600), &e))
        .await
        .unwrap();
    assert_eq!(runs(&f, &e).await, vec![(created, Some(t)), (t, None)]);
    event_saying(
        &f,
        &e,
        "(of 3.0 h by Kueue's count: what fits after what Gantry recorded)",
    )
    .await;

    // A run closed at t; an undated admission said to be at t - 5 min comes after it.
    let d = store(&f, &params, "undated-after-a-run").await;
    for (from, to, at) in [
        (JobState::Queued, JobState::Admitted, t - minutes(20)),
        (JobState::Admitted, JobState::Queued, t),
    ] {
        assert!(f
            .db
            .transition(&Transition {
                job_id: &d,
                from: &[from],
                to,
                at,
                reason: "test: seen",
                node_names: Some(&[]),
                kind: None,
            })
            .await
            .unwrap());
    }
    apply(&f.db, &admitted_at(t - minutes(5), None, &d))
        .await
        .unwrap();
    assert_eq!(
        runs(&f, &d).await,
        vec![(t - minutes(20), Some(t)), (t, None)],
        "never overlapping the run it knew of"
    );
}

/// A job the database holds as queued after a run it saw, which Kueue admitted again and
/// deactivated at its max runtime while Gantry was not watching: the failure's count less the
/// closed run is the run it missed, ending at the failure. Applied again (a restart's list),
/// nothing more; a count within rounding of the closed run adds none.
#[tokio::test]
async fn a_deactivation_missed_while_queued_bills_the_rest_of_kueues_count() {
    use super::{apply, Outcome};
    use crate::cluster::{Change, ClusterEvent};
    let db = TestDb::sqlite();
    let f = Fixture::start_with(&db, ONLY_WHEN_ASKED).await;
    let params = serde_json::Map::new();
    let t = chrono::DateTime::from_timestamp_millis(f.cluster.now().timestamp_millis()).unwrap()
        + chrono::Duration::hours(2);
    let minutes = chrono::Duration::minutes;
    let failed = |past_run_s, id: &str| ClusterEvent {
        seq: 0,
        job_id: id.to_string(),
        pool: "hgx-h100".into(),
        at: t,
        change: Change::Failed {
            reason: "Stopped at its max runtime of 8.0 h: Kueue deactivated its workload".into(),
            past_run_s,
        },
    };
    let seen_run = |id: String| {
        let db = f.db.clone();
        async move {
            for (from, to, at) in [
                (JobState::Queued, JobState::Admitted, t - minutes(60)),
                (JobState::Admitted, JobState::Queued, t - minutes(40)),
            ] {
                assert!(db
                    .transition(&Transition {
                        job_id: &id,
                        from: &[from],
                        to,
                        at,
                        reason: "test: seen",
                        node_names: Some(&[]),
                        kind: None,
                    })
                    .await
                    .unwrap());
            }
        }
    };
    // 20 min seen and closed, 35 min counted: the 15 min missed end at the failure.
    let a = store(&f, &params, "deactivated").await;
    seen_run(a.clone()).await;
    assert!(matches!(
        apply(&f.db, &failed(35 * 60, &a)).await.unwrap(),
        Outcome::Moved(_)
    ));
    let both = vec![
        (t - minutes(60), Some(t - minutes(40))),
        (t - minutes(15), Some(t)),
    ];
    assert_eq!(runs(&f, &a).await, both);
    let row = f.db.get_job(&a).await.unwrap();
    assert_eq!((row.state, row.finished_at), (JobState::Failed, Some(t)));
    event_saying(&f, &a, "for 15 min by Kueue's count until its end").await;
    // The same failure again: already ended, the runs unchanged.
    assert!(matches!(
        apply(&f.db, &failed(35 * 60, &a)).await.unwrap(),
        Outcome::AlreadyEnded
    ));
    assert_eq!(runs(&f, &a).await, both);
    // A count within rounding of the closed run (3 s over it; 2 s per run and 2 more): none.
    let b = store(&f, &params, "rounding").await;
    seen_run(b.clone()).await;
    apply(&f.db, &failed(20 * 60 + 3, &b)).await.unwrap();
    assert_eq!(
        runs(&f, &b).await,
        vec![(t - minutes(60), Some(t - minutes(40)))]
    );
}

/// A burst of cluster events (a watch's list after a restart: the history of every finished
/// job the cluster keeps, mixed with live changes) is written in order: the events of jobs
/// that had ended change nothing, and every other job moves as its events say, including one
/// that ends within the burst and is told of again after. The writer reads which jobs had
/// ended once per burst (`make bench`'s replay: 20,000 ended jobs' history in about 1 s
/// instead of 6 s).
#[tokio::test]
async fn a_burst_of_history_is_passed_over_and_live_changes_in_it_are_written() {
    use crate::cluster::{Change, ClusterEvent};
    let db = TestDb::sqlite();
    let f = Fixture::start_with(&db, ONLY_WHEN_ASKED).await;
    let params = serde_json::Map::new();
    let t = chrono::DateTime::from_timestamp_millis(f.cluster.now().timestamp_millis()).unwrap()
        + chrono::Duration::minutes(10);
    let at = |m: i64| t + chrono::Duration::seconds(m);
    // Two jobs that ended (one ran, one was cancelled queued), and two queued ones.
    let ran = store(&f, &params, "ran").await;
    drift(&f, &ran, JobState::Queued, JobState::Admitted, &[]).await;
    drift(&f, &ran, JobState::Admitted, JobState::Succeeded, &[]).await;
    let cancelled = store(&f, &params, "cancelled").await;
    drift(&f, &cancelled, JobState::Queued, JobState::Cancelled, &[]).await;
    let a = store(&f, &params, "a").await;
    let b = store(&f, &params, "b").await;
    let before = |id: &str| {
        let db = f.db.clone();
        let id = id.to_string();
        async move {
            let row = db.get_job(&id).await.unwrap();
            let events = db.events_for(&[id.as_str()]).await.unwrap();
            (
                row.state,
                row.finished_at,
                events.get(&id).map_or(0, Vec::len),
                db.job_intervals(&id).await.unwrap().len(),
            )
        }
    };
    let (ran_was, cancelled_was) = (before(&ran).await, before(&cancelled).await);

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (applied_tx, mut applied) = tokio::sync::watch::channel(0u64);
    let (writer, _sync) = super::spawn_event_writer_every(
        f.db.clone(),
        f.cluster.clone(),
        rx,
        applied_tx,
        crate::service::LiveTx::new(64),
        ONLY_WHEN_ASKED,
    );
    let admitted = Change::Admitted {
        nodes: vec![],
        past_run_s: Some(0),
    };
    let succeeded = Change::Succeeded {
        reason: "The JobSet completed".into(),
    };
    let send = |seq: u64, id: &str, at, change: &Change| {
        tx.send(ClusterEvent {
            seq,
            job_id: id.to_string(),
            pool: "hgx-h100".into(),
            at,
            change: change.clone(),
        })
        .unwrap();
    };
    // History alone: nothing written, not even an empty transaction (each counted as a
    // change, which drops every page the page cache holds).
    let changes = f.db.changes();
    send(1, &ran, at(0), &admitted);
    send(2, &ran, at(3), &succeeded);
    send(3, &cancelled, at(2), &admitted);
    tokio::time::timeout(Duration::from_secs(10), applied.wait_for(|s| *s >= 3))
        .await
        .expect("the history is passed")
        .unwrap();
    assert_eq!(f.db.changes(), changes, "history writes nothing");
    let burst = [
        (&ran, at(0), admitted.clone()),
        (&a, at(1), admitted.clone()),
        (&cancelled, at(2), admitted.clone()),
        (&ran, at(3), succeeded.clone()),
        (&a, at(4), Change::Running),
        (&b, at(5), admitted.clone()),
        (&a, at(6), succeeded.clone()),
        (&a, at(7), succeeded.clone()),
        (
            &cancelled,
            at(8),
            Change::Cancelled {
                reason: "gone".into(),
            },
        ),
    ];
    // All queued before the writer takes the first: one burst.
    for (i, (id, at, change)) in burst.iter().enumerate() {
        send(i as u64 + 4, id, *at, change);
    }
    tokio::time::timeout(
        Duration::from_secs(10),
        applied.wait_for(|s| *s >= burst.len() as u64 + 3),
    )
    .await
    .expect("the burst is written")
    .unwrap();
    assert_eq!(before(&ran).await, ran_was, "an ended job is unchanged");
    assert_eq!(before(&cancelled).await, cancelled_was);
    let a_row = f.db.get_job(&a).await.unwrap();
    assert_eq!(
        (a_row.state, a_row.admitted_at, a_row.finished_at),
        (JobState::Succeeded, Some(at(1)), Some(at(6)))
    );
    let b_row = f.db.get_job(&b).await.unwrap();
    assert_eq!(
        (b_row.state, b_row.admitted_at),
        (JobState::Admitted, Some(at(5)))
    );
    writer.abort();
}
