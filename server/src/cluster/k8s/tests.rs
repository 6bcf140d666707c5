//! The Kubernetes back end without a cluster: every object checked against the upstream CRD
//! schemas, Workload conditions read into state changes, and the request sequences against
//! kube's `tower_test` mock service (the pattern of kube's own `mock_tests.rs`).

use super::watch::{change_time, transitions};
use super::*;
use crate::config::Config;
use app::model::Priority;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::json;

// ---- schemas ----------------------------------------------------------------------------

/// The `openAPIV3Schema` of `version` in a vendored CRD, made strict: an object that lists
/// its properties refuses others, as the API server prunes or (with strict field
/// validation) refuses unknown fields.
fn schema(file: &str, version: &str) -> Value {
    let path = format!("{}/tests/data/crds/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let crd: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut s = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == version))
        .map(|v| v["schema"]["openAPIV3Schema"].clone())
        .unwrap_or_else(|| panic!("{file} has no version {version}"));
    fn strict(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if m.contains_key("properties") && !m.contains_key("additionalProperties") {
                    m.insert("additionalProperties".into(), json!(false));
                }
                m.values_mut().for_each(strict);
            }
            Value::Array(a) => a.iter_mut().for_each(strict),
            _ => {}
        }
    }
    strict(&mut s);
    s
}

fn validator(file: &str, version: &str) -> jsonschema::Validator {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .should_validate_formats(false)
        .build(&schema(file, version))
        .expect("the CRD schema compiles")
}

fn errors(v: &jsonschema::Validator, obj: &Value) -> Vec<String> {
    v.iter_errors(obj)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn settings() -> KubeSettings {
    Config::default().kube
}

fn pool(name: &str, model: &str) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        gpu_model: model.into(),
        nodes: 16,
        strategy: crate::cluster::QueueingStrategy::BestEffortFifo,
    }
}

const JOB_ID: &str = "019a7c3e-5b1d-7f00-8a3c-2f6d9e1b4c70";

fn workload(
    template: &crate::domain::template::TemplateVersion,
    gpus: u32,
    team: &str,
) -> WorkloadSpec {
    let params: serde_json::Map<String, Value> = template
        .params
        .iter()
        .map(|p| (p.name.clone(), p.default.clone()))
        .collect();
    WorkloadSpec {
        job_id: JOB_ID.into(),
        team: team.into(),
        pool: "hgx-h100".into(),
        gpus,
        priority: Priority::High,
        submitted_at: Utc::now(),
        max_runtime_s: 8 * 3600,
        run: crate::domain::workload::run_spec(template, "llama-run", "alice", &params),
    }
}

#[test]
fn every_object_gantry_builds_validates_against_the_crds() {
    let s = settings();
    let cq = validator("kueue.x-k8s.io_clusterqueues.yaml", "v1beta2");
    let lq = validator("kueue.x-k8s.io_localqueues.yaml", "v1beta2");
    let rf = validator("kueue.x-k8s.io_resourceflavors.yaml", "v1beta2");
    let wpc = validator("kueue.x-k8s.io_workloadpriorityclasses.yaml", "v1beta2");
    let js = validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2");
    let tj = validator("trainer.kubeflow.org_trainjobs.yaml", "v1alpha1");

    let pools = [pool("hgx-h100", "H100"), pool("hgx-h200", "H200")];
    let quotas = vec![
        (
            "nlp".to_string(),
            "hgx-h100".to_string(),
            QuotaSpec {
                nominal: 64,
                borrowing_limit: Some(32),
                lending_limit: None,
                strategy: None,
            },
        ),
        (
            "speech".to_string(),
            "hgx-h200".to_string(),
            QuotaSpec {
                nominal: 8,
                borrowing_limit: None,
                lending_limit: Some(4),
                strategy: None,
            },
        ),
    ];
    let mut kinds = BTreeMap::new();
    for o in objects::queueing_objects(&s, &pools, &quotas) {
        let kind = o["kind"].as_str().unwrap().to_string();
        let v = match kind.as_str() {
            "ClusterQueue" => &cq,
            "LocalQueue" => &lq,
            "ResourceFlavor" => &rf,
            "WorkloadPriorityClass" => &wpc,
            "Namespace" => continue,
            other => panic!("unexpected kind {other}"),
        };
        assert_eq!(errors(v, &o), Vec::<String>::new(), "{kind}: {o}");
        *kinds.entry(kind).or_insert(0) += 1;
    }
    assert_eq!(kinds["ClusterQueue"], 2);
    assert_eq!(kinds["LocalQueue"], 2);
    assert_eq!(kinds["ResourceFlavor"], 2);
    assert_eq!(kinds["WorkloadPriorityClass"], 3);

    let templates = crate::seed::templates();
    assert!(
        templates.iter().any(|t| t.trainer_runtime.is_some()),
        "one template runs as a TrainJob"
    );
    assert!(
        templates.iter().any(|t| t.trainer_runtime.is_none()),
        "the others as JobSets"
    );
    for t in &templates {
        for gpus in [1, 8, 32] {
            let o = objects::job_object(&s, &workload(t, gpus, "nlp"));
            let (v, kind) = if t.trainer_runtime.is_some() {
                (&tj, "TrainJob")
            } else {
                (&js, "JobSet")
            };
            assert_eq!(o["kind"], kind);
            assert_eq!(
                errors(v, &o),
                Vec::<String>::new(),
                "{} with {gpus} GPUs: {o}",
                t.name
            );
        }
    }
}

#[test]
fn the_schema_check_catches_mistakes() {
    // The check is worth something only if a wrong object fails it.
    let js = validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2");
    let t = &crate::seed::templates()[0];
    let mut o = objects::job_object(&settings(), &workload(t, 16, "nlp"));
    o["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelizm"] = json!(2);
    o["spec"]["successPolicy"]["operator"] = json!("Most");
    let errs = errors(&js, &o);
    assert!(errs.iter().any(|e| e.contains("parallelizm")), "{errs:?}");
    assert!(
        errs.iter().any(|e| e.contains("successPolicy/operator")),
        "{errs:?}"
    );
    let cq = validator("kueue.x-k8s.io_clusterqueues.yaml", "v1beta2");
    let mut q = objects::cluster_queue(
        &settings(),
        "nlp",
        &pool("hgx-h100", "H100"),
        QuotaSpec::default(),
    );
    q["spec"]["cohort"] = json!("v1beta1-name");
    assert!(
        !errors(&cq, &q).is_empty(),
        "v1beta1's `cohort` is not v1beta2"
    );
}

#[test]
fn a_jobset_runs_torchrun_with_one_pod_per_node() {
    let s = settings();
    let t = crate::seed::templates()
        .into_iter()
        .find(|t| t.name == "llama-3.1-8b-fsdp")
        .unwrap();
    let o = objects::job_object(&s, &workload(&t, 32, "nlp"));
    let name = objects::object_name(JOB_ID);
    assert_eq!(name, "gantry-019a7c3e5b1d7f008a3c2f6d9e1b4c70");
    assert_eq!(
        status::job_id_of(&name).as_deref(),
        Some(JOB_ID),
        "names map back to job ids"
    );
    assert_eq!(o["metadata"]["namespace"], "team-nlp");
    let labels = &o["metadata"]["labels"];
    assert_eq!(labels["kueue.x-k8s.io/queue-name"], "hgx-h100");
    assert_eq!(labels["kueue.x-k8s.io/priority-class"], "gantry-high");
    assert_eq!(labels["kueue.x-k8s.io/max-exec-time-seconds"], "28800");
    let job = &o["spec"]["replicatedJobs"][0]["template"]["spec"];
    assert_eq!(job["parallelism"], 4);
    assert_eq!(job["completions"], 4);
    assert_eq!(job["completionMode"], "Indexed");
    let c = &job["template"]["spec"]["containers"][0];
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 8);
    assert_eq!(c["image"], t.image);
    let cmd: Vec<&str> = c["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        &cmd[..6],
        [
            "torchrun",
            "--nnodes=4",
            "--nproc-per-node=8",
            "--node-rank=$(NODE_RANK)",
            "--master-addr=$(MASTER_ADDR)",
            "--master-port=$(MASTER_PORT)"
        ]
    );
    assert!(
        cmd.contains(&"--learning_rate=2e-5")
            || cmd.iter().any(|a| a.starts_with("--learning_rate=")),
        "{cmd:?}"
    );
    let env = c["env"].as_array().unwrap();
    let master = env.iter().find(|e| e["name"] == "MASTER_ADDR").unwrap();
    assert_eq!(
        master["value"],
        format!("{name}-node-0-0.{name}"),
        "the JobSet's headless service"
    );
    let shm = &job["template"]["spec"]["volumes"][0];
    assert_eq!(shm["emptyDir"]["medium"], "Memory");
    // under one node: one pod with that many GPUs
    let small = objects::job_object(&s, &workload(&t, 4, "nlp"));
    let job = &small["spec"]["replicatedJobs"][0]["template"]["spec"];
    assert_eq!(job["parallelism"], 1);
    assert_eq!(
        job["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"],
        4
    );
}

#[test]
fn a_trainjob_names_its_runtime_and_shape() {
    let s = settings();
    let t = crate::seed::templates()
        .into_iter()
        .find(|t| t.trainer_runtime.is_some())
        .unwrap();
    let o = objects::job_object(&s, &workload(&t, 16, "speech"));
    assert_eq!(o["spec"]["runtimeRef"]["name"], "torch-distributed");
    assert_eq!(o["spec"]["runtimeRef"]["kind"], "ClusterTrainingRuntime");
    assert_eq!(o["spec"]["trainer"]["numNodes"], 2);
    assert_eq!(o["spec"]["trainer"]["numProcPerNode"], 8);
    assert_eq!(
        o["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"],
        8
    );
    assert_eq!(o["metadata"]["namespace"], "team-speech");
}

#[test]
fn render_prints_reviewable_yaml() {
    let s = settings();
    let pools = [pool("hgx-h100", "H100")];
    let quotas = vec![(
        "nlp".to_string(),
        "hgx-h100".to_string(),
        QuotaSpec {
            nominal: 64,
            borrowing_limit: Some(32),
            lending_limit: None,
            strategy: None,
        },
    )];
    let yaml = objects::to_yaml(&objects::queueing_objects(&s, &pools, &quotas));
    let docs: Vec<Value> = yaml
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).expect("each document parses"))
        .collect();
    assert_eq!(
        docs.len(),
        3 + 1 + 1 + 2,
        "3 priority classes, a flavor, a namespace, a ClusterQueue and a LocalQueue"
    );
    let cq = docs.iter().find(|d| d["kind"] == "ClusterQueue").unwrap();
    assert_eq!(cq["spec"]["cohortName"], "hgx-h100");
    assert_eq!(
        cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"],
        64
    );
    assert_eq!(
        cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"],
        32
    );
    assert_eq!(cq["spec"]["preemption"]["reclaimWithinCohort"], "Any");
    let rf = docs.iter().find(|d| d["kind"] == "ResourceFlavor").unwrap();
    assert_eq!(
        rf["spec"]["nodeLabels"]["nvidia.com/gpu.product"],
        "NVIDIA-H100-80GB-HBM3"
    );
}

// ---- reading Workloads --------------------------------------------------------------------

fn wl(conditions: Value) -> Value {
    json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "jobset-gantry-019a7c3e5b1d7f008a3c2f6d9e1b4c70-1a2b3",
            "namespace": "team-nlp",
            "creationTimestamp": "2026-11-29T10:00:00Z",
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "gantry-019a7c3e5b1d7f008a3c2f6d9e1b4c70", "uid": "u1"}]
        },
        "spec": {
            "queueName": "hgx-h100",
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "gantry-high"},
            "podSets": [{"name": "node", "count": 2, "template": {"spec": {"containers": [{"name": "trainer", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]
        },
        "status": {"conditions": conditions}
    })
}

fn cond(kind: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": if status { "True" } else { "False" }, "reason": reason, "message": message, "lastTransitionTime": "2026-11-29T10:05:00Z"})
}

#[test]
fn workload_conditions_become_state_changes() {
    let prefix = "team-";
    let pending = status::observe(&wl(json!([cond("QuotaReserved", false, "Pending", "couldn't assign flavors to pod set node: insufficient unused quota for nvidia.com/gpu in flavor hgx-h100, 16 more needed")])), prefix).unwrap();
    assert_eq!(pending.job_id, JOB_ID);
    assert_eq!(pending.team, "nlp");
    assert_eq!(pending.pool, "hgx-h100");
    assert_eq!(pending.gpus, 16);
    assert_eq!(pending.priority, Priority::High);
    match &pending.phase {
        Phase::Pending { reason } => {
            assert!(reason.contains("insufficient unused quota"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(transitions(None, &pending), vec![]);
    // The time admitted before an eviction, which the max runtime counts (v1beta2's name).
    assert_eq!(pending.past_run_s, 0);
    let mut evicted_before = wl(json!([cond("QuotaReserved", false, "Pending", "")]));
    evicted_before["status"]["accumulatedPastExecutionTimeSeconds"] = json!(10800);
    assert_eq!(
        status::observe(&evicted_before, prefix).unwrap().past_run_s,
        10800
    );

    let admitted = status::observe(
        &wl(json!([
            cond("QuotaReserved", true, "QuotaReserved", ""),
            cond("Admitted", true, "Admitted", "")
        ])),
        prefix,
    )
    .unwrap();
    assert_eq!(
        transitions(Some(&pending), &admitted),
        vec![Change::Admitted {
            nodes: vec![],
            past_run_s: Some(0),
        }]
    );
    let running = status::observe(
        &wl(json!([
            cond("Admitted", true, "Admitted", ""),
            cond("PodsReady", true, "PodsReady", "")
        ])),
        prefix,
    )
    .unwrap();
    assert_eq!(
        transitions(Some(&admitted), &running),
        vec![Change::Running]
    );
    assert_eq!(
        transitions(Some(&running), &running),
        vec![],
        "the same sighting twice changes nothing"
    );

    let preempted = status::observe(
        &wl(json!([
            cond("Admitted", false, "NoReservation", ""),
            cond(
                "Evicted",
                true,
                "Preempted",
                "Preempted to accommodate a workload"
            ),
            cond(
                "Preempted",
                true,
                "InCohortReclamation",
                "Preempted to accommodate a workload (UID: x) due to reclamation within the cohort"
            ),
            cond("QuotaReserved", false, "Pending", "waiting"),
        ])),
        prefix,
    )
    .unwrap();
    assert_eq!(
        transitions(Some(&running), &preempted),
        vec![Change::Preempted {
            reason: "Preempted: another team reclaimed its quota".into()
        }]
    );

    // Evicted for a reason of Kueue's own, not to make room: queued again, not a preemption.
    let timed_out = status::observe(
        &wl(json!([
            cond("Admitted", false, "NoReservation", ""),
            cond(
                "Evicted",
                true,
                "PodsReadyTimeout",
                "Exceeded the PodsReady timeout default/x"
            ),
            cond("QuotaReserved", false, "Pending", "waiting"),
        ])),
        prefix,
    )
    .unwrap();
    assert_eq!(
        transitions(Some(&running), &timed_out),
        vec![Change::Evicted {
            reason: "Evicted: its pods were not all ready in time (Kueue's waitForPodsReady); queued again"
                .into()
        }]
    );
    let stopped = status::observe(
        &wl(json!([cond("Evicted", true, "ClusterQueueStopped", "")])),
        prefix,
    )
    .unwrap();
    assert_eq!(
        transitions(Some(&running), &stopped),
        vec![Change::Evicted {
            reason: "Evicted: an admin stopped its queue; queued again".into()
        }]
    );

    let failed = status::observe(
        &wl(json!([cond(
            "Finished",
            true,
            "Failed",
            "Job failed: BackoffLimitExceeded"
        )])),
        prefix,
    )
    .unwrap();
    assert_eq!(
        transitions(Some(&running), &failed),
        vec![Change::Failed {
            reason: "Job failed: BackoffLimitExceeded".into(),
            past_run_s: 0,
        }]
    );
    let done = status::observe(
        &wl(json!([cond(
            "Finished",
            true,
            "Succeeded",
            "Job finished successfully"
        )])),
        prefix,
    )
    .unwrap();
    assert_eq!(
        transitions(None, &done),
        vec![
            Change::Admitted {
                nodes: vec![],
                past_run_s: None,
            },
            Change::Succeeded {
                reason: "Job finished successfully".into()
            }
        ],
        "a job that finished while Gantry was down still passes through admitted (undated)"
    );

    // Kueue keeps `Admitted` on a finished Workload, at its last admission. Seen running
    // since 10:05, then finished with an admission at 11:00 and 1,800 s counted before it:
    // an eviction and an admission were missed, told with Kueue's count. Finished with the
    // admission seen before: only the end.
    let running_since = status::observe(
        &wl(json!([
            cond("Admitted", true, "Admitted", ""),
            cond("PodsReady", true, "PodsReady", "")
        ])),
        prefix,
    )
    .unwrap();
    let mut again = wl(json!([
        cond("Admitted", true, "Admitted", ""),
        cond("Finished", true, "Succeeded", "Job finished successfully")
    ]));
    again["status"]["conditions"][0]["lastTransitionTime"] = json!("2026-11-29T11:00:00Z");
    again["status"]["accumulatedPastExecutionTimeSeconds"] = json!(1800);
    let again = status::observe(&again, prefix).unwrap();
    assert_eq!(
        transitions(Some(&running_since), &again),
        vec![
            Change::Admitted {
                nodes: vec![],
                past_run_s: Some(1800),
            },
            Change::Succeeded {
                reason: "Job finished successfully".into()
            }
        ]
    );
    assert_eq!(
        change_time(&transitions(Some(&running_since), &again)[0], &again).map(|t| t.to_rfc3339()),
        Some("2026-11-29T11:00:00+00:00".into())
    );
    // Running again, admitted later than seen (an eviction missed in a watch's gap): the
    // admission is told, with Kueue's count, so that the run known ends where it says.
    let mut running_again = wl(json!([
        cond("Admitted", true, "Admitted", ""),
        cond("PodsReady", true, "PodsReady", "")
    ]));
    running_again["status"]["conditions"][0]["lastTransitionTime"] = json!("2026-11-29T11:00:00Z");
    running_again["status"]["accumulatedPastExecutionTimeSeconds"] = json!(1800);
    let running_again = status::observe(&running_again, prefix).unwrap();
    assert_eq!(
        transitions(Some(&running_since), &running_again),
        vec![
            Change::Admitted {
                nodes: vec![],
                past_run_s: Some(1800),
            },
            Change::Running
        ]
    );
    // Evicted at 10:30, its pods gone and its quota released at 10:31 (Admitted and
    // QuotaReserved false): the run ended at the release, as Kueue counts it.
    let mut released = wl(json!([
        cond("Admitted", false, "NoReservation", ""),
        cond("QuotaReserved", false, "Pending", ""),
        cond(
            "Evicted",
            true,
            "Preempted",
            "Preempted to accommodate a workload"
        ),
        cond("Preempted", true, "InClusterQueue", "")
    ]));
    released["status"]["conditions"][0]["lastTransitionTime"] = json!("2026-11-29T10:31:00Z");
    released["status"]["conditions"][1]["lastTransitionTime"] = json!("2026-11-29T10:31:00Z");
    released["status"]["conditions"][2]["lastTransitionTime"] = json!("2026-11-29T10:30:00Z");
    let released = status::observe(&released, prefix).unwrap();
    let preempted = transitions(Some(&running_since), &released);
    assert!(
        matches!(preempted[..], [Change::Preempted { .. }]),
        "{preempted:?}"
    );
    assert_eq!(
        change_time(&preempted[0], &released).map(|t| t.to_rfc3339()),
        Some("2026-11-29T10:31:00+00:00".into())
    );
    // Released at 10:31, reserved again at 10:40 (Evicted reset) and released unadmitted at
    // 10:45 (its pods not ready in time, say): Kueue counted the run to 10:31, when Admitted
    // turned false; the later release was time in the queue.
    let mut again_released = wl(json!([
        cond("Admitted", false, "NoReservation", ""),
        cond("Evicted", false, "QuotaReserved", "Previously: Preempted"),
        cond("QuotaReserved", false, "Pending", "")
    ]));
    for (i, t) in ["10:31", "10:40", "10:45"].iter().enumerate() {
        again_released["status"]["conditions"][i]["lastTransitionTime"] =
            json!(format!("2026-11-29T{t}:00Z"));
    }
    let again_released = status::observe(&again_released, prefix).unwrap();
    assert_eq!(
        again_released.times.evicted.map(|t| t.to_rfc3339()),
        Some("2026-11-29T10:31:00+00:00".into())
    );
    assert_eq!(
        change_time(&Change::Running, &running_again).map(|t| t.to_rfc3339()),
        Some("2026-11-29T11:00:00+00:00".into()),
        "its PodsReady (10:05) is left from the run before: running from the admission"
    );
    assert_eq!(
        transitions(Some(&running_since), &running_since),
        Vec::<Change>::new()
    );
    let same = status::observe(
        &wl(json!([
            cond("Admitted", true, "Admitted", ""),
            cond("Finished", true, "Succeeded", "Job finished successfully")
        ])),
        prefix,
    )
    .unwrap();
    assert_eq!(
        transitions(Some(&running_since), &same),
        vec![Change::Succeeded {
            reason: "Job finished successfully".into()
        }]
    );

    // Kueue's other reasons for Finished are not successes. An admission check's rejection
    // never ran: it fails from the queue, with no admission made up for it.
    let rejected = status::observe(
        &wl(json!([cond(
            "Finished",
            true,
            "AdmissionChecksRejected",
            "Admission check provisioning-h100 rejected the workload"
        )])),
        prefix,
    )
    .unwrap();
    assert_eq!(
        transitions(None, &rejected),
        vec![Change::Failed {
            reason: "Admission check provisioning-h100 rejected the workload".into(),
            past_run_s: 0,
        }]
    );
    // Kueue 0.9 and later deactivate a workload an admission check rejected.
    let mut deactivated = wl(json!([
        cond("QuotaReserved", false, "Pending", ""),
        cond(
            "Evicted",
            true,
            "DeactivatedDueToAdmissionCheck",
            "The workload is deactivated due to Admission check(s): provisioning-h100, were rejected"
        ),
    ]));
    deactivated["spec"]["active"] = json!(false);
    let deactivated = status::observe(&deactivated, prefix).unwrap();
    assert_eq!(
        transitions(None, &deactivated),
        vec![Change::Failed {
            reason: "Rejected by an admission check: The workload is deactivated due to Admission check(s): provisioning-h100, were rejected".into(),
            past_run_s: 0,
        }]
    );
    // Seen waiting (evicted for its pods not ready in time), then deactivated at its
    // requeuing limit: it did not run since, so no admission is made up for it.
    let mut gave_up = wl(json!([
        cond("QuotaReserved", false, "Pending", ""),
        cond(
            "Evicted",
            true,
            "DeactivatedDueToRequeuingLimitExceeded",
            "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
        ),
    ]));
    gave_up["spec"]["active"] = json!(false);
    let gave_up = status::observe(&gave_up, prefix).unwrap();
    let waiting = status::observe(
        &wl(json!([cond("QuotaReserved", false, "Pending", "waiting")])),
        prefix,
    )
    .unwrap();
    assert_eq!(
        transitions(Some(&waiting), &gave_up),
        vec![Change::Failed {
            reason: "Kueue deactivated its workload (DeactivatedDueToRequeuingLimitExceeded)"
                .into(),
            past_run_s: 0,
        }]
    );
    assert_eq!(
        transitions(None, &gave_up),
        transitions(Some(&waiting), &gave_up),
        "after a restart too: a failure without an admission to read may not have run"
    );
    let out_of_sync = status::observe(
        &wl(json!([cond("Finished", true, "OutOfSync", "")])),
        prefix,
    )
    .unwrap();
    assert_eq!(
        transitions(Some(&running), &out_of_sync),
        vec![Change::Failed {
            reason: "Kueue finished its workload (OutOfSync)".into(),
            past_run_s: 0,
        }]
    );

    // Workloads of other jobs are not Gantry's.
    let mut other = wl(json!([]));
    other["metadata"]["ownerReferences"][0]["name"] = json!("someone-elses-job");
    assert!(status::observe(&other, prefix).is_none());
}

#[test]
fn queues_merge_in_kueues_cross_queue_order() {
    let t = |m: i64| {
        DateTime::parse_from_rfc3339("2026-11-29T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
            + chrono::Duration::minutes(m)
    };
    let p = |id: &str, team: &str, prio: i64, m: i64, pos: u32| VisiblePending {
        job_id: id.into(),
        team: team.into(),
        priority: prio,
        created: t(m),
        position_in_queue: pos,
    };
    let merged = merge_queues(vec![
        vec![p("n1", "nlp", 1000, 1, 0), p("n2", "nlp", 1000, 5, 1)],
        vec![
            p("v1", "vision", 10000, 9, 0),
            p("v2", "vision", 1000, 3, 1),
        ],
    ]);
    let ids: Vec<&str> = merged.iter().map(|p| p.job_id.as_str()).collect();
    assert_eq!(ids, ["v1", "n1", "v2", "n2"]);
}

// ---- request sequences against a mock API server --------------------------------------------

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn mock(timeout_s: u64) -> (Arc<KubeCluster>, Handle) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "default");
    let mut s = settings();
    s.timeout_s = timeout_s;
    let pools = vec![PoolSpec {
        name: "hgx-h100".into(),
        gpu_model: "H100".into(),
        nodes: 4,
        strategy: crate::cluster::QueueingStrategy::BestEffortFifo,
    }];
    (Arc::new(KubeCluster::new(client, s, pools)), handle)
}

async fn body_json(req: Request<Body>) -> Value {
    let bytes = req.into_body().collect_bytes().await.expect("request body");
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(&bytes).expect("a JSON body")
}

fn respond(send: tower_test::mock::SendResponse<Response<Body>>, status: StatusCode, body: Value) {
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
}

#[tokio::test]
async fn submit_applies_the_jobset_and_a_retry_applies_the_same_object() {
    let (k, mut handle) = mock(5);
    let t = crate::seed::templates()
        .into_iter()
        .find(|t| t.name == "llama-3.1-8b-fsdp")
        .unwrap();
    let w = workload(&t, 16, "nlp");
    let server = tokio::spawn(async move {
        let mut bodies = Vec::new();
        for _ in 0..2 {
            let (req, send) = handle.next_request().await.expect("an apply");
            assert_eq!(req.method(), Method::PATCH);
            assert_eq!(req.uri().path(), "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-nlp/jobsets/gantry-019a7c3e5b1d7f008a3c2f6d9e1b4c70");
            let q = req.uri().query().unwrap_or_default().to_string();
            assert!(
                q.contains("fieldManager=gantry") && q.contains("force=true"),
                "{q}"
            );
            assert_eq!(
                req.headers()[http::header::CONTENT_TYPE],
                "application/apply-patch+yaml"
            );
            let body = body_json(req).await;
            respond(send, StatusCode::OK, body.clone());
            bodies.push(body);
        }
        assert_eq!(
            bodies[0], bodies[1],
            "a retried submission is the same object"
        );
        assert_eq!(
            bodies[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
            "hgx-h100"
        );
        assert!(
            bodies[0]["spec"].get("suspend").is_none(),
            "Kueue's webhook suspends it; Gantry must not own the field"
        );
    });
    k.submit(w.clone()).await.expect("applied");
    k.submit(w).await.expect("applied again");
    server.await.unwrap();
}

#[tokio::test]
async fn an_unreachable_api_server_is_a_clear_error_not_a_hang() {
    let (k, mut handle) = mock(1);
    let t = crate::seed::templates().remove(0);
    let server = tokio::spawn(async move {
        // The request arrives and is never answered.
        let (_req, send) = handle.next_request().await.expect("an apply");
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        drop(send);
    });
    let err = k.submit(workload(&t, 8, "nlp")).await.unwrap_err();
    assert!(
        matches!(&err, ClusterError::Unavailable(m) if m.contains("no answer within 1 s")),
        "{err}"
    );
    assert!(!k.is_reachable());
    server.abort();
}

#[tokio::test]
async fn cancel_deletes_the_job_object_in_the_foreground() {
    let (k, mut handle) = mock(5);
    k.observe(&wl(json!([cond(
        "QuotaReserved",
        false,
        "Pending",
        "waiting"
    )])));
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("a delete");
        assert_eq!(req.method(), Method::DELETE);
        assert_eq!(req.uri().path(), "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-nlp/jobsets/gantry-019a7c3e5b1d7f008a3c2f6d9e1b4c70");
        assert_eq!(
            body_json(req).await,
            json!({"propagationPolicy": "Foreground"})
        );
        respond(
            send,
            StatusCode::OK,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
        );
        // The Workload named its owner's kind, so no other kind is tried: the mock closes
        // here, and a second request would fail the cancel.
    });
    k.cancel(JOB_ID).await.expect("cancelled");
    server.await.unwrap();
}

/// A cancel right after the launch, before the watch has seen the job's Workload, deletes the
/// JobSet it sent (in the team's namespace, known from the submission). It deleted nothing:
/// the JobSet waited up to 10 s for the resender, and could be admitted and start meanwhile.
#[tokio::test]
async fn a_cancel_before_the_watch_saw_the_workload_deletes_what_was_sent() {
    let (k, mut handle) = mock(5);
    let t = crate::seed::templates()
        .into_iter()
        .find(|t| t.name == "llama-3.1-8b-fsdp")
        .unwrap();
    let w = workload(&t, 16, "vision");
    let id = w.job_id.clone();
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("the apply");
        assert_eq!(req.method(), Method::PATCH);
        let body = body_json(req).await;
        respond(send, StatusCode::CREATED, body);
        let (req, send) = handle.next_request().await.expect("a delete");
        assert_eq!(req.method(), Method::DELETE);
        assert_eq!(
            req.uri().path(),
            format!(
                "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-vision/jobsets/{}",
                objects::object_name(JOB_ID)
            )
        );
        respond(
            send,
            StatusCode::OK,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
        );
    });
    k.submit(w).await.expect("applied");
    k.cancel(&id).await.expect("cancelled");
    tokio::time::timeout(std::time::Duration::from_secs(5), server)
        .await
        .expect("the JobSet was deleted")
        .unwrap();
}

#[tokio::test]
async fn a_quota_edit_applies_only_gantrys_fields_and_reports_a_conflict() {
    let (k, mut handle) = mock(5);
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("an apply");
        assert_eq!(req.method(), Method::PATCH);
        assert_eq!(
            req.uri().path(),
            "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/nlp-hgx-h100"
        );
        let q = req.uri().query().unwrap_or_default().to_string();
        assert!(
            q.contains("fieldManager=gantry") && !q.contains("force"),
            "never forced: {q}"
        );
        let body = body_json(req).await;
        assert_eq!(
            body["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0],
            json!({"name": "nvidia.com/gpu", "nominalQuota": 48, "borrowingLimit": 16})
        );
        respond(
            send,
            StatusCode::CONFLICT,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
            "message": "Apply failed with 1 conflict: conflict with \"kubectl-edit\": .spec.resourceGroups"}),
        );
    });
    let err = k
        .set_quota(
            "nlp",
            "hgx-h100",
            QuotaSpec {
                nominal: 48,
                borrowing_limit: Some(16),
                lending_limit: None,
                strategy: None,
            },
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("kubectl-edit"), "{err}");
    assert!(k.is_reachable(), "the server answered");
    server.await.unwrap();
}

#[tokio::test]
async fn positions_come_from_the_visibility_api_merged_across_the_pools_queues() {
    let (k, mut handle) = mock(5);
    k.know_quota(
        "nlp",
        "hgx-h100",
        QuotaSpec {
            nominal: 16,
            borrowing_limit: Some(0),
            lending_limit: None,
            strategy: None,
        },
    );
    k.know_quota(
        "vision",
        "hgx-h100",
        QuotaSpec {
            nominal: 16,
            borrowing_limit: Some(0),
            lending_limit: None,
            strategy: None,
        },
    );
    k.observe(&wl(json!([cond(
        "QuotaReserved",
        false,
        "Pending",
        "insufficient unused quota for nvidia.com/gpu in flavor hgx-h100, 16 more needed"
    )])));
    let item = |owner: &str, prio: i64, created: &str, pos: u32| {
        json!({
            "metadata": {"name": format!("jobset-{owner}"), "creationTimestamp": created, "ownerReferences": [{"kind": "JobSet", "name": owner}]},
            "priority": prio, "positionInClusterQueue": pos + 5, "positionInLocalQueue": pos, "localQueueName": "hgx-h100"
        })
    };
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("nlp's queue");
        assert_eq!(
            req.uri().path(),
            "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/team-nlp/localqueues/hgx-h100/pendingworkloads"
        );
        respond(
            send,
            StatusCode::OK,
            json!({"kind": "PendingWorkloadsSummary", "items": [
            item("gantry-019a7c3e5b1d7f008a3c2f6d9e1b4c70", 10000, "2026-11-29T10:00:00Z", 0)]}),
        );
        let (req, send) = handle.next_request().await.expect("vision's queue");
        assert_eq!(req.uri().path(), "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/team-vision/localqueues/hgx-h100/pendingworkloads");
        respond(
            send,
            StatusCode::OK,
            json!({"kind": "PendingWorkloadsSummary", "items": [
            item("gantry-00000000000000000000000000000001", 10000, "2026-11-29T09:00:00Z", 0),
            item("gantry-00000000000000000000000000000002", 1000, "2026-11-29T08:00:00Z", 1)]}),
        );
    });
    let q = k.pending("hgx-h100").await.expect("a queue");
    server.await.unwrap();
    let ids: Vec<&str> = q.iter().map(|p| p.job_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "00000000-0000-0000-0000-000000000001",
            JOB_ID,
            "00000000-0000-0000-0000-000000000002"
        ]
    );
    let mine = &q[1];
    assert_eq!((mine.position_in_pool, mine.position_in_team), (2, 1));
    assert_eq!(mine.team, "nlp");
    assert!(
        mine.reason.contains("16 more needed"),
        "Kueue's own reason: {}",
        mine.reason
    );
}

#[tokio::test]
async fn the_watch_turns_workload_events_into_cluster_events() {
    let (k, mut handle) = mock(5);
    let mut events = k.subscribe();
    let watch = k.spawn_watch();
    let admitted = wl(json!([
        cond("QuotaReserved", true, "QuotaReserved", ""),
        cond("Admitted", true, "Admitted", "")
    ]));
    let mut running = wl(json!([
        cond("Admitted", true, "Admitted", ""),
        cond("PodsReady", true, "PodsReady", "")
    ]));
    running["metadata"]["resourceVersion"] = json!("3");
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("the initial list");
        assert_eq!(req.uri().path(), "/apis/kueue.x-k8s.io/v1beta2/workloads");
        assert!(!req.uri().query().unwrap_or_default().contains("watch=true"));
        respond(
            send,
            StatusCode::OK,
            json!({"kind": "WorkloadList", "apiVersion": "kueue.x-k8s.io/v1beta2", "metadata": {"resourceVersion": "2"}, "items": [admitted]}),
        );
        let (req, send) = handle.next_request().await.expect("the watch");
        assert!(req.uri().query().unwrap_or_default().contains("watch=true"));
        let line = serde_json::to_vec(&json!({"type": "MODIFIED", "object": running})).unwrap();
        send.send_response(
            Response::builder()
                .status(StatusCode::OK)
                .body(Body::from(line))
                .unwrap(),
        );
        // Keep the handle open so the watcher's next request waits instead of failing.
        let _ = handle.next_request().await;
    });
    let first = tokio::time::timeout(std::time::Duration::from_secs(5), events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (first.job_id.as_str(), first.change.clone()),
        (
            JOB_ID,
            Change::Admitted {
                nodes: vec![],
                past_run_s: Some(0),
            }
        )
    );
    let second = tokio::time::timeout(std::time::Duration::from_secs(5), events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.change, Change::Running);
    assert_eq!(second.seq, first.seq + 1);
    let phases = k.workloads().await.unwrap();
    assert!(
        matches!(&phases[..], [(id, WorkloadPhase::Admitted { running: true, .. })] if id == JOB_ID)
    );
    watch.abort();
    server.abort();
}

// ---- gantry kube render ----------------------------------------------------------------

#[test]
fn render_arguments_are_checked() {
    let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        crate::render::RenderArgs::parse(&w("")).unwrap(),
        crate::render::RenderArgs::default()
    );
    let a = crate::render::RenderArgs::parse(&w(
        "--template llama-3.1-8b-fsdp --gpus 32 --team vision",
    ))
    .unwrap();
    assert_eq!(
        (a.template.as_deref(), a.gpus, a.team.as_deref()),
        (Some("llama-3.1-8b-fsdp"), Some(32), Some("vision"))
    );
    for (bad, says) in [
        ("--gpus 8", "go together"),
        ("--template x --gpus zero", "--gpus"),
        ("--template x --gpus 0", "--gpus"),
        ("--team nlp", "need --template"),
        ("--template x --gpus 8 --priority urgent", "--priority"),
        ("--frobnicate", "unknown argument"),
        ("--template", "needs a value"),
    ] {
        let e = crate::render::RenderArgs::parse(&w(bad)).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[tokio::test]
async fn render_reads_the_stored_pools_quotas_and_templates() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("render.db").display()
    );
    let db = crate::db::Db::connect(&url, 1).await.unwrap();
    crate::seed::seed_catalog(&db, Utc::now()).await.unwrap();
    let config = Config::default();
    let parse = |yaml: &str| -> Vec<Value> {
        yaml.split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect()
    };
    let all = parse(
        &crate::render::render(&config, &db, &crate::render::RenderArgs::default())
            .await
            .unwrap(),
    );
    let cqs: Vec<&str> = all
        .iter()
        .filter(|o| o["kind"] == "ClusterQueue")
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(cqs.len(), 6, "3 teams x 2 pools: {cqs:?}");
    assert!(cqs.contains(&"speech-hgx-h200"));
    let cq = validator("kueue.x-k8s.io_clusterqueues.yaml", "v1beta2");
    for o in all.iter().filter(|o| o["kind"] == "ClusterQueue") {
        assert_eq!(errors(&cq, o), Vec::<String>::new());
    }
    let args = crate::render::RenderArgs {
        template: Some("qwen2.5-72b-zero3".into()),
        gpus: Some(32),
        team: Some("vision".into()),
        priority: Some(Priority::Low),
    };
    let job = parse(&crate::render::render(&config, &db, &args).await.unwrap());
    assert_eq!(job.len(), 1);
    assert_eq!(job[0]["kind"], "JobSet");
    assert_eq!(job[0]["metadata"]["namespace"], "team-vision");
    assert_eq!(
        job[0]["metadata"]["labels"]["kueue.x-k8s.io/priority-class"],
        "gantry-low"
    );
    let cmd = job[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["containers"][0]["command"]
        .clone();
    assert_eq!(cmd[0], "deepspeed");
    assert_eq!(cmd[1], "--no_ssh");
    assert_eq!(cmd[2], "--num_nodes=4");
    let js = validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2");
    assert_eq!(errors(&js, &job[0]), Vec::<String>::new());
    let bad = crate::render::RenderArgs {
        template: Some("qwen2.5-72b-zero3".into()),
        gpus: Some(8),
        ..Default::default()
    };
    let e = crate::render::render(&config, &db, &bad)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--gpus") && e.contains("[16, 32, 64]"), "{e}");
    let unknown = crate::render::RenderArgs {
        template: Some("gpt-5".into()),
        gpus: Some(8),
        ..Default::default()
    };
    let e = crate::render::render(&config, &db, &unknown)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no template 'gpt-5'") && e.contains("llama-3.1-8b-fsdp"),
        "{e}"
    );
}

// ---- deploy/ ------------------------------------------------------------------------------

fn deploy_docs(file: &str) -> Vec<Value> {
    let path = format!("{}/../deploy/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.split("\n---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect()
}

#[test]
fn rbac_grants_exactly_what_the_back_end_calls() {
    let mut granted = std::collections::BTreeSet::new();
    for role in deploy_docs("rbac.yaml")
        .iter()
        .filter(|d| d["kind"] == "ClusterRole")
    {
        for rule in role["rules"].as_array().unwrap() {
            for g in rule["apiGroups"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    for v in rule["verbs"].as_array().unwrap() {
                        granted.insert((
                            g.as_str().unwrap().to_string(),
                            r.as_str().unwrap().to_string(),
                            v.as_str().unwrap().to_string(),
                        ));
                    }
                }
            }
        }
    }
    let used: std::collections::BTreeSet<_> = API_USE
        .iter()
        .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
        .collect();
    assert_eq!(granted, used);
    // the team-jobs role is bound per team namespace, never cluster-wide
    for b in deploy_docs("rbac.yaml")
        .iter()
        .filter(|d| d["roleRef"]["name"] == "gantry-team-jobs")
    {
        assert_eq!(b["kind"], "RoleBinding");
        assert!(b["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .starts_with("team-"));
    }
}

#[test]
fn the_deployments_configuration_loads_and_its_probes_exist() {
    let cm = &deploy_docs("configmap.yaml")[0];
    let toml = cm["data"]["gantry.toml"].as_str().unwrap();
    let fig = figment::Figment::from(figment::providers::Serialized::defaults(Config::default()))
        .merge(<figment::providers::Toml as figment::providers::Format>::string(toml));
    let config = Config::from_figment(fig).expect("deploy/configmap.yaml is a valid configuration");
    assert_eq!(config.cluster.backend, crate::config::ClusterBackend::Kube);
    assert_eq!(
        config.metrics_backend(),
        crate::config::MetricsBackend::Prometheus
    );
    assert!(
        !config.demo.history,
        "no made-up history in real accounting"
    );
    assert!(!config.auth.dev_login());
    let oidc = config
        .auth
        .oidc
        .as_ref()
        .expect("production signs in with OIDC");
    assert!(
        oidc.client_secret.is_none(),
        "the secret comes from a Secret, not the ConfigMap"
    );
    assert!(config.auth.secure());
    let d = &deploy_docs("deployment.yaml")[0];
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(
        d["spec"]["template"]["spec"]["serviceAccountName"],
        "gantry"
    );
}

/// A Workload that runs past its `maximumExecutionTimeSeconds` (the job's max runtime, from
/// its `kueue.x-k8s.io/max-exec-time-seconds` label) is deactivated by Kueue (KEP-3125):
/// `spec.active: false`, evicted with reason `DeactivatedDueToMaximumExecutionTimeExceeded`,
/// never admitted again and never `Finished`. Its job ends as failed at the eviction, saying
/// why; it once read as evicted and went back to queued for good.
#[test]
fn a_workload_deactivated_at_its_max_runtime_ends_its_job() {
    let (_rt, k, mut events) = watching();
    k.observe(&wl(json!([
        cond("Admitted", true, "Admitted", ""),
        cond("PodsReady", true, "PodsReady", "")
    ])));
    let mut stopped = wl(json!([
        {"type": "DeactivationTarget", "status": "True", "reason": "MaximumExecutionTimeExceeded", "message": "exceeding the maximum execution time", "lastTransitionTime": "2026-11-29T18:05:00Z"},
        {"type": "Evicted", "status": "True", "reason": "DeactivatedDueToMaximumExecutionTimeExceeded", "message": "The workload is deactivated due to exceeding the maximum execution time", "lastTransitionTime": "2026-11-29T18:05:01Z"},
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "The workload is deactivated", "lastTransitionTime": "2026-11-29T18:05:01Z"},
        {"type": "Admitted", "status": "False", "reason": "NoReservation", "message": "The workload has no reservation", "lastTransitionTime": "2026-11-29T18:05:01Z"},
        {"type": "Requeued", "status": "False", "reason": "DeactivatedDueToMaximumExecutionTimeExceeded", "message": "", "lastTransitionTime": "2026-11-29T18:05:01Z"}
    ]));
    stopped["spec"]["active"] = json!(false);
    stopped["spec"]["maximumExecutionTimeSeconds"] = json!(28800);
    k.observe(&stopped);
    // Seen again (a re-list) it says nothing more.
    k.observe(&stopped);
    let changes: Vec<(String, Change)> = std::iter::from_fn(|| events.try_recv().ok())
        .map(|e| (e.at.to_rfc3339(), e.change))
        .collect();
    assert_eq!(
        changes,
        vec![
            (
                "2026-11-29T10:05:00+00:00".into(),
                Change::Admitted {
                    nodes: vec![],
                    past_run_s: Some(0),
                }
            ),
            ("2026-11-29T10:05:00+00:00".into(), Change::Running),
            (
                "2026-11-29T18:05:01+00:00".into(),
                Change::Failed {
                    reason: "Stopped at its max runtime of 8.0 h: Kueue deactivated its workload"
                        .into(),
                    past_run_s: 0,
                }
            ),
        ]
    );
    // First seen deactivated (admitted and run to its max runtime while Gantry was not
    // watching): no condition says when it was admitted, but Kueue's count of the run comes
    // with the failure, for the database to record the run it missed.
    let mut counted = stopped.clone();
    counted["status"]["accumulatedPastExecutionTimeSeconds"] = json!(28800);
    assert_eq!(
        transitions(None, &status::observe(&counted, "team-").unwrap()),
        vec![Change::Failed {
            reason: "Stopped at its max runtime of 8.0 h: Kueue deactivated its workload".into(),
            past_run_s: 28800,
        }]
    );
    // Deactivated while it waited (its quota released at an eviction an hour before): the
    // count's last run did not end at this end, so it does not come with it.
    let mut waited = counted.clone();
    waited["status"]["conditions"][2]["lastTransitionTime"] = json!("2026-11-29T17:05:01Z");
    waited["status"]["conditions"][3]["lastTransitionTime"] = json!("2026-11-29T17:05:01Z");
    assert_eq!(
        transitions(None, &status::observe(&waited, "team-").unwrap()),
        vec![Change::Failed {
            reason: "Stopped at its max runtime of 8.0 h: Kueue deactivated its workload".into(),
            past_run_s: 0,
        }]
    );
    // Deactivated by hand (`kubectl patch … active: false`), the reason is Kueue's.
    let mut by_hand = stopped.clone();
    by_hand["status"]["conditions"][1]["reason"] = json!("DeactivatedDueToDeactivated");
    by_hand["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .remove(0);
    let o = status::observe(&by_hand, "team-").unwrap();
    assert_eq!(
        o.phase,
        Phase::Finished {
            succeeded: false,
            message: "Kueue deactivated its workload (DeactivatedDueToDeactivated)".into(),
            ran: true,
        }
    );
    // Still admitted while its eviction is under way: it still holds its GPUs.
    let mut evicting = wl(json!([
        cond("Admitted", true, "Admitted", ""),
        cond("PodsReady", true, "PodsReady", "")
    ]));
    evicting["spec"]["active"] = json!(false);
    assert!(matches!(
        status::observe(&evicting, "team-").unwrap().phase,
        Phase::Running { .. }
    ));
}

/// kube-runtime's watcher lists every Workload again when it falls too far behind (410
/// Gone), and a Workload deleted in the gap sends no `Delete`: "objects not in the new list
/// should be assumed deleted". A running job whose Workload the list no longer holds ends as
/// cancelled (the mirror kept it running forever, and the comparison agreed); one still
/// listed is untouched, and a finished one is only forgotten.
#[test]
fn a_workload_missing_from_the_watch_s_new_list_ends_its_job() {
    use kube::runtime::watcher::Event;
    let (_rt, k, mut events) = watching();
    let running = wl(json!([
        cond("Admitted", true, "Admitted", ""),
        cond("PodsReady", true, "PodsReady", "")
    ]));
    let other = |id: &str, conditions: Value| {
        let mut w = wl(conditions);
        let owner = format!("gantry-{}", id.replace('-', ""));
        w["metadata"]["name"] = json!(format!("jobset-{owner}-9z9z9"));
        w["metadata"]["ownerReferences"][0]["name"] = json!(owner);
        w
    };
    let kept_id = "00000000-0000-0000-0000-000000000007";
    let kept = other(
        kept_id,
        json!([cond("QuotaReserved", false, "Pending", "waiting")]),
    );
    let done_id = "00000000-0000-0000-0000-000000000008";
    let done = other(
        done_id,
        json!([cond("Finished", true, "Succeeded", "Jobset finished")]),
    );
    let obj = |v: &Value| serde_json::from_value::<DynamicObject>(v.clone()).unwrap();
    let mut relisted = None;
    // The first list: all three.
    k.on_workload_event(Event::Init, &mut relisted);
    for w in [&running, &kept, &done] {
        k.on_workload_event(Event::InitApply(obj(w)), &mut relisted);
    }
    k.on_workload_event(Event::InitDone, &mut relisted);
    let first: Vec<(String, Change)> = std::iter::from_fn(|| events.try_recv().ok())
        .map(|e| (e.job_id, e.change))
        .collect();
    assert!(
        first.contains(&(JOB_ID.to_string(), Change::Running)),
        "{first:?}"
    );
    assert_eq!(k.mirror().observed.len(), 3);

    // The watch fell behind and lists again: the running one and the finished one are gone.
    let before = chrono::Utc::now();
    k.on_workload_event(Event::Init, &mut relisted);
    k.on_workload_event(Event::InitApply(obj(&kept)), &mut relisted);
    k.on_workload_event(Event::InitDone, &mut relisted);
    let after: Vec<_> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].job_id, JOB_ID);
    assert_eq!(
        after[0].change,
        Change::Cancelled {
            reason: "Its workload was gone from the cluster when Gantry listed the workloads again"
                .into()
        }
    );
    assert!(
        after[0].at >= before,
        "now: the deletion time went with the object"
    );
    let ids: Vec<String> = k.mirror().observed.keys().cloned().collect();
    assert_eq!(ids, [kept_id]);
}

#[test]
fn a_job_object_deleted_in_the_cluster_cancels_its_job() {
    let (svc, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let k = KubeCluster::new(kube::Client::new(svc, "default"), settings(), vec![]);
    k.workloads_listed();
    let mut events = k.subscribe();
    let t = crate::seed::templates().remove(0);
    let mut js = objects::job_object(&settings(), &workload(&t, 8, "nlp"));
    js["metadata"]["creationTimestamp"] = json!("2026-11-29T10:00:00Z");
    // Its Workload is running; then the JobSet is deleted with kubectl.
    k.observe(&wl(json!([
        cond("Admitted", true, "Admitted", ""),
        cond("PodsReady", true, "PodsReady", "")
    ])));
    k.observe_job_object(&js, false);
    let mut deleted = js.clone();
    deleted["metadata"]["deletionTimestamp"] = json!("2026-11-29T11:30:00Z");
    k.observe_job_object(&deleted, true);
    let changes: Vec<(String, Change)> = std::iter::from_fn(|| events.try_recv().ok())
        .map(|e| (e.at.to_rfc3339(), e.change))
        .collect();
    // Each at the time Kubernetes recorded, not when Gantry saw it.
    assert_eq!(
        changes,
        vec![
            (
                "2026-11-29T10:05:00+00:00".into(),
                Change::Admitted {
                    nodes: vec![],
                    past_run_s: Some(0),
                }
            ),
            ("2026-11-29T10:05:00+00:00".into(), Change::Running),
            (
                "2026-11-29T11:30:00+00:00".into(),
                Change::Cancelled {
                    reason: "Its JobSet was deleted in the cluster".into()
                }
            )
        ]
    );
    // A JobSet that completed while its Workload was already gone still ends the job: it was
    // admitted first (created suspended, it ran only once admitted), at a time gone with its
    // Workload, so the admission stands at the end and says it is not dated.
    let mut done = js.clone();
    done["metadata"]["labels"][objects::JOB_ID_LABEL] =
        json!("00000000-0000-0000-0000-000000000009");
    done["status"] = json!({"terminalState": "Completed", "conditions": [
        {"type": "Completed", "status": "True", "lastTransitionTime": "2026-11-29T12:00:00Z"}
    ]});
    k.observe_job_object(&done, false);
    let changes: Vec<(String, String, Change)> = std::iter::from_fn(|| events.try_recv().ok())
        .map(|e| (e.job_id, e.at.to_rfc3339(), e.change))
        .collect();
    let id = "00000000-0000-0000-0000-000000000009".to_string();
    let at = "2026-11-29T12:00:00+00:00".to_string();
    assert_eq!(
        changes,
        vec![
            (
                id.clone(),
                at.clone(),
                Change::Admitted {
                    nodes: vec![],
                    past_run_s: None
                }
            ),
            (
                id,
                at,
                Change::Succeeded {
                    reason: "The JobSet completed".into()
                }
            )
        ]
    );
}

/// A job object's verdict, kept while its Workload is there, ends the job when the Workload
/// goes before its own end was seen: deleted (Kueue's retention after the JobSet ended), or
/// missing from a list after the watch fell behind. The implied admission is dated by the
/// JobSet's `Suspended` condition turning false. A job object deleted after its verdict ended
/// by the verdict, not by the deletion. Before, each of these ended the job as cancelled.
#[test]
fn a_workload_gone_before_its_end_was_seen_ends_by_its_job_objects_verdict() {
    let (rt, k, mut events) = watching();
    let _guard = rt.enter();
    let t = crate::seed::templates().remove(0);
    let with_id = |v: &Value, id: &str| {
        let mut v = v.clone();
        v["metadata"]["labels"][objects::JOB_ID_LABEL] = json!(id);
        v
    };
    let workload_of = |id: &str| {
        let mut w = wl(json!([
            cond("Admitted", true, "Admitted", ""),
            cond("PodsReady", true, "PodsReady", "")
        ]));
        w["metadata"]["ownerReferences"][0]["name"] = json!(objects::object_name(id));
        w
    };
    let ended = |succeeded: bool| {
        let mut js = objects::job_object(&settings(), &workload(&t, 8, "nlp"));
        let state = if succeeded { "Completed" } else { "Failed" };
        js["status"] = json!({"terminalState": state, "conditions": [
            {"type": "Suspended", "status": "False", "reason": "ResumeJobs", "lastTransitionTime": "2026-11-29T10:06:00Z"},
            {"type": state, "status": "True", "lastTransitionTime": "2026-11-29T12:00:00Z"}]});
        js
    };
    let drain =
        |events: &mut mpsc::UnboundedReceiver<ClusterEvent>| -> Vec<(String, String, Change)> {
            std::iter::from_fn(|| events.try_recv().ok())
                .map(|e| (e.job_id, e.at.to_rfc3339(), e.change))
                .collect()
        };
    let verdict = |id: &str, succeeded: bool| {
        vec![
            (
                id.to_string(),
                "2026-11-29T10:06:00+00:00".to_string(),
                Change::Admitted {
                    nodes: vec![],
                    past_run_s: None,
                },
            ),
            (
                id.to_string(),
                "2026-11-29T12:00:00+00:00".to_string(),
                if succeeded {
                    Change::Succeeded {
                        reason: "The JobSet completed".into(),
                    }
                } else {
                    Change::Failed {
                        reason: "The JobSet failed".into(),
                        past_run_s: 0,
                    }
                },
            ),
        ]
    };
    // 1. Running; its JobSet completes (the Workload speaks for it: nothing yet); then its
    //    Workload is deleted before its Finished was seen.
    let (a, b, c) = (
        "00000000-0000-0000-0000-00000000000a",
        "00000000-0000-0000-0000-00000000000b",
        "00000000-0000-0000-0000-00000000000c",
    );
    k.observe(&workload_of(a));
    k.observe_job_object(&with_id(&ended(true), a), false);
    assert_eq!(
        drain(&mut events).len(),
        2,
        "admitted and running, from the Workload"
    );
    k.forget(&workload_of(a));
    assert_eq!(drain(&mut events), verdict(a, true));
    // 2. Running; its JobSet failed; its Workload is missing when the watch lists again.
    k.observe(&workload_of(b));
    k.observe_job_object(&with_id(&ended(false), b), false);
    drain(&mut events);
    k.forget_unlisted(&Default::default());
    assert_eq!(drain(&mut events), verdict(b, false));
    // 3. A JobSet that completed, its Workload gone, is deleted: it ended by its verdict.
    k.observe_job_object(&with_id(&ended(true), c), true);
    assert_eq!(drain(&mut events), verdict(c, true));
    // Without a verdict, a deletion still cancels.
    let mut plain = with_id(
        &objects::job_object(&settings(), &workload(&t, 8, "nlp")),
        c,
    );
    plain["metadata"]["deletionTimestamp"] = json!("2026-11-29T13:00:00Z");
    k.observe_job_object(&plain, true);
    assert_eq!(
        drain(&mut events),
        vec![(
            c.to_string(),
            "2026-11-29T13:00:00+00:00".to_string(),
            Change::Cancelled {
                reason: "Its JobSet was deleted in the cluster".into()
            }
        )]
    );
    // A verdict is kept only while its Workload is there unfinished: none is left now, and
    // one kept goes when its Workload finishes.
    assert!(k.mirror().verdicts.is_empty());
    let d = "00000000-0000-0000-0000-00000000000d";
    k.observe(&workload_of(d));
    k.observe_job_object(&with_id(&ended(true), d), false);
    assert_eq!(k.mirror().verdicts.len(), 1);
    let mut finished = workload_of(d);
    finished["status"]["conditions"] = json!([
        cond("Admitted", true, "Admitted", ""),
        cond("Finished", true, "Succeeded", "Job finished successfully")
    ]);
    k.observe(&finished);
    assert!(k.mirror().verdicts.is_empty());
}

/// A job object seen before the Workload watch's first list waits for it: whether its
/// Workload exists is not known until then. Its verdict counts only if the list holds no
/// Workload of the job; the latest sighting of each job counts once.
#[test]
fn job_objects_seen_before_the_workloads_are_listed_wait_for_the_list() {
    let (svc, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let k = KubeCluster::new(kube::Client::new(svc, "default"), settings(), vec![]);
    let mut events = k.subscribe();
    let t = crate::seed::templates().remove(0);
    let mut running = objects::job_object(&settings(), &workload(&t, 8, "nlp"));
    running["metadata"]["creationTimestamp"] = json!("2026-11-29T10:00:00Z");
    let mut done = running.clone();
    done["status"] = json!({"terminalState": "Completed", "conditions": [
        {"type": "Completed", "status": "True", "lastTransitionTime": "2026-11-29T12:00:00Z"}
    ]});
    // Another job's JobSet, completed, whose Workload is gone.
    let other = "00000000-0000-0000-0000-000000000011";
    let mut gone = done.clone();
    gone["metadata"]["labels"][objects::JOB_ID_LABEL] = json!(other);
    k.observe_job_object(&running, false);
    k.observe_job_object(&done, false);
    k.observe_job_object(&gone, false);
    assert!(events.try_recv().is_err(), "nothing before the list");
    // The list holds the first job's Workload, finished: that Workload speaks for it.
    k.observe(&wl(json!([
        cond("Admitted", true, "Admitted", ""),
        cond("Finished", true, "Succeeded", "Job finished successfully")
    ])));
    let from_workload: Vec<Change> = std::iter::from_fn(|| events.try_recv().ok())
        .map(|e| e.change)
        .collect();
    assert_eq!(from_workload.len(), 2, "{from_workload:?}");
    k.workloads_listed();
    let after: Vec<(String, Change)> = std::iter::from_fn(|| events.try_recv().ok())
        .map(|e| (e.job_id, e.change))
        .collect();
    assert_eq!(
        after,
        vec![
            (
                other.to_string(),
                Change::Admitted {
                    nodes: vec![],
                    past_run_s: None
                }
            ),
            (
                other.to_string(),
                Change::Succeeded {
                    reason: "The JobSet completed".into()
                }
            )
        ],
        "only the job whose Workload the list did not hold, once"
    );
    k.workloads_listed();
    assert!(events.try_recv().is_err(), "taken in once");
}

#[test]
fn a_cluster_queue_carries_its_teams_queueing_strategy_and_lending_limit() {
    let cq = validator("kueue.x-k8s.io_clusterqueues.yaml", "v1beta2");
    let strict = QuotaSpec {
        nominal: 32,
        borrowing_limit: Some(16),
        lending_limit: Some(8),
        strategy: Some(crate::cluster::QueueingStrategy::StrictFifo),
    };
    let q = objects::cluster_queue(&settings(), "nlp", &pool("hgx-h100", "H100"), strict);
    assert!(errors(&cq, &q).is_empty(), "{:?}", errors(&cq, &q));
    assert_eq!(q["spec"]["queueingStrategy"], "StrictFIFO");
    let gpu = &q["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0];
    assert_eq!(
        (
            gpu["nominalQuota"].clone(),
            gpu["borrowingLimit"].clone(),
            gpu["lendingLimit"].clone()
        ),
        (json!(32), json!(16), json!(8))
    );
    // No strategy of its own: the pool's.
    let q = objects::cluster_queue(
        &settings(),
        "nlp",
        &pool("hgx-h100", "H100"),
        QuotaSpec {
            strategy: None,
            ..strict
        },
    );
    assert_eq!(q["spec"]["queueingStrategy"], "BestEffortFIFO");
}

/// A kube back end on a mock API server that answers nothing, and its event stream.
fn watching() -> (
    tokio::runtime::Runtime,
    KubeCluster,
    mpsc::UnboundedReceiver<ClusterEvent>,
) {
    let (svc, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let k = {
        let _guard = rt.enter();
        KubeCluster::new(kube::Client::new(svc, "default"), settings(), vec![])
    };
    k.workloads_listed();
    let events = k.subscribe();
    (rt, k, events)
}

/// A JobSet that failed (JobSet v0.12: `status.terminalState: Failed` and a `Failed`
/// condition with its message) fails its job with that message, at the condition's time;
/// the status is checked against the JobSet CRD.
#[test]
fn a_failed_jobset_fails_its_job_with_the_condition_message() {
    let (rt, k, mut events) = watching();
    let _guard = rt.enter();
    let t = crate::seed::templates()
        .into_iter()
        .find(|t| t.name == "llama-3.1-8b-fsdp")
        .unwrap();
    let mut js = objects::job_object(&settings(), &workload(&t, 16, "nlp"));
    js["status"] = json!({
        "terminalState": "Failed",
        "restarts": 0,
        "conditions": [{
            "type": "Failed",
            "status": "True",
            "reason": "FailedJobs",
            "message": "jobset failed due to one or more job failures",
            "lastTransitionTime": "2026-11-29T10:15:00Z"
        }]
    });
    let v = validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2");
    assert_eq!(errors(&v, &js), Vec::<String>::new());
    assert_eq!(
        status::job_object_outcome(&js),
        Some(status::Outcome {
            succeeded: false,
            message: "jobset failed due to one or more job failures".into(),
            at: Some("2026-11-29T10:15:00Z".parse().unwrap()),
        })
    );
    k.observe_job_object(&js, false);
    // No resume recorded: a failure may have come from the queue; no admission is implied.
    let e = events.try_recv().unwrap();
    assert_eq!(e.job_id, JOB_ID);
    assert_eq!(
        e.at,
        "2026-11-29T10:15:00Z".parse::<DateTime<Utc>>().unwrap()
    );
    assert_eq!(
        e.change,
        Change::Failed {
            reason: "The JobSet failed: jobset failed due to one or more job failures".into(),
            past_run_s: 0,
        }
    );
    // The terminal state alone (no condition yet) is a failure too.
    let mut bare = js.clone();
    bare["status"] = json!({"terminalState": "Failed"});
    assert!(status::job_object_outcome(&bare).is_some_and(|o| !o.succeeded && o.message.is_empty()));
}

/// A TrainJob (Kubeflow Trainer v2.3) with a true `Failed` condition fails its job with the
/// condition's message; the status is checked against the TrainJob CRD.
#[test]
fn a_failed_trainjob_fails_its_job_with_the_condition_message() {
    let (rt, k, mut events) = watching();
    let _guard = rt.enter();
    let t = crate::seed::templates()
        .into_iter()
        .find(|t| t.name == "mistral-7b-sft")
        .unwrap();
    let mut tj = objects::job_object(&settings(), &workload(&t, 8, "nlp"));
    assert_eq!(tj["kind"], "TrainJob");
    tj["status"] = json!({
        "conditions": [
            {
                "type": "Suspended",
                "status": "False",
                "reason": "Resumed",
                "message": "TrainJob is resumed",
                "lastTransitionTime": "2026-11-29T10:01:00Z"
            },
            {
                "type": "Failed",
                "status": "True",
                "reason": "FailedJobs",
                "message": "jobset failed due to reaching max number of restarts",
                "lastTransitionTime": "2026-11-29T10:20:00Z"
            }
        ]
    });
    let v = validator("trainer.kubeflow.org_trainjobs.yaml", "v1alpha1");
    assert_eq!(errors(&v, &tj), Vec::<String>::new());
    k.observe_job_object(&tj, false);
    // Resumed at 10:01: its run counts from then.
    let admitted = events.try_recv().unwrap();
    assert_eq!(
        (admitted.at.to_rfc3339(), admitted.change),
        (
            "2026-11-29T10:01:00+00:00".to_string(),
            Change::Admitted {
                nodes: vec![],
                past_run_s: None
            }
        )
    );
    let e = events.try_recv().unwrap();
    assert_eq!(
        e.at,
        "2026-11-29T10:20:00Z".parse::<DateTime<Utc>>().unwrap()
    );
    assert_eq!(
        e.change,
        Change::Failed {
            reason: "The TrainJob failed: jobset failed due to reaching max number of restarts"
                .into(),
            past_run_s: 0,
        }
    );
    // A completed TrainJob succeeds, with its message.
    let mut done = tj.clone();
    done["metadata"]["labels"][objects::JOB_ID_LABEL] =
        json!("00000000-0000-0000-0000-000000000010");
    done["status"] = json!({"conditions": [{
        "type": "Complete",
        "status": "True",
        "reason": "JobsCompleted",
        "message": "TrainJob is completed",
        "lastTransitionTime": "2026-11-29T11:00:00Z"
    }]});
    k.observe_job_object(&done, false);
    assert!(matches!(
        events.try_recv().unwrap().change,
        Change::Admitted { .. }
    ));
    assert_eq!(
        events.try_recv().unwrap().change,
        Change::Succeeded {
            reason: "The TrainJob completed: TrainJob is completed".into()
        }
    );
}

/// The sim-only parameters (`sim_fail_after_s`, `sim_fail_reason`) never reach a container.
#[test]
fn sim_only_parameters_are_not_passed_to_the_container() {
    for t in crate::seed::templates() {
        assert!(t.params.iter().any(|p| p.name == "sim_fail_after_s"));
        let o = objects::job_object(&settings(), &workload(&t, 8, "nlp"));
        let text = o.to_string();
        assert!(!text.contains("sim_fail"), "{}: {text}", t.name);
        assert!(text.contains("--seed=42"), "{}: {text}", t.name);
    }
}
