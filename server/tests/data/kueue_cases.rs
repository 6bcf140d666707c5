//! Kueue conformance cases, ported from kubernetes-sigs/kueue at commit ff69552e79ad21652c36caa97038382e55625cf7.
//! One Kueue resource unit = one 8-GPU node. Expected results are Kueue's own.
//!
//! Time conventions: Kueue unit tests mostly reserve quota for every admitted
//! workload at the same instant (`now`); those cases keep equal `admitted_at`
//! values (Kueue then breaks ties by UID, which the tests leave unset, so no
//! ported expectation depends on such a tie). Where a Kueue test sets no
//! creation time, workloads get increasing seconds in the order the test
//! lists them.
//!
//! Shared, not duplicated: the lib's admission tests include this file (through
//! `server/src/cluster/admission/conformance_cases.rs`) and run the cases through Gantry's
//! admission rules; `server/tests/kube_flow.rs` includes it and replays the cases' expected
//! outcomes through the Kubernetes back end. Each reads only part of it.
#![allow(dead_code)]

pub struct Cq {
    pub name: &'static str,
    pub nominal: u32,
    pub borrowing_limit: Option<u32>,
    pub lending_limit: Option<u32>,
    pub strict: bool,
}

pub struct Wl {
    pub name: &'static str,
    pub cq: &'static str,
    pub units: u32,
    pub priority: i32,
    /// Creation time, seconds after the case's start (queue order).
    pub created: i64,
    /// For admitted workloads: when quota was reserved (victims are taken newest first).
    pub admitted_at: i64,
}

pub enum Kind {
    /// `GetTargets`: the victims the preemptor would get (none when it fits or cannot).
    Targets { preemptor: &'static str },
    /// One scheduling cycle, as `TestSchedule` runs it.
    Cycle,
    /// Scheduling until nothing changes, as an integration test waits for.
    Settle,
}

pub struct Case {
    pub source: &'static str,
    pub nodes: Option<u32>,
    pub cohort: bool,
    pub cqs: &'static [Cq],
    pub admitted: &'static [Wl],
    pub pending: &'static [Wl],
    pub kind: Kind,
    pub want_admitted: &'static [&'static str],
    pub want_preempted: &'static [&'static str],
    pub want_pending: &'static [&'static str],
}

pub const CASES: &[Case] = &[
    // ---------------------------------------------------------------------
    // pkg/scheduler/preemption/preemption_test.go, TestPreemption (GetTargets)
    // CQ "standalone": no cohort, cpu nominal 6 in flavor "default",
    // withinClusterQueue=LowerPriority. (It also has a second resource group
    // with memory in flavors alpha/beta, unused by the cpu-only cases below.)
    // All admitted workloads: QuotaReserved at `now` (equal admitted_at).
    // ---------------------------------------------------------------------
    Case {
        source: "pkg/scheduler/preemption/preemption_test.go TestPreemption \"preempt lowest priority\"",
        nodes: None,
        cohort: false,
        cqs: &[
            Cq { name: "standalone", nominal: 6, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "low", cq: "standalone", units: 2, priority: -1, created: 0, admitted_at: 5 },
            Wl { name: "mid", cq: "standalone", units: 2, priority: 0, created: 1, admitted_at: 5 },
            Wl { name: "high", cq: "standalone", units: 2, priority: 1, created: 2, admitted_at: 5 },
        ],
        pending: &[
            Wl { name: "in", cq: "standalone", units: 2, priority: 1, created: 10, admitted_at: 0 },
        ],
        kind: Kind::Targets { preemptor: "in" },
        want_admitted: &[],
        want_preempted: &["low"],
        want_pending: &[],
    },
    Case {
        source: "pkg/scheduler/preemption/preemption_test.go TestPreemption \"preempt multiple\"",
        nodes: None,
        cohort: false,
        cqs: &[
            Cq { name: "standalone", nominal: 6, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "low", cq: "standalone", units: 2, priority: -1, created: 0, admitted_at: 5 },
            Wl { name: "mid", cq: "standalone", units: 2, priority: 0, created: 1, admitted_at: 5 },
            Wl { name: "high", cq: "standalone", units: 2, priority: 1, created: 2, admitted_at: 5 },
        ],
        pending: &[
            Wl { name: "in", cq: "standalone", units: 3, priority: 1, created: 10, admitted_at: 0 },
        ],
        kind: Kind::Targets { preemptor: "in" },
        want_admitted: &[],
        want_preempted: &["low", "mid"],
        want_pending: &[],
    },
    Case {
        source: "pkg/scheduler/preemption/preemption_test.go TestPreemption \"no preemption for low priority\"",
        nodes: None,
        cohort: false,
        cqs: &[
            Cq { name: "standalone", nominal: 6, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "low", cq: "standalone", units: 3, priority: -1, created: 0, admitted_at: 5 },
            Wl { name: "mid", cq: "standalone", units: 3, priority: 0, created: 1, admitted_at: 5 },
        ],
        pending: &[
            Wl { name: "in", cq: "standalone", units: 1, priority: -1, created: 10, admitted_at: 0 },
        ],
        kind: Kind::Targets { preemptor: "in" },
        want_admitted: &[],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "pkg/scheduler/preemption/preemption_test.go TestPreemption \"not enough low priority workloads\"",
        nodes: None,
        cohort: false,
        cqs: &[
            Cq { name: "standalone", nominal: 6, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "low", cq: "standalone", units: 3, priority: -1, created: 0, admitted_at: 5 },
            Wl { name: "mid", cq: "standalone", units: 3, priority: 0, created: 1, admitted_at: 5 },
        ],
        pending: &[
            Wl { name: "in", cq: "standalone", units: 4, priority: 0, created: 10, admitted_at: 0 },
        ],
        kind: Kind::Targets { preemptor: "in" },
        want_admitted: &[],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "pkg/scheduler/preemption/preemption_test.go TestPreemption \"some free quota, preempt low priority\"",
        nodes: None,
        cohort: false,
        cqs: &[
            Cq { name: "standalone", nominal: 6, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "low", cq: "standalone", units: 1, priority: -1, created: 0, admitted_at: 5 },
            Wl { name: "mid", cq: "standalone", units: 1, priority: 0, created: 1, admitted_at: 5 },
            Wl { name: "high", cq: "standalone", units: 3, priority: 1, created: 2, admitted_at: 5 },
        ],
        pending: &[
            Wl { name: "in", cq: "standalone", units: 2, priority: 1, created: 10, admitted_at: 0 },
        ],
        kind: Kind::Targets { preemptor: "in" },
        want_admitted: &[],
        want_preempted: &["low"],
        want_pending: &[],
    },
    Case {
        source: "pkg/scheduler/preemption/preemption_test.go TestPreemption \"minimal set excludes low priority\"",
        nodes: None,
        cohort: false,
        cqs: &[
            Cq { name: "standalone", nominal: 6, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "low", cq: "standalone", units: 1, priority: -1, created: 0, admitted_at: 5 },
            Wl { name: "mid", cq: "standalone", units: 2, priority: 0, created: 1, admitted_at: 5 },
            Wl { name: "high", cq: "standalone", units: 3, priority: 1, created: 2, admitted_at: 5 },
        ],
        pending: &[
            Wl { name: "in", cq: "standalone", units: 2, priority: 1, created: 10, admitted_at: 0 },
        ],
        kind: Kind::Targets { preemptor: "in" },
        want_admitted: &[],
        want_preempted: &["mid"],
        want_pending: &[],
    },
    // CQs "a", "b", "c" in cohort "cohort-three": each cpu 2 and memory 2
    // (nominal only). "a" has withinClusterQueue=LowerPriority,
    // reclaimWithinCohort=Any; b and c never preempt here.
    Case {
        source: "pkg/scheduler/preemption/preemption_test.go TestPreemption \"preemptions from cq when target queue is exhausted for the single requested resource\"",
        // Only cpu is requested; memory unused.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "a", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "b", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "c", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "a1", cq: "a", units: 1, priority: -2, created: 0, admitted_at: 10 },
            Wl { name: "a2", cq: "a", units: 1, priority: -2, created: 1, admitted_at: 10 },
            Wl { name: "a3", cq: "a", units: 1, priority: -1, created: 2, admitted_at: 10 },
            Wl { name: "b1", cq: "b", units: 1, priority: 0, created: 3, admitted_at: 10 },
            Wl { name: "b2", cq: "b", units: 1, priority: 0, created: 4, admitted_at: 10 },
            Wl { name: "b3", cq: "b", units: 1, priority: 0, created: 5, admitted_at: 10 },
        ],
        pending: &[
            Wl { name: "in", cq: "a", units: 2, priority: 0, created: 20, admitted_at: 0 },
        ],
        kind: Kind::Targets { preemptor: "in" },
        want_admitted: &[],
        want_preempted: &["a1", "a2"],
        want_pending: &[],
    },
    Case {
        source: "pkg/scheduler/preemption/preemption_test.go TestPreemption \"preemptions from cq when target queue is exhausted for two requested resources\"",
        // cpu and memory are requested in identical amounts by every workload and
        // have identical quotas, so only one binding resource is modelled.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "a", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "b", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "c", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "a1", cq: "a", units: 1, priority: -2, created: 0, admitted_at: 10 },
            Wl { name: "a2", cq: "a", units: 1, priority: -2, created: 1, admitted_at: 10 },
            Wl { name: "a3", cq: "a", units: 1, priority: -1, created: 2, admitted_at: 10 },
            Wl { name: "b1", cq: "b", units: 1, priority: 0, created: 3, admitted_at: 10 },
            Wl { name: "b2", cq: "b", units: 1, priority: 0, created: 4, admitted_at: 10 },
            Wl { name: "b3", cq: "b", units: 1, priority: 0, created: 5, admitted_at: 10 },
        ],
        pending: &[
            Wl { name: "in", cq: "a", units: 2, priority: 0, created: 20, admitted_at: 0 },
        ],
        kind: Kind::Targets { preemptor: "in" },
        want_admitted: &[],
        want_preempted: &["a1", "a2"],
        want_pending: &[],
    },
    Case {
        source: "pkg/scheduler/preemption/preemption_test.go TestPreemption \"preemptions from cq when target queue is exhausted for one requested resource, but not the other\"",
        // Incoming requests cpu 2 + memory 2; admitted workloads use no memory,
        // so memory (2 free in "a" nominal) never binds: only cpu is modelled.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "a", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "b", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "c", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "a1", cq: "a", units: 1, priority: -2, created: 0, admitted_at: 10 },
            Wl { name: "a2", cq: "a", units: 1, priority: -2, created: 1, admitted_at: 10 },
            Wl { name: "a3", cq: "a", units: 1, priority: -1, created: 2, admitted_at: 10 },
            Wl { name: "b1", cq: "b", units: 1, priority: 0, created: 3, admitted_at: 10 },
            Wl { name: "b2", cq: "b", units: 1, priority: 0, created: 4, admitted_at: 10 },
            Wl { name: "b3", cq: "b", units: 1, priority: 0, created: 5, admitted_at: 10 },
        ],
        pending: &[
            Wl { name: "in", cq: "a", units: 2, priority: 0, created: 20, admitted_at: 0 },
        ],
        kind: Kind::Targets { preemptor: "in" },
        want_admitted: &[],
        want_preempted: &["a1", "a2"],
        want_pending: &[],
    },
    Case {
        source: "pkg/scheduler/preemption/preemption_test.go TestPreemption \"allow preemption from other cluster queues if target cq is not exhausted for the requested resource\"",
        // cpu only.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "a", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "b", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "c", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "a1", cq: "a", units: 1, priority: -1, created: 0, admitted_at: 10 },
            Wl { name: "b1", cq: "b", units: 1, priority: 0, created: 1, admitted_at: 10 },
            Wl { name: "b2", cq: "b", units: 1, priority: 0, created: 2, admitted_at: 10 },
            Wl { name: "b3", cq: "b", units: 1, priority: 0, created: 3, admitted_at: 10 },
            Wl { name: "b4", cq: "b", units: 1, priority: 0, created: 4, admitted_at: 10 },
            Wl { name: "b5", cq: "b", units: 1, priority: -1, created: 5, admitted_at: 10 },
        ],
        pending: &[
            Wl { name: "in", cq: "a", units: 2, priority: 0, created: 20, admitted_at: 0 },
        ],
        kind: Kind::Targets { preemptor: "in" },
        want_admitted: &[],
        want_preempted: &["a1", "b5"],
        want_pending: &[],
    },
    // ---------------------------------------------------------------------
    // pkg/scheduler/scheduler_test.go, TestSchedule (one cycle)
    // ---------------------------------------------------------------------
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"single clusterQueue full\"",
        // CQ "sales": no cohort, cpu nominal 50 (borrowingLimit 0), StrictFIFO,
        // default preemption (Never). "assigned" 40 pods x 1 cpu; "new" 11 pods x 1 cpu.
        // PartialAdmission gate is on but no pod set has minCount, so no partial
        // admission. Same priority (0): no LowerPriority candidates either, so the
        // preemption-policy difference does not matter. The namespace selector
        // matches the workload's namespace.
        nodes: None,
        cohort: false,
        cqs: &[
            Cq { name: "sales", nominal: 50, borrowing_limit: Some(0), lending_limit: None, strict: true },
        ],
        admitted: &[
            Wl { name: "assigned", cq: "sales", units: 40, priority: 0, created: 1, admitted_at: 2 },
        ],
        pending: &[
            Wl { name: "new", cq: "sales", units: 11, priority: 0, created: 0, admitted_at: 0 },
        ],
        kind: Kind::Cycle,
        want_admitted: &[],
        want_preempted: &[],
        want_pending: &["new"],
    },
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"not enough resources\"",
        // CQ "sales" (see above); nothing admitted, so no preemption candidates.
        nodes: None,
        cohort: false,
        cqs: &[
            Cq { name: "sales", nominal: 50, borrowing_limit: Some(0), lending_limit: None, strict: true },
        ],
        admitted: &[],
        pending: &[
            Wl { name: "new", cq: "sales", units: 100, priority: 0, created: 0, admitted_at: 0 },
        ],
        kind: Kind::Cycle,
        want_admitted: &[],
        want_preempted: &[],
        want_pending: &["new"],
    },
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"admit workload with zero-quantity request for resource not in ClusterQueue\"",
        // The extra zero request of example.com/gpu is dropped (it asks for
        // nothing); cpu 1 fits in "sales" (nominal 50).
        nodes: None,
        cohort: false,
        cqs: &[
            Cq { name: "sales", nominal: 50, borrowing_limit: Some(0), lending_limit: None, strict: true },
        ],
        admitted: &[],
        pending: &[
            Wl { name: "zero-resource-wl", cq: "sales", units: 1, priority: 0, created: 0, admitted_at: 0 },
        ],
        kind: Kind::Cycle,
        want_admitted: &["zero-resource-wl"],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"preempt when workload requests zero of a resource not defined in ClusterQueue\"",
        // CQ no cohort, cpu nominal 4, withinClusterQueue=LowerPriority. The
        // preemptor's zero request of example.com/gpu is dropped.
        nodes: None,
        cohort: false,
        cqs: &[
            Cq { name: "preempt-zero-gpu-cq", nominal: 4, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "low-priority", cq: "preempt-zero-gpu-cq", units: 4, priority: -1, created: 1, admitted_at: 2 },
        ],
        pending: &[
            Wl { name: "preemptor", cq: "preempt-zero-gpu-cq", units: 2, priority: 0, created: 0, admitted_at: 0 },
        ],
        kind: Kind::Cycle,
        want_admitted: &[],
        want_preempted: &["low-priority"],
        want_pending: &["preemptor"],
    },
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"workload exceeds lending limit when borrow in cohort\"",
        // Cohort "lend": lend-a cpu 3 (lendingLimit 2), lend-b cpu 2 (lendingLimit 2),
        // default preemption (Never). "b" (3 cpu, lend-b) cannot borrow past lend-a's
        // lending limit; "a" has the same priority, so no LowerPriority candidates
        // and nothing borrows, so no reclaim candidates: the policy difference does
        // not matter. Kueue: "b" is inadmissible.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "lend-a", nominal: 3, borrowing_limit: None, lending_limit: Some(2), strict: false },
            Cq { name: "lend-b", nominal: 2, borrowing_limit: None, lending_limit: Some(2), strict: false },
        ],
        admitted: &[
            Wl { name: "a", cq: "lend-b", units: 2, priority: 0, created: 0, admitted_at: 2 },
        ],
        pending: &[
            Wl { name: "b", cq: "lend-b", units: 3, priority: 0, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Cycle,
        want_admitted: &[],
        want_preempted: &[],
        want_pending: &["b"],
    },
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"two workloads can borrow the same resources from the same flavor in the same cycle if fits in the cohort quota\"",
        // cq1..cq3 in cohort "co": resources r1 and r2, each nominal 10 /
        // borrowingLimit 10, LowerPriority/Any. Only r1 is requested, so r1 is the
        // single modelled resource.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "cq1", nominal: 10, borrowing_limit: Some(10), lending_limit: None, strict: false },
            Cq { name: "cq2", nominal: 10, borrowing_limit: Some(10), lending_limit: None, strict: false },
            Cq { name: "cq3", nominal: 10, borrowing_limit: Some(10), lending_limit: None, strict: false },
        ],
        admitted: &[],
        pending: &[
            Wl { name: "wl1", cq: "cq1", units: 16, priority: -1, created: 0, admitted_at: 0 },
            Wl { name: "wl2", cq: "cq2", units: 14, priority: -2, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Cycle,
        want_admitted: &["wl1", "wl2"],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"only one workload can borrow one resources from the same flavor in the same cycle if cohort quota cannot fit\"",
        // Same CQs as the previous case; only r1 requested.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "cq1", nominal: 10, borrowing_limit: Some(10), lending_limit: None, strict: false },
            Cq { name: "cq2", nominal: 10, borrowing_limit: Some(10), lending_limit: None, strict: false },
            Cq { name: "cq3", nominal: 10, borrowing_limit: Some(10), lending_limit: None, strict: false },
        ],
        admitted: &[],
        pending: &[
            Wl { name: "wl1", cq: "cq1", units: 16, priority: -1, created: 0, admitted_at: 0 },
            Wl { name: "wl2", cq: "cq2", units: 16, priority: -2, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Cycle,
        want_admitted: &["wl1"],
        want_preempted: &[],
        want_pending: &["wl2"],
    },
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"minimal preemptions when target queue is exhausted\"",
        // Cohort "other": other-alpha/beta/gamma cpu nominal 2 each. Only
        // other-alpha has a pending workload; its policy is LowerPriority/Any.
        // All admitted at `now`.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "other-alpha", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "other-beta", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "other-gamma", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "a1", cq: "other-alpha", units: 1, priority: -2, created: 0, admitted_at: 10 },
            Wl { name: "a2", cq: "other-alpha", units: 1, priority: -2, created: 1, admitted_at: 10 },
            Wl { name: "a3", cq: "other-alpha", units: 1, priority: -1, created: 2, admitted_at: 10 },
            Wl { name: "b1", cq: "other-beta", units: 1, priority: 0, created: 3, admitted_at: 10 },
            Wl { name: "b2", cq: "other-beta", units: 1, priority: 0, created: 4, admitted_at: 10 },
            Wl { name: "b3", cq: "other-beta", units: 1, priority: 0, created: 5, admitted_at: 10 },
        ],
        pending: &[
            Wl { name: "incoming", cq: "other-alpha", units: 2, priority: 0, created: 6, admitted_at: 0 },
        ],
        kind: Kind::Cycle,
        want_admitted: &[],
        want_preempted: &["a1", "a2"],
        want_pending: &["incoming"],
    },
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"A workload is only eligible to do preemptions if it fits fully within nominal quota\"",
        // other-alpha (LowerPriority/Any) and other-beta, cpu nominal 2 each.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "other-alpha", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "other-beta", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "a1", cq: "other-alpha", units: 1, priority: -1, created: 0, admitted_at: 10 },
            Wl { name: "b1", cq: "other-beta", units: 1, priority: -1, created: 1, admitted_at: 10 },
        ],
        pending: &[
            Wl { name: "incoming", cq: "other-alpha", units: 3, priority: 1, created: 2, admitted_at: 0 },
        ],
        kind: Kind::Cycle,
        want_admitted: &[],
        want_preempted: &[],
        want_pending: &["incoming"],
    },
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"multiple preemptions without borrowing\"",
        // other-alpha/other-beta cpu nominal 2 each, withinClusterQueue=LowerPriority,
        // reclaimWithinCohort unset (Never) in Kueue. Nobody borrows, so
        // reclaimWithinCohort=Any would have no candidates either.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "other-alpha", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "other-beta", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "a1", cq: "other-alpha", units: 2, priority: 0, created: 0, admitted_at: 10 },
            Wl { name: "b1", cq: "other-beta", units: 2, priority: 0, created: 1, admitted_at: 10 },
        ],
        pending: &[
            Wl { name: "alpha-preemptor", cq: "other-alpha", units: 2, priority: 100, created: 2, admitted_at: 0 },
            Wl { name: "beta-preemptor", cq: "other-beta", units: 2, priority: 100, created: 3, admitted_at: 0 },
        ],
        // Kueue names both pending workloads "preemptor" (different namespaces);
        // renamed alpha-preemptor / beta-preemptor to keep names unique.
        kind: Kind::Cycle,
        want_admitted: &[],
        want_preempted: &["a1", "b1"],
        want_pending: &["alpha-preemptor", "beta-preemptor"],
    },
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"multiple preemptions preemption possible after earlier workload fits\"",
        // other-alpha cpu 1, other-beta cpu 2, withinClusterQueue=LowerPriority,
        // reclaim unset (Never) in Kueue; nobody borrows, so no reclaim candidates.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "other-alpha", nominal: 1, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "other-beta", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "b1", cq: "other-beta", units: 2, priority: 0, created: 0, admitted_at: 10 },
        ],
        pending: &[
            Wl { name: "fit", cq: "other-alpha", units: 1, priority: 100, created: 1, admitted_at: 0 },
            Wl { name: "preemptor", cq: "other-beta", units: 2, priority: 99, created: 2, admitted_at: 0 },
        ],
        kind: Kind::Cycle,
        want_admitted: &["fit"],
        want_preempted: &["b1"],
        want_pending: &["preemptor"],
    },
    Case {
        source: "pkg/scheduler/scheduler_test.go TestSchedule \"capacity not blocked when lending clusterqueue can reclaim (ReclaimWithinCohort=Any)\"",
        // Cohort "root" (flat): ClusterQueueA gpu 2 (reclaim Any, within unset),
        // ClusterQueueB gpu 0 (unset). a2-pending needs preemption in A but a1 has
        // the same priority (no LowerPriority candidates) and nobody borrows;
        // b1-pending fits by borrowing. So the policy difference does not matter.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "ClusterQueueA", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "ClusterQueueB", nominal: 0, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "a1-admitted", cq: "ClusterQueueA", units: 1, priority: 0, created: 0, admitted_at: 10 },
        ],
        pending: &[
            Wl { name: "a2-pending", cq: "ClusterQueueA", units: 2, priority: 0, created: 1, admitted_at: 0 },
            Wl { name: "b1-pending", cq: "ClusterQueueB", units: 1, priority: 0, created: 2, admitted_at: 0 },
        ],
        kind: Kind::Cycle,
        want_admitted: &["b1-pending"],
        want_preempted: &[],
        want_pending: &["a2-pending"],
    },
    // ---------------------------------------------------------------------
    // Integration tests (run to steady state). lowPriority=-1, midPriority=0,
    // highPriority=1. Multi-step tests are split into one Settle per step;
    // times are increasing seconds in creation/admission order (not given by Kueue).
    // Evicted workloads are requeued by Kueue and so count as pending at the end.
    // ---------------------------------------------------------------------
    Case {
        source: "test/integration/singlecluster/scheduler/preemption_test.go \"Should preempt Workloads in the cohort borrowing quota, when the ClusterQueue is using less than nominal quota\" (step 1: initial admission)",
        // Context "In a ClusterQueue that is part of a cohort": cohort "all", alpha-cq/beta-cq/gamma-cq cpu 2 each;
        // alpha-cq and gamma-cq LowerPriority/Any; beta-cq unset (its pending workloads have no
        // candidates under either policy in these steps).
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "alpha-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "beta-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "gamma-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "alpha-low", cq: "alpha-cq", units: 1, priority: -1, created: 0, admitted_at: 0 },
            Wl { name: "beta-mid", cq: "beta-cq", units: 1, priority: 0, created: 1, admitted_at: 0 },
            Wl { name: "beta-high", cq: "beta-cq", units: 4, priority: 1, created: 2, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["alpha-low", "beta-mid", "beta-high"],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/preemption_test.go \"Should preempt Workloads in the cohort borrowing quota, when the ClusterQueue is using less than nominal quota\" (step 2: alpha-mid preempts)",
        // Context "In a ClusterQueue that is part of a cohort": cohort "all", alpha-cq/beta-cq/gamma-cq cpu 2 each;
        // alpha-cq and gamma-cq LowerPriority/Any; beta-cq unset (its pending workloads have no
        // candidates under either policy in these steps).
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "alpha-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "beta-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "gamma-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "alpha-low", cq: "alpha-cq", units: 1, priority: -1, created: 0, admitted_at: 3 },
            Wl { name: "beta-mid", cq: "beta-cq", units: 1, priority: 0, created: 1, admitted_at: 4 },
            Wl { name: "beta-high", cq: "beta-cq", units: 4, priority: 1, created: 2, admitted_at: 5 },
        ],
        pending: &[
            Wl { name: "alpha-mid", cq: "alpha-cq", units: 2, priority: 0, created: 10, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["alpha-mid"],
        want_preempted: &["alpha-low", "beta-mid"],
        want_pending: &["alpha-low", "beta-mid"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/preemption_test.go \"Should preempt Workloads in the cohort borrowing quota, when the ClusterQueue is using less than nominal quota\" (step 3: after alpha-mid finishes, the preempted workloads are re-admitted)",
        // Context "In a ClusterQueue that is part of a cohort": cohort "all", alpha-cq/beta-cq/gamma-cq cpu 2 each;
        // alpha-cq and gamma-cq LowerPriority/Any; beta-cq unset (its pending workloads have no
        // candidates under either policy in these steps).
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "alpha-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "beta-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "gamma-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "beta-high", cq: "beta-cq", units: 4, priority: 1, created: 2, admitted_at: 5 },
        ],
        pending: &[
            Wl { name: "alpha-low", cq: "alpha-cq", units: 1, priority: -1, created: 0, admitted_at: 0 },
            Wl { name: "beta-mid", cq: "beta-cq", units: 1, priority: 0, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["alpha-low", "beta-mid"],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/preemption_test.go \"Should not preempt Workloads in the cohort, if the ClusterQueue requires borrowing\" (step 1: initial admission)",
        // Context "In a ClusterQueue that is part of a cohort": cohort "all", alpha-cq/beta-cq/gamma-cq cpu 2 each;
        // alpha-cq and gamma-cq LowerPriority/Any; beta-cq unset (its pending workloads have no
        // candidates under either policy in these steps).
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "alpha-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "beta-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "gamma-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "alpha-high-1", cq: "alpha-cq", units: 2, priority: 1, created: 0, admitted_at: 0 },
            Wl { name: "beta-low", cq: "beta-cq", units: 4, priority: -1, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["alpha-high-1", "beta-low"],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/preemption_test.go \"Should not preempt Workloads in the cohort, if the ClusterQueue requires borrowing\" (step 2)",
        // Context "In a ClusterQueue that is part of a cohort": cohort "all", alpha-cq/beta-cq/gamma-cq cpu 2 each;
        // alpha-cq and gamma-cq LowerPriority/Any; beta-cq unset (its pending workloads have no
        // candidates under either policy in these steps).
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "alpha-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "beta-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "gamma-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "alpha-high-1", cq: "alpha-cq", units: 2, priority: 1, created: 0, admitted_at: 2 },
            Wl { name: "beta-low", cq: "beta-cq", units: 4, priority: -1, created: 1, admitted_at: 3 },
        ],
        pending: &[
            Wl { name: "alpha-high-2", cq: "alpha-cq", units: 2, priority: 1, created: 10, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &[],
        want_preempted: &[],
        want_pending: &["alpha-high-2"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/preemption_test.go \"Should preempt all necessary workloads in concurrent scheduling with different priorities\" (step 1: initial admission)",
        // Context "In a ClusterQueue that is part of a cohort": cohort "all", alpha-cq/beta-cq/gamma-cq cpu 2 each;
        // alpha-cq and gamma-cq LowerPriority/Any; beta-cq unset (its pending workloads have no
        // candidates under either policy in these steps).
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "alpha-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "beta-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "gamma-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "beta-mid", cq: "beta-cq", units: 3, priority: 0, created: 0, admitted_at: 0 },
            Wl { name: "beta-high", cq: "beta-cq", units: 3, priority: 1, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["beta-mid", "beta-high"],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/preemption_test.go \"Should preempt all necessary workloads in concurrent scheduling with different priorities\" (step 2)",
        // Context "In a ClusterQueue that is part of a cohort": cohort "all", alpha-cq/beta-cq/gamma-cq cpu 2 each;
        // alpha-cq and gamma-cq LowerPriority/Any; beta-cq unset (its pending workloads have no
        // candidates under either policy in these steps).
        // Kueue asserts alpha-mid and gamma-mid admitted after beta-mid and beta-high are evicted;
        // that the evicted two stay pending is implied (cohort 6, 4 used, each needs 3), not asserted.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "alpha-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "beta-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
            Cq { name: "gamma-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "beta-mid", cq: "beta-cq", units: 3, priority: 0, created: 0, admitted_at: 2 },
            Wl { name: "beta-high", cq: "beta-cq", units: 3, priority: 1, created: 1, admitted_at: 3 },
        ],
        pending: &[
            Wl { name: "alpha-mid", cq: "alpha-cq", units: 2, priority: 0, created: 10, admitted_at: 0 },
            Wl { name: "gamma-mid", cq: "gamma-cq", units: 2, priority: 0, created: 11, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["alpha-mid", "gamma-mid"],
        want_preempted: &["beta-mid", "beta-high"],
        want_pending: &["beta-mid", "beta-high"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/preemption_test.go \"Should reclaim from cohort even if another CQ has pending workloads\" (step 1: use-all admitted, pending stays pending)",
        // Context "In a cohort with StrictFIFO": alpha-cq and beta-cq, cpu 2 each, StrictFIFO, LowerPriority/Any.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "alpha-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: true },
            Cq { name: "beta-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: true },
        ],
        admitted: &[
            Wl { name: "use-all", cq: "alpha-cq", units: 4, priority: 1, created: 0, admitted_at: 1 },
        ],
        pending: &[
            Wl { name: "pending", cq: "alpha-cq", units: 1, priority: 0, created: 2, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &[],
        want_preempted: &[],
        want_pending: &["pending"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/preemption_test.go \"Should reclaim from cohort even if another CQ has pending workloads\" (step 2: preemptor reclaims; use-all back at alpha's head blocks pending)",
        // As step 1, then "preemptor" (beta-cq, cpu 1, priority -1) reclaims beta's quota from use-all.
        // Kueue asserts preemptor admitted and use-all preempted and pending. Until kueue#8203
        // (5fd5eb9583) it also asserted "pending" pending; that commit relaxed the assert for a
        // race in which "pending" is admitted while use-all is between the cache and the queue,
        // which the maintainers call a priority inversion (kueue#8141): the assert before it is
        // Kueue's intended result (an evicted workload is queued by its creation time and, under
        // StrictFIFO, blocks the rest of its queue), and it is the one ported here.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "alpha-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: true },
            Cq { name: "beta-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: true },
        ],
        admitted: &[
            Wl { name: "use-all", cq: "alpha-cq", units: 4, priority: 1, created: 0, admitted_at: 1 },
        ],
        pending: &[
            Wl { name: "pending", cq: "alpha-cq", units: 1, priority: 0, created: 2, admitted_at: 0 },
            Wl { name: "preemptor", cq: "beta-cq", units: 1, priority: -1, created: 3, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["preemptor"],
        want_preempted: &["use-all"],
        want_pending: &["use-all", "pending"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/preemption_test.go \"Should be able to preempt when lending limit enabled\" (step 1: initial admission)",
        // Context "With lending limit": prod-cq cpu 5 lendingLimit 4 (reclaim Any, within unset: prod-cq has no
        // other workloads), dev-cq cpu 5 (unset; its evicted wl-1 needs borrowing, so no candidates either way).
        // Kueue asserts wl-1 preempted and wl-3 admitted; wl-1 staying pending is implied (10 total, 9 used).
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "prod-cq", nominal: 5, borrowing_limit: None, lending_limit: Some(4), strict: false },
            Cq { name: "dev-cq", nominal: 5, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "wl-1", cq: "dev-cq", units: 4, priority: 0, created: 0, admitted_at: 0 },
            Wl { name: "wl-2", cq: "dev-cq", units: 5, priority: 1, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["wl-1", "wl-2"],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/preemption_test.go \"Should be able to preempt when lending limit enabled\" (step 2)",
        // Context "With lending limit": prod-cq cpu 5 lendingLimit 4 (reclaim Any, within unset: prod-cq has no
        // other workloads), dev-cq cpu 5 (unset; its evicted wl-1 needs borrowing, so no candidates either way).
        // Kueue asserts wl-1 preempted and wl-3 admitted; wl-1 staying pending is implied (10 total, 9 used).
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "prod-cq", nominal: 5, borrowing_limit: None, lending_limit: Some(4), strict: false },
            Cq { name: "dev-cq", nominal: 5, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "wl-1", cq: "dev-cq", units: 4, priority: 0, created: 0, admitted_at: 2 },
            Wl { name: "wl-2", cq: "dev-cq", units: 5, priority: 1, created: 1, admitted_at: 3 },
        ],
        pending: &[
            Wl { name: "wl-3", cq: "prod-cq", units: 4, priority: 0, created: 10, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["wl-3"],
        want_preempted: &["wl-1"],
        want_pending: &["wl-1"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/scheduler_test.go \"Should schedule workloads borrowing quota from ClusterQueues in the same Cohort\" (step 1: before test-cq exists)",
        // prod-cq and dev-cq cpu 5 borrowingLimit 10 in cohort "all"; preemption unset, none needed.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "prod-cq", nominal: 5, borrowing_limit: Some(10), lending_limit: None, strict: false },
            Cq { name: "dev-cq", nominal: 5, borrowing_limit: Some(10), lending_limit: None, strict: false },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "wl-1", cq: "prod-cq", units: 11, priority: 0, created: 0, admitted_at: 0 },
            Wl { name: "wl-2", cq: "dev-cq", units: 11, priority: 0, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &[],
        want_preempted: &[],
        want_pending: &["wl-1", "wl-2"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/scheduler_test.go \"Should schedule workloads borrowing quota from ClusterQueues in the same Cohort\" (step 2: after test-cq, cpu 15 borrowingLimit 0, joins)",
        // prod-cq and dev-cq cpu 5 borrowingLimit 10 in cohort "all"; preemption unset, none needed.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "prod-cq", nominal: 5, borrowing_limit: Some(10), lending_limit: None, strict: false },
            Cq { name: "dev-cq", nominal: 5, borrowing_limit: Some(10), lending_limit: None, strict: false },
            Cq { name: "test-cq", nominal: 15, borrowing_limit: Some(0), lending_limit: None, strict: false },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "wl-1", cq: "prod-cq", units: 11, priority: 0, created: 0, admitted_at: 0 },
            Wl { name: "wl-2", cq: "dev-cq", units: 11, priority: 0, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["wl-1", "wl-2"],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/scheduler_test.go \"Should start workloads that are under min quota before borrowing\" (step 2: after p-wl-1 finishes)",
        // prod-cq cpu 2, dev-cq cpu 0, both StrictFIFO, cohort "all", preemption unset (no candidates:
        // same priority; dev-cq workload needs borrowing).
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "prod-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: true },
            Cq { name: "dev-cq", nominal: 0, borrowing_limit: None, lending_limit: None, strict: true },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "d-wl-1", cq: "dev-cq", units: 1, priority: 0, created: 1, admitted_at: 0 },
            Wl { name: "p-wl-2", cq: "prod-cq", units: 2, priority: 0, created: 2, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["p-wl-2"],
        want_preempted: &[],
        want_pending: &["d-wl-1"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/scheduler_test.go \"Should start workloads that are under min quota before borrowing\" (step 3: after p-wl-2 finishes)",
        // prod-cq cpu 2, dev-cq cpu 0, both StrictFIFO, cohort "all", preemption unset (no candidates:
        // same priority; dev-cq workload needs borrowing).
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "prod-cq", nominal: 2, borrowing_limit: None, lending_limit: None, strict: true },
            Cq { name: "dev-cq", nominal: 0, borrowing_limit: None, lending_limit: None, strict: true },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "d-wl-1", cq: "dev-cq", units: 1, priority: 0, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["d-wl-1"],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit workloads using borrowed ClusterQueue\" (LendingLimit context, step 1: prod-cq alone in cohort)",
        // When "Using cohorts for sharing with LendingLimit": prod-cq cpu 5 lendingLimit 1; dev-cq cpu 5
        // lendingLimit 4 is added in step 2. Preemption unset, none needed.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "prod-cq", nominal: 5, borrowing_limit: None, lending_limit: Some(1), strict: false },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "wl", cq: "prod-cq", units: 9, priority: 0, created: 0, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &[],
        want_preempted: &[],
        want_pending: &["wl"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit workloads using borrowed ClusterQueue\" (LendingLimit context, step 2: dev-cq added)",
        // When "Using cohorts for sharing with LendingLimit": prod-cq cpu 5 lendingLimit 1; dev-cq cpu 5
        // lendingLimit 4 is added in step 2. Preemption unset, none needed.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "prod-cq", nominal: 5, borrowing_limit: None, lending_limit: Some(1), strict: false },
            Cq { name: "dev-cq", nominal: 5, borrowing_limit: None, lending_limit: Some(4), strict: false },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "wl", cq: "prod-cq", units: 9, priority: 0, created: 0, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["wl"],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit workloads after updating lending limit\" (step 1)",
        // prod-cq and dev-cq cpu 5, lendingLimit 0, cohort "all"; step 2 raises dev-cq lendingLimit to 5.
        // Preemption unset; same priorities and wl-2 needs borrowing, so no candidates.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "prod-cq", nominal: 5, borrowing_limit: None, lending_limit: Some(0), strict: false },
            Cq { name: "dev-cq", nominal: 5, borrowing_limit: None, lending_limit: Some(0), strict: false },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "wl-1", cq: "prod-cq", units: 5, priority: 0, created: 0, admitted_at: 0 },
            Wl { name: "wl-2", cq: "prod-cq", units: 5, priority: 0, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["wl-1"],
        want_preempted: &[],
        want_pending: &["wl-2"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit workloads after updating lending limit\" (step 2: dev-cq lendingLimit 5)",
        // prod-cq and dev-cq cpu 5, lendingLimit 0, cohort "all"; step 2 raises dev-cq lendingLimit to 5.
        // Preemption unset; same priorities and wl-2 needs borrowing, so no candidates.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "prod-cq", nominal: 5, borrowing_limit: None, lending_limit: Some(0), strict: false },
            Cq { name: "dev-cq", nominal: 5, borrowing_limit: None, lending_limit: Some(5), strict: false },
        ],
        admitted: &[
            Wl { name: "wl-1", cq: "prod-cq", units: 5, priority: 0, created: 0, admitted_at: 2 },
        ],
        pending: &[
            Wl { name: "wl-2", cq: "prod-cq", units: 5, priority: 0, created: 1, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["wl-2"],
        want_preempted: &[],
        want_pending: &[],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/scheduler_test.go \"Should schedule workloads by their priority strictly\"",
        // strict-fifo-cq: cpu 5 borrowingLimit 0, StrictFIFO, alone in cohort "cohort"; namespace selector
        // matches. Preemption unset; wl2/wl3 have lower priority than wl1, so no LowerPriority candidates.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "strict-fifo-cq", nominal: 5, borrowing_limit: Some(0), lending_limit: None, strict: true },
        ],
        admitted: &[
        ],
        pending: &[
            Wl { name: "wl1", cq: "strict-fifo-cq", units: 2, priority: 100, created: 0, admitted_at: 0 },
            Wl { name: "wl2", cq: "strict-fifo-cq", units: 5, priority: 10, created: 1, admitted_at: 0 },
            Wl { name: "wl3", cq: "strict-fifo-cq", units: 1, priority: 1, created: 2, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["wl1"],
        want_preempted: &[],
        want_pending: &["wl2", "wl3"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/scheduler_test.go \"foundation-queue allows best-effort queue to use capacity until it is ready to admit next workload\" (step 1)",
        // foundation-queue cpu 2 StrictFIFO, reclaimWithinCohort=Any (within unset; it holds only same-priority
        // workloads); best-effort-queue cpu 0 (unset; its workloads always need borrowing). Kueue generates
        // the workload names; named f1, f2, be1, be2 here. f: priority 1000; be: priority 0. Kueue checks
        // the counts via metrics.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "foundation-queue", nominal: 2, borrowing_limit: None, lending_limit: None, strict: true },
            Cq { name: "best-effort-queue", nominal: 0, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "f1", cq: "foundation-queue", units: 1, priority: 1000, created: 0, admitted_at: 1 },
        ],
        pending: &[
            Wl { name: "f2", cq: "foundation-queue", units: 2, priority: 1000, created: 2, admitted_at: 0 },
            Wl { name: "be1", cq: "best-effort-queue", units: 1, priority: 0, created: 3, admitted_at: 0 },
            Wl { name: "be2", cq: "best-effort-queue", units: 1, priority: 0, created: 4, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["be1"],
        want_preempted: &[],
        want_pending: &["f2", "be2"],
    },
    Case {
        source: "test/integration/singlecluster/scheduler/scheduler_test.go \"foundation-queue allows best-effort queue to use capacity until it is ready to admit next workload\" (step 2: after f1 finishes)",
        // foundation-queue cpu 2 StrictFIFO, reclaimWithinCohort=Any (within unset; it holds only same-priority
        // workloads); best-effort-queue cpu 0 (unset; its workloads always need borrowing). Kueue generates
        // the workload names; named f1, f2, be1, be2 here. f: priority 1000; be: priority 0. Kueue checks
        // the counts via metrics.
        nodes: None,
        cohort: true,
        cqs: &[
            Cq { name: "foundation-queue", nominal: 2, borrowing_limit: None, lending_limit: None, strict: true },
            Cq { name: "best-effort-queue", nominal: 0, borrowing_limit: None, lending_limit: None, strict: false },
        ],
        admitted: &[
            Wl { name: "be1", cq: "best-effort-queue", units: 1, priority: 0, created: 3, admitted_at: 5 },
        ],
        pending: &[
            Wl { name: "f2", cq: "foundation-queue", units: 2, priority: 1000, created: 2, admitted_at: 0 },
            Wl { name: "be2", cq: "best-effort-queue", units: 1, priority: 0, created: 4, admitted_at: 0 },
        ],
        kind: Kind::Settle,
        want_admitted: &["f2"],
        want_preempted: &["be1"],
        want_pending: &["be1", "be2"],
    },
];

/// Cases read and left out, with why.
pub const NOT_PORTED: &[(&str, &str)] = &[
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"only preempt workloads using the chosen flavor\"", "two flavors (alpha/beta) and two resources"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"reclaim quota from borrower\"", "preemptor CQ c1 has reclaimWithinCohort=LowerPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"reclaim quota if workload requests 0 resources for a resource at nominal quota\"", "preemptor CQ c1 reclaimWithinCohort=LowerPriority; cpu+memory"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"no workloads borrowing\"", "preemptor CQ c1 reclaimWithinCohort=LowerPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"not enough workloads borrowing\"", "preemptor CQ c1 reclaimWithinCohort=LowerPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"preempting locally and borrowing other resources in cohort, without cohort candidates\"", "c1 reclaim LowerPriority; two binding resources"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"preempting locally and borrowing same resource in cohort\"", "preemptor CQ c1 reclaimWithinCohort=LowerPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"preempting locally and borrowing same resource in cohort; no borrowing limit in the cohort\"", "preemptor CQ d1 reclaimWithinCohort=LowerPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"preempting locally and borrowing other resources in cohort, with cohort candidates\"", "c1 reclaim LowerPriority; two binding resources"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"preempting locally and not borrowing same resource in 1-queue cohort\"", "preemptor CQ l1 reclaimWithinCohort=LowerPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"do not reclaim borrowed quota from same priority for withinCohort=ReclaimFromLowerPriority\"", "preemptor CQ c1 reclaimWithinCohort=LowerPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"reclaim borrowed quota from same priority for withinCohort=ReclaimFromAny\"", "preemptor CQ c2 has withinClusterQueue=Never"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"preempt from all ClusterQueues in cohort\"", "preemptor CQ c1 reclaimWithinCohort=LowerPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"can't preempt workloads in ClusterQueue for withinClusterQueue=Never\"", "preemptor CQ c2 has withinClusterQueue=Never"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"each podset preempts a different flavor\"", "several pod sets and flavors"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"preempt newer workloads with the same priority\"", "LowerOrNewerEqualPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"use BorrowWithinCohort; allow preempting a lower-priority workload from another ClusterQueue while borrowing\"", "borrowWithinCohort"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"use BorrowWithinCohort; don't allow preempting a lower-priority workload with priority above MaxPriorityThreshold, if borrowing is required even after the preemption\"", "borrowWithinCohort"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"use BorrowWithinCohort; allow preempting a lower-priority workload with priority above MaxPriorityThreshold, if borrowing is not required after the preemption\"", "borrowWithinCohort"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"use BorrowWithinCohort; don't allow for preemption of lower-priority workload from the same ClusterQueue\"", "borrowWithinCohort"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"use BorrowWithinCohort; only preempt from CQ if no workloads below threshold and already above nominal\"", "borrowWithinCohort"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"use BorrowWithinCohort; preempt from CQ and from other CQs with workloads below threshold\"", "borrowWithinCohort"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"reclaim quota from lender\"", "preemptor CQ lend1 reclaimWithinCohort=LowerPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"preempt from all ClusterQueues in cohort-lend\"", "preemptor CQ lend1 reclaimWithinCohort=LowerPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"cannot preempt from other ClusterQueues if exceeds requestable quota including lending limit\"", "preemptor CQ lend1 reclaimWithinCohort=LowerPriority"),
    ("pkg/scheduler/preemption/preemption_test.go TestPreemption \"long range preemption\"", "hierarchical cohorts"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"use second flavor when the first has no preemption candidates; WhenCanPreempt: MayStopSearch\"", "two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"workload fits in single clusterQueue, with check state ready\"", "admission checks"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"skip workload with missing or deleted ClusterQueue (NoFit)\"", "missing ClusterQueue"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"flavors with mixed misconfiguration and insufficient quota\"", "several flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"flavors with mixed taint mismatch and exceeding limits\"", "several flavors, taints"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"flavors are structurally incompatible\"", "several flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"workload fits in single clusterQueue, with check state pending\"", "admission checks"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"error during admission\"", "injected API error"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"failed to match clusterQueue selector\"", "namespace selector"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"admit in different cohorts\"", "eng-alpha has two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"admit in same cohort with no borrowing\"", "two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"assign multiple resources and flavors\"", "several pod sets, resources, flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"cannot borrow if cohort was assigned and would result in overadmission\"", "two flavors (eng CQs)"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"can borrow if cohort was assigned and will not result in overadmission\"", "two flavors (eng CQs)"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"can borrow if needs reclaim from cohort in different flavor\"", "two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"hierarchical cohort respects lending limit when borrowing\"", "hierarchical cohorts"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"hierarchical cohort allows borrowing up to lending limit\"", "hierarchical cohorts"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"preempt workloads in ClusterQueue and cohort\"", "two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"multiple CQs need preemption\"", "other-alpha has preemption unset and its pending workload would have LowerPriority candidates under Gantry's policy"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"cannot borrow resource not listed in clusterQueue\"", "resource not in ClusterQueue / two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"not enough resources to borrow, fallback to next flavor; WhenCanPreempt: TryNextFlavor\"", "two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"workload should not fit in nonexistent clusterQueue\"", "nonexistent ClusterQueue"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"workload should not fit in clusterQueue with nonexistent flavor\"", "nonexistent flavor (inactive CQ)"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"no overadmission while borrowing\"", "two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"partial admission single variable pod set\"", "partial admission"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"partial admission single variable pod set, preempt first\"", "partial admission"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"partial admission single variable pod set, preempt with partial admission\"", "partial admission"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"partial admission multiple variable pod sets\"", "partial admission"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"partial admission disabled, multiple variable pod sets\"", "several pod sets / resources"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"two workloads can borrow different resources from the same flavor in the same cycle\"", "two binding resources (r1, r2)"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"preemption while borrowing, workload waiting for preemption should not block a borrowing workload in another CQ\"", "borrowWithinCohort, reclaim LowerPriority"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"multiple preemptions skip preemption when shared limited resource\"", "borrowWithinCohort"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"container does not satisfy limitRange constraints\"", "LimitRange"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"container resource requests exceed limits\"", "requests/limits validation"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"prefer reclamation over cq priority based preemption\"", "two flavors, reclaim LowerPriority"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"prefer first preemption flavor when second flavor requires both reclaim and cq priority preemption\"", "two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"prefer first preemption flavor when second flavor also requires cq preemption\"", "two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"workload requiring reclaimation prioritized over wl in another full cq\"", "CQ1 preemption unset and its pending WL1 would have reclaim candidates under Gantry's policy"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"capacity blocked when lending clusterqueue not guaranteed to reclaim (ReclaimWithinCohort=LowerPriority)\"", "reclaimWithinCohort=LowerPriority is the point of the case"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"capacity blocked when lending clusterqueue not guaranteed to reclaim (ReclaimWithinCohort=Never)\"", "reclaimWithinCohort=Never is the point of the case"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"in a hierarchical cohort, workload borrowing less is scheduled first\"", "hierarchical cohorts"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"don't assign flavor if there are no candidates for preemption\"", "two flavors, borrowWithinCohort"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"workload-slice fits in single clusterQueue\"", "workload slices"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"pending admission check with nofit and fit flavors\"", "admission checks, two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"admit to second flavor when first needs preemption; WhenCanPreempt: TryNextFlavor\"", "two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"PreemptionOverBorrowing preference: preempt in first flavor instead of borrowing in second\"", "two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"PreemptionOverBorrowing preference: select fitting second flavor over first flavor with no preemption candidates\"", "two flavors, hierarchical cohorts"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"BorrowingOverPreemption preference: borrow in second flavor instead of preempting in first\"", "two flavors"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"block preemptions and signal `BlockedOnPreemptionGates` when a preemption gate is present\"", "preemption gates (multikueue), two resource groups"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"do not signal `BlockedOnPreemptionGates` when a preemption gate is present, but the workload fits without preemption\"", "preemption gates (multikueue)"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"do not signal `BlockedOnPreemptionGates` when a preemption gate is present, but the workload had nothing to preempt\"", "preemption gates (multikueue)"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"prevent integer overflow when sum of requests over podsets exceeds MaxInt64\"", "quantity overflow, several pod sets"),
    ("pkg/scheduler/scheduler_test.go TestSchedule \"prevent integer overflow in ResourceValue conversion to MilliValue\"", "quantity overflow"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"Should preempt Workloads with lower priority when there is not enough quota\"", "LowerOrNewerEqualPriority"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"Should retry on failed preemptions\"", "LowerOrNewerEqualPriority; API failure injection"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"Should preempt newer Workloads with the same priority when there is not enough quota\"", "LowerOrNewerEqualPriority"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"Should issue preemption exactly once for each preempted workload\"", "LowerOrNewerEqualPriority; API call counting"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"Should include job UID in preemption condition when the label is set\"", "condition message only"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"Should preempt all necessary workloads in concurrent scheduling with the same priority (RecomputeAssignmentUponPreemptionTargetsOverlap=true)\"", "result nondeterministic (any one of three same-priority workloads survives)"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"Should preempt all necessary workloads in concurrent scheduling with the same priority (RecomputeAssignmentUponPreemptionTargetsOverlap=false)\"", "result nondeterministic (any one of three same-priority workloads survives)"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"should allow preempting workloads while borrowing\"", "borrowWithinCohort"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"When borrowWithinCohort is used and PrioritySortingWithinCohort disabled: should allow preempting workloads while borrowing\"", "borrowWithinCohort"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"workloads in guaranteed cq should have preferential access to the resources\"", "hierarchical cohorts"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"Should preempt on-scale-up Workloads with lower priority when there is not enough quota\"", "elastic workload slices"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"Should prevent other workloads from stealing quota when a preemptor is waiting for multiple evictions\"", "borrowWithinCohort, reclaim LowerPriority"),
    ("test/integration/singlecluster/scheduler/preemption_test.go \"Should not block lower priority workloads while the preemption gate is closed\"", "preemption gates"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit workloads as they fit in their ClusterQueue\"", "two flavors (tainted spot + on-demand)"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit workloads as number of pods allows it\"", "pod-count limits"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit workloads as the number of pods (only) allows it\"", "pod-count limits"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit workloads when resources are dynamically reclaimed\"", "reclaimable pods"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit workloads with admission checks\"", "admission checks"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit workloads according to their priorities\"", "prod-cq has two flavors; hold stop policy"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"when PriorityBoost is enabled, boosting a low-priority pending workload preempts the running workload\"", "priority boost"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit two small workloads after a big one finishes\"", "prod-cq has two flavors"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"Should admit workloads using borrowed ClusterQueue (Using cohorts for sharing unused resources)\"", "two flavors"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"Should try next flavor if can't preempt on first\"", "two flavors"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"Workloads not matching namespaceSelector should not block others\"", "namespace selector"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"shouldn't admit second workload on over admission\"", "two binding resources (cpu, memory) and CQ update"),
    ("test/integration/singlecluster/scheduler/scheduler_test.go \"foundation-queue blocks capacity when it is not sure that it can reclaim\"", "preemptor CQ reclaimWithinCohort=LowerPriority is the point of the case"),
];
