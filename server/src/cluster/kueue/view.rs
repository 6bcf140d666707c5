//! What the sim shows of its state: each pool's queue with positions, reasons and ETAs, the
//! pools' use, and whether a workload would fit now.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::cluster::{
    Admissibility, ClusterError, PendingWorkload, PoolStatus, QuotaSpec, Result, TeamUse,
    WorkloadSpec,
};

/// Why a pending workload waits, as a sentence, and whether it can ever start as things are.
pub(super) fn explain(co: &Cohort, c: &Candidate) -> (String, bool) {
    match co.evaluate(c) {
        Ok(_) => ("Being admitted".to_string(), false),
        Err(b) => (b.sentence(), b.is_permanent()),
    }
}

impl KueueState {
    /// The pending workloads of a pool, in order, with why each waits and when it would start.
    pub fn view(&mut self, pool: &str, now: DateTime<Utc>) -> Result<Arc<Vec<PendingWorkload>>> {
        if let Some(v) = self.views.get(pool) {
            return Ok(v.clone());
        }
        let co = self
            .cohorts
            .get(pool)
            .ok_or_else(|| ClusterError::UnknownPool(pool.to_string()))?;
        let queue = &self.queues[pool];
        // Why each waits, from the present state (the last settle admitted all it could).
        // Nothing is admitted between the workloads of a dry pass, so a workload's reason
        // depends only on its team and size: explain each class once. Behind the head of a
        // team whose queue is StrictFIFO, the reason is the head.
        let mut by_class: HashMap<(usize, u32), (String, bool)> = HashMap::new();
        let mut by_workload: WidMap<(String, bool)> = WidMap::default();
        let mut seen: HashMap<usize, u32> = HashMap::new();
        for c in queue.iter() {
            let before = seen.entry(c.team).or_default();
            let strict = co.quotas[c.team].strategy == QueueingStrategy::StrictFifo;
            if strict && *before > 0 {
                let b = Blocker::StrictFifo {
                    team: co.teams[c.team].clone(),
                    pool: pool.to_string(),
                    ahead: *before,
                };
                by_workload.insert(c.id, (b.sentence(), false));
            } else {
                by_class
                    .entry((c.team, c.gpus))
                    .or_insert_with(|| explain(co, c));
            }
            *before += 1;
        }
        let ends: WidMap<DateTime<Utc>> = co
            .admitted
            .values()
            .map(|a| (a.id, self.ends_at(a.id, a.admitted_at)))
            .collect();
        let eta = forecast(
            co,
            queue,
            &ends,
            |id| self.run_left_s(id),
            now,
            Duration::days(ETA_HORIZON_DAYS),
        );
        let mut per_team: HashMap<&str, u32> = HashMap::new();
        let mut list = Vec::with_capacity(queue.len());
        for (pos, c) in queue.iter().enumerate() {
            let spec = &self.specs[&c.id];
            let team_pos = per_team.entry(spec.team.as_str()).or_default();
            *team_pos += 1;
            let explained = by_workload
                .get(&c.id)
                .or_else(|| by_class.get(&(c.team, c.gpus)));
            let (reason, never) = explained
                .cloned()
                .unwrap_or_else(|| ("Being admitted".to_string(), false));
            list.push(PendingWorkload {
                job_id: spec.job_id.clone(),
                team: spec.team.clone(),
                gpus: spec.gpus,
                priority: spec.priority,
                submitted_at: spec.submitted_at,
                position_in_pool: pos as u32 + 1,
                position_in_team: *team_pos,
                reason,
                eta: if never { None } else { eta.get(&c.id).copied() },
            });
        }
        let view = Arc::new(list);
        self.views.insert(pool.to_string(), view.clone());
        Ok(view)
    }

    pub fn pools(&self) -> Vec<PoolStatus> {
        self.cohorts
            .values()
            .map(|co| {
                let teams = co
                    .teams
                    .iter()
                    .enumerate()
                    .map(|(i, t)| TeamUse {
                        team: t.clone(),
                        quota: QuotaSpec {
                            nominal: co.quotas[i].nominal,
                            borrowing_limit: co.quotas[i].borrowing_limit,
                            lending_limit: co.quotas[i].lending_limit,
                            strategy: Some(co.quotas[i].strategy),
                        },
                        used: co.used[i],
                        borrowed: co.borrowed(i),
                    })
                    .collect();
                PoolStatus {
                    name: co.pool().to_string(),
                    gpu_model: self.gpu_models.get(co.pool()).cloned().unwrap_or_default(),
                    nodes: co.capacity.nodes.len() as u32,
                    gpus_total: co.capacity.total(),
                    gpus_allocated: co.capacity.total() - co.capacity.free(),
                    free_nodes: co.capacity.free_whole_nodes(),
                    pending: self.queues[co.pool()].len() as u32,
                    teams,
                }
            })
            .collect()
    }

    /// What a workload submitted now would meet.
    pub fn check(&mut self, w: &WorkloadSpec, now: DateTime<Utc>) -> Result<Admissibility> {
        let co = self
            .cohorts
            .get(&w.pool)
            .ok_or_else(|| ClusterError::UnknownPool(w.pool.clone()))?;
        let mut co = co.clone();
        let mut queue = self.queues[&w.pool].clone();
        let probe = Wid::MAX;
        // The probe sorts after every real workload of its priority, as a new launch would.
        let latest = queue
            .iter()
            .map(|c| c.submitted_at)
            .max()
            .unwrap_or(now)
            .max(now);
        queue.push(Candidate {
            id: probe,
            team: co.team(&w.team),
            gpus: w.gpus,
            priority: w.priority.value(),
            submitted_at: latest,
        });
        let probe_c = queue.get(probe).cloned().expect("probe queued");
        let admitted = co
            .settle(&mut queue, now, true)
            .iter()
            .any(|d| matches!(d, Decision::Admit(id, _) if *id == probe));
        if admitted {
            return Ok(Admissibility {
                fits_now: true,
                ahead: 0,
                reason: None,
                never: false,
                eta: Some(now),
            });
        }
        let ahead_in_team = queue
            .iter()
            .take_while(|c| c.id != probe)
            .filter(|c| c.team == probe_c.team)
            .count() as u32;
        let blocker = if co.quotas[probe_c.team].strategy == QueueingStrategy::StrictFifo
            && ahead_in_team > 0
        {
            Some(Blocker::StrictFifo {
                team: w.team.clone(),
                pool: w.pool.clone(),
                ahead: ahead_in_team,
            })
        } else {
            co.evaluate(&probe_c).err()
        };
        let ahead = queue.iter().take_while(|c| c.id != probe).count() as u32;
        let never = blocker.as_ref().is_some_and(Blocker::is_permanent);
        let ends: WidMap<DateTime<Utc>> = co
            .admitted
            .values()
            .map(|a| (a.id, self.ends_at(a.id, a.admitted_at)))
            .collect();
        let eta = if never {
            None
        } else {
            forecast(
                &co,
                &queue,
                &ends,
                |id| match id {
                    Wid::MAX => w.max_runtime_s as i64,
                    _ => self.run_left_s(id),
                },
                now,
                Duration::days(ETA_HORIZON_DAYS),
            )
            .get(&probe)
            .copied()
        };
        Ok(Admissibility {
            fits_now: false,
            ahead,
            reason: blocker.map(|b| b.sentence()),
            never,
            eta,
        })
    }
}
