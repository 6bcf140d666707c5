//! Reading Kueue `Workload` objects (v1beta2) into Gantry's terms: which job, where it
//! stands, why it waits. Pure functions over the object's JSON.
//!
//! Conditions used (<https://kueue.sigs.k8s.io/docs/concepts/workload/#workload-conditions>):
//! `QuotaReserved` (its `False` message is Kueue's reason for waiting), `Admitted`,
//! `PodsReady`, `Evicted` (reason `Preempted`), `Preempted` (reasons `InClusterQueue`,
//! `InCohortReclamation`, `InCohortFairSharing`, `InCohortReclaimWhileBorrowing`) and
//! `Finished` (reason `Succeeded` or `Failed`); and `spec.active: false` with `Evicted` (reason
//! `DeactivatedDueTo…`, e.g. `…MaximumExecutionTimeExceeded`): deactivated, the job has ended.

use chrono::{DateTime, Utc};
use serde_json::Value;

use app::model::domain::Priority;

/// Where a workload stands, as its conditions say.
#[derive(Clone, Debug, PartialEq)]
pub enum Phase {
    Pending {
        reason: String,
    },
    Admitted {
        at: DateTime<Utc>,
        nodes: Vec<String>,
    },
    Running {
        at: DateTime<Utc>,
        nodes: Vec<String>,
    },
    Finished {
        succeeded: bool,
        message: String,
        /// Whether it ran: a workload an admission check rejected never held quota.
        ran: bool,
    },
}

/// One Kueue Workload of a Gantry job.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub job_id: String,
    pub team: String,
    pub pool: String,
    pub gpus: u32,
    pub priority: Priority,
    pub created_at: DateTime<Utc>,
    /// `spec.maximumExecutionTimeSeconds` (from the job's `max-exec-time-seconds` label).
    pub max_runtime_s: Option<u64>,
    /// `status.accumulatedPastExecutionTimeSeconds`: how long it was admitted before, in
    /// admissions that ended in an eviction (its max runtime counts them).
    pub past_run_s: i64,
    /// `JobSet` or `TrainJob`: the object to delete on cancel.
    pub owner_kind: String,
    pub phase: Phase,
    /// The sentence of the last preemption, while the `Preempted` condition is true.
    pub preempted: Option<String>,
    /// The sentence of the last eviction, while the `Evicted` condition is true (a
    /// preemption is one too: [`Observed::preempted`] says which).
    pub evicted: Option<String>,
    /// When the state changes it shows happened, from the conditions' `lastTransitionTime`:
    /// `PodsReady` (else the admission), `Finished`, `Evicted`.
    pub times: Times,
}

/// The times of a Workload's conditions, as Kubernetes recorded them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Times {
    /// `Admitted`, else `QuotaReserved`, while true.
    pub admitted: Option<DateTime<Utc>>,
    pub running: Option<DateTime<Utc>>,
    pub finished: Option<DateTime<Utc>>,
    pub evicted: Option<DateTime<Utc>>,
    /// The latest `lastTransitionTime` of any condition: when it was last seen to change.
    pub last_change: Option<DateTime<Utc>>,
}

/// The job id of a job object named by [`super::objects::object_name`]: `gantry-` and the
/// UUID's 32 hex digits.
pub fn job_id_of(object_name: &str) -> Option<String> {
    let hex = object_name.strip_prefix("gantry-")?;
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    Some(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

fn condition<'a>(w: &'a Value, kind: &str) -> Option<&'a Value> {
    w["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn is_true(w: &Value, kind: &str) -> bool {
    condition(w, kind).is_some_and(|c| c["status"] == "True")
}

/// The `lastTransitionTime` of a condition that is true.
fn true_since(w: &Value, kind: &str) -> Option<DateTime<Utc>> {
    condition(w, kind)
        .filter(|c| c["status"] == "True")
        .and_then(|c| time(&c["lastTransitionTime"]))
}

/// The latest `lastTransitionTime` among an object's conditions.
pub fn last_change(obj: &Value) -> Option<DateTime<Utc>> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .filter_map(|c| time(&c["lastTransitionTime"]))
        .max()
}

/// When an object was deleted: `metadata.deletionTimestamp` when the API server set one (it
/// does not for an object deleted at once), else the latest time the object records (its last
/// condition change, else its creation): a lower bound, never Gantry's clock.
pub fn deleted_at(obj: &Value) -> Option<DateTime<Utc>> {
    time(&obj["metadata"]["deletionTimestamp"])
        .or_else(|| last_change(obj))
        .or_else(|| time(&obj["metadata"]["creationTimestamp"]))
}

pub fn time(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// The preemption as a sentence for the job page.
pub fn preemption_sentence(reason: &str) -> String {
    match reason {
        "InClusterQueue" => "Preempted by a higher-priority job of the same team".into(),
        "InCohortReclamation" | "InCohortReclaimWhileBorrowing" => {
            "Preempted: another team reclaimed its quota".into()
        }
        "InCohortFairSharing" => "Preempted to restore fair sharing in the pool".into(),
        other => format!("Preempted ({other})"),
    }
}

/// Kueue's reason for an eviction (the `Evicted` condition), in words; `Preempted` is told by
/// [`preemption_sentence`] from the `Preempted` condition.
pub fn eviction_sentence(reason: &str) -> String {
    match reason {
        "Preempted" => "Preempted by Kueue; queued again".into(),
        "PodsReadyTimeout" => {
            "Evicted: its pods were not all ready in time (Kueue's waitForPodsReady); queued again"
                .into()
        }
        "AdmissionCheck" => "Evicted: an admission check asked for a retry; queued again".into(),
        "ClusterQueueStopped" | "LocalQueueStopped" => {
            "Evicted: an admin stopped its queue; queued again".into()
        }
        "NodeFailures" => "Evicted: a node it ran on failed; queued again".into(),
        "" => "Evicted by Kueue; queued again".into(),
        other => format!("Evicted by Kueue ({other}); queued again"),
    }
}

/// The GPUs a workload asks for: the sum over its pod sets of count × `nvidia.com/gpu`.
fn gpus(w: &Value) -> u32 {
    w["spec"]["podSets"]
        .as_array()
        .map(|sets| {
            sets.iter()
                .map(|ps| {
                    let count = ps["count"].as_u64().unwrap_or(1);
                    let per = ps["template"]["spec"]["containers"]
                        .as_array()
                        .map(|cs| {
                            cs.iter()
                                .map(|c| quantity(&c["resources"]["requests"]["nvidia.com/gpu"]))
                                .sum::<u64>()
                        })
                        .unwrap_or(0);
                    count * per
                })
                .sum::<u64>() as u32
        })
        .unwrap_or(0)
}

fn quantity(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n.as_u64().unwrap_or(0),
        Value::String(s) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

/// Node names from Topology Aware Scheduling's assignment, when Kueue made one
/// (`status.admission.podSetAssignments[].topologyAssignment`, hostname level).
fn nodes(w: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for psa in w["status"]["admission"]["podSetAssignments"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let ta = &psa["topologyAssignment"];
        let levels = ta["levels"].as_array().cloned().unwrap_or_default();
        let Some(host) = levels.iter().position(|l| l == "kubernetes.io/hostname") else {
            continue;
        };
        for d in ta["domains"].as_array().into_iter().flatten() {
            if let Some(name) = d["values"].get(host).and_then(Value::as_str) {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// How a JobSet or TrainJob ended, by its own status.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub succeeded: bool,
    /// The message of its `Completed`/`Complete` or `Failed` condition; may be empty.
    pub message: String,
    /// That condition's `lastTransitionTime`.
    pub at: Option<DateTime<Utc>>,
}

/// A JobSet's or TrainJob's own verdict, when it has one. A JobSet says it in
/// `status.terminalState` (`Completed` or `Failed`) and in its `Completed`/`Failed`
/// conditions; a TrainJob in its `Complete`/`Failed` conditions. A failure wins over a
/// completion if both are set.
pub fn job_object_outcome(obj: &Value) -> Option<Outcome> {
    let terminal = obj["status"]["terminalState"].as_str();
    let failed = terminal == Some("Failed") || is_true(obj, "Failed");
    let succeeded =
        terminal == Some("Completed") || is_true(obj, "Completed") || is_true(obj, "Complete");
    if !failed && !succeeded {
        return None;
    }
    let kinds: &[&str] = if failed {
        &["Failed"]
    } else {
        &["Completed", "Complete"]
    };
    let c = kinds
        .iter()
        .filter_map(|k| condition(obj, k))
        .find(|c| c["status"] == "True");
    Some(Outcome {
        succeeded: !failed,
        message: c
            .and_then(|c| c["message"].as_str())
            .map(str::trim)
            .unwrap_or_default()
            .to_string(),
        at: c.and_then(|c| time(&c["lastTransitionTime"])),
    })
}

/// When the last eviction ended the run. Kueue sets `Evicted`, stops the job, and once its
/// pods are gone releases the quota: `QuotaReserved` and `Admitted` turn false, and the run is
/// added to `accumulatedPastExecutionTimeSeconds` up to then. The GPUs were held until the
/// release, and Kueue counts the run to it, so the release is when the run ended; the
/// `Evicted` time while the quota is not released yet (or no release is recorded after it).
fn evicted_at(w: &Value) -> Option<DateTime<Utc>> {
    let evicted = condition(w, "Evicted").and_then(|c| time(&c["lastTransitionTime"]))?;
    // Kueue counts a run to the moment `Admitted` turns false, and that time stays while it
    // is false (a later reservation released without an admission moves only
    // `QuotaReserved`); `QuotaReserved` only where there is no `Admitted` condition.
    let released = match condition(w, "Admitted") {
        Some(a) => (a["status"] == "False")
            .then(|| time(&a["lastTransitionTime"]))
            .flatten(),
        None => condition(w, "QuotaReserved")
            .filter(|c| c["status"] == "False")
            .and_then(|c| time(&c["lastTransitionTime"])),
    };
    Some(released.unwrap_or(evicted))
}

/// When a JobSet or TrainJob was last let run: its `Suspended` condition turning false
/// (the JobSet controller resumes it once Kueue admits its Workload; a TrainJob says so too).
pub fn resumed_at(obj: &Value) -> Option<DateTime<Utc>> {
    condition(obj, "Suspended")
        .filter(|c| c["status"] == "False")
        .and_then(|c| time(&c["lastTransitionTime"]))
}

/// Reads a Workload owned by a Gantry job; `None` for workloads of other jobs.
pub fn observe(w: &Value, namespace_prefix: &str) -> Option<Observed> {
    let owner = w["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["kind"] == "JobSet" || o["kind"] == "TrainJob")?;
    let job_id = job_id_of(owner["name"].as_str()?)?;
    let team = w["metadata"]["namespace"]
        .as_str()?
        .strip_prefix(namespace_prefix)?
        .to_string();
    let pool = w["spec"]["queueName"].as_str()?.to_string();
    let priority = w["spec"]["priorityClassRef"]["name"]
        .as_str()
        .and_then(|n| n.strip_prefix("gantry-"))
        .and_then(Priority::parse)
        .unwrap_or_default();
    let name = w["metadata"]["name"].as_str().unwrap_or_default();
    // Times come from Kubernetes, never from Gantry's clock: a watch that resumes after an
    // outage must not stamp what happened meanwhile with the time it learned of it. Without
    // the time it needs, the sighting is skipped (the API server always writes these).
    let Some(created_at) = time(&w["metadata"]["creationTimestamp"]) else {
        tracing::error!(job.id = %job_id, workload = %name, "a Workload without metadata.creationTimestamp; skipped");
        return None;
    };
    let phase = if let Some(f) = condition(w, "Finished").filter(|c| c["status"] == "True") {
        // Kueue's reasons: `Succeeded`, `Failed`, `AdmissionChecksRejected` (an admission
        // check said no: it never ran) and `OutOfSync` (the job changed under its admitted
        // workload). Only the first is a success.
        let reason = f["reason"].as_str().unwrap_or_default();
        let message = f["message"].as_str().unwrap_or_default();
        Phase::Finished {
            succeeded: reason == "Succeeded",
            message: match (message.is_empty(), reason) {
                (false, _) => message.to_string(),
                (true, "AdmissionChecksRejected") => "Rejected by an admission check".to_string(),
                (true, "Succeeded" | "Failed") => String::new(),
                (true, other) => format!("Kueue finished its workload ({other})"),
            },
            ran: reason != "AdmissionChecksRejected",
        }
    } else if w["spec"]["active"] == false && !is_true(w, "Admitted") {
        // Deactivated and evicted: Kueue does so when a workload runs past its
        // `maximumExecutionTimeSeconds` (KEP-3125; the job's `max-exec-time-seconds` label),
        // past its requeuing limit, or when someone sets `spec.active: false`. It is never
        // admitted again and gets no `Finished` condition: the job has ended.
        let why = ["Evicted", "DeactivationTarget"]
            .into_iter()
            .filter_map(|k| condition(w, k))
            .find_map(|c| c["reason"].as_str().filter(|r| !r.is_empty()))
            .unwrap_or("Deactivated");
        let message = if why.contains("MaximumExecutionTimeExceeded") {
            match w["spec"]["maximumExecutionTimeSeconds"].as_i64() {
                Some(s) => format!(
                    "Stopped at its max runtime of {}: Kueue deactivated its workload",
                    app::format::duration(s)
                ),
                None => "Stopped at its max runtime: Kueue deactivated its workload".to_string(),
            }
        } else if why.contains("AdmissionCheck") {
            // An admission check rejected it (Kueue 0.9 and later deactivate the workload;
            // earlier ones finished it, above), in Kueue's words when it gave them.
            let said = ["Evicted", "DeactivationTarget"]
                .into_iter()
                .filter_map(|k| condition(w, k))
                .find_map(|c| c["message"].as_str().filter(|m| !m.is_empty()));
            match said {
                Some(m) => format!("Rejected by an admission check: {m}"),
                None => "Rejected by an admission check".to_string(),
            }
        } else {
            format!("Kueue deactivated its workload ({why})")
        };
        // Admission checks are passed before a workload is admitted: one they rejected
        // never ran, unless an earlier admission of it did.
        let past_run_s = w["status"]["accumulatedPastExecutionTimeSeconds"]
            .as_i64()
            .unwrap_or(0);
        Phase::Finished {
            succeeded: false,
            message,
            ran: !why.contains("AdmissionCheck") || past_run_s > 0,
        }
    } else if is_true(w, "Admitted") {
        // Kueue reserves quota, then admits once the admission checks pass; the admission
        // time is that of `Admitted`, else of `QuotaReserved`.
        let Some(at) = true_since(w, "Admitted").or_else(|| true_since(w, "QuotaReserved")) else {
            tracing::error!(job.id = %job_id, workload = %name, "an admitted Workload without the time of its Admitted or QuotaReserved condition; skipped");
            return None;
        };
        if is_true(w, "PodsReady") {
            Phase::Running {
                at,
                nodes: nodes(w),
            }
        } else {
            Phase::Admitted {
                at,
                nodes: nodes(w),
            }
        }
    } else {
        let reason = condition(w, "QuotaReserved")
            .filter(|c| c["status"] == "False")
            .and_then(|c| c["message"].as_str())
            .filter(|m| !m.is_empty())
            .map(|m| format!("Kueue: {m}"))
            .unwrap_or_else(|| "Waiting for Kueue to consider it".to_string());
        Phase::Pending { reason }
    };
    let admitted_at = match &phase {
        Phase::Admitted { at, .. } | Phase::Running { at, .. } => Some(*at),
        _ => None,
    };
    let times = Times {
        admitted: true_since(w, "Admitted").or_else(|| true_since(w, "QuotaReserved")),
        running: true_since(w, "PodsReady").or(admitted_at),
        // A deactivated workload ended when it was evicted (or marked for it).
        finished: matches!(phase, Phase::Finished { .. })
            .then(|| {
                true_since(w, "Finished")
                    // At the quota's release when it ran to a deactivation, else when evicted.
                    .or_else(|| {
                        true_since(w, "Evicted").map(|e| evicted_at(w).map_or(e, |r| r.max(e)))
                    })
                    .or_else(|| true_since(w, "DeactivationTarget"))
                    .or_else(|| last_change(w))
            })
            .flatten(),
        evicted: evicted_at(w),
        last_change: last_change(w),
    };
    if matches!(phase, Phase::Finished { .. }) && times.finished.is_none() {
        tracing::error!(job.id = %job_id, workload = %name, "a finished Workload without the time of its Finished condition; skipped");
        return None;
    }
    let preempted = condition(w, "Preempted")
        .filter(|c| c["status"] == "True")
        .map(|c| preemption_sentence(c["reason"].as_str().unwrap_or_default()));
    let evicted = condition(w, "Evicted")
        .filter(|c| c["status"] == "True")
        .map(|c| eviction_sentence(c["reason"].as_str().unwrap_or_default()));
    Some(Observed {
        job_id,
        team,
        pool,
        gpus: gpus(w),
        priority,
        created_at,
        max_runtime_s: w["spec"]["maximumExecutionTimeSeconds"].as_u64(),
        past_run_s: w["status"]["accumulatedPastExecutionTimeSeconds"]
            .as_i64()
            .unwrap_or(0),
        owner_kind: owner["kind"].as_str().unwrap_or("JobSet").to_string(),
        phase,
        preempted,
        evicted,
        times,
    })
}
