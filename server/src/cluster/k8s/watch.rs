//! The watches: Kueue Workloads and Gantry's JobSets/TrainJobs, mirrored in a Kueue state
//! model, each change turned into a cluster event with the time Kubernetes recorded.

use super::*;

/// The state changes between two sightings of a workload.
pub fn transitions(prev: Option<&Observed>, next: &Observed) -> Vec<Change> {
    let held = |p: Option<&Observed>| {
        matches!(
            p.map(|o| &o.phase),
            Some(Phase::Admitted { .. } | Phase::Running { .. })
        )
    };
    // Admitted later than the admission seen before: an eviction and an admission were
    // missed (the watch listed again after falling behind). Kueue keeps `Admitted` at the
    // latest admission, on a finished Workload too.
    let readmitted = held(prev)
        && prev.is_some_and(|p| {
            matches!(
                (p.times.admitted, next.times.admitted),
                (Some(before), Some(now)) if now > before
            )
        });
    match &next.phase {
        // Kueue evicts to preempt (its `Preempted` condition says so) and for reasons of its
        // own (pods not ready in time, a stopped queue, ...): only the first is a preemption.
        Phase::Pending { .. } if held(prev) => vec![match (&next.preempted, &next.evicted) {
            (Some(sentence), _) => Change::Preempted {
                reason: sentence.clone(),
            },
            (None, Some(sentence)) if !sentence.starts_with("Preempted") => Change::Evicted {
                reason: sentence.clone(),
            },
            (None, other) => Change::Preempted {
                reason: other
                    .clone()
                    .unwrap_or_else(|| "Evicted by Kueue; queued again".into()),
            },
        }],
        Phase::Pending { .. } => Vec::new(),
        Phase::Admitted { nodes, .. } if !held(prev) || readmitted => vec![Change::Admitted {
            nodes: nodes.clone(),
            past_run_s: Some(next.past_run_s),
        }],
        Phase::Admitted { .. } => Vec::new(),
        Phase::Running { nodes, .. } if readmitted => vec![
            Change::Admitted {
                nodes: nodes.clone(),
                past_run_s: Some(next.past_run_s),
            },
            Change::Running,
        ],
        Phase::Running { nodes, .. } => match prev.map(|p| &p.phase) {
            Some(Phase::Running { .. }) => Vec::new(),
            Some(Phase::Admitted { .. }) => vec![Change::Running],
            _ => vec![
                Change::Admitted {
                    nodes: nodes.clone(),
                    past_run_s: Some(next.past_run_s),
                },
                Change::Running,
            ],
        },
        Phase::Finished {
            succeeded,
            message,
            ran,
        } => match prev.map(|p| &p.phase) {
            Some(Phase::Finished { .. }) => Vec::new(),
            _ => {
                let reason = if message.is_empty() {
                    if *succeeded {
                        "Finished".to_string()
                    } else {
                        "Failed".to_string()
                    }
                } else {
                    message.clone()
                };
                let mut out = Vec::new();
                // Ended while Gantry was not watching, it was admitted first; unless it never
                // ran (an admission check rejected it): it fails from the queue. Kueue keeps
                // `Admitted` on a finished Workload, at its last admission: one later than the
                // admission seen before is an eviction and admission missed (a watch that
                // listed again), which the database repairs from `past_run_s`. Without an
                // admission to read, a success still ran (its admission stands at the end),
                // while a failure may never have (deactivated from the queue at its requeuing
                // limit): it fails from the queue, and no run is made up for it.
                let dated = next.times.admitted.is_some();
                if (!held(prev) || readmitted) && *ran && (dated || *succeeded) {
                    out.push(Change::Admitted {
                        nodes: Vec::new(),
                        // Without `Admitted` the change stands at the end (see change_time).
                        past_run_s: next.times.admitted.map(|_| next.past_run_s),
                    });
                }
                out.push(if *succeeded {
                    Change::Succeeded { reason }
                } else {
                    Change::Failed {
                        reason,
                        // Kueue's count, when the last run in it ended at this end: its quota
                        // released (`Admitted` false) at the time the failure is dated, as a
                        // deactivation of an admitted workload does. Otherwise (released
                        // earlier, or still admitted on a `Finished` workload) the end says
                        // nothing of where a missed run was: no count.
                        past_run_s: if next.times.evicted.is_some()
                            && next.times.evicted == next.times.finished
                        {
                            next.past_run_s
                        } else {
                            0
                        },
                    }
                });
                out
            }
        },
    }
}

/// When a change happened, from the Workload's conditions.
pub(super) fn change_time(change: &Change, o: &Observed) -> Option<DateTime<Utc>> {
    match change {
        // Admitted and finished while Gantry was away: no `Admitted` left to read, so the
        // run counts from the end (nothing is made up).
        Change::Admitted { .. } => o.times.admitted.or(o.times.finished),
        // Not before its admission (a `PodsReady` left from an earlier run).
        Change::Running => o
            .times
            .running
            .map(|r| o.times.admitted.map_or(r, |a| r.max(a))),
        Change::Succeeded { .. } | Change::Failed { .. } => o.times.finished,
        Change::Preempted { .. } | Change::Evicted { .. } => {
            o.times.evicted.or(o.times.last_change)
        }
        Change::Cancelled { .. } => o.times.last_change,
    }
}

impl KubeCluster {
    pub(super) fn mirror(&self) -> std::sync::MutexGuard<'_, Mirror> {
        self.mirror.lock().expect("mirror lock")
    }

    /// The watched state as the sim's rules see it: quotas, holders on nodes, the queue.
    pub(super) fn mirror_state(&self) -> KueueState {
        let m = self.mirror();
        // What the watch saw of a workload, as the sim's rules take it (the runtime from the
        // Workload, else from the submission).
        let spec_of = |o: &Observed| WorkloadSpec {
            job_id: o.job_id.clone(),
            team: o.team.clone(),
            pool: o.pool.clone(),
            gpus: o.gpus,
            priority: o.priority,
            submitted_at: o.created_at,
            max_runtime_s: o
                .max_runtime_s
                .or_else(|| m.submitted.get(&o.job_id).map(|s| s.0))
                .unwrap_or(0),
            run: RunSpec::default(),
        };
        let mut st = KueueState::new(&self.pools, GPUS_PER_NODE);
        for ((team, pool), q) in &m.quotas {
            let _ = st.set_quota(team, pool, *q);
        }
        let mut pending: Vec<&Observed> = Vec::new();
        for o in m.observed.values() {
            match &o.phase {
                Phase::Admitted { at, nodes } | Phase::Running { at, nodes } => {
                    let _ = st.put_admitted(RestoredWorkload {
                        spec: spec_of(o),
                        admitted_at: *at,
                        nodes: nodes.clone(),
                        running: matches!(o.phase, Phase::Running { .. }),
                        past_run_s: o.past_run_s,
                    });
                }
                Phase::Pending { .. } => pending.push(o),
                Phase::Finished { .. } => {}
            }
        }
        pending.sort_by_key(|o| (std::cmp::Reverse(o.priority.value()), o.created_at));
        for o in pending {
            let _ = st.enqueue_with_past(spec_of(o), o.past_run_s);
        }
        st
    }

    pub(super) fn emit(&self, pool: &str, job_id: &str, at: DateTime<Utc>, changes: Vec<Change>) {
        let mut subs = self.subscribers.lock().expect("subscribers lock");
        for change in changes {
            let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
            let ev = ClusterEvent {
                seq,
                job_id: job_id.to_string(),
                pool: pool.to_string(),
                at,
                change,
            };
            subs.retain(|s| s.send(ev.clone()).is_ok());
        }
    }

    /// Takes in one Workload as the watch saw it and reports what changed, each change at
    /// the time its condition records. The mirror stays locked until the changes are sent,
    /// so a reader of [`Cluster::workloads`] never sees a state whose events are still to come.
    /// Returns the job id the Workload is of, if it is one of Gantry's.
    pub fn observe(&self, workload: &Value) -> Option<String> {
        let next = status::observe(workload, &self.settings.namespace_prefix)?;
        let job_id = next.job_id.clone();
        let mut m = self.mirror();
        let prev = m.observed.insert(next.job_id.clone(), next.clone());
        if matches!(next.phase, Phase::Finished { .. }) {
            m.verdicts.remove(&next.job_id);
        }
        let mut timed = Vec::new();
        for change in transitions(prev.as_ref(), &next) {
            match change_time(&change, &next) {
                Some(at) => timed.push((at, change)),
                None => {
                    tracing::error!(job.id = %next.job_id, change = ?change, "the Workload does not say when this happened; the change is not recorded")
                }
            }
        }
        self.emit_timed(&next.pool, &next.job_id, timed);
        drop(m);
        Some(job_id)
    }

    /// After the watch listed every Workload again: it does so when it fell too far behind
    /// (the API server's 410 Gone), and a Workload deleted in the gap sends no `Delete`; the
    /// list is the truth. Each Workload the mirror holds that the list did not is forgotten,
    /// and a job that had not finished ends as cancelled, now (its deletion time went with
    /// it). Without this the mirror kept it as it last was: a running job ran on forever.
    pub fn forget_unlisted(&self, listed: &std::collections::HashSet<String>) {
        let now = Utc::now();
        let mut m = self.mirror();
        let gone: Vec<String> = m
            .observed
            .keys()
            .filter(|id| !listed.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            let Some(prev) = m.observed.remove(&id) else {
                continue;
            };
            let verdict = m.verdicts.remove(&id);
            if matches!(prev.phase, Phase::Finished { .. }) {
                continue;
            }
            // Its job object's verdict, when it has one: finished, then collected by Kueue
            // in the gap. Else the workload was deleted, and the job with it.
            if let Some((pool, changes)) = verdict {
                tracing::warn!(job.id = %id, "its Workload was gone when the watch listed again; the job ends by its job object's verdict");
                self.emit_timed(&pool, &id, changes);
                continue;
            }
            tracing::warn!(job.id = %id, "its Workload was not in the cluster when the watch listed again; the job ends as cancelled");
            self.emit(
                &prev.pool,
                &id,
                now,
                vec![Change::Cancelled {
                    reason: "Its workload was gone from the cluster when Gantry listed the workloads again".into(),
                }],
            );
        }
        drop(m);
    }

    /// One event of the Workload watch; `relisted` gathers the job ids of a list in progress.
    pub fn on_workload_event(
        &self,
        ev: watcher::Event<DynamicObject>,
        relisted: &mut Option<std::collections::HashSet<String>>,
    ) {
        match ev {
            watcher::Event::Init => *relisted = Some(Default::default()),
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                self.reachable.store(true, Ordering::Relaxed);
                if let Ok(v) = serde_json::to_value(&o) {
                    if let (Some(id), Some(listed)) = (self.observe(&v), relisted.as_mut()) {
                        listed.insert(id);
                    }
                }
            }
            watcher::Event::Delete(o) => {
                if let Ok(v) = serde_json::to_value(&o) {
                    self.forget(&v);
                }
            }
            watcher::Event::InitDone => {
                if let Some(listed) = relisted.take() {
                    self.forget_unlisted(&listed);
                }
                self.workloads_listed();
                self.listed.store(true, Ordering::SeqCst);
            }
        }
    }

    /// A Workload deleted in the cluster: a job that had not finished ends as its last state
    /// says when that is finished, else by its job object's verdict when that has one, else
    /// as cancelled at its `deletionTimestamp` (else its last recorded change).
    pub fn forget(&self, workload: &Value) {
        let Some(gone) = status::observe(workload, &self.settings.namespace_prefix) else {
            return;
        };
        let mut m = self.mirror();
        let prev = m.observed.remove(&gone.job_id);
        let verdict = m.verdicts.remove(&gone.job_id);
        let Some(prev) = prev.filter(|p| !matches!(p.phase, Phase::Finished { .. })) else {
            return;
        };
        if matches!(gone.phase, Phase::Finished { .. }) {
            // Its last state says it finished: that, as if seen before the deletion.
            let timed = transitions(Some(&prev), &gone)
                .into_iter()
                .filter_map(|c| change_time(&c, &gone).map(|at| (at, c)))
                .collect();
            self.emit_timed(&gone.pool, &gone.job_id, timed);
        } else if let Some((pool, changes)) = verdict {
            // Its job object ended first (the Workload's own end not seen yet).
            self.emit_timed(&pool, &gone.job_id, changes);
        } else {
            let Some(at) = status::deleted_at(workload) else {
                tracing::error!(job.id = %gone.job_id, "a deleted Workload without a deletion or condition time; the cancel is not recorded");
                return;
            };
            self.emit(
                &gone.pool,
                &gone.job_id,
                at,
                vec![Change::Cancelled {
                    reason: "Its workload was deleted in the cluster".into(),
                }],
            );
        }
        drop(m);
    }

    pub(super) fn emit_timed(
        &self,
        pool: &str,
        job_id: &str,
        changes: Vec<(DateTime<Utc>, Change)>,
    ) {
        for (at, change) in changes {
            self.emit(pool, job_id, at, vec![change]);
        }
    }

    /// Watches every Kueue Workload (with backoff on errors) until the task is dropped.
    pub fn spawn_watch(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let api: Api<DynamicObject> = Api::all_with(me.client.clone(), &workload_resource());
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut relisted = None;
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(ev) => me.on_workload_event(ev, &mut relisted),
                    Err(e) => {
                        me.reachable.store(false, Ordering::Relaxed);
                        tracing::warn!(error = %e, "watching Kueue workloads failed; retrying with backoff");
                    }
                }
            }
        })
    }

    /// Watches Gantry's own JobSets (and TrainJobs when `kube.trainer` is on): a job object
    /// deleted in the cluster ends its job as cancelled, and its own verdict ends it when its
    /// Workload is already gone.
    pub fn spawn_job_watches(self: &Arc<Self>) -> Vec<tokio::task::JoinHandle<()>> {
        self.job_kinds()
            .into_iter()
            .map(|ar| {
                let me = Arc::clone(self);
                tokio::spawn(async move {
                    let api: Api<DynamicObject> = Api::all_with(me.client.clone(), &ar);
                    let cfg = watcher::Config::default().labels("app.kubernetes.io/managed-by=gantry");
                    let mut events = watcher(api, cfg).default_backoff().boxed();
                    let mut counted = false;
                    while let Some(ev) = events.next().await {
                        match ev {
                            Ok(watcher::Event::InitDone) if !counted => {
                                counted = true;
                                me.jobs_listed.fetch_add(1, Ordering::SeqCst);
                            }
                            // Not served (its CRD is not installed: Kubeflow Trainer is
                            // optional) or not allowed: nothing of this kind can be sent or
                            // seen, so the comparison does not wait for its list. The watch
                            // keeps trying, and a later list is taken in as it comes.
                            Err(watcher::Error::InitialListFailed(kube::Error::Api(st)))
                                if !counted && (st.code == 404 || st.code == 403) =>
                            {
                                counted = true;
                                me.jobs_listed.fetch_add(1, Ordering::SeqCst);
                                tracing::error!(kind = %ar.kind, code = st.code, "the cluster does not serve or allow Gantry's job objects of this kind; templates of this kind cannot run here (the watch keeps trying)");
                            }
                            Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => {
                                if let Ok(v) = serde_json::to_value(&o) {
                                    me.observe_job_object(&v, false);
                                }
                            }
                            Ok(watcher::Event::Delete(o)) => {
                                if let Ok(v) = serde_json::to_value(&o) {
                                    me.observe_job_object(&v, true);
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(kind = %ar.kind, error = %e, "watching Gantry's job objects failed; retrying with backoff")
                            }
                        }
                    }
                })
            })
            .collect()
    }

    /// The job-object kinds Gantry watches: JobSets, and TrainJobs when `kube.trainer` is on.
    pub(super) fn job_kinds(&self) -> Vec<ApiResource> {
        let mut kinds = vec![resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")];
        if self.settings.trainer {
            kinds.push(resource(
                "trainer.kubeflow.org",
                "v1alpha1",
                "TrainJob",
                "trainjobs",
            ));
        }
        kinds
    }

    /// A JobSet or TrainJob as its watch saw it (or its deletion). Until the Workload watch
    /// has listed, whether the job's Workload exists is not known: the object waits for that
    /// list (the latest sighting of each job), then counts as if seen after it.
    pub fn observe_job_object(&self, obj: &Value, deleted: bool) {
        let Some(job_id) = obj["metadata"]["labels"][objects::JOB_ID_LABEL]
            .as_str()
            .map(str::to_string)
        else {
            return;
        };
        let mut m = self.mirror();
        if !m.workloads_listed {
            m.deferred.insert(job_id, (obj.clone(), deleted));
            return;
        }
        self.job_object_changes(&mut m, &job_id, obj, deleted);
        drop(m);
    }

    /// The job objects seen before the Workload watch's first list, taken in once it is
    /// complete (the mirror stays locked, so no later sighting of the same job comes first).
    pub(super) fn workloads_listed(&self) {
        let mut m = self.mirror();
        m.workloads_listed = true;
        for (job_id, (obj, deleted)) in std::mem::take(&mut m.deferred) {
            self.job_object_changes(&mut m, &job_id, &obj, deleted);
        }
        drop(m);
    }

    /// Reports what a job object says that its Workload does not: its own verdict when the
    /// mirror holds no Workload of the job, or its deletion. A verdict is kept in the mirror
    /// too, for the job's Workload going away unfinished (see [`KubeCluster::forget`]). A
    /// deleted object that had a verdict ended by it, not by the deletion.
    fn job_object_changes(&self, m: &mut Mirror, job_id: &str, obj: &Value, deleted: bool) {
        let pool = obj["metadata"]["labels"]["gantry.dev/pool"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let verdict = verdict_changes(job_id, obj);
        let seen = m.observed.get(job_id);
        if seen.is_some_and(|o| matches!(o.phase, Phase::Finished { .. })) {
            return;
        }
        // Kept only while it may be needed: its Workload is there and has not finished (the
        // Workload finishing or going takes it out; see `observe`, `forget`).
        if let (Some(v), Some(_)) = (&verdict, seen) {
            m.verdicts
                .insert(job_id.to_string(), (pool.clone(), v.clone()));
        }
        let changes = match verdict {
            // The Workload speaks for it while there is one.
            Some(_) if seen.is_some() => return,
            Some(v) => v,
            None if deleted => {
                let kind = obj["kind"].as_str().unwrap_or("JobSet");
                let Some(at) = status::deleted_at(obj) else {
                    tracing::error!(job.id = %job_id, %kind, "a deleted job object without a deletion or condition time; the cancel is not recorded");
                    return;
                };
                vec![(
                    at,
                    Change::Cancelled {
                        reason: format!("Its {kind} was deleted in the cluster"),
                    },
                )]
            }
            None => return,
        };
        self.emit_timed(&pool, job_id, changes);
    }
}

/// A job object's own verdict, when it has one, as the changes it makes, each at its time:
/// the admission it implies (a job object under Kueue is created suspended, so one that ran
/// was admitted first), then its end. The admission is dated by its `Suspended` condition
/// turning false (the JobSet controller resumed it once Kueue admitted it); else a success
/// has it at the end (nothing is made up) and a failure has none (it may have failed from
/// the queue). Either way it is undated for Kueue's purposes (`past_run_s: None`): a job the
/// database holds as admitted keeps its own admission.
fn verdict_changes(job_id: &str, obj: &Value) -> Option<TimedChanges> {
    let o = status::job_object_outcome(obj)?;
    let kind = obj["kind"].as_str().unwrap_or("JobSet");
    // The condition that gave the verdict, else the object's own latest time.
    let Some(at) = o.at.or_else(|| status::deleted_at(obj)) else {
        tracing::error!(job.id = %job_id, %kind, "the job object does not say when it ended; its end is not recorded");
        return None;
    };
    let said = if o.message.is_empty() {
        String::new()
    } else {
        format!(": {}", o.message)
    };
    let verdict = if o.succeeded {
        Change::Succeeded {
            reason: format!("The {kind} completed{said}"),
        }
    } else {
        Change::Failed {
            reason: format!("The {kind} failed{said}"),
            // A job object does not keep Kueue's count.
            past_run_s: 0,
        }
    };
    let admitted = match status::resumed_at(obj).filter(|r| *r <= at) {
        Some(resumed) => Some(resumed),
        // A success ran; a failure without a resume may not have (it fails from the queue).
        None => o.succeeded.then_some(at),
    };
    let mut out = Vec::new();
    if let Some(a) = admitted {
        out.push((
            a,
            Change::Admitted {
                nodes: Vec::new(),
                past_run_s: None,
            },
        ));
    }
    out.push((at, verdict));
    Some(out)
}
