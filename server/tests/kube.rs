//! The portal on the Kubernetes back end, against kube's `tower_test` mock API server: a
//! launch is stored before it is sent, survives an API server that does not answer, is
//! shown as such, and is sent once the server is back — as the same object, so nothing doubles.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use app::model::{JobState, LaunchRequest};
use gantry::cluster::k8s::KubeCluster;
use gantry::cluster::{Cluster, PoolSpec, QueueingStrategy};
use gantry::config::Config;
use gantry::db::Db;
use gantry::service::Portal;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{json, Value};
use tokio::sync::watch;

#[tokio::test]
async fn a_launch_waits_out_an_unreachable_api_server_and_is_sent_once_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("kube.db").display());
    let db = Db::connect(&url, 4).await.unwrap();
    gantry::seed::seed_catalog(&db, chrono::Utc::now())
        .await
        .unwrap();

    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let mut settings = Config::default().kube;
    settings.timeout_s = 1;
    let pools = db
        .list_pools()
        .await
        .unwrap()
        .into_iter()
        .map(|p| PoolSpec {
            name: p.name,
            gpu_model: p.gpu_model,
            nodes: p.nodes,
            strategy: QueueingStrategy::BestEffortFifo,
        })
        .collect();
    let kube = Arc::new(KubeCluster::new(client, settings, pools));
    for q in db.list_quotas().await.unwrap() {
        kube.know_quota(&q.team, &q.pool, q.quota);
    }

    // The mock API server: down (requests hang past the timeout) until `up`; then it takes
    // applies and answers the visibility API with empty queues.
    let up = Arc::new(AtomicBool::new(false));
    let applied: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let server = {
        let (up, applied) = (up.clone(), applied.clone());
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                if !up.load(Ordering::SeqCst) {
                    tokio::spawn(async move {
                        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
                        drop(send);
                    });
                    continue;
                }
                let path = req.uri().path().to_string();
                let method = req.method().clone();
                let bytes = req.into_body().collect_bytes().await.unwrap();
                let body = if method == Method::PATCH {
                    let v: Value = serde_json::from_slice(&bytes).unwrap();
                    applied.lock().unwrap().push((path.clone(), v.clone()));
                    v
                } else {
                    json!({"kind": "PendingWorkloadsSummary", "items": []})
                };
                send.send_response(
                    Response::builder()
                        .status(StatusCode::OK)
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                );
            }
        })
    };

    let cluster: Arc<dyn Cluster> = kube.clone();
    let (applied_tx, applied_rx) = watch::channel(0u64);
    let live_tx = gantry::service::LiveTx::new(64);
    let _writer = gantry::reconciler::spawn_event_writer(
        db.clone(),
        cluster.clone(),
        cluster.subscribe(),
        applied_tx,
        live_tx.clone(),
    );
    let portal = Portal::new(db.clone(), cluster, applied_rx, live_tx, true);
    let alice = portal.viewer_by_id("alice").await.unwrap().expect("seeded");
    let req = LaunchRequest {
        template: "llama-3.1-8b-fsdp".into(),
        gpus: 16,
        pool: None,
        params: Default::default(),
        max_runtime_s: None,
        name: Some("while-the-cluster-is-down".into()),
        priority: None,
        team: None,
        ..Default::default()
    };

    // 1. Down: the launch is stored and says why it waits.
    let (job, created) = portal.launch_job(&alice, req, None).await.expect("stored");
    assert!(created);
    assert_eq!(job.state, JobState::Queued);
    let reason = job.pending_reason.clone().unwrap_or_default();
    assert!(
        reason.contains("unreachable") && reason.contains("retries"),
        "{reason}"
    );
    assert!(!kube.is_reachable());
    let row = db.get_job(&job.id).await.expect("stored before sent");
    assert!(row.sent_at.is_none());
    // A retry while still down changes nothing and loses nothing (the job's error is logged,
    // the pass goes on).
    assert_eq!(gantry::reconciler::resend_unsent(&portal).await.unwrap(), 0);
    assert!(db.get_job(&job.id).await.unwrap().sent_at.is_none());

    // 2. Back: the reconciler sends it.
    up.store(true, Ordering::SeqCst);
    assert_eq!(gantry::reconciler::resend_unsent(&portal).await.unwrap(), 1);
    assert!(db.get_job(&job.id).await.unwrap().sent_at.is_some());
    assert!(kube.is_reachable());
    let shown = portal.get_job(&alice, &job.id).await.unwrap();
    let reason = shown.pending_reason.unwrap_or_default();
    assert!(reason.contains("Sent to the cluster"), "{reason}");

    // 3. Sent once it is sent: the next pass (the watch has not listed it yet) sends nothing.
    assert_eq!(gantry::reconciler::resend_unsent(&portal).await.unwrap(), 0);
    let applied = applied.lock().unwrap().clone();
    let jobsets: Vec<&(String, Value)> = applied
        .iter()
        .filter(|(p, _)| p.contains("/jobsets/"))
        .collect();
    assert_eq!(jobsets.len(), 1, "{applied:?}");
    let (path, obj) = jobsets[0];
    let name = gantry::cluster::k8s::objects::object_name(&job.id);
    assert!(
        path.ends_with(&format!("/namespaces/team-nlp/jobsets/{name}")),
        "{path}"
    );
    assert_eq!(
        obj["metadata"]["labels"]["gantry.dev/job-id"],
        job.id.as_str()
    );
    assert_eq!(
        db.list_jobs(&Default::default()).await.unwrap().len(),
        1,
        "one job, not two"
    );
    server.abort();
}

/// The quota service method on the Kubernetes back end: admins only, applied to the
/// ClusterQueue without force, stored only when the cluster took it; a conflict with a field
/// another manager owns is refused with a clear message and changes nothing.
#[tokio::test]
async fn a_quota_edit_goes_to_the_cluster_queue_and_a_conflict_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("quota.db").display()
    );
    let db = Db::connect(&url, 4).await.unwrap();
    gantry::seed::seed_catalog(&db, chrono::Utc::now())
        .await
        .unwrap();
    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let pools = vec![PoolSpec {
        name: "hgx-h100".into(),
        gpu_model: "H100".into(),
        nodes: 16,
        strategy: QueueingStrategy::BestEffortFifo,
    }];
    let kube = Arc::new(KubeCluster::new(
        kube::Client::new(svc, "default"),
        Config::default().kube,
        pools,
    ));
    let cluster: Arc<dyn Cluster> = kube.clone();
    let (_applied_tx, applied_rx) = watch::channel(0u64);
    let live_tx = gantry::service::LiveTx::new(8);
    let portal = Portal::new(db.clone(), cluster, applied_rx, live_tx, true);
    let carol = portal.viewer_by_id("carol").await.unwrap().unwrap();
    let alice = portal.viewer_by_id("alice").await.unwrap().unwrap();
    let q = |n, b| gantry::service::QuotaEdit {
        nominal: n,
        borrowing_limit: Some(Some(b)),
        ..Default::default()
    };

    let server = tokio::spawn(async move {
        let mut statuses = vec![StatusCode::CONFLICT, StatusCode::OK];
        while let Some(status) = statuses.last().copied() {
            let (req, send) = handle.next_request().await.expect("a request");
            if req.method() == Method::GET {
                // the queue read that follows a change (visibility API): nothing queued
                let empty = json!({"kind": "PendingWorkloadsSummary", "items": []});
                send.send_response(Response::new(Body::from(
                    serde_json::to_vec(&empty).unwrap(),
                )));
                continue;
            }
            statuses.pop();
            assert_eq!(req.method(), Method::PATCH);
            assert_eq!(
                req.uri().path(),
                "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/nlp-hgx-h100"
            );
            assert!(!req.uri().query().unwrap_or_default().contains("force"));
            let body: Value =
                serde_json::from_slice(&req.into_body().collect_bytes().await.unwrap()).unwrap();
            let reply = if status == StatusCode::OK {
                body
            } else {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
                       "message": "Apply failed with 1 conflict: conflict with \"kubectl-edit\": .spec.resourceGroups"})
            };
            send.send_response(
                Response::builder()
                    .status(status)
                    .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                    .unwrap(),
            );
        }
    });

    let e = portal
        .set_quota(&alice, "nlp", "hgx-h100", q(48, 16), None, None)
        .await
        .unwrap_err();
    assert_eq!(e.status(), 403);
    let e = portal
        .set_quota(&carol, "nlp", "hgx-h100", q(400, 16), None, None)
        .await
        .unwrap_err();
    assert_eq!(
        (e.status(), e.field.as_deref()),
        (422, Some("nominal_gpus"))
    );
    let e = portal
        .set_quota(&carol, "nlp", "tpu-v5", q(8, 0), None, None)
        .await
        .unwrap_err();
    assert_eq!(e.status(), 404, "{e:?}");

    portal
        .set_quota(&carol, "nlp", "hgx-h100", q(48, 16), None, None)
        .await
        .expect("applied and stored");
    let stored = |db: Db| async move {
        db.list_quotas()
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.team == "nlp" && r.pool == "hgx-h100")
            .unwrap()
            .quota
    };
    assert_eq!(
        stored(db.clone()).await,
        q(48, 16).apply(&Default::default())
    );
    let e = portal
        .set_quota(&carol, "nlp", "hgx-h100", q(8, 0), None, None)
        .await
        .unwrap_err();
    assert_eq!(e.status(), 409);
    assert!(
        e.message.contains("kubectl-edit") && e.message.contains("nothing was changed"),
        "{}",
        e.message
    );
    assert_eq!(
        stored(db).await,
        q(48, 16).apply(&Default::default()),
        "the refused edit is not stored"
    );
    server.await.unwrap();
}
