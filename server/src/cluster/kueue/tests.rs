//! Scenario tests of the admission rules. Each names the Kueue documentation it follows.

use super::*;
use chrono::TimeZone;

const LOW: i32 = 100;
const NORMAL: i32 = 1000;
const HIGH: i32 = 10000;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

/// Builder-style fixture: a pool, quotas, admitted jobs and a queue, by name.
struct Scenario {
    co: Cohort,
    queue: Queue,
    minute: i64,
    ids: HashMap<String, Wid>,
}

struct Outcome {
    admitted: Vec<String>,
    preempted: Vec<(String, String)>,
    pending: Vec<(String, Blocker)>,
}

impl Outcome {
    /// The admitted, preempted and pending names, each sorted.
    fn names(&self) -> (Vec<&str>, Vec<&str>, Vec<&str>) {
        fn sorted(mut v: Vec<&str>) -> Vec<&str> {
            v.sort();
            v
        }
        (
            sorted(self.admitted.iter().map(String::as_str).collect()),
            sorted(self.preempted.iter().map(|(n, _)| n.as_str()).collect()),
            sorted(self.pending.iter().map(|(n, _)| n.as_str()).collect()),
        )
    }
}

impl Scenario {
    fn pool(nodes: usize) -> Self {
        Scenario {
            co: Cohort::new(PoolCapacity::new("hgx-h100", nodes, 8)),
            queue: Queue::default(),
            minute: 0,
            ids: HashMap::new(),
        }
    }
    fn strict(mut self) -> Self {
        self.co.capacity.strategy = QueueingStrategy::StrictFifo;
        self
    }
    /// Nominal quota only: no borrowing.
    fn quota(self, team: &str, nominal: u32) -> Self {
        self.quota_full(team, nominal, Some(0), None)
    }
    fn borrowing(self, team: &str, nominal: u32, limit: Option<u32>) -> Self {
        self.quota_full(team, nominal, limit, None)
    }
    fn quota_full(
        mut self,
        team: &str,
        nominal: u32,
        borrowing_limit: Option<u32>,
        lending_limit: Option<u32>,
    ) -> Self {
        self.co.set_quota(
            team,
            Quota {
                nominal,
                borrowing_limit,
                lending_limit,
                strategy: self.co.capacity.strategy,
            },
        );
        self
    }
    fn id(&mut self, name: &str) -> Wid {
        let n = self.ids.len() as Wid + 1;
        *self.ids.entry(name.to_string()).or_insert(n)
    }
    fn candidate(&mut self, name: &str, team: &str, gpus: u32, priority: i32) -> Candidate {
        self.minute += 1;
        Candidate {
            id: self.id(name),
            team: self.co.team(team),
            gpus,
            priority,
            submitted_at: t0() + chrono::Duration::minutes(self.minute),
        }
    }
    /// A job already admitted, placed as the pool would place it.
    fn running(self, name: &str, team: &str, gpus: u32) -> Self {
        self.running_with(name, team, gpus, NORMAL)
    }
    fn running_with(mut self, name: &str, team: &str, gpus: u32, priority: i32) -> Self {
        let c = self.candidate(name, team, gpus, priority);
        let p = self.co.capacity.place(gpus).expect("fixture job must fit");
        let at = c.submitted_at;
        self.co.admit(&c, p, at);
        self
    }
    fn queued(self, name: &str, team: &str, gpus: u32) -> Self {
        self.queued_with(name, team, gpus, NORMAL)
    }
    fn queued_with(mut self, name: &str, team: &str, gpus: u32, priority: i32) -> Self {
        let c = self.candidate(name, team, gpus, priority);
        self.queue.push(c);
        self
    }
    fn name(&self, id: Wid) -> String {
        self.ids
            .iter()
            .find(|(_, v)| **v == id)
            .map(|(k, _)| k.clone())
            .unwrap()
    }
    /// Kueue's scheduling cycles until nothing changes, then why each workload still waits.
    fn cycle(mut self) -> (Outcome, Scenario) {
        let at = t0() + chrono::Duration::hours(1);
        let decisions = self.co.settle(&mut self.queue, at, true);
        let mut admitted = Vec::new();
        let mut preempted = Vec::new();
        for d in decisions {
            match d {
                Decision::Admit(id, _) => admitted.push(self.name(id)),
                Decision::Evict(id, cause, _) => preempted.push((self.name(id), cause.sentence())),
            }
        }
        let mut seen: HashMap<TeamIdx, u32> = HashMap::new();
        let mut pending = Vec::new();
        for c in self.queue.iter() {
            let before = seen.entry(c.team).or_default();
            let b =
                if self.co.quotas[c.team].strategy == QueueingStrategy::StrictFifo && *before > 0 {
                    Blocker::StrictFifo {
                        team: self.co.teams[c.team].clone(),
                        pool: self.co.pool().to_string(),
                        ahead: *before,
                    }
                } else {
                    self.co
                        .evaluate(c)
                        .err()
                        .unwrap_or_else(|| self.co.capacity_blocker(c.gpus))
                };
            *before += 1;
            pending.push((self.name(c.id), b));
        }
        let out = Outcome {
            admitted,
            preempted,
            pending,
        };
        (out, self)
    }
}

// ---- gangs and whole nodes (Kueue TAS, podset-required-topology: hostname) ---------------

#[test]
fn gang_is_all_or_nothing_on_whole_nodes() {
    let mut s = Scenario::pool(4).quota("nlp", 64).quota("vision", 64);
    for n in &mut s.co.capacity.nodes {
        n.free = 7; // one GPU taken on every node: 28 free, no whole node
    }
    let (o, s) = s.queued("big", "nlp", 16).cycle();
    assert!(o.admitted.is_empty());
    assert_eq!(s.co.capacity.free(), 28, "nothing partially allocated");
    assert_eq!(
        o.pending[0].1.sentence(),
        "Waiting for 2 whole nodes in hgx-h100: none is free"
    );
}

#[test]
fn gang_takes_whole_free_nodes_and_small_jobs_pack() {
    let (o, s) = Scenario::pool(4)
        .quota("nlp", 64)
        .running("r", "nlp", 4)
        .queued("a", "nlp", 16)
        .queued("b", "nlp", 4)
        .cycle();
    assert_eq!(o.admitted, ["a", "b"]);
    assert_eq!(
        s.co.capacity.free_whole_nodes(),
        1,
        "the 4-GPU job packed next to the other"
    );
}

#[test]
fn single_node_jobs_need_room_on_one_node() {
    let mut s = Scenario::pool(2).quota("nlp", 64);
    s.co.capacity.nodes[0].free = 2;
    s.co.capacity.nodes[1].free = 3;
    let (o, _) = s.queued("four", "nlp", 4).cycle();
    assert_eq!(
        o.pending[0].1.sentence(),
        "Waiting for a node with 4 free GPUs in hgx-h100: at most 3 free on any node"
    );
}

// ---- quota (Kueue ClusterQueue nominalQuota) ----------------------------------------------

#[test]
fn quota_binds_before_capacity() {
    let (o, _) = Scenario::pool(16)
        .quota("nlp", 64)
        .running("r", "nlp", 56)
        .queued("a", "nlp", 16)
        .cycle();
    assert!(o.admitted.is_empty());
    assert_eq!(
        o.pending[0].1.sentence(),
        "Team nlp would exceed its quota in hgx-h100: 56 of 64 GPUs in use, this job needs 16"
    );
}

#[test]
fn one_team_at_quota_does_not_block_another() {
    let (o, _) = Scenario::pool(16)
        .quota("nlp", 64)
        .quota("vision", 32)
        .running("r", "nlp", 64)
        .queued("nlp-job", "nlp", 8)
        .queued("vision-job", "vision", 8)
        .cycle();
    assert_eq!(o.admitted, ["vision-job"]);
}

#[test]
fn never_admissible_gangs_say_so() {
    let (o, _) = Scenario::pool(2)
        .quota("nlp", 64)
        .queued("huge", "nlp", 32)
        .cycle();
    assert_eq!(
        o.pending[0].1.sentence(),
        "Needs 32 GPUs but hgx-h100 has 16 in all: it can never be admitted"
    );
    let (o, _) = Scenario::pool(16)
        .borrowing("nlp", 16, Some(8))
        .quota("vision", 64)
        .queued("big", "nlp", 32)
        .cycle();
    assert!(o.pending[0].1.is_permanent());
    assert_eq!(
        o.pending[0].1.sentence(),
        "Cannot start under the current quotas: team nlp may hold at most 24 GPUs in hgx-h100 (its quota of 16 plus what it may borrow) and this job needs 32. It starts once the team's quota or borrowing limit in hgx-h100 is raised, or other teams lend more"
    );
}

// ---- order (WorkloadPriorityClass, then creation time) ------------------------------------

#[test]
fn priority_then_fifo() {
    let (o, _) = Scenario::pool(1)
        .quota("nlp", 64)
        .queued("first", "nlp", 8)
        .queued("second", "nlp", 8)
        .queued_with("urgent", "nlp", 8, HIGH)
        .cycle();
    assert_eq!(o.admitted, ["urgent"]);
    let pending: Vec<&str> = o.pending.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(pending, ["first", "second"], "FIFO among equals");
}

// ---- queueing strategy (Kueue ClusterQueue queueingStrategy) ------------------------------

#[test]
fn best_effort_fifo_lets_a_later_job_that_fits_go_first() {
    let (o, _) = Scenario::pool(2)
        .quota("nlp", 64)
        .running("r", "nlp", 4)
        .queued("big", "nlp", 16)
        .queued("small", "nlp", 4)
        .cycle();
    assert_eq!(o.admitted, ["small"]);
    assert_eq!(o.pending[0].0, "big");
}

#[test]
fn strict_fifo_blocks_behind_the_head() {
    let (o, _) = Scenario::pool(2)
        .strict()
        .quota("nlp", 64)
        .quota("vision", 64)
        .running("r", "vision", 4)
        .queued_with("big", "nlp", 16, HIGH)
        .queued("small", "nlp", 4)
        .cycle();
    assert!(o.admitted.is_empty());
    assert_eq!(
        o.pending[1].1.sentence(),
        "Waiting behind 1 earlier job of team nlp in hgx-h100: the team's queue there is in strict FIFO order"
    );
}

// ---- borrowing (Kueue docs: ClusterQueue borrowingLimit / lendingLimit) -------------------

#[test]
fn a_team_borrows_idle_quota_up_to_its_borrowing_limit() {
    // Like the docs' team-a-cq (nominal 9, borrowingLimit 6 → at most 15): here 16 + 8 GPUs.
    let (o, s) = Scenario::pool(16)
        .borrowing("nlp", 16, Some(8))
        .quota("vision", 64)
        .queued("a", "nlp", 16)
        .queued("b", "nlp", 8)
        .queued("c", "nlp", 8)
        .cycle();
    assert_eq!(o.admitted, ["a", "b"]);
    assert_eq!(s.co.borrowed(0), 8);
    assert_eq!(
        o.pending[0].1.sentence(),
        "Team nlp would exceed its quota and borrowing limit in hgx-h100: 24 of 16 + 8 GPUs in use, this job needs 8"
    );
}

#[test]
fn borrowing_is_bounded_by_the_cohorts_unused_quota() {
    let (o, _) = Scenario::pool(16)
        .borrowing("nlp", 16, None)
        .quota("vision", 16)
        .running("v", "vision", 8)
        .queued("a", "nlp", 16)
        .queued("b", "nlp", 16)
        .cycle();
    // The cohort lends 32 GPUs in all; vision uses 8, nlp 16: 8 are left, b needs 16.
    assert_eq!(o.admitted, ["a"]);
    assert_eq!(
        o.pending[0].1.sentence(),
        "Team nlp has 16 of its 16 GPUs in use in hgx-h100; this job needs 16, so the team would borrow 16, but only 8 GPUs of other teams' quota are unused"
    );
}

#[test]
fn a_lending_limit_keeps_part_of_a_quota_home() {
    // vision lends only 8 of its 16 GPUs.
    let (o, _) = Scenario::pool(16)
        .borrowing("nlp", 16, None)
        .quota_full("vision", 16, Some(0), Some(8))
        .queued("a", "nlp", 16)
        .queued("b", "nlp", 8)
        .queued("c", "nlp", 8)
        .cycle();
    assert_eq!(o.admitted, ["a", "b"]);
    assert!(
        matches!(o.pending[0].1, Blocker::Quota { borrowable: 0, .. }),
        "{:?}",
        o.pending[0].1
    );
}

// ---- preemption (Kueue docs: preemption, reclaimWithinCohort: Any, withinClusterQueue: LowerPriority)

#[test]
fn a_team_reclaims_its_quota_from_borrowers_newest_first() {
    let (o, s) = Scenario::pool(4)
        .borrowing("nlp", 16, None)
        .quota("vision", 16)
        .running("nlp-old", "nlp", 8)
        .running("nlp-mid", "nlp", 8)
        .running("nlp-new", "nlp", 8)
        .running("nlp-newest", "nlp", 8)
        .queued("vision-job", "vision", 16)
        .cycle();
    assert_eq!(o.admitted, ["vision-job"]);
    assert_eq!(
        o.preempted,
        [
            (
                "nlp-newest".to_string(),
                "Preempted: team vision reclaimed its quota".to_string()
            ),
            (
                "nlp-new".to_string(),
                "Preempted: team vision reclaimed its quota".to_string()
            ),
        ]
    );
    assert_eq!(s.co.used, [16, 16]);
}

#[test]
fn reclaim_stops_once_the_lender_is_back_within_quota() {
    // nlp borrows 8 GPUs of vision's quota. vision reclaims them: the newest nlp job goes and
    // reclaim stops there, as nlp is then back within its quota.
    let (o, _) = Scenario::pool(4)
        .borrowing("nlp", 24, None)
        .quota("vision", 8)
        .running("nlp-a", "nlp", 16)
        .running("nlp-b", "nlp", 16)
        .queued("vision-job", "vision", 8)
        .cycle();
    assert_eq!(
        o.admitted,
        ["vision-job"],
        "nlp's 8 borrowed GPUs come back"
    );
    assert_eq!(o.preempted.len(), 1);
    let (o, _) = Scenario::pool(4)
        .borrowing("nlp", 24, None)
        .quota("vision", 8)
        .running("nlp-a", "nlp", 16)
        .running("nlp-b", "nlp", 8)
        .running("vision-a", "vision", 8)
        .queued("vision-job", "vision", 8)
        .cycle();
    assert!(
        o.preempted.is_empty(),
        "vision would borrow itself: no reclaim"
    );
    assert!(o.admitted.is_empty());
}

#[test]
fn a_higher_priority_job_preempts_lower_priority_jobs_of_its_own_team() {
    let (o, _) = Scenario::pool(4)
        .quota("nlp", 16)
        .quota("vision", 16)
        .running_with("low-old", "nlp", 8, LOW)
        .running_with("low-new", "nlp", 8, LOW)
        .running_with("vision-low", "vision", 8, LOW)
        .queued_with("urgent", "nlp", 8, HIGH)
        .queued("normal", "nlp", 8)
        .cycle();
    // urgent evicts the newest low job; normal, also above low, then evicts the other one;
    // vision's low job is another queue's and within its quota: never a candidate.
    assert_eq!(o.admitted, ["urgent", "normal"]);
    let by_nlp = "Preempted by a higher-priority job of team nlp".to_string();
    assert_eq!(
        o.preempted,
        [
            ("low-new".to_string(), by_nlp.clone()),
            ("low-old".to_string(), by_nlp)
        ]
    );
    let (o, _) = Scenario::pool(4)
        .quota("nlp", 16)
        .running_with("n1", "nlp", 8, NORMAL)
        .running_with("n2", "nlp", 8, NORMAL)
        .queued("n3", "nlp", 8)
        .cycle();
    assert!(o.preempted.is_empty(), "equal priority never preempts");
    assert!(o.admitted.is_empty());
}

// ---- forecast (ETA) ----------------------------------------------------------------------

#[test]
fn forecast_gives_exact_etas_for_known_runtimes() {
    let mut s = Scenario::pool(2)
        .quota("nlp", 16)
        .running("r", "nlp", 16)
        .queued("a", "nlp", 16)
        .queued("b", "nlp", 8)
        .queued("c", "nlp", 8);
    let now = t0() + chrono::Duration::hours(1);
    let ends: WidMap<DateTime<Utc>> = [(s.id("r"), now + chrono::Duration::minutes(30))]
        .into_iter()
        .collect();
    let runtimes: WidMap<i64> = [(s.id("a"), 3600), (s.id("b"), 600), (s.id("c"), 600)]
        .into_iter()
        .collect();
    let eta = forecast(
        &s.co,
        &s.queue,
        &ends,
        |id| runtimes[&id],
        now,
        chrono::Duration::days(30),
    );
    assert_eq!(eta[&s.id("a")], now + chrono::Duration::minutes(30));
    assert_eq!(
        eta[&s.id("b")],
        now + chrono::Duration::minutes(90),
        "after a's hour"
    );
    assert_eq!(
        eta[&s.id("c")],
        now + chrono::Duration::minutes(90),
        "b and c run side by side"
    );
    // a job that can never be admitted gets no estimate
    let s = s.queued("never", "nlp", 64);
    let eta = forecast(
        &s.co,
        &s.queue,
        &ends,
        |id| runtimes[&id],
        now,
        chrono::Duration::days(30),
    );
    assert!(!eta.contains_key(&s.ids["never"]));
}

/// The forecast as the plain loop of admission passes it stands for: copy the queue, run
/// [`Cohort::cycle`] without preemption at each end time, remove what it admits.
fn forecast_by_passes(
    cohort: &Cohort,
    queue: &Queue,
    ends: &WidMap<DateTime<Utc>>,
    runtimes: &WidMap<i64>,
    now: DateTime<Utc>,
    horizon: chrono::Duration,
) -> WidMap<DateTime<Utc>> {
    use std::collections::BinaryHeap;
    let mut co = cohort.clone();
    let mut queue = queue.clone();
    let mut eta = WidMap::default();
    let mut heap: BinaryHeap<Reverse<(DateTime<Utc>, Wid)>> = co
        .admitted
        .keys()
        .map(|id| Reverse((ends.get(id).copied().unwrap_or(now).max(now), *id)))
        .collect();
    let mut t = now;
    loop {
        for d in co.settle(&mut queue, t, false) {
            let Decision::Admit(id, _) = d else { continue };
            eta.insert(id, t);
            heap.push(Reverse((
                t + chrono::Duration::seconds(runtimes[&id].max(1)),
                id,
            )));
        }
        let Some(Reverse((next, _))) = heap.peek().copied() else {
            break;
        };
        if queue.is_empty() || next > now + horizon {
            break;
        }
        t = next;
        while let Some(Reverse((_, id))) = heap.peek().copied().filter(|r| r.0 .0 <= t) {
            heap.pop();
            co.release(id);
        }
    }
    eta
}

mod forecast_properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The cursor-per-class forecast gives exactly the ETAs of a replay of admission passes,
        /// for random quotas, running jobs and queues (sizes up to larger than the pool).
        #[test]
        fn forecast_matches_a_replay_of_admission_passes(
            nodes in 1usize..6,
            quotas in proptest::collection::vec((0u32..40, proptest::option::of(0u32..40)), 3),
            running in proptest::collection::vec((0usize..3, 0usize..7, 1i64..600), 0..8),
            queued in proptest::collection::vec((0usize..3, 0usize..7, 0usize..3, 1i64..600), 0..60),
            horizon_h in 1i64..48,
            strict in any::<bool>(),
        ) {
            let teams = ["nlp", "vision", "speech"];
            let sizes = [1, 2, 4, 8, 16, 24, 64];
            let prios = [LOW, NORMAL, HIGH];
            let mut s = Scenario::pool(nodes);
            if strict {
                s = s.strict();
            }
            for (t, (nominal, limit)) in teams.iter().zip(&quotas) {
                s = s.borrowing(t, *nominal, *limit);
            }
            let now = t0() + chrono::Duration::hours(1);
            let mut ends = WidMap::default();
            let mut runtimes = WidMap::default();
            for (i, (team, size, minutes)) in running.iter().enumerate() {
                let name = format!("r{i}");
                let c = s.candidate(&name, teams[*team], sizes[*size], NORMAL);
                if let Ok(p) = s.co.evaluate(&c) {
                    s.co.admit(&c, p, t0());
                    ends.insert(c.id, now + chrono::Duration::minutes(*minutes));
                }
            }
            for (i, (team, size, prio, minutes)) in queued.iter().enumerate() {
                let c = s.candidate(&format!("q{i}"), teams[*team], sizes[*size], prios[*prio]);
                runtimes.insert(c.id, minutes * 60);
                s.queue.push(c);
            }
            let horizon = chrono::Duration::hours(horizon_h);
            let fast = forecast(&s.co, &s.queue, &ends, |id| runtimes[&id], now, horizon);
            let slow = forecast_by_passes(&s.co, &s.queue, &ends, &runtimes, now, horizon);
            prop_assert_eq!(fast, slow);
        }
    }
}

// ---- queueing strategy per ClusterQueue (team × pool) --------------------------------------

/// Kueue's `queueingStrategy` is a field of the ClusterQueue
/// (<https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#queueing-strategy>): a StrictFIFO
/// head blocks only the rest of its own team's queue in the pool.
#[test]
fn a_strict_fifo_head_blocks_only_its_own_team() {
    let mut s = Scenario::pool(4)
        .quota("nlp", 16)
        .quota("vision", 16)
        .running("r", "nlp", 8);
    let nlp = s.co.team("nlp");
    s.co.quotas[nlp].strategy = QueueingStrategy::StrictFifo;
    let (o, _) = s
        .queued("nlp-big", "nlp", 16)
        .queued("nlp-small", "nlp", 8)
        .queued("vision-job", "vision", 8)
        .cycle();
    assert_eq!(o.admitted, ["vision-job"], "the other team is not blocked");
    let reasons: Vec<(String, String)> = o
        .pending
        .iter()
        .map(|(n, b)| (n.clone(), b.sentence()))
        .collect();
    assert_eq!(reasons[1].0, "nlp-small");
    assert_eq!(
        reasons[1].1,
        "Waiting behind 1 earlier job of team nlp in hgx-h100: the team's queue there is in strict FIFO order"
    );
}

/// A scheduling pass never both admits and evicts one workload: victims are chosen from what
/// was admitted before the cycle, and a preemptor is admitted only once its victims are gone.
#[test]
fn a_cycle_never_admits_and_evicts_the_same_workload() {
    let at = t0() + chrono::Duration::hours(1);
    // Both at once: the job within nominal quota goes first; the borrower no longer fits.
    let mut s = Scenario::pool(4)
        .borrowing("nlp", 16, None)
        .borrowing("vision", 16, None)
        .queued("vision-borrow", "vision", 32)
        .queued("nlp-reclaim", "nlp", 16);
    let heads = s.co.heads(&s.queue, &[], &[]);
    let cycle = s.co.schedule(&heads, at);
    let admitted: Vec<String> = cycle.admitted.iter().map(|(id, _)| s.name(*id)).collect();
    assert_eq!(admitted, ["nlp-reclaim"]);
    assert!(cycle.preempted.is_empty());
    assert_eq!(
        cycle
            .skipped
            .iter()
            .map(|id| s.name(*id))
            .collect::<Vec<_>>(),
        ["vision-borrow"]
    );

    // The borrower first, alone; then the lender's job: one cycle evicts, the next admits.
    let mut s = Scenario::pool(4)
        .borrowing("nlp", 16, None)
        .borrowing("vision", 16, None)
        .queued("vision-borrow", "vision", 32);
    s.co.settle(&mut s.queue, at, true);
    let s = s.queued("nlp-reclaim", "nlp", 16);
    let mut s = s;
    let heads = s.co.heads(&s.queue, &[], &[]);
    let first = s.co.schedule(&heads, at);
    assert!(
        first.admitted.is_empty(),
        "the preemptor waits for its victims"
    );
    assert_eq!(
        first
            .preempted
            .iter()
            .map(|(id, _)| s.name(*id))
            .collect::<Vec<_>>(),
        ["vision-borrow"]
    );
    for a in first.evicted {
        s.queue.push(Candidate {
            id: a.id,
            team: a.team,
            gpus: a.gpus,
            priority: a.priority,
            submitted_at: a.submitted_at,
        });
    }
    let heads = s.co.heads(&s.queue, &[], &[]);
    let second = s.co.schedule(&heads, at);
    assert_eq!(
        second
            .admitted
            .iter()
            .map(|(id, _)| s.name(*id))
            .collect::<Vec<_>>(),
        ["nlp-reclaim"]
    );
    assert!(second.preempted.is_empty());
    assert_eq!(
        s.co.used,
        vec![16, 0],
        "nlp holds its nominal; vision waits"
    );
}

/// The pending reason states the real numbers: quota another team is already borrowing is not
/// "unused", and a team at its nominal quota cannot reclaim (Kueue: only a request within the
/// nominal quota may preempt).
#[test]
fn the_reason_counts_what_is_really_unused() {
    let (o, _) = Scenario::pool(4)
        .borrowing("a", 8, None)
        .borrowing("b", 8, None)
        .borrowing("c", 16, None)
        .running("c1", "c", 24)
        .running("a1", "a", 8)
        .queued("a2", "a", 8)
        .cycle();
    assert!(o.admitted.is_empty() && o.preempted.is_empty());
    assert_eq!(
        o.pending[0].1.sentence(),
        "Team a has 8 of its 8 GPUs in use in hgx-h100; this job needs 8, so the team would borrow 8, but none of other teams' quota is unused"
    );
}

mod settle_properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A settle stops without flapping, keeps the nodes' books, and settles converge — with sub-node gangs that fragment the nodes, where evicting for room
        /// once made two teams take turns, and a preemptor that did not keep its place let
        /// its victim back in first.
        #[test]
        fn settling_is_stable(
            nodes in 1usize..6,
            quotas in proptest::collection::vec((0u32..48, proptest::option::of(0u32..48)), 3),
            running in proptest::collection::vec((0usize..3, 0usize..7, 0usize..3), 0..10),
            queued in proptest::collection::vec((0usize..3, 0usize..7, 0usize..3), 0..30),
            strict in any::<bool>(),
        ) {
            let teams = ["nlp", "vision", "speech"];
            let sizes = [1, 2, 4, 8, 16, 24, 32];
            let prios = [LOW, NORMAL, HIGH];
            let mut s = Scenario::pool(nodes);
            if strict {
                s = s.strict();
            }
            for (t, (nominal, limit)) in teams.iter().zip(&quotas) {
                s = s.borrowing(t, *nominal, *limit);
            }
            for (i, (t, g, p)) in running.iter().enumerate() {
                if s.co.capacity.place(sizes[*g]).is_some() {
                    s = s.running_with(&format!("r{i}"), teams[*t], sizes[*g], prios[*p]);
                }
            }
            for (i, (t, g, p)) in queued.iter().enumerate() {
                s = s.queued_with(&format!("q{i}"), teams[*t], sizes[*g], prios[*p]);
            }
            let at = t0() + chrono::Duration::hours(1);
            let decisions = s.co.settle(&mut s.queue, at, true);
            // No flapping. Kueue itself may evict a borrower twice in a row (one head per
            // queue per cycle: the borrower comes back while the lender's head cannot fit,
            // and the lender's next head reclaims it again), but never without end.
            let flapping = |ds: &[Decision]| {
                let mut n: HashMap<Wid, u32> = HashMap::new();
                for d in ds {
                    if let Decision::Evict(id, ..) = d {
                        *n.entry(*id).or_default() += 1;
                    }
                }
                n.into_values().max().unwrap_or(0) > 3
            };
            prop_assert!(!flapping(&decisions), "flapping: {decisions:?}");
            prop_assert!(s.co.capacity.free() <= s.co.capacity.total());
            let used: u32 = s.co.admitted.values().map(|a| a.gpus).sum();
            prop_assert_eq!(used, s.co.capacity.total() - s.co.capacity.free());
            // Converges: each settle starts with every head back in play (the sim's settle
            // follows an event, as Kueue requeues inadmissible workloads after one), so a
            // later one may still preempt what an earlier one set aside; within a few it
            // changes nothing.
            // Quotas beyond the pool (the Quotas page warns of it) let room and quota disagree
            // in ways Kueue's quota alone never sees: convergence is asked of the quotas the
            // pool can back.
            let nominal_sum: u32 = s.co.quotas.iter().map(|q| q.nominal).sum();
            if nominal_sum > s.co.capacity.total() {
                return Ok(());
            }
            let mut last = decisions;
            for _ in 0..4 {
                if last.is_empty() {
                    break;
                }
                last = s.co.settle(&mut s.queue, at, true);
                prop_assert!(!flapping(&last), "flapping: {last:?}");
            }
            prop_assert!(last.is_empty(), "not settled after 5 settles: {last:?}");
        }
    }
}

/// Kueue's `TestEntryOrdering` "Some workloads are preemptors; PrioritizePreemptorWorkloads is
/// disabled" (pkg/scheduler/scheduler_test.go; the gate is alpha and off by default): a
/// workload waiting for its preemptions gets no place ahead of the others, so the order is
/// within nominal before borrowing, then priority, then creation time.
#[test]
fn entries_are_taken_in_kueues_default_order() {
    let mut s = Scenario::pool(4);
    let entry = |s: &mut Scenario, name: &str, priority: i32, second: i64| {
        let mut c = s.candidate(name, "a", 8, priority);
        c.submitted_at = t0() + chrono::Duration::seconds(second);
        c
    };
    // (entry, borrows), as Kueue's test lists them.
    let mut entries = [
        (entry(&mut s, "preemptor-borrowing", 1, 1), true),
        (entry(&mut s, "preemptor-not-borrowing", 1, 2), false),
        (entry(&mut s, "not-preemptor-not-borrowing", 2, 0), false),
    ];
    entries.sort_by(|(a, ab), (b, bb)| super::cycle::entry_order((a, *ab), (b, *bb)));
    let order: Vec<String> = entries.iter().map(|(c, _)| s.name(c.id)).collect();
    assert_eq!(
        order,
        [
            "not-preemptor-not-borrowing",
            "preemptor-not-borrowing",
            "preemptor-borrowing"
        ]
    );
}

/// What that order does over a settle: a workload that preempted waits for its victims like
/// any head, and a borrower of higher priority from another team may take the quota it freed
/// first (Kueue's "quota stealing", which only the off-by-default gate prevents). p evicts its
/// own team's a2 and then, as q, must borrow; q (priority 7) goes before p (5), and p, which
/// would still borrow, cannot reclaim from q.
#[test]
fn a_preemptor_does_not_go_before_other_teams() {
    let (o, _) = Scenario::pool(4)
        .borrowing("a", 16, None)
        .borrowing("c", 16, None)
        .running_with("a1", "a", 8, 10)
        .running_with("a2", "a", 16, 0)
        .running_with("c1", "c", 8, 9)
        .queued_with("p", "a", 16, 5)
        .queued_with("q", "c", 16, 7)
        .cycle();
    let (admitted, preempted, pending) = o.names();
    assert_eq!(admitted, ["q"]);
    assert_eq!(preempted, ["a2"]);
    assert_eq!(pending, ["a2", "p"]);
}

/// Two preemptors of one cycle that would evict the same workload: the second chooses again
/// against the cycle so far, as Kueue's `RecomputeAssignmentUponPreemptionTargetsOverlap`
/// (beta, on by default; `scheduler.go` `updateAssignmentIfNeeded`) does, and evicts another
/// victim in the same cycle. Expected result from Kueue's code, not from a Kueue test (its
/// recompute tests use hierarchical cohorts). Skipped instead, p2 left v's spare room to the
/// borrower x, which was admitted and evicted at the same instant.
#[test]
fn overlapping_preemption_targets_are_chosen_again() {
    let (o, _) = Scenario::pool(4)
        .borrowing("a", 16, None)
        .borrowing("g", 16, None)
        .borrowing("b", 0, None)
        .running_with("v", "b", 16, 0)
        .running_with("w", "b", 8, 1)
        .running_with("u", "b", 8, 10)
        .queued_with("p1", "a", 8, 0)
        .queued_with("p2", "g", 16, 0)
        .queued_with("x", "b", 8, 5)
        .cycle();
    let (admitted, preempted, _) = o.names();
    assert_eq!(admitted, ["p1", "p2"], "x is never admitted");
    assert_eq!(preempted, ["v", "w"]);
}

/// A preempted workload is back in line by priority, then creation time (Kueue's queue
/// order): under StrictFIFO it blocks its team only where it would be ahead. Here the
/// team's next job has the higher priority, so the victim of low priority waits behind it
/// and the next job is admitted once the victim is gone.
#[test]
fn a_strict_fifo_victim_blocks_only_the_jobs_it_is_ahead_of() {
    let (o, _) = Scenario::pool(4)
        .strict()
        .borrowing("alpha", 16, None)
        .borrowing("beta", 16, None)
        .running_with("use-all", "alpha", 32, LOW)
        .queued_with("next", "alpha", 24, NORMAL)
        .queued_with("preemptor", "beta", 8, LOW)
        .cycle();
    let (admitted, preempted, _) = o.names();
    assert_eq!(admitted, ["next", "preemptor"]);
    assert_eq!(preempted, ["use-all"]);
}

/// The same victim under BestEffortFIFO does not block its team: Kueue sets an inadmissible
/// head aside for the next (use-all, back in line, cannot fit: 32 GPUs where its team may
/// hold 24), so the team's smaller job is admitted.
#[test]
fn a_best_effort_fifo_victim_does_not_block_its_team() {
    let (o, _) = Scenario::pool(4)
        .borrowing("alpha", 16, None)
        .borrowing("beta", 16, None)
        .running_with("use-all", "alpha", 32, HIGH)
        .queued_with("pending", "alpha", 8, NORMAL)
        .queued_with("preemptor", "beta", 8, LOW)
        .cycle();
    let (admitted, preempted, _) = o.names();
    assert_eq!(admitted, ["pending", "preemptor"]);
    assert_eq!(preempted, ["use-all"]);
}
