//! The Kueue conformance table, kept in `server/tests/data/kueue_cases.rs` so the
//! Kubernetes flow test (`server/tests/kube_flow.rs`) replays the same cases; included here
//! for the admission rules' own conformance test (`super::conformance`).

#[path = "../../../tests/data/kueue_cases.rs"]
mod kueue_cases;

pub(super) use kueue_cases::{Case, Cq, Kind, Wl, CASES, NOT_PORTED};
