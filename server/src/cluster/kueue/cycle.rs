//! One scheduling cycle as Kueue's scheduler runs it: the head of each team's queue,
//! nominated against the cycle's start, within-nominal before borrowing, then priority and
//! time; each entry re-checked against the cycle so far.

use super::*;

impl Cohort {
    /// Kueue's flavor assignment for one head (`fitsResourceQuota`): fits now, fits after
    /// preempting, or not at all.
    pub fn nominate(&self, c: &Candidate) -> Mode {
        if c.gpus > self.capacity.total() {
            return Mode::NoFit;
        }
        let t = c.team;
        match self.quota_status(t, c.gpus) {
            QuotaStatus::TooLarge { .. } => return Mode::NoFit,
            // Quota fits: admitted where the nodes have room, else it waits for room.
            // Preemption is for quota only, as in Kueue (without Topology Aware Scheduling
            // preemption); evicting for room alone could flap between teams.
            QuotaStatus::Fits { borrows } => {
                return match self.capacity.place(c.gpus) {
                    Some(p) => Mode::Fit {
                        placement: p,
                        borrows,
                    },
                    None => Mode::NoFit,
                };
            }
            QuotaStatus::BorrowingLimit { .. } | QuotaStatus::Cohort => {
                // Preemption is considered only for a request within the nominal quota
                // (without `borrowWithinCohort`, which Gantry does not offer).
                if c.gpus > self.quotas[t].nominal {
                    return Mode::NoFit;
                }
            }
        }
        match self.preemption_targets(c) {
            Some(targets) => {
                let own: u32 = targets
                    .iter()
                    .filter_map(|(id, _)| self.admitted.get(id))
                    .filter(|a| a.team == t)
                    .map(|a| a.gpus)
                    .sum();
                let borrows = (self.used[t] - own).saturating_add(c.gpus) > self.quotas[t].nominal;
                Mode::Preempt { targets, borrows }
            }
            None => Mode::NoFit,
        }
    }

    /// One Kueue scheduling cycle (`scheduler.go` `schedule`) over the heads of the teams'
    /// queues: each head is nominated against the state at the start of the cycle, the
    /// entries are taken in Kueue's order (within nominal quota before borrowing, then
    /// priority, then creation time), and each is checked again against what the cycle has
    /// done so far. A workload that needs preemption only evicts its victims in this cycle
    /// (it is admitted in a later one, once they are gone), and a workload admitted in a
    /// cycle is never a victim in the same cycle: victims are chosen at nomination.
    ///
    /// A workload waiting for its victims to go gets no place ahead of the others
    /// ([`entry_order`]): that is Kueue's `PrioritizePreemptorWorkloads` gate, alpha and off
    /// by default. A borrower of higher priority may take the quota it freed first, as in
    /// Kueue; the preemptor then waits, like any head, until quota frees up.
    pub fn schedule(&mut self, heads: &[Candidate], at: DateTime<Utc>) -> Cycle {
        let mut entries: Vec<(&Candidate, Mode)> =
            heads.iter().map(|c| (c, self.nominate(c))).collect();
        entries.sort_by(|(a, ma), (b, mb)| entry_order((a, ma.borrows()), (b, mb.borrows())));
        let mut out = Cycle::default();
        let mut victims: std::collections::HashSet<Wid> = Default::default();
        // Quota and nodes held for preemptors until the end of the cycle.
        let mut reserved: Vec<(TeamIdx, u32, Option<Placement>)> = Vec::new();
        for (c, mode) in entries {
            match mode {
                Mode::NoFit => out.unschedulable.push(c.id),
                Mode::Fit { .. } => match self.capacity.place(c.gpus) {
                    Some(p) if self.fits(c, true) => {
                        self.admit(c, p.clone(), at);
                        out.admitted.push((c.id, p));
                    }
                    _ => out.skipped.push(c.id),
                },
                Mode::Preempt { targets, .. } => {
                    // Targets another preemptor of this cycle took: chosen again against the
                    // cycle so far (its victims gone, earlier preemptors' usage held), as
                    // Kueue's `RecomputeAssignmentUponPreemptionTargetsOverlap` (beta, on by
                    // default) does. If it fits once they are gone, it holds its usage and
                    // waits for them (Kueue's `DeferredFit`); with other victims it evicts
                    // those now; otherwise it is skipped. Workloads admitted in this cycle are
                    // not victims: Kueue's candidates are what the cycle's snapshot holds.
                    let targets = if targets.iter().any(|(id, _)| victims.contains(id)) {
                        let recomputed = if self.fits(c, true) {
                            Some(Vec::new())
                        } else {
                            self.preemption_targets(c).filter(|t| {
                                !t.is_empty()
                                    && !t
                                        .iter()
                                        .any(|(id, _)| out.admitted.iter().any(|(a, _)| a == id))
                            })
                        };
                        match recomputed {
                            Some(t) => t,
                            None => {
                                out.skipped.push(c.id);
                                continue;
                            }
                        }
                    } else {
                        targets
                    };
                    let removed: Vec<Admitted> = targets
                        .iter()
                        .filter_map(|(id, _)| self.release(*id))
                        .collect();
                    if !self.fits(c, true) {
                        for a in &removed {
                            self.admit_admitted(a);
                        }
                        out.skipped.push(c.id);
                        continue;
                    }
                    // Kueue adds the preemptor's usage to the cycle's snapshot, so later
                    // entries cannot take what its victims free.
                    let q = self.quotas[c.team];
                    let headroom = if self.used[c.team].saturating_add(c.gpus) > q.nominal {
                        q.borrowing_limit.map_or(c.gpus, |l| {
                            (q.nominal + l)
                                .saturating_sub(self.used[c.team])
                                .min(c.gpus)
                        })
                    } else {
                        c.gpus
                    };
                    let p = self.capacity.place(c.gpus);
                    if let Some(p) = &p {
                        self.capacity.allocate(p);
                    }
                    self.used[c.team] += headroom;
                    reserved.push((c.team, headroom, p));
                    for (id, cause) in targets {
                        victims.insert(id);
                        out.preempted.push((id, cause));
                    }
                    out.evicted.extend(removed);
                    out.preempting.push(c.id);
                }
            }
        }
        for (team, gpus, p) in reserved {
            self.used[team] -= gpus;
            if let Some(p) = p {
                self.capacity.release(&p);
            }
        }
        out
    }

    /// The head of each team's queue, as Kueue's queue manager hands them to a cycle: the
    /// first pending workload of the team; under `BestEffortFIFO` skipping what was found
    /// inadmissible since the last release (`failed[team]`: the smallest such request; any
    /// later request of the team at least that large fails too, as quota and room only
    /// shrink until something is released and the queue runs by falling priority).
    ///
    /// A workload that issued preemptions stays its team's head while it waits for its
    /// victims (`preemptors[team]`; Kueue's queue manager keeps it "sticky at the head" under
    /// BestEffortFIFO, and under StrictFIFO it is the head anyway), so the workloads it
    /// evicted cannot take back the room before it. It stops being one when it is admitted or
    /// found unschedulable.
    pub fn heads(
        &self,
        queue: &Queue,
        failed: &[u32],
        preemptors: &[Option<Wid>],
    ) -> Vec<Candidate> {
        let mut best: Vec<Option<QueueKey>> = vec![None; self.teams.len()];
        for (team, p) in preemptors.iter().enumerate() {
            if let (Some(id), Some(b)) = (p, best.get_mut(team)) {
                if let Some(c) = queue.get(*id) {
                    *b = Some(c.key());
                }
            }
        }
        for (&(team, gpus), keys) in &queue.classes {
            if preemptors
                .get(team)
                .is_some_and(|p| p.is_some_and(|id| queue.get(id).is_some()))
            {
                continue;
            }
            let strict = self
                .quotas
                .get(team)
                .is_some_and(|q| q.strategy == QueueingStrategy::StrictFifo);
            if !strict && gpus >= failed.get(team).copied().unwrap_or(u32::MAX) {
                continue;
            }
            if let (Some(k), Some(b)) = (keys.iter().next(), best.get_mut(team)) {
                if b.is_none_or(|b| *k < b) {
                    *b = Some(*k);
                }
            }
        }
        best.into_iter()
            .flatten()
            .map(|k| queue.items[&k].clone())
            .collect()
    }

    /// Scheduling cycles at `at` until one changes nothing, as Kueue's scheduler runs while
    /// its queues have heads: admitted workloads leave `queue`, evicted ones go back to it
    /// (with their creation time), and under `BestEffortFIFO` an inadmissible head steps
    /// aside for the next until something is released. `preemption: false` leaves every
    /// admitted workload in place (the ETA forecast).
    pub fn settle(
        &mut self,
        queue: &mut Queue,
        at: DateTime<Utc>,
        preemption: bool,
    ) -> Vec<Decision> {
        let mut out = Vec::new();
        let mut failed: Vec<u32> = vec![u32::MAX; self.teams.len()];
        let mut preemptors: Vec<Option<Wid>> = vec![None; self.teams.len()];
        let mut returning: Vec<Candidate> = Vec::new();
        // Each productive cycle admits, evicts or sets one head aside: bounded by the queue.
        let mut budget = 4 * (queue.len() + self.admitted.len()) + 16;
        loop {
            failed.resize(self.teams.len(), u32::MAX);
            preemptors.resize(self.teams.len(), None);
            let mut heads = self.heads(queue, &failed, &preemptors);
            // An evicted workload goes back in line with its creation time (Kueue's
            // `GetQueueOrderTimestamp`), so under StrictFIFO it is its team's head again and
            // blocks the rest of its queue. It is out of play until this settle ends (the
            // sim's stand-in for the time an eviction takes), but a later workload of its
            // team must not be admitted meanwhile: in Kueue that happens only in a race its
            // maintainers call a priority inversion (kueue#8141).
            heads.retain(|h| {
                self.quotas[h.team].strategy != QueueingStrategy::StrictFifo
                    || !returning
                        .iter()
                        .any(|r| r.team == h.team && r.key() < h.key())
            });
            if heads.is_empty() || budget == 0 {
                if budget == 0 {
                    tracing::warn!(pool = %self.capacity.name, "admission did not settle; stopping the pass");
                }
                break;
            }
            budget -= 1;
            let cycle = if preemption {
                self.schedule(&heads, at)
            } else {
                self.schedule_without_preemption(&heads, at)
            };
            let released = !cycle.preempted.is_empty();
            let mut productive = !cycle.admitted.is_empty() || released;
            for (id, p) in cycle.admitted {
                if let Some(c) = queue.remove(id) {
                    if preemptors[c.team] == Some(id) {
                        preemptors[c.team] = None;
                    }
                }
                out.push(Decision::Admit(id, p));
            }
            for &id in &cycle.preempting {
                if let Some(c) = queue.get(id) {
                    preemptors[c.team] = Some(id);
                }
            }
            // An evicted workload is queued again once it is gone: Kueue's evictions take
            // time, so it is not back in line in the instant it was evicted. In the sim the
            // instant is this settle; without the pause a victim could be taken back in and
            // evicted again at the same moment, without end.
            let since: HashMap<Wid, DateTime<Utc>> = cycle
                .evicted
                .iter()
                .map(|a| (a.id, a.admitted_at))
                .collect();
            returning.extend(cycle.evicted.into_iter().map(|a| Candidate {
                id: a.id,
                team: a.team,
                gpus: a.gpus,
                priority: a.priority,
                submitted_at: a.submitted_at,
            }));
            for (id, cause) in cycle.preempted {
                let since = since.get(&id).copied().unwrap_or(at);
                out.push(Decision::Evict(id, cause, since));
            }
            for id in cycle.unschedulable {
                let Some(c) = queue.get(id) else { continue };
                if preemptors[c.team] == Some(id) {
                    preemptors[c.team] = None; // no longer preempting: back in line
                }
                if self.quotas[c.team].strategy == QueueingStrategy::StrictFifo {
                    continue; // the head stays, and blocks its team's queue
                }
                if c.gpus < failed[c.team] {
                    failed[c.team] = c.gpus;
                    productive = true;
                }
            }
            if released {
                // The victims are gone: every head is in play again, those set aside in this
                // very cycle too (Kueue requeues the cohort's inadmissible workloads when a
                // workload is evicted).
                failed.iter_mut().for_each(|f| *f = u32::MAX);
            }
            if !productive {
                break;
            }
        }
        for c in returning {
            queue.push(c);
        }
        out
    }

    /// A cycle in which nothing is preempted: heads that fit are admitted, the rest step
    /// aside (the ETA forecast's passes).
    pub(super) fn schedule_without_preemption(
        &mut self,
        heads: &[Candidate],
        at: DateTime<Utc>,
    ) -> Cycle {
        let mut entries: Vec<(&Candidate, bool)> = heads
            .iter()
            .map(|c| {
                let borrows =
                    self.used[c.team].saturating_add(c.gpus) > self.quotas[c.team].nominal;
                (c, borrows)
            })
            .collect();
        entries.sort_by(|(a, ba), (b, bb)| entry_order((a, *ba), (b, *bb)));
        let mut out = Cycle::default();
        for (c, _) in entries {
            match self.try_fit(c) {
                Ok(p) => {
                    self.admit(c, p.clone(), at);
                    out.admitted.push((c.id, p));
                }
                Err(_) => out.unschedulable.push(c.id),
            }
        }
        out
    }
}

/// The order of a cycle's entries (Kueue's `makeClassicalIterator` with its default feature
/// gates): those that fit within their nominal quota before those that must borrow, then
/// higher priority, then earlier creation (the queue's own order, [`Candidate::key`]).
/// Kueue's `PrioritizePreemptorWorkloads` gate (alpha, off by default) would put workloads
/// waiting for their preemptions first.
pub(super) fn entry_order(
    (a, a_borrows): (&Candidate, bool),
    (b, b_borrows): (&Candidate, bool),
) -> std::cmp::Ordering {
    a_borrows.cmp(&b_borrows).then(a.key().cmp(&b.key()))
}
