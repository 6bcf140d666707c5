//! Preemption as Kueue's `classicalPreemptions`: the candidates a workload may evict
//! (its team's lower priorities, borrowers in the cohort when it fits within nominal), the
//! minimal set, and `fillBackWorkloads`.

use super::*;

impl Cohort {
    /// Kueue's classical preemption (`preemption.go` `classicalPreemptions`, with
    /// `withinClusterQueue: LowerPriority`, `reclaimWithinCohort: Any` and no
    /// `borrowWithinCohort`): the victims that would let `c` in, or `None`.
    ///
    /// - Candidates: the team's own lower-priority workloads; and, from teams holding more
    ///   than their nominal quota, any workload. The latter are "hierarchical reclaim"
    ///   candidates when `c` fits within its own nominal quota (usage + request ≤ nominal),
    ///   otherwise candidates that may only be taken if `c` then fits without borrowing.
    /// - Order (`CandidatesOrdering`): other teams first, lower priority first, most recently
    ///   admitted first.
    /// - Attempts: with borrowing allowed, then without (or the other way round when `c`
    ///   needs to borrow but its team is under nominal), each removing candidates in order
    ///   until `c` fits; another team's workload stops being a candidate once that team is
    ///   back within its nominal quota.
    /// - The set is then made minimal (`fillBackWorkloads`): from the second-to-last victim
    ///   back to the first, a victim whose return still leaves room is put back.
    pub fn preemption_targets(&self, c: &Candidate) -> Option<Vec<(Wid, PreemptCause)>> {
        let t = c.team;
        let q = self.quotas[t];
        let used = self.used[t];
        let advantage = used.saturating_add(c.gpus) <= q.nominal;
        // Equal reservation times (Kueue's are whole seconds) fall back to the later
        // workload first, where Kueue compares UIDs.
        let order = |a: &&Admitted, b: &&Admitted| {
            a.priority
                .cmp(&b.priority)
                .then(b.admitted_at.cmp(&a.admitted_at))
                .then(b.id.cmp(&a.id))
        };
        let mut others: Vec<&Admitted> = self
            .admitted
            .values()
            .filter(|a| a.team != t && self.used[a.team] > self.quotas[a.team].nominal)
            .collect();
        others.sort_by(order);
        let mut same: Vec<&Admitted> = self
            .admitted
            .values()
            .filter(|a| a.team == t && a.priority < c.priority)
            .collect();
        same.sort_by(order);
        if others.is_empty() && same.is_empty() {
            return None;
        }
        let attempts: &[bool] = if others.is_empty() || used >= q.nominal {
            &[true]
        } else if !advantage {
            &[false, true]
        } else {
            &[true, false]
        };
        let by_team = self.teams[t].clone();
        for &allow_borrowing in attempts {
            // A simulated removal: the nodes and the teams' use, not the whole cohort.
            let mut cap = self.capacity.clone();
            let mut used = self.used.clone();
            let mut victims: Vec<&Admitted> = Vec::new();
            let mut fits = false;
            for a in others.iter().chain(same.iter()) {
                if a.team != t {
                    // A candidate that may only be taken without borrowing is not valid in
                    // an attempt that allows borrowing; nor once its team is within nominal.
                    if allow_borrowing && !advantage {
                        continue;
                    }
                    if used[a.team] <= self.quotas[a.team].nominal {
                        continue;
                    }
                }
                cap.release(&a.placement);
                used[a.team] -= a.gpus;
                victims.push(a);
                if self.fits_with(&cap, &used, c, allow_borrowing) {
                    fits = true;
                    break;
                }
            }
            if !fits {
                continue;
            }
            // fillBackWorkloads: in reverse, skipping the last, put back what is not needed.
            let mut i = victims.len().saturating_sub(1);
            while i > 0 {
                i -= 1;
                let v = victims[i];
                cap.allocate(&v.placement);
                used[v.team] += v.gpus;
                if self.fits_with(&cap, &used, c, allow_borrowing) {
                    victims.swap_remove(i);
                } else {
                    cap.release(&v.placement);
                    used[v.team] -= v.gpus;
                }
            }
            return Some(
                victims
                    .into_iter()
                    .map(|a| {
                        let cause = if a.team == t {
                            PreemptCause::Priority {
                                by_team: by_team.clone(),
                            }
                        } else {
                            PreemptCause::Reclaim {
                                by_team: by_team.clone(),
                            }
                        };
                        (a.id, cause)
                    })
                    .collect(),
            );
        }
        None
    }
}
