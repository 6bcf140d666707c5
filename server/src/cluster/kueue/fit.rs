//! Whether a workload fits: a team's quota status (within nominal, borrowing, over),
//! what it may borrow under the cohort's lending and borrowing limits, and what blocks it.

use super::*;

impl Cohort {
    /// GPUs the team holds beyond its nominal quota.
    pub fn borrowed(&self, team: TeamIdx) -> u32 {
        self.used[team].saturating_sub(self.quotas[team].nominal)
    }

    /// The most the team could ever hold here.
    pub fn most(&self, team: TeamIdx) -> u32 {
        let q = self.quotas[team];
        // In u64: quotas replayed from history (the what-if) may sum past u32.
        let lendable_by_others: u64 = (0..self.teams.len())
            .filter(|&j| j != team)
            .map(|j| u64::from(self.quotas[j].nominal - self.quotas[j].guaranteed()))
            .sum();
        let borrow = q
            .borrowing_limit
            .map_or(lendable_by_others, |l| u64::from(l).min(lendable_by_others));
        let most = (u64::from(q.nominal) + borrow).min(u64::from(self.capacity.total()));
        u32::try_from(most).unwrap_or(u32::MAX)
    }

    /// The quota check of Kueue's flavor assignment, without allocating: the hot path.
    pub(super) fn quota_status(&self, team: TeamIdx, need: u32) -> QuotaStatus {
        self.quota_status_with(&self.used, team, need)
    }

    /// [`Self::quota_status`] with the teams' use given (a simulated removal).
    pub(super) fn quota_status_with(&self, used: &[u32], team: TeamIdx, need: u32) -> QuotaStatus {
        let q = self.quotas[team];
        let most = self.most(team);
        if need > most {
            return QuotaStatus::TooLarge { most };
        }
        let new_used = used[team].saturating_add(need);
        if let Some(limit) = q.borrowing_limit {
            if new_used > q.nominal.saturating_add(limit) {
                return QuotaStatus::BorrowingLimit { limit };
            }
        }
        // Use beyond a queue's guaranteed part draws on the cohort's lendable quota.
        let mut lendable = 0u64;
        let mut drawn = 0u64;
        for (j, qj) in self.quotas.iter().enumerate() {
            let g = qj.guaranteed();
            lendable += u64::from(qj.nominal - g);
            let u = if j == team { new_used } else { used[j] };
            drawn += u64::from(u.saturating_sub(g));
        }
        if drawn > lendable {
            return QuotaStatus::Cohort;
        }
        QuotaStatus::Fits {
            borrows: new_used > q.nominal,
        }
    }

    /// The quota check with what binds spelled out: `Ok(borrows)` or the blocker.
    pub fn quota_check(&self, team: TeamIdx, need: u32) -> Result<bool, Blocker> {
        let q = self.quotas[team];
        let used = self.used[team];
        let name = || self.teams[team].clone();
        let pool = || self.capacity.name.clone();
        match self.quota_status(team, need) {
            QuotaStatus::Fits { borrows } => Ok(borrows),
            QuotaStatus::TooLarge { most } => Err(Blocker::LargerThanQuota {
                team: name(),
                pool: pool(),
                need,
                most,
                nominal: q.nominal,
            }),
            QuotaStatus::BorrowingLimit { limit } => Err(Blocker::BorrowingLimit {
                team: name(),
                pool: pool(),
                used,
                nominal: q.nominal,
                limit,
                need,
            }),
            QuotaStatus::Cohort => Err(Blocker::Quota {
                team: name(),
                pool: pool(),
                used,
                nominal: q.nominal,
                borrowable: self.borrowable(team),
                need,
            }),
        }
    }

    /// Other teams' unused quota `team` may borrow now: Kueue's `Available` for the team,
    /// less what is left of its own nominal quota.
    pub fn borrowable(&self, team: TeamIdx) -> u32 {
        let q = self.quotas[team];
        let used = i64::from(self.used[team]);
        let (mut lendable, mut drawn) = (0i64, 0i64);
        for (j, qj) in self.quotas.iter().enumerate() {
            let g = i64::from(qj.guaranteed());
            lendable += i64::from(qj.nominal) - g;
            drawn += (i64::from(self.used[j]) - g).max(0);
        }
        let mut from_cohort = (lendable - drawn).max(0);
        if let Some(limit) = q.borrowing_limit {
            let headroom =
                i64::from(q.nominal) + i64::from(limit) - used.max(i64::from(q.guaranteed()));
            from_cohort = from_cohort.min(headroom.max(0));
        }
        let available = (i64::from(q.guaranteed()) - used).max(0) + from_cohort;
        let own_left = (i64::from(q.nominal) - used).max(0);
        u32::try_from((available - own_left).max(0)).unwrap_or(u32::MAX)
    }

    /// Would `c` fit now without preempting? `Err(permanent)` if not; allocates nothing.
    pub(super) fn try_fit(&self, c: &Candidate) -> Result<Placement, Miss> {
        if c.gpus > self.capacity.total() {
            return Err(Miss::Never);
        }
        match self.quota_status(c.team, c.gpus) {
            QuotaStatus::Fits { .. } => self.capacity.place(c.gpus).ok_or(Miss::Room),
            QuotaStatus::TooLarge { .. } => Err(Miss::Never),
            _ => Err(Miss::Quota),
        }
    }

    pub(super) fn capacity_blocker(&self, need: u32) -> Blocker {
        let pool = self.capacity.name.clone();
        if need > self.capacity.per_node {
            Blocker::WholeNodes {
                pool,
                need: need.div_ceil(self.capacity.per_node),
                free: self.capacity.free_whole_nodes(),
            }
        } else {
            Blocker::NodeRoom {
                pool,
                need,
                most_free: self
                    .capacity
                    .nodes
                    .iter()
                    .map(|n| n.free)
                    .max()
                    .unwrap_or(0),
            }
        }
    }

    /// Would `c` be admitted now, without preempting anything?
    pub fn evaluate(&self, c: &Candidate) -> Result<Placement, Blocker> {
        let total = self.capacity.total();
        if c.gpus > total {
            return Err(Blocker::LargerThanPool {
                pool: self.capacity.name.clone(),
                need: c.gpus,
                total,
            });
        }
        self.quota_check(c.team, c.gpus)?;
        self.capacity
            .place(c.gpus)
            .ok_or_else(|| self.capacity_blocker(c.gpus))
    }

    /// [`Self::fits`] on simulated nodes and use.
    pub(super) fn fits_with(
        &self,
        cap: &PoolCapacity,
        used: &[u32],
        c: &Candidate,
        allow_borrowing: bool,
    ) -> bool {
        if !allow_borrowing && used[c.team].saturating_add(c.gpus) > self.quotas[c.team].nominal {
            return false;
        }
        matches!(
            self.quota_status_with(used, c.team, c.gpus),
            QuotaStatus::Fits { .. }
        ) && cap.place(c.gpus).is_some()
    }

    /// Kueue's `workloadFits` (quota, and room on the nodes): does `c` fit now?
    pub(super) fn fits(&self, c: &Candidate, allow_borrowing: bool) -> bool {
        self.fits_with(&self.capacity, &self.used, c, allow_borrowing)
    }
}
