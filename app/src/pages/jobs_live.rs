//! The Jobs list patched from the live stream. A change of a job the viewer may see carries
//! the job's list row: the shown page updates, inserts or removes that row by the page's own
//! terms ([`JobTerms::matches`], the rule the server's query follows) and its place in the
//! newest-first order, and keeps its count. What a row cannot tell asks for a refetch
//! instead: missed changes, another team's job moving a queue this page shows, a job whose
//! place in the list is on another page while the page filters by state.

use crate::live::Change;
use crate::model::{Job, JobFacts, JobKey, JobList, JobState, JobTerms};

/// What a change did to the shown page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Patched {
    /// Nothing shown changed.
    Nothing,
    /// The page was patched in place.
    Changed,
    /// The page cannot be patched exactly: ask the server again.
    Refetch,
}

fn facts(j: &Job) -> JobFacts<'_> {
    JobFacts {
        team: &j.team,
        user: &j.user,
        state: j.state,
        pool: &j.pool,
        name: &j.name,
        template: &j.template,
        created_at: j.created_at,
    }
}

/// The server's order: newest first by submission time, then by id, both descending.
fn key(j: &Job) -> (chrono::DateTime<chrono::Utc>, &str) {
    (j.created_at, j.id.as_str())
}

/// Applies `c` to the shown page `list` of the list `terms` make.
pub fn patch(list: &mut JobList, terms: &JobTerms, c: &Change) -> Patched {
    let Some(row) = c.row.as_deref() else {
        if c.is_everything() || list.jobs.iter().any(|j| j.id == c.job_id) {
            return Patched::Refetch;
        }
        // Another team's job: the shown queued jobs of that pool may have moved.
        return if queued_behind(list, &c.pool, "", 0) {
            Patched::Refetch
        } else {
            Patched::Nothing
        };
    };
    let was = list.jobs.iter().position(|j| j.id == row.id);
    // Where the row stood before: its state and queue position.
    let before = was.map(|i| (list.jobs[i].state, list.jobs[i].queue_position));
    // Queue positions of the other shown rows of the pool: a job that joined ahead of them
    // or left the queue moves them; the row tells its own place, not theirs. The row may be
    // newer than the change (a change sent again carries the row as it is now): a change
    // that took the job out of the queue counts as that even when its row is already
    // running. (A launch whose row is already admitted is taken by its row: admitted at
    // once, it never held a place; had it waited, its admission is a change of its own.)
    let to = match c.state {
        Some(s @ (JobState::Admitted | JobState::Cancelled)) => s,
        _ => row.state,
    };
    let moves_others = match to {
        JobState::Queued => match (before, row.queue_position) {
            (Some((JobState::Queued, Some(b))), Some(p)) if b == p => false,
            (_, Some(p)) => queued_behind(list, &row.pool, &row.id, p),
            (_, None) => queued_behind(list, &row.pool, &row.id, 0),
        },
        // Admitted from the queue, or cancelled while it may have waited (a brand-new job
        // admitted at once never held a place; nor did one shown as already admitted).
        JobState::Admitted | JobState::Cancelled => {
            let from = match before {
                Some((JobState::Queued, p)) => Some(p.unwrap_or(0)),
                Some(_) => None,
                None if to == JobState::Admitted && launched_by(row, c) => None,
                None => Some(0),
            };
            from.is_some_and(|p| queued_behind(list, &row.pool, &row.id, p))
        }
        // From admitted or running: it held no place in the queue.
        JobState::Running | JobState::Succeeded | JobState::Failed => false,
    };
    let belongs = terms.matches(facts(row));
    let out = match was {
        Some(i) if belongs => {
            if crate::pages::jobs_wire::same_row(&list.jobs[i], row) {
                Patched::Nothing
            } else {
                list.jobs[i] = row.clone();
                Patched::Changed
            }
        }
        Some(i) => {
            list.jobs.remove(i);
            list.total = list.total.saturating_sub(1);
            Patched::Changed
        }
        // Not in the list now. Under a state filter it may have been, on another page, and
        // counted: it just left that state (a running job that succeeded).
        None if !belongs => {
            if (terms.state.is_some() || terms.active) && list.total > list.jobs.len() as u64 {
                Patched::Refetch
            } else {
                Patched::Nothing
            }
        }
        None => {
            // Not shown, and in the list. The page spans from where it starts (the first
            // page: everything newer; a later one: past its cursor's job, the last of the
            // page before) to its last row (or everything older when there is no next page).
            // Not from its first row: a later page may have none left, or a row may now
            // match that sits between the cursor and the first row shown.
            let above = list
                .after
                .as_ref()
                .is_some_and(|a| key(row) >= (a.created_at, a.id.as_str()));
            let below =
                list.next_cursor.is_some() && list.jobs.last().is_none_or(|l| key(row) < key(l));
            if !above && !below {
                // Within the shown span it would be shown had it matched before: it is new to
                // the list (launched, or it now has the state the page filters by).
                let at = list
                    .jobs
                    .iter()
                    .position(|j| key(j) < key(row))
                    .unwrap_or(list.jobs.len());
                list.jobs.insert(at, row.clone());
                list.total += 1;
                newer_than_counted(list, row);
                Patched::Changed
            } else if terms.state.is_none() && !terms.active {
                // The terms do not depend on the state, so a job on another page was counted
                // already; only a new job adds to the count. A launch told of after the list
                // was read may be in it all the same (stored while the list was being read):
                // newer than the newest job the count held, it was not; otherwise it may
                // have been (launches are not stored in the order of their times), so the
                // count is asked for again.
                if above && launched_by(row, c) {
                    if newer_than_counted(list, row) {
                        list.total += 1;
                        Patched::Changed
                    } else {
                        Patched::Refetch
                    }
                } else {
                    Patched::Nothing
                }
            } else {
                // On another page, under a state filter: whether it was counted is unknown.
                Patched::Refetch
            }
        }
    };
    if moves_others {
        Patched::Refetch
    } else {
        out
    }
}

/// Whether `c` is the launch of `row`: its submission is no earlier than the change. To the
/// millisecond, as the database keeps it (the change's time has the clock's full precision,
/// and a launch at 10.000123 s is stored as 10.000 s).
fn launched_by(row: &Job, c: &Change) -> bool {
    row.created_at.timestamp_millis() >= c.at.timestamp_millis()
}

/// Whether `row` is newer than every job `list.total` counts ([`JobList::newest`]); if so, it
/// is counted from now on.
fn newer_than_counted(list: &mut JobList, row: &Job) -> bool {
    let newer = list
        .newest
        .as_ref()
        .is_none_or(|n| key(row) > (n.created_at, n.id.as_str()));
    if newer {
        list.newest = Some(JobKey::of(row));
    }
    newer
}

/// Whether the page shows a queued job of `pool` other than `id` at `from` or behind it.
fn queued_behind(list: &JobList, pool: &str, id: &str, from: u32) -> bool {
    list.jobs.iter().any(|j| {
        j.state == JobState::Queued
            && j.pool == pool
            && j.id != id
            && j.queue_position.is_none_or(|p| p >= from)
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use chrono::{DateTime, TimeZone, Utc};

    pub(crate) fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }

    pub(crate) fn job(id: &str, at: i64, state: JobState, pool: &str, pos: Option<u32>) -> Job {
        Job {
            id: id.into(),
            name: format!("run-{id}"),
            template: "llama-3.1-8b-fsdp".into(),
            template_version: 1,
            team: "nlp".into(),
            user: "bob".into(),
            pool: pool.into(),
            gpus: 8,
            nodes: 1,
            priority: Default::default(),
            state,
            queue_position: pos,
            queue_position_in_team: pos,
            pending_reason: None,
            eta: None,
            ahead: vec![],
            preemptions: vec![],
            created_at: t(at),
            admitted_at: None,
            finished_at: None,
            params: Default::default(),
            max_runtime_s: 3600,
            node_names: vec![],
            events: vec![],
            can_cancel: false,
            failure: None,
            cloned_from: None,
            clones: vec![],
            clone_count: 0,
            can_rerun: true,
            version_note: None,
            gpu_hours: None,
        }
    }

    fn list(jobs: Vec<Job>, total: u64, more: bool) -> JobList {
        JobList {
            after: None,
            total,
            next_cursor: more.then(|| "c".into()),
            now: t(0),
            live_seq: 0,
            newest: jobs.first().map(JobKey::of),
            jobs,
        }
    }

    fn change(row: Option<Job>, pool: &str, at: i64) -> Change {
        Change {
            seq: 1,
            job_id: row.as_ref().map(|r| r.id.clone()).unwrap_or_default(),
            pool: pool.into(),
            at: t(at),
            row: row.map(Box::new),
            ..Default::default()
        }
    }

    fn team() -> JobTerms {
        JobTerms {
            teams: Some(vec!["nlp".into()]),
            ..Default::default()
        }
    }

    fn ids(l: &JobList) -> Vec<&str> {
        l.jobs.iter().map(|j| j.id.as_str()).collect()
    }

    #[test]
    fn a_teammates_launch_is_inserted_first_and_counted() {
        let mut l = list(
            vec![
                job("b", 20, JobState::Queued, "h100", Some(2)),
                job("a", 10, JobState::Running, "h100", None),
            ],
            7,
            true,
        );
        // Queued behind every shown queued job: nothing shown moves.
        let new = job("c", 30, JobState::Queued, "h100", Some(3));
        let c = change(Some(new), "h100", 30);
        assert_eq!(patch(&mut l, &team(), &c), Patched::Changed);
        assert_eq!(ids(&l), ["c", "b", "a"]);
        assert_eq!(l.total, 8);
        // Admitted at once: it never held a place in the queue.
        let new = job("d", 40, JobState::Admitted, "h100", None);
        assert_eq!(
            patch(&mut l, &team(), &change(Some(new), "h100", 40)),
            Patched::Changed
        );
        assert_eq!(ids(&l), ["d", "c", "b", "a"]);
        // Ahead of a shown queued job (a higher priority): its position moved too.
        let new = job("e", 50, JobState::Queued, "h100", Some(1));
        assert_eq!(
            patch(&mut l, &team(), &change(Some(new), "h100", 50)),
            Patched::Refetch
        );
        assert_eq!(ids(&l)[0], "e", "the row itself is still placed");
    }

    #[test]
    fn a_row_that_leaves_the_filter_is_removed_and_one_leaving_the_queue_moves_others() {
        let queued = JobTerms {
            state: Some(JobState::Queued),
            ..team()
        };
        let mut l = list(
            vec![
                job("b", 20, JobState::Queued, "h100", Some(2)),
                job("a", 10, JobState::Queued, "h100", Some(1)),
            ],
            2,
            false,
        );
        let mut b = job("b", 20, JobState::Admitted, "h100", None);
        b.admitted_at = Some(t(25));
        // "b" was behind "a": "a" keeps its place; "b" leaves the queued list.
        assert_eq!(
            patch(&mut l, &queued, &change(Some(b), "h100", 25)),
            Patched::Changed
        );
        assert_eq!((ids(&l), l.total), (vec!["a"], 1));
        // "a" leaves the queue with "c" behind it: "c" moves up, which the row cannot say.
        l.jobs
            .insert(0, job("c", 30, JobState::Queued, "h100", Some(2)));
        let a = job("a", 10, JobState::Cancelled, "h100", None);
        assert_eq!(
            patch(&mut l, &queued, &change(Some(a), "h100", 35)),
            Patched::Refetch
        );
        assert_eq!(ids(&l), ["c"]);
    }

    #[test]
    fn rows_update_in_place_and_other_pages_only_count() {
        let mut l = list(
            vec![
                job("b", 20, JobState::Running, "h100", None),
                job("a", 10, JobState::Running, "h100", None),
            ],
            9,
            true,
        );
        // A later page, past "e" (the last of the page before); the newest job counted is
        // on the first.
        l.after = Some(JobKey::of(&job("e", 40, JobState::Running, "h100", None)));
        l.newest = Some(JobKey::of(&job("f", 50, JobState::Running, "h100", None)));
        let mut done = job("a", 10, JobState::Succeeded, "h100", None);
        done.finished_at = Some(t(60));
        assert_eq!(
            patch(&mut l, &team(), &change(Some(done.clone()), "h100", 60)),
            Patched::Changed
        );
        assert_eq!((l.jobs[1].state, l.total), (JobState::Succeeded, 9));
        assert_eq!(
            patch(&mut l, &team(), &change(Some(done), "h100", 60)),
            Patched::Nothing,
            "the same row again changes nothing"
        );
        // An older page: a new job belongs to the first page, and counts. The change's time
        // has the clock's full precision, the stored row's the millisecond (it once did not
        // count: the row looked older than its own launch).
        let new = job("n", 70, JobState::Admitted, "h100", None);
        let mut launch = change(Some(new.clone()), "h100", 70);
        launch.at += chrono::Duration::nanoseconds(123_456);
        assert_eq!(patch(&mut l, &team(), &launch), Patched::Changed);
        assert_eq!((ids(&l), l.total), (vec!["b", "a"], 10));
        // An older job on a later page changed state: it was counted already.
        let old = job("o", 1, JobState::Succeeded, "h100", None);
        assert_eq!(
            patch(&mut l, &team(), &change(Some(old), "h100", 80)),
            Patched::Nothing
        );
        // Under a state filter, whether it was counted is unknown.
        let running = JobTerms {
            state: Some(JobState::Admitted),
            ..team()
        };
        assert_eq!(
            patch(&mut l, &running, &change(Some(new), "h100", 70)),
            Patched::Refetch
        );
        // Nor whether a job on another page that left the filtered state was counted (the
        // count stayed where it was).
        assert_eq!(
            patch(
                &mut l,
                &running,
                &change(
                    Some(job("p", 2, JobState::Succeeded, "h100", None)),
                    "h100",
                    90
                )
            ),
            Patched::Refetch
        );
        // With every row shown there is no other page: it was not in the list.
        let mut whole = list(
            vec![job("a", 10, JobState::Admitted, "h100", None)],
            1,
            false,
        );
        assert_eq!(
            patch(
                &mut whole,
                &running,
                &change(
                    Some(job("p", 2, JobState::Succeeded, "h100", None)),
                    "h100",
                    90
                )
            ),
            Patched::Nothing
        );
    }

    #[test]
    fn a_later_page_places_rows_by_where_it_starts_not_by_its_first_row() {
        let queued = JobTerms {
            state: Some(JobState::Queued),
            ..team()
        };
        // The last page of the queued jobs, past "e": its one job was admitted meanwhile,
        // and the page is empty.
        let mut l = list(
            vec![job("a", 10, JobState::Queued, "h100", Some(4))],
            31,
            false,
        );
        l.after = Some(JobKey::of(&job("e", 40, JobState::Queued, "h100", Some(3))));
        let mut a = job("a", 10, JobState::Admitted, "h100", None);
        a.admitted_at = Some(t(45));
        assert_eq!(
            patch(&mut l, &queued, &change(Some(a), "h100", 45)),
            Patched::Changed
        );
        assert_eq!((ids(&l), l.total), (vec![], 30));
        // A teammate launches a queued job: it belongs to the first page, not this one (it
        // was put here, "1 of 31", and gone on a reload).
        let new = job("n", 50, JobState::Queued, "h100", Some(4));
        assert_ne!(
            patch(&mut l, &queued, &change(Some(new), "h100", 50)),
            Patched::Changed
        );
        assert!(l.jobs.is_empty(), "{:?}", ids(&l));
        // Without a state filter it is counted, and still not shown.
        let mut l = list(vec![], 30, false);
        l.after = Some(JobKey::of(&job("e", 40, JobState::Queued, "h100", Some(3))));
        l.newest = Some(JobKey::of(&job("e", 40, JobState::Queued, "h100", Some(3))));
        let new = job("m", 60, JobState::Running, "h200", None);
        assert_eq!(
            patch(&mut l, &team(), &change(Some(new), "h200", 60)),
            Patched::Changed
        );
        assert_eq!((ids(&l), l.total), (vec![], 31));
        // A job older than where the page starts and newer than its first row is its own:
        // a job now queued that was not (requeued after an eviction).
        let mut l = list(
            vec![job("a", 10, JobState::Queued, "h100", Some(2))],
            5,
            false,
        );
        l.after = Some(JobKey::of(&job("e", 40, JobState::Queued, "h100", Some(1))));
        let back = job("c", 30, JobState::Queued, "h100", Some(3));
        assert_eq!(
            patch(&mut l, &queued, &change(Some(back), "h100", 70)),
            Patched::Changed
        );
        assert_eq!((ids(&l), l.total), (vec!["c", "a"], 6));
    }

    #[test]
    fn a_launch_the_list_was_read_with_is_counted_once() {
        // A later page, read while "m" was being launched: the count holds "m", but the
        // change is numbered after the read and comes all the same.
        let mut l = list(
            vec![
                job("b", 20, JobState::Running, "h100", None),
                job("a", 10, JobState::Running, "h100", None),
            ],
            9,
            true,
        );
        let m = job("m", 60, JobState::Admitted, "h100", None);
        l.after = Some(JobKey::of(&job("e", 40, JobState::Running, "h100", None)));
        l.newest = Some(JobKey::of(&m));
        // Not newer than the newest the count held: it may be counted, or not (two
        // launches stored in the other order than their times): asked again, not added.
        assert_eq!(
            patch(&mut l, &team(), &change(Some(m), "h100", 60)),
            Patched::Refetch
        );
        assert_eq!(l.total, 9, "counted twice");
        // A launch after the read adds one, and only once should it be told again.
        let n = job("n", 70, JobState::Queued, "h200", Some(1));
        assert_eq!(
            patch(&mut l, &team(), &change(Some(n.clone()), "h200", 70)),
            Patched::Changed
        );
        assert_eq!(l.total, 10);
        assert_eq!(
            patch(&mut l, &team(), &change(Some(n), "h200", 70)),
            Patched::Refetch
        );
        assert_eq!((ids(&l), l.total), (vec!["b", "a"], 10));
    }

    #[test]
    fn a_change_sent_again_with_a_newer_row_still_moves_the_queue() {
        let mut l = list(
            vec![
                job("b", 20, JobState::Queued, "h100", Some(2)),
                job("a", 10, JobState::Queued, "h100", Some(1)),
            ],
            2,
            false,
        );
        // "a" was admitted, then started; the admission is sent to a stream that opened
        // after both, with the row read then: running. "b" moved up all the same.
        let mut a = job("a", 10, JobState::Running, "h100", None);
        a.admitted_at = Some(t(30));
        let mut c = change(Some(a), "h100", 30);
        c.state = Some(JobState::Admitted);
        assert_eq!(patch(&mut l, &team(), &c), Patched::Refetch);
        assert_eq!(
            l.jobs[1].state,
            JobState::Running,
            "the row itself is shown as it is"
        );
        // The start itself, sent after: it held no place in the queue by then.
        let mut l = list(
            vec![
                job("b", 20, JobState::Queued, "h100", Some(1)),
                job("a", 10, JobState::Admitted, "h100", None),
            ],
            2,
            false,
        );
        let mut c = change(
            Some(job("a", 10, JobState::Running, "h100", None)),
            "h100",
            40,
        );
        c.state = Some(JobState::Running);
        assert_eq!(patch(&mut l, &team(), &c), Patched::Changed);
        // A launch told of as queued whose row was read admitted: admitted at once, it never
        // held a place, and "b" (queued in the same pool) did not move.
        let mut c = change(
            Some(job("n", 50, JobState::Admitted, "h100", None)),
            "h100",
            50,
        );
        c.state = Some(JobState::Queued);
        assert_eq!(patch(&mut l, &team(), &c), Patched::Changed);
        assert_eq!(ids(&l), ["n", "b", "a"]);
    }

    #[test]
    fn what_a_row_cannot_tell_is_asked_again() {
        let other_pool = JobTerms {
            pool: Some("h200".into()),
            ..team()
        };
        let mut l = list(
            vec![job("a", 10, JobState::Queued, "h100", Some(3))],
            1,
            false,
        );
        // A job of another pool, not in this list: nothing.
        let h200 = job("x", 30, JobState::Queued, "h200", Some(1));
        assert_eq!(
            patch(&mut l, &other_pool, &change(Some(h200.clone()), "h200", 30)),
            Patched::Changed,
            "it is in the h200 list"
        );
        let mut l = list(
            vec![job("a", 10, JobState::Queued, "h100", Some(3))],
            1,
            false,
        );
        assert_eq!(
            patch(&mut l, &team(), &change(None, "h200", 30)),
            Patched::Nothing,
            "another team's job in a pool with nothing shown queued"
        );
        assert_eq!(
            patch(&mut l, &team(), &change(None, "h100", 30)),
            Patched::Refetch,
            "another team's job may have moved the shown queue"
        );
        assert_eq!(
            patch(&mut l, &team(), &Change::default()),
            Patched::Refetch,
            "missed changes"
        );
        let text = JobTerms {
            text: Some("LLAMA".into()),
            user: Some("alice".into()),
            ..team()
        };
        assert_eq!(
            patch(&mut l, &text, &change(Some(h200), "h200", 40)),
            Patched::Nothing,
            "bob's job is not in alice's list"
        );
    }
}
