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
use tokio::sync::{broadcast, watch};

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
    let (live_tx, _) = broadcast::channel(64);
    let _writer = gantry::reconciler::spawn_event_writer(
        db.clone(),
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
    };

    // 1. Down: the launch is stored and says why it waits.
    let (job, created) = portal.launch(&alice, req, None).await.expect("stored");
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
    // A retry while still down changes nothing and loses nothing.
    assert!(gantry::reconciler::resend_unsent(&portal).await.is_err());
    assert!(db.get_job(&job.id).await.unwrap().sent_at.is_none());

    // 2. Back: the reconciler sends it.
    up.store(true, Ordering::SeqCst);
    assert_eq!(gantry::reconciler::resend_unsent(&portal).await.unwrap(), 1);
    assert!(db.get_job(&job.id).await.unwrap().sent_at.is_some());
    assert!(kube.is_reachable());
    let shown = portal.job_for(&alice, &job.id).await.unwrap();
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
