//! The sim cluster over time: admission, start-up, completion, preemption, restore, ETAs.

use super::*;
use app::model::Priority;
use chrono::TimeZone;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 1, 9, 0, 0).unwrap()
}

fn quota(nominal: u32, borrowing_limit: Option<u32>) -> QuotaSpec {
    QuotaSpec {
        nominal,
        borrowing_limit,
        lending_limit: None,
        strategy: None,
    }
}

async fn sim(nodes: u32) -> SimCluster {
    let s = SimCluster::new(
        Clock::manual(t0()),
        30,
        &[PoolSpec {
            name: "hgx-h100".into(),
            gpu_model: "H100".into(),
            nodes,
            strategy: QueueingStrategy::BestEffortFifo,
        }],
    );
    s.set_quota("nlp", "hgx-h100", quota(64, Some(0)))
        .await
        .unwrap();
    s.set_quota("vision", "hgx-h100", quota(32, Some(0)))
        .await
        .unwrap();
    s
}

fn job(id: &str, team: &str, gpus: u32, runtime_s: u64, minute: i64) -> WorkloadSpec {
    WorkloadSpec {
        job_id: id.into(),
        team: team.into(),
        pool: "hgx-h100".into(),
        gpus,
        priority: Priority::Normal,
        submitted_at: t0() + Duration::minutes(minute),
        max_runtime_s: runtime_s,
        run: Default::default(),
    }
}

fn drain(rx: &mut mpsc::UnboundedReceiver<ClusterEvent>) -> Vec<ClusterEvent> {
    let mut v = Vec::new();
    while let Ok(e) = rx.try_recv() {
        v.push(e);
    }
    v
}

fn changes(ev: &[ClusterEvent]) -> Vec<(String, Change)> {
    ev.iter()
        .map(|e| (e.job_id.clone(), e.change.clone()))
        .collect()
}

#[tokio::test]
async fn jobs_are_admitted_run_and_finish_on_the_clock() {
    let s = sim(2).await;
    let mut rx = s.subscribe();
    s.submit(job("a", "nlp", 16, 3600, 0)).await.unwrap();
    let ev = changes(&drain(&mut rx));
    assert!(
        matches!(&ev[0], (id, Change::Admitted { nodes, .. }) if id == "a" && nodes.len() == 2)
    );
    s.advance(Duration::seconds(30));
    assert_eq!(
        changes(&drain(&mut rx)),
        vec![("a".to_string(), Change::Running)]
    );
    s.advance(Duration::seconds(3569));
    assert!(
        drain(&mut rx).is_empty(),
        "one second before the end it still runs"
    );
    s.advance(Duration::seconds(1));
    assert!(matches!(&changes(&drain(&mut rx))[0], (id, Change::Succeeded { .. }) if id == "a"));
    assert_eq!(s.pools().await.unwrap()[0].gpus_allocated, 0);
}

#[tokio::test]
async fn a_finish_admits_the_next_job_at_that_moment() {
    let s = sim(2).await;
    let mut rx = s.subscribe();
    s.submit(job("a", "nlp", 16, 600, 0)).await.unwrap();
    s.submit(job("b", "nlp", 16, 600, 1)).await.unwrap();
    let q = s.pending("hgx-h100").await.unwrap();
    assert_eq!(q.len(), 1);
    assert_eq!(q[0].position_in_pool, 1);
    assert_eq!(
        q[0].reason,
        "Waiting for 2 whole nodes in hgx-h100: none is free"
    );
    assert_eq!(
        q[0].eta,
        Some(t0() + Duration::seconds(600)),
        "b starts when a ends"
    );
    drain(&mut rx);
    s.advance(Duration::hours(1));
    let ev = drain(&mut rx);
    let b_admitted = ev
        .iter()
        .find(|e| e.job_id == "b" && matches!(e.change, Change::Admitted { .. }))
        .unwrap();
    assert_eq!(
        b_admitted.at,
        t0() + Duration::seconds(600),
        "admitted when a finished, not at the end of the advance"
    );
    let b_done = ev
        .iter()
        .find(|e| e.job_id == "b" && matches!(e.change, Change::Succeeded { .. }))
        .unwrap();
    assert_eq!(b_done.at, t0() + Duration::seconds(1200));
}

#[tokio::test]
async fn positions_and_etas_move_when_a_job_ahead_is_cancelled() {
    let s = sim(16).await;
    s.submit(job("running", "nlp", 64, 3600, 0)).await.unwrap();
    s.submit(job("b", "nlp", 16, 7200, 1)).await.unwrap();
    s.submit(job("c", "nlp", 64, 3600, 2)).await.unwrap();
    let q = s.pending("hgx-h100").await.unwrap();
    assert_eq!(
        q.iter()
            .map(|p| (p.job_id.as_str(), p.position_in_pool))
            .collect::<Vec<_>>(),
        [("b", 1), ("c", 2)]
    );
    assert_eq!(
        q[1].reason,
        "Team nlp would exceed its quota in hgx-h100: 64 of 64 GPUs in use, this job needs 64"
    );
    assert_eq!(q[0].eta, Some(t0() + Duration::hours(1)));
    assert_eq!(
        q[1].eta,
        Some(t0() + Duration::hours(3)),
        "c waits for b's two hours"
    );
    s.cancel("b").await.unwrap();
    let q = s.pending("hgx-h100").await.unwrap();
    assert_eq!(q.len(), 1);
    assert_eq!((q[0].job_id.as_str(), q[0].position_in_pool), ("c", 1));
    assert_eq!(
        q[0].eta,
        Some(t0() + Duration::hours(1)),
        "the cancel moved c's ETA two hours earlier"
    );
}

/// Four nodes (32 GPUs): nlp 16 GPUs and may borrow without limit, vision 16 and lends.
async fn reclaim_sim() -> SimCluster {
    let s = sim(4).await;
    s.set_quota("nlp", "hgx-h100", quota(16, None))
        .await
        .unwrap();
    s.set_quota("vision", "hgx-h100", quota(16, Some(0)))
        .await
        .unwrap();
    s
}

#[tokio::test]
async fn a_reclaim_preempts_the_borrower_which_queues_again_with_its_time() {
    let s = reclaim_sim().await;
    let mut rx = s.subscribe();
    s.submit(job("nlp-1", "nlp", 16, 36000, 0)).await.unwrap();
    s.submit(job("nlp-2", "nlp", 16, 36000, 1)).await.unwrap();
    assert_eq!(
        s.pools().await.unwrap()[0]
            .teams
            .iter()
            .find(|t| t.team == "nlp")
            .unwrap()
            .borrowed,
        16
    );
    s.advance(Duration::minutes(5));
    drain(&mut rx);
    s.submit(job("vision-1", "vision", 16, 600, 10))
        .await
        .unwrap();
    let ev = changes(&drain(&mut rx));
    assert_eq!(
        ev[0],
        (
            "nlp-2".to_string(),
            Change::Preempted {
                reason: "Preempted: team vision reclaimed its quota".into()
            }
        )
    );
    assert!(matches!(&ev[1], (id, Change::Admitted { .. }) if id == "vision-1"));
    let q = s.pending("hgx-h100").await.unwrap();
    assert_eq!(q[0].job_id, "nlp-2");
    assert_eq!(
        q[0].submitted_at,
        t0() + Duration::minutes(1),
        "keeps its original submission time"
    );
    assert_eq!(
        q[0].eta,
        Some(t0() + Duration::minutes(5) + Duration::seconds(600)),
        "back when vision's job ends"
    );
}

/// Kueue's max execution time counts every admission: the workload controller keeps the time
/// admitted before each eviction (`status.accumulatedPastExecutionTimeSeconds`) and
/// deactivates the workload once that and the current admission reach the maximum
/// (`remaining = maximumExecutionTimeSeconds - accumulated - since admission`). A 4 h job
/// preempted after 3 h has 1 h once admitted again; it once ran 4 h more, holding the GPUs
/// 3 h longer than Kueue would, and the ETAs behind it were as late.
#[tokio::test]
async fn a_preempted_job_s_max_runtime_counts_its_earlier_admission() {
    let s = reclaim_sim().await;
    let mut rx = s.subscribe();
    s.submit(job("nlp-1", "nlp", 16, 36000, 0)).await.unwrap();
    s.submit(job("nlp-2", "nlp", 16, 4 * 3600, 1))
        .await
        .unwrap();
    s.advance(Duration::hours(3));
    drain(&mut rx);
    s.submit(job("vision-1", "vision", 16, 1800, 180))
        .await
        .unwrap();
    let ev = changes(&drain(&mut rx));
    assert!(
        matches!(&ev[0], (id, Change::Preempted { .. }) if id == "nlp-2"),
        "{ev:?}"
    );
    // Behind it, a job's ETA counts the 1 h nlp-2 has left once admitted again, not 4 h.
    s.submit(job("nlp-3", "nlp", 16, 600, 181)).await.unwrap();
    let q = s.pending("hgx-h100").await.unwrap();
    let behind = q.iter().find(|p| p.job_id == "nlp-3").expect("nlp-3 waits");
    assert_eq!(
        behind.eta,
        Some(t0() + Duration::hours(4) + Duration::minutes(30)),
        "{q:?}"
    );
    drain(&mut rx);
    // vision's job ends after 30 min, and nlp-2 is admitted again, with 1 h left.
    s.advance(Duration::minutes(30));
    let ev = drain(&mut rx);
    assert!(
        ev.iter()
            .any(|e| e.job_id == "nlp-2" && matches!(e.change, Change::Admitted { .. })),
        "{ev:?}"
    );
    s.advance(Duration::minutes(59));
    let ev = drain(&mut rx);
    assert!(
        !ev.iter().any(|e| e.job_id == "nlp-2"
            && matches!(e.change, Change::Failed { .. } | Change::Succeeded { .. })),
        "a minute before its 4 h are used it still runs: {ev:?}"
    );
    s.advance(Duration::minutes(2));
    let ev = drain(&mut rx);
    let end = ev
        .iter()
        .find(|e| e.job_id == "nlp-2" && !matches!(e.change, Change::Running))
        .expect("nlp-2 ended");
    assert_eq!(end.at, t0() + Duration::hours(4) + Duration::minutes(30));
    assert_eq!(
        end.change,
        Change::Failed {
            reason: "Stopped at its max runtime of 4.0 h: Kueue deactivated its workload".into(),
            past_run_s: 0,
        }
    );
}

#[tokio::test]
async fn submitting_twice_is_one_workload() {
    let s = sim(1).await;
    s.submit(job("a", "nlp", 8, 60, 0)).await.unwrap();
    s.submit(job("a", "nlp", 8, 60, 0)).await.unwrap();
    s.submit(job("b", "nlp", 8, 60, 1)).await.unwrap();
    s.submit(job("b", "nlp", 8, 60, 1)).await.unwrap();
    assert_eq!(s.workloads().await.unwrap().len(), 2);
    assert_eq!(s.pending("hgx-h100").await.unwrap().len(), 1);
}

#[tokio::test]
async fn restore_puts_jobs_back_on_their_nodes_and_in_order() {
    let s = sim(2).await;
    let nodes = vec!["hgx-h100-node-01".to_string()];
    s.restore(
        vec![RestoredWorkload {
            spec: job("a", "nlp", 8, 3600, 0),
            admitted_at: t0(),
            nodes: nodes.clone(),
            running: true,
            past_run_s: 0,
        }],
        vec![
            (job("c", "nlp", 16, 60, 2), 0),
            (job("b", "nlp", 16, 60, 1), 0),
        ],
    );
    let w = s.workloads().await.unwrap();
    assert!(w
        .iter()
        .any(|(id, p)| id == "a"
            && matches!(p, WorkloadPhase::Admitted { nodes: n, .. } if *n == nodes)));
    let q = s.pending("hgx-h100").await.unwrap();
    assert_eq!(
        q.iter().map(|p| p.job_id.as_str()).collect::<Vec<_>>(),
        ["b", "c"]
    );
}

#[tokio::test]
async fn check_says_whether_a_launch_would_fit_and_when() {
    let s = sim(2).await;
    let probe = job("probe", "vision", 16, 60, 5);
    assert!(s.check(&probe).await.unwrap().fits_now);
    s.submit(job("a", "nlp", 16, 3600, 0)).await.unwrap();
    let c = s.check(&probe).await.unwrap();
    assert!(!c.fits_now);
    assert_eq!(c.ahead, 0);
    assert_eq!(
        c.reason.as_deref(),
        Some("Waiting for 2 whole nodes in hgx-h100: none is free")
    );
    assert_eq!(c.eta, Some(t0() + Duration::hours(1)));
    let c = s.check(&job("huge", "nlp", 128, 60, 5)).await.unwrap();
    assert!(c.never);
    assert_eq!(c.eta, None);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn arb_job() -> impl Strategy<Value = (u8, u8, u8, u16)> {
        // team, size class, priority, runtime in minutes
        (0u8..3, 0u8..6, 0u8..3, 1u16..600)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// ETAs never lie in the past and positions never exceed the queue, whatever arrives.
        #[test]
        fn etas_are_never_past_and_positions_fit_the_queue(jobs in proptest::collection::vec(arb_job(), 1..40), advance in 0i64..20_000) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let s = SimCluster::new(
                    Clock::manual(t0()),
                    30,
                    &[PoolSpec { name: "hgx-h100".into(), gpu_model: "H100".into(), nodes: 4, strategy: QueueingStrategy::BestEffortFifo }],
                );
                for (team, limit) in [("nlp", None), ("vision", Some(8)), ("speech", Some(0))] {
                    s.set_quota(team, "hgx-h100", quota(8, limit)).await.unwrap();
                }
                let teams = ["nlp", "vision", "speech"];
                let sizes = [1, 2, 4, 8, 16, 24];
                let prios = [Priority::Low, Priority::Normal, Priority::High];
                for (i, (team, size, prio, minutes)) in jobs.iter().enumerate() {
                    let mut w = job(&format!("j{i}"), teams[*team as usize], sizes[*size as usize], *minutes as u64 * 60, i as i64);
                    w.priority = prios[*prio as usize];
                    s.submit(w).await.unwrap();
                    if i % 7 == 3 {
                        s.cancel(&format!("j{}", i / 2)).await.unwrap();
                    }
                }
                s.advance(Duration::seconds(advance.max(1)));
                let now = s.now();
                let q = s.pending("hgx-h100").await.unwrap();
                let n = q.len() as u32;
                for (i, p) in q.iter().enumerate() {
                    prop_assert_eq!(p.position_in_pool, i as u32 + 1);
                    prop_assert!(p.position_in_pool <= n);
                    prop_assert!(p.position_in_team <= p.position_in_pool);
                    if let Some(eta) = p.eta {
                        prop_assert!(eta >= now, "ETA {} before now {}", eta, now);
                    }
                }
                let pool = &s.pools().await.unwrap()[0];
                prop_assert!(pool.gpus_allocated <= pool.gpus_total);
                for t in &pool.teams {
                    if let Some(limit) = t.quota.borrowing_limit {
                        prop_assert!(t.used <= t.quota.nominal + limit, "{} uses {} > {} + {}", t.team, t.used, t.quota.nominal, limit);
                    }
                }
                prop_assert!(pool.teams.iter().map(|t| t.used).sum::<u32>() <= 24, "the cohort lends no more than its quotas");
                Ok(())
            })?;
        }
    }
}

fn failing(id: &str, gpus: u32, runtime_s: u64, after_s: u64, minute: i64) -> WorkloadSpec {
    let mut w = job(id, "nlp", gpus, runtime_s, minute);
    w.run.params = vec![(
        failure::FAIL_AFTER_PARAM.to_string(),
        serde_json::json!(after_s),
    )];
    w
}

#[tokio::test]
async fn a_job_set_to_fail_fails_after_its_running_time_and_frees_its_gpus() {
    let s = sim(2).await;
    let mut rx = s.subscribe();
    s.submit(failing("a", 16, 3600, 600, 0)).await.unwrap();
    s.submit(job("b", "nlp", 16, 3600, 1)).await.unwrap();
    drain(&mut rx);
    s.advance(Duration::seconds(629));
    assert_eq!(
        changes(&drain(&mut rx)),
        vec![("a".to_string(), Change::Running)]
    );
    // Much later than the failure: it happens at its own time, and b is admitted then.
    s.advance(Duration::seconds(100));
    let ev = drain(&mut rx);
    assert_eq!(ev[0].job_id, "a");
    assert_eq!(
        ev[0].at,
        t0() + Duration::seconds(630),
        "30 s start-up + 600 s"
    );
    assert_eq!(
        ev[0].change,
        Change::Failed {
            reason:
                "Failed: a worker exited with code 1 (rank 15 on hgx-h100-node-01) after 10 min"
                    .into(),
            past_run_s: 0,
        }
    );
    assert_eq!(ev[1].job_id, "b");
    assert!(matches!(ev[1].change, Change::Admitted { .. }));
    assert_eq!(ev[1].at, ev[0].at);
    assert!(s.workloads().await.unwrap().iter().all(|(id, _)| id != "a"));
    assert_eq!(s.pools().await.unwrap()[0].gpus_allocated, 16);
}

#[tokio::test]
async fn a_job_that_reaches_its_max_runtime_before_its_fail_time_succeeds() {
    let s = sim(2).await;
    let mut rx = s.subscribe();
    s.submit(failing("a", 8, 600, 600, 0)).await.unwrap();
    s.advance(Duration::hours(1));
    let ev = changes(&drain(&mut rx));
    assert!(
        matches!(ev.last(), Some((id, Change::Succeeded { .. })) if id == "a"),
        "{ev:?}"
    );
}

#[tokio::test]
async fn a_restored_job_fails_at_the_time_its_stored_admission_gives() {
    let s = sim(2).await;
    let mut rx = s.subscribe();
    s.restore(
        vec![RestoredWorkload {
            spec: failing("a", 8, 3600, 120, 0),
            admitted_at: t0() - Duration::seconds(100),
            nodes: vec!["hgx-h100-node-01".to_string()],
            running: true,
            past_run_s: 0,
        }],
        vec![],
    );
    s.advance(Duration::seconds(60));
    let ev = drain(&mut rx);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].at, t0() + Duration::seconds(50));
    assert_eq!(
        ev[0].change,
        Change::Failed {
            reason: "Failed: a worker exited with code 1 (rank 7 on hgx-h100-node-01) after 2 min"
                .into(),
            past_run_s: 0,
        }
    );
}
