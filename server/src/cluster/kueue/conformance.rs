//! Kueue conformance: the cases of `server/tests/data/kueue_cases.rs` (included as
//! `conformance_cases`), ported from Kueue's own tests with
//! Kueue's expected results, run through Gantry's admission rules. One Kueue resource unit is
//! one whole 8-GPU node; a pool has as many nodes as its ClusterQueues' nominal quotas add up
//! to, so (as in Kueue's tests) only quota binds.

use std::collections::{BTreeSet, HashMap};

use chrono::TimeZone;

use super::*;

use super::conformance_cases::{Case, Cq, Kind, Wl};

const GPUS: u32 = 8;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

/// What a case ended with: names admitted, preempted and left pending.
#[derive(Debug, Default, PartialEq)]
struct Result {
    admitted: BTreeSet<&'static str>,
    preempted: BTreeSet<&'static str>,
    pending: BTreeSet<&'static str>,
}

/// One cohort of the case (all its queues, or one queue standing alone) and its queue.
fn run_group(case: &Case, cqs: &[&Cq], out: &mut Result) {
    let nominal: u32 = cqs.iter().map(|q| q.nominal).sum();
    let nodes = case.nodes.unwrap_or(nominal).max(1);
    let mut co = Cohort::new(PoolCapacity::new("pool", nodes as usize, GPUS));
    for q in cqs {
        co.set_quota(
            q.name,
            Quota {
                nominal: q.nominal * GPUS,
                borrowing_limit: q.borrowing_limit.map(|l| l * GPUS),
                lending_limit: q.lending_limit.map(|l| l * GPUS),
                strategy: if q.strict {
                    QueueingStrategy::StrictFifo
                } else {
                    QueueingStrategy::BestEffortFifo
                },
            },
        );
    }
    let mut names: HashMap<Wid, &'static str> = HashMap::new();
    let mut next: Wid = 0;
    let mut candidate = |co: &mut Cohort, w: &Wl| {
        next += 1;
        names.insert(next, w.name);
        Candidate {
            id: next,
            team: co.team(w.cq),
            gpus: w.units * GPUS,
            priority: w.priority,
            submitted_at: t0() + chrono::Duration::seconds(w.created),
        }
    };
    let in_group = |w: &&Wl| cqs.iter().any(|q| q.name == w.cq);
    for w in case.admitted.iter().filter(in_group) {
        let c = candidate(&mut co, w);
        let p = co.capacity.place(c.gpus).unwrap_or_else(|| {
            panic!("{}: admitted {} does not fit the pool", case.source, w.name)
        });
        co.admit(&c, p, t0() + chrono::Duration::seconds(w.admitted_at));
    }
    let mut queue = Queue::default();
    let mut by_name: HashMap<&str, Candidate> = HashMap::new();
    for w in case.pending.iter().filter(in_group) {
        let c = candidate(&mut co, w);
        by_name.insert(w.name, c.clone());
        queue.push(c);
    }
    let at = t0() + chrono::Duration::hours(1);
    let name = |id: &Wid| names[id];
    match case.kind {
        Kind::Targets { preemptor } => {
            let Some(c) = by_name.get(preemptor) else {
                return;
            };
            if let Mode::Preempt { targets, .. } = co.nominate(c) {
                out.preempted.extend(targets.iter().map(|(id, _)| name(id)));
            }
        }
        Kind::Cycle => {
            let heads = co.heads(&queue, &[], &[]);
            let cycle = co.schedule(&heads, at);
            out.admitted
                .extend(cycle.admitted.iter().map(|(id, _)| name(id)));
            out.preempted
                .extend(cycle.preempted.iter().map(|(id, _)| name(id)));
            let admitted: BTreeSet<Wid> = cycle.admitted.iter().map(|(id, _)| *id).collect();
            out.pending.extend(
                queue
                    .iter()
                    .filter(|c| !admitted.contains(&c.id))
                    .map(|c| name(&c.id)),
            );
        }
        Kind::Settle => {
            let decisions = co.settle(&mut queue, at, true);
            for d in &decisions {
                match d {
                    Decision::Admit(id, _) if co.admitted.contains_key(id) => {
                        out.admitted.insert(name(id));
                    }
                    Decision::Evict(id, ..) => {
                        out.preempted.insert(name(id));
                    }
                    Decision::Admit(..) => {}
                }
            }
            out.pending.extend(queue.iter().map(|c| name(&c.id)));
        }
    }
}

fn run(case: &Case) -> Result {
    let mut out = Result::default();
    if case.cohort {
        let all: Vec<&Cq> = case.cqs.iter().collect();
        run_group(case, &all, &mut out);
    } else {
        for q in case.cqs {
            run_group(case, &[q], &mut out);
        }
    }
    out
}

#[test]
fn kueue_conformance() {
    use super::conformance_cases::{CASES, NOT_PORTED};
    assert!(CASES.len() >= 40, "at least 40 ported cases");
    let mut failures = Vec::new();
    for case in CASES {
        let got = run(case);
        let want = Result {
            admitted: case.want_admitted.iter().copied().collect(),
            preempted: case.want_preempted.iter().copied().collect(),
            pending: case.want_pending.iter().copied().collect(),
        };
        if got != want {
            failures.push(format!("{}\n  want {want:?}\n  got  {got:?}", case.source));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} Kueue cases differ ({} listed as not expressible):\n{}",
        failures.len(),
        CASES.len(),
        NOT_PORTED.len(),
        failures.join("\n")
    );
}
