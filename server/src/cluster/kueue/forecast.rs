//! When each queued workload would start if nothing new arrived: the cycles replayed over
//! the running jobs' ends.

use super::*;

/// When each pending workload would be admitted if nothing new arrived: running workloads end
/// at their max runtime, pending ones are admitted in order by the same rules (without
/// preemption, an approximation stated on the page: "about"). Workloads not admitted within
/// `horizon` get no estimate.
///
/// Each step is the pass [`Cohort::cycle`] makes without preemption, walked over the queue's
/// classes (team, GPUs) in queue order. Every workload of a class meets the same quota and room, and a class
/// that misses is out for the rest of the pass, so a class is only ever admitted from its
/// front: a cursor per class stands in for a copy of the queue that admitted workloads are
/// removed from. `forecast_matches_a_replay_of_admission_passes` checks the two agree.
pub fn forecast(
    cohort: &Cohort,
    queue: &Queue,
    ends: &WidMap<DateTime<Utc>>,
    runtime: impl Fn(Wid) -> i64,
    now: DateTime<Utc>,
    horizon: chrono::Duration,
) -> WidMap<DateTime<Utc>> {
    use std::collections::BinaryHeap;
    struct Class<'a> {
        team: TeamIdx,
        gpus: u32,
        head: Option<QueueKey>,
        rest: std::collections::btree_set::Iter<'a, QueueKey>,
    }
    let mut co = cohort.clone();
    let mut classes: Vec<Class> = queue
        .classes
        .iter()
        .map(|(&(team, gpus), keys)| {
            let mut rest = keys.iter();
            Class {
                team,
                gpus,
                head: rest.next().copied(),
                rest,
            }
        })
        .collect();
    let mut eta = WidMap::with_capacity_and_hasher(queue.len(), Default::default());
    let mut heap: BinaryHeap<Reverse<(DateTime<Utc>, Wid)>> = co
        .admitted
        .keys()
        .map(|id| Reverse((ends.get(id).copied().unwrap_or(now).max(now), *id)))
        .collect();
    let limit = now + horizon;
    let mut left = queue.len();
    let mut failed_team: Vec<u32> = Vec::new();
    let mut t = now;
    loop {
        // Scheduling cycles at `t`, as `Cohort::settle` runs them without preemption: the
        // head of each team (its best class not set aside), taken within nominal quota
        // first, then by priority and creation time.
        failed_team.clear();
        failed_team.resize(co.teams.len(), u32::MAX);
        loop {
            let mut heads: Vec<Option<(QueueKey, usize)>> = vec![None; co.teams.len()];
            for (i, cl) in classes.iter().enumerate() {
                let Some(k) = cl.head else { continue };
                if failed_team.get(cl.team).is_some_and(|&f| cl.gpus >= f) {
                    continue;
                }
                if let Some(h) = heads.get_mut(cl.team) {
                    if h.is_none_or(|(b, _)| k < b) {
                        *h = Some((k, i));
                    }
                }
            }
            let mut heads: Vec<(bool, QueueKey, usize)> = heads
                .into_iter()
                .flatten()
                .map(|(k, i)| {
                    let cl = &classes[i];
                    let borrows =
                        co.used[cl.team].saturating_add(cl.gpus) > co.quotas[cl.team].nominal;
                    (borrows, k, i)
                })
                .collect();
            if heads.is_empty() {
                break;
            }
            heads.sort();
            let mut productive = false;
            for (_, (Reverse(priority), submitted_at, id), i) in heads {
                let cl = &mut classes[i];
                let c = Candidate {
                    id,
                    team: cl.team,
                    gpus: cl.gpus,
                    priority,
                    submitted_at,
                };
                match co.try_fit(&c) {
                    Ok(p) => {
                        co.admit(&c, p, t);
                        eta.insert(id, t);
                        heap.push(Reverse((
                            t + chrono::Duration::seconds(runtime(id).max(1)),
                            id,
                        )));
                        cl.head = cl.rest.next().copied();
                        left -= 1;
                        productive = true;
                    }
                    // Under StrictFIFO the head blocks the rest of its team's queue.
                    Err(_) if co.quotas[cl.team].strategy == QueueingStrategy::StrictFifo => {
                        if let Some(f) = failed_team.get_mut(cl.team) {
                            *f = 0;
                        }
                    }
                    Err(_) => {
                        if let Some(f) = failed_team.get_mut(cl.team) {
                            if cl.gpus < *f {
                                *f = cl.gpus;
                                productive = true;
                            }
                        }
                    }
                }
            }
            if !productive {
                break;
            }
        }
        if left == 0 {
            break;
        }
        let Some(Reverse((next, _))) = heap.peek().copied() else {
            break;
        };
        if next > limit {
            break;
        }
        t = next;
        while let Some(Reverse((when, id))) = heap.peek().copied() {
            if when > t {
                break;
            }
            heap.pop();
            co.release(id);
        }
    }
    eta
}
