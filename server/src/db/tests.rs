//! The job list's SQL against the rule live pages patch with ([`JobTerms::matches`]): for a
//! spread of terms, on SQLite and Postgres, the database selects exactly the jobs `matches`
//! accepts, so a page patched from the live stream shows what a refetch would.

use app::model::domain::{JobFacts, JobState, JobTerms, Priority};
use chrono::{DateTime, Duration, TimeZone, Utc};

use super::{Db, JobQuery, NewJob, Transition};
use crate::testkit::TestDb;

struct Made {
    id: String,
    name: String,
    template: String,
    team: String,
    user: String,
    pool: String,
    state: JobState,
    created_at: DateTime<Utc>,
}

/// A small deterministic generator (no test should depend on the OS's randomness).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

/// A job to store: 8 GPUs of llama-3.1-8b-fsdp v1 in hgx-h100, normal priority, an hour's
/// max runtime, no idempotency key, not a clone. Tests change what they vary with `..`.
fn new_job<'a>(
    id: &'a str,
    name: &'a str,
    team: &'a str,
    user: &'a str,
    params: &'a serde_json::Map<String, serde_json::Value>,
    created_at: DateTime<Utc>,
) -> NewJob<'a> {
    NewJob {
        id,
        name,
        template: "llama-3.1-8b-fsdp",
        template_version: 1,
        team,
        user,
        pool: "hgx-h100",
        gpus: 8,
        priority: Priority::Normal,
        params,
        max_runtime_s: 3600,
        idempotency_key: None,
        request_body: "{}",
        created_at,
        cloned_from: None,
    }
}

async fn jobs_agree(db: &TestDb) {
    let db = Db::connect(&db.url, 4).await.expect("connect");
    crate::seed::seed_catalog(&db, Utc::now()).await.unwrap();
    let start = Utc.with_ymd_and_hms(2026, 11, 20, 22, 0, 0).unwrap();
    let names = [
        "Llama-Run",
        "llama_sweep",
        "100%-eval",
        "bob's test",
        "ALICE-ablation",
        "Ünïcode-run",
        "plain",
    ];
    let who = [
        ("alice", "nlp"),
        ("bob", "nlp"),
        ("dave", "vision"),
        ("erin", "speech"),
    ];
    let templates = ["llama-3.1-8b-fsdp", "mistral-7b-sft", "whisper-large-v3-ft"];
    let pools = ["hgx-h100", "hgx-h200"];
    let mut rng = Lcg(7);
    let mut made = Vec::new();
    let params = serde_json::Map::new();
    for i in 0..70 {
        let (user, team) = who[rng.next(who.len())];
        let m = Made {
            id: format!("job-{i:03}"),
            name: format!("{}-{i}", names[rng.next(names.len())]),
            template: templates[rng.next(templates.len())].into(),
            team: team.into(),
            user: user.into(),
            pool: pools[rng.next(pools.len())].into(),
            state: JobState::ALL[rng.next(JobState::ALL.len())],
            // Across several UTC days, some on the same millisecond.
            created_at: start + Duration::minutes(37 * (i as i64 / 2)),
        };
        db.insert_job(
            &NewJob {
                template: &m.template,
                pool: &m.pool,
                ..new_job(&m.id, &m.name, &m.team, &m.user, &params, m.created_at)
            },
            "launched",
        )
        .await
        .unwrap();
        // Walk the job to its state the way the cluster would.
        let path: &[JobState] = match m.state {
            JobState::Queued => &[],
            JobState::Admitted => &[JobState::Admitted],
            JobState::Running => &[JobState::Admitted, JobState::Running],
            JobState::Succeeded => &[JobState::Admitted, JobState::Running, JobState::Succeeded],
            JobState::Failed => &[JobState::Admitted, JobState::Running, JobState::Failed],
            JobState::Cancelled => &[JobState::Cancelled],
        };
        let mut from = JobState::Queued;
        for (k, to) in path.iter().enumerate() {
            let moved = db
                .transition(&Transition {
                    job_id: &m.id,
                    from: &[from],
                    to: *to,
                    at: m.created_at + Duration::seconds(k as i64 + 1),
                    reason: "test",
                    node_names: None,
                    kind: None,
                })
                .await
                .unwrap();
            assert!(moved, "{} to {to:?}", m.id);
            from = *to;
        }
        made.push(m);
    }
    let teams: [Option<Vec<String>>; 3] = [
        None,
        Some(vec!["nlp".into()]),
        Some(vec!["nlp".into(), "vision".into()]),
    ];
    let users = [None, Some("alice"), Some("bob")];
    let states = [
        None,
        Some(JobState::Queued),
        Some(JobState::Running),
        Some(JobState::Cancelled),
    ];
    let texts = [
        None,
        Some("LLAMA"),
        Some("%"),
        Some("_"),
        Some("b"),
        Some("ali"),
        Some("üNï"),
        Some("sft"),
    ];
    let days = [
        None,
        Some(Utc.with_ymd_and_hms(2026, 11, 21, 0, 0, 0).unwrap()),
        Some(start + Duration::minutes(37 * 10)),
    ];
    let mut checked = 0;
    for _ in 0..240 {
        let terms = JobTerms {
            teams: teams[rng.next(teams.len())].clone(),
            user: users[rng.next(users.len())].map(String::from),
            state: states[rng.next(states.len())],
            active: rng.next(4) == 0,
            pool: [None, Some("hgx-h100"), Some("hgx-h200")][rng.next(3)].map(String::from),
            text: texts[rng.next(texts.len())].map(String::from),
            from: days[rng.next(days.len())],
            until: days[rng.next(days.len())].map(|d| d + Duration::hours(30)),
        };
        let mut want: Vec<&str> = made
            .iter()
            .filter(|m| {
                terms.matches(JobFacts {
                    team: &m.team,
                    user: &m.user,
                    state: m.state,
                    pool: &m.pool,
                    name: &m.name,
                    template: &m.template,
                    created_at: m.created_at,
                })
            })
            .map(|m| m.id.as_str())
            .collect();
        want.sort();
        let q = JobQuery {
            terms: terms.clone(),
            after: None,
            limit: 1000,
        };
        let rows = db.list_jobs(&q).await.unwrap();
        let mut got: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        got.sort();
        assert_eq!(got, want, "{terms:?}");
        // The page and its count in one statement: the same rows, and the count of them all.
        let read = db.page_of_jobs(&q).await.unwrap();
        assert_eq!(format!("{:?}", read.rows), format!("{rows:?}"), "{terms:?}");
        assert_eq!(read.total, want.len() as u64, "{terms:?}");
        checked += usize::from(!want.is_empty());
    }
    // The spread is wide enough to mean something: most terms select some jobs.
    assert!(checked > 60, "only {checked} of 240 terms selected any job");
}

#[tokio::test]
async fn the_list_query_and_the_live_rule_agree_on_sqlite() {
    let db = TestDb::sqlite();
    jobs_agree(&db).await;
}

#[tokio::test]
async fn the_list_query_and_the_live_rule_agree_on_postgres() {
    let db = TestDb::postgres().await;
    jobs_agree(&db).await;
    db.drop_database().await;
}

/// A list's rows, which the database writes as one JSON array ([`Db::list_sql`]), are the
/// stored jobs as [`Db::get_job`] reads them, column by column, but for the parameters and
/// launch request no list shows; they come in the database's own order (submitted, then id,
/// newest first, ties on the same millisecond included), and a walk by cursor in small pages
/// gives the same order. Names carry what JSON must escape.
async fn list_rows_are_the_stored_jobs(t: &TestDb) {
    let db = Db::connect(&t.url, 2).await.expect("connect");
    crate::seed::seed_catalog(&db, Utc::now()).await.unwrap();
    let start = Utc.with_ymd_and_hms(2026, 11, 20, 22, 0, 0).unwrap();
    let names = [
        "quote \" and back\\slash",
        "tab\there",
        "Ünïcode 🚀 run",
        "<b>&amp;</b>",
        "plain",
    ];
    let mut params = serde_json::Map::new();
    params.insert("lr".into(), serde_json::json!(0.0003));
    for i in 0..12usize {
        let id = format!("job-{i:02}");
        let origin = format!("job-{:02}", i.saturating_sub(1));
        db.insert_job(
            &NewJob {
                gpus: 8 * (i as u32 % 3 + 1),
                priority: [Priority::Low, Priority::Normal, Priority::High][i % 3],
                max_runtime_s: 3600 + i as u64,
                request_body: "{\"name\": \"x\"}",
                cloned_from: (i % 4 == 3).then_some(origin.as_str()),
                ..new_job(
                    &id,
                    names[i % names.len()],
                    "nlp",
                    if i % 2 == 0 { "alice" } else { "bob" },
                    &params,
                    // Pairs on the same millisecond: the id decides their order.
                    start + Duration::milliseconds(i as i64 / 2),
                )
            },
            "launched",
        )
        .await
        .unwrap();
        let at = start + Duration::seconds(10 + i as i64);
        if i % 3 != 0 {
            db.mark_sent(&id, at).await.unwrap();
        }
        if i % 3 == 1 {
            let nodes = ["hgx-01".to_string(), "hgx-02".to_string()];
            for (from, to) in [
                (JobState::Queued, JobState::Admitted),
                (JobState::Admitted, JobState::Running),
            ] {
                db.transition(&Transition {
                    job_id: &id,
                    from: &[from],
                    to,
                    at,
                    reason: "test",
                    node_names: Some(&nodes),
                    kind: None,
                })
                .await
                .unwrap();
            }
        }
        if i % 4 == 2 {
            let failure = app::model::domain::JobFailure {
                summary: "A worker ran out of memory (OOMKilled)".into(),
                exit_code: Some(137),
                reason: "OOMKilled".into(),
                meaning: "\"killed\" by the kernel".into(),
                pod: Some("w-0".into()),
                rank: Some(0),
                node: Some("hgx-01".into()),
                at: Some(at),
                condition: Some("Job has reached the specified backoff limit".into()),
            };
            db.keep_logs(&id, &[], Some(&failure), at).await.unwrap();
        }
    }
    let all = JobQuery {
        limit: 1000,
        ..Default::default()
    };
    let rows = db.list_jobs(&all).await.unwrap();
    let order: Vec<String> =
        sqlx::query("SELECT job_id FROM job ORDER BY created_at DESC, job_id DESC")
            .fetch_all(&db.pool)
            .await
            .unwrap()
            .iter()
            .map(|r| sqlx::Row::try_get(r, "job_id").unwrap())
            .collect();
    let got: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
    assert_eq!(got, order, "the list's order is the database's");
    assert_eq!(got.len(), 12);
    for row in &rows {
        let mut stored = db.get_job(&row.id).await.unwrap();
        assert!(
            !stored.params.is_empty() && stored.request_body.is_some(),
            "{}",
            row.id
        );
        stored.params = serde_json::Map::new();
        stored.request_body = None;
        assert_eq!(format!("{row:?}"), format!("{stored:?}"));
    }
    assert!(rows.iter().any(|r| r.failure.is_some()));
    assert!(rows.iter().any(|r| r.cloned_from.is_some()));
    assert!(rows.iter().any(|r| !r.node_names.is_empty()));
    assert!(rows.iter().any(|r| r.sent_at.is_some()));
    // Pages of 5 by cursor, as the service walks them. The service reads them through the
    // memo (keyed by the query, not by the statement): on, it answers each page as read.
    db.read_memo().set_ttl(std::time::Duration::from_secs(30));
    let mut walked = Vec::new();
    let mut q = JobQuery {
        limit: 5,
        ..Default::default()
    };
    loop {
        let page = db.list_jobs(&q).await.unwrap();
        // Every page counts every job, whatever its cursor; its rows are the list's.
        let read = db.page_of_jobs(&q).await.unwrap();
        for _ in 0..2 {
            let memo = db.page_of_jobs_memo(&q).await.unwrap();
            assert_eq!(
                format!("{memo:?}"),
                format!("{read:?}"),
                "memo after {:?}",
                q.after
            );
        }
        assert_eq!(read.total, 12, "the count on the page after {:?}", q.after);
        assert_eq!(format!("{:?}", read.rows), format!("{page:?}"));
        // And names the newest job it counted, which only the first page shows.
        assert_eq!(
            read.newest.as_ref().map(|(_, id)| id),
            order.first(),
            "the newest on the page after {:?}",
            q.after
        );
        let Some(last) = page.last() else { break };
        q.after = Some((last.created_at, last.id.clone()));
        walked.extend(page.iter().map(|r| r.id.clone()));
    }
    assert_eq!(walked, order, "a walk by cursor");
    // And the memo did answer: a change it is not told of (written around `Db`, as an
    // operator's SQL would be) is not in the first page it kept, until the time to live ends.
    let first = JobQuery {
        limit: 5,
        ..Default::default()
    };
    sqlx::query("UPDATE job SET name = 'renamed around the memo' WHERE job_id = $1")
        .bind(&order[0])
        .execute(&db.pool)
        .await
        .unwrap();
    let kept = db.page_of_jobs_memo(&first).await.unwrap();
    let read = db.page_of_jobs(&first).await.unwrap();
    assert_eq!(read.rows[0].name, "renamed around the memo");
    assert_ne!(
        kept.rows[0].name, read.rows[0].name,
        "the memo's first page"
    );
    // A list that selects nothing is an empty page, not an error.
    q.terms.user = Some("nobody".into());
    assert!(db.list_jobs(&q).await.unwrap().is_empty());
    let none = db.page_of_jobs(&q).await.unwrap();
    assert!(
        none.rows.is_empty() && none.total == 0 && none.newest.is_none(),
        "{none:?}"
    );
    let memo = db.page_of_jobs_memo(&q).await.unwrap();
    assert_eq!(
        format!("{memo:?}"),
        format!("{none:?}"),
        "memo of a list that selects nothing"
    );
}

#[tokio::test]
async fn list_rows_are_the_stored_jobs_on_sqlite() {
    list_rows_are_the_stored_jobs(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn list_rows_are_the_stored_jobs_on_postgres() {
    let db = TestDb::postgres().await;
    list_rows_are_the_stored_jobs(&db).await;
    db.drop_database().await;
}

/// The dev sign-in page's list of every user, read in one statement, is what asking for each
/// user gives, for every user there is and in the order the page shows them.
async fn the_viewer_list_is_each_viewer(t: &TestDb) {
    let db = Db::connect(&t.url, 2).await.expect("connect");
    let now = Utc::now();
    crate::seed::seed_catalog(&db, now).await.unwrap();
    // Someone in two teams as their lead, someone in none, a name with quotes and an Ö.
    db.insert_user("zed", "Zed \"Z\" Ölund", false, now)
        .await
        .unwrap();
    db.insert_user("nobody", "No Team", false, now)
        .await
        .unwrap();
    let teams = db.team_ids().await.unwrap();
    assert!(teams.len() >= 2, "{teams:?}");
    for team in &teams[..2] {
        db.insert_membership("zed", team, app::model::domain::Role::Lead)
            .await
            .unwrap();
    }
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT user_id FROM app_user ORDER BY is_admin, user_id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let mut each = Vec::new();
    for id in &ids {
        each.push(db.get_viewer(id).await.unwrap().expect("a stored user"));
    }
    let listed = db.list_viewers().await.unwrap();
    assert_eq!(listed, each);
    let zed = listed.iter().find(|v| v.user == "zed").expect("zed");
    assert_eq!(zed.teams.len(), 2, "{zed:?}");
    let nobody = listed.iter().find(|v| v.user == "nobody").expect("nobody");
    assert!(nobody.teams.is_empty(), "{nobody:?}");
    assert!(listed.iter().any(|v| v.is_admin) && listed.iter().any(|v| v.teams.len() == 1));
}

#[tokio::test]
async fn the_viewer_list_is_each_viewer_on_sqlite() {
    the_viewer_list_is_each_viewer(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn the_viewer_list_is_each_viewer_on_postgres() {
    let db = TestDb::postgres().await;
    the_viewer_list_is_each_viewer(&db).await;
    db.drop_database().await;
}

/// [`Db::changes`] (what the page cache checks) moves with each completed write, a single
/// statement or a commit, and never with a read, nor with the sim saving its clock.
#[tokio::test]
async fn writes_and_only_writes_move_the_change_count() {
    let t = TestDb::sqlite();
    let db = Db::connect(&t.url, 2).await.expect("connect");
    crate::seed::seed_catalog(&db, Utc::now()).await.unwrap();
    let c0 = db.changes();
    assert!(c0 > 0, "seeding the catalog wrote");
    let reader = db.clone();
    assert!(!reader.list_viewers().await.unwrap().is_empty());
    assert!(reader.get_viewer("alice").await.unwrap().is_some());
    reader.sim_clock().await.unwrap();
    assert_eq!(db.changes(), c0, "reads move nothing");
    // The sim's clock is saved for a restart; no page reads it from here.
    reader.save_sim_clock(Utc::now()).await.unwrap();
    assert_eq!(db.changes(), c0, "saving the sim clock is not a change");
    reader
        .insert_team("vision", "Vision", Utc::now())
        .await
        .unwrap();
    assert_eq!(
        db.changes(),
        c0 + 1,
        "a statement that writes, seen by every clone"
    );
    let entry = crate::db::AuditEntry::new("carol", "test.write", "alice", Utc::now());
    reader.append_audit(&entry).await.unwrap();
    assert_eq!(db.changes(), c0 + 2, "a committed transaction");
}

/// [`Db::memo`]: off until given a time to live; then a read is answered again while no
/// write has finished, read afresh (showing the write) after one, not kept when a write
/// finished while it read, and read afresh once older than the time to live.
#[tokio::test]
async fn a_memoized_read_lasts_until_a_write_finishes() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let t = TestDb::sqlite();
    let db = Db::connect(&t.url, 2).await.expect("connect");
    crate::seed::seed_catalog(&db, Utc::now()).await.unwrap();
    let reads = AtomicUsize::new(0);
    let alice = || async {
        reads.fetch_add(1, SeqCst);
        db.get_viewer("alice").await
    };
    let key = || "viewer alice".to_string();
    for _ in 0..2 {
        db.memo(key(), alice).await.unwrap();
    }
    assert_eq!(reads.load(SeqCst), 2, "off by default: every call reads");

    db.read_memo().set_ttl(std::time::Duration::from_secs(30));
    let first = db.memo(key(), alice).await.unwrap().expect("alice");
    let again = db.memo(key(), alice).await.unwrap().expect("alice");
    assert_eq!(
        reads.load(SeqCst),
        3,
        "the second call is answered from memory"
    );
    assert_eq!(again, first);
    // Another key is another read.
    let bob = db
        .memo("viewer bob".into(), || db.get_viewer("bob"))
        .await
        .unwrap()
        .expect("bob");
    assert_ne!(bob.user, first.user);

    // A write, then alice joins a team: the next read shows it.
    db.insert_team("vision", "Vision", Utc::now())
        .await
        .unwrap();
    db.insert_membership("alice", "vision", app::model::domain::Role::Member)
        .await
        .unwrap();
    let after = db.memo(key(), alice).await.unwrap().expect("alice");
    assert_eq!(
        reads.load(SeqCst),
        4,
        "a write was finished since: read afresh"
    );
    assert!(
        after.teams.iter().any(|m| m.team == "vision")
            && !first.teams.iter().any(|m| m.team == "vision"),
        "{first:?} then {after:?}"
    );

    // A write that finishes while a read runs: what it read is not kept. (A write first, so
    // that the racing read is made at all.)
    db.insert_team("speech", "Speech", Utc::now())
        .await
        .unwrap();
    let racing = || async {
        reads.fetch_add(1, SeqCst);
        let v = db.get_viewer("alice").await;
        db.insert_team("audio", "Audio", Utc::now()).await.unwrap();
        v
    };
    let at = db.changes();
    db.memo(key(), racing).await.unwrap();
    assert_eq!(reads.load(SeqCst), 5);
    assert_eq!(
        db.read_memo().get::<Option<app::model::Viewer>>(&key(), at),
        None,
        "the read a write overlapped was not kept, even at the count it began at"
    );
    db.memo(key(), alice).await.unwrap();
    assert_eq!(reads.load(SeqCst), 6);
    db.memo(key(), alice).await.unwrap();
    assert_eq!(reads.load(SeqCst), 6, "the read after it was");

    // The store itself keeps nothing a write overlapped, and a caller behind the count
    // neither gets what was kept at a later one nor drops it.
    let memo = db.read_memo();
    let c = db.changes();
    let now = std::time::Instant::now();
    memo.put("overlapped".into(), 1u32, now, (c, c + 1));
    assert_eq!(memo.get::<u32>("overlapped", c), None);
    memo.put("whole".into(), 2u32, now, (c, c));
    assert_eq!(memo.get::<u32>("whole", c), Some(2));
    assert_eq!(memo.get::<u32>("whole", c - 1), None);
    assert_eq!(memo.get::<u32>("whole", c), Some(2));
    assert_eq!(
        memo.get::<String>("whole", c),
        None,
        "another type is not this read"
    );

    // Older than the time to live (counted from when the read began): read afresh.
    db.read_memo().set_ttl(std::time::Duration::from_millis(40));
    db.memo(key(), alice).await.unwrap();
    let n = reads.load(SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(80)).await;
    db.memo(key(), alice).await.unwrap();
    assert_eq!(reads.load(SeqCst), n + 1, "past the time to live");

    // Zero turns it off again.
    db.read_memo().set_ttl(std::time::Duration::ZERO);
    for _ in 0..2 {
        db.memo(key(), alice).await.unwrap();
    }
    assert_eq!(reads.load(SeqCst), n + 3);
}

/// SQLite's plan for a statement with its arguments, one line per step.
async fn plan(db: &Db, (sql, args): (String, Vec<String>)) -> String {
    let explain = format!("EXPLAIN QUERY PLAN {sql}");
    let rows = super::jobs::with_args(&explain, &args)
        .fetch_all(&db.pool)
        .await
        .expect("explain");
    rows.iter()
        .map(|r| sqlx::Row::try_get::<String, _>(r, "detail").expect("detail"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The Jobs list and the home page read their page from an index in the list's own order
/// (submitted, then id, newest first), so the database stops after the page instead of
/// reading and sorting every job of a team; the home page's active jobs and their count come
/// from the partial index of active jobs. The one sort allowed is the JSON array's own
/// (`json_group_array(… ORDER BY …)`, see [`Db::list_sql`]), of the page's rows only. SQLite's
/// planner has no statistics to go by here, so its choice is fixed; Postgres chooses by its
/// statistics and is not asserted.
#[tokio::test]
async fn the_lists_read_a_page_from_an_index_in_their_order_on_sqlite() {
    let t = TestDb::sqlite();
    let db = Db::connect(&t.url, 2).await.expect("connect");
    let nlp = Some(vec!["nlp".to_string()]);
    let cases = [
        (
            "a team's page",
            JobTerms {
                teams: nlp.clone(),
                ..Default::default()
            },
            "job_team_newest",
        ),
        (
            "an admin's page of every team",
            JobTerms::default(),
            "job_newest",
        ),
        (
            "the home page's active jobs",
            JobTerms {
                teams: nlp.clone(),
                user: Some("alice".into()),
                active: true,
                ..Default::default()
            },
            "job_active_newest",
        ),
    ];
    for (what, terms, index) in cases {
        let mut q = JobQuery {
            terms,
            after: None,
            limit: 51,
        };
        let list = plan(&db, db.list_sql(&q).expect("a list")).await;
        assert!(
            list.contains(&format!("INDEX {index}")) && !list.contains("TEMP B-TREE FOR ORDER BY"),
            "{what}: the page should come from {index} in order, without a sort; plan: {list}"
        );
        q.after = Some((Utc::now(), "z".into()));
        let next = plan(&db, db.list_sql(&q).expect("a list")).await;
        assert!(
            next.contains(&format!("INDEX {index}")) && !next.contains("TEMP B-TREE FOR ORDER BY"),
            "{what}, a later page: plan: {next}"
        );
        if index == "job_active_newest" {
            let count = plan(&db, db.count_sql(&q).expect("a count")).await;
            assert!(
                count.contains("INDEX job_active_newest"),
                "{what}: the count should read the active jobs' index; plan: {count}"
            );
        }
        // The page and its count in one statement plan as each does alone.
        let both = plan(&db, db.page_sql(&q).expect("a page")).await;
        assert!(
            both.contains(&format!("INDEX {index}")) && !both.contains("TEMP B-TREE FOR ORDER BY"),
            "{what}, page and count: plan: {both}"
        );
    }
}

/// The usage recorder's look for intervals without a utilization figure, about once a second,
/// reads the partial index of those few instead of every interval recorded.
#[tokio::test]
async fn the_recorder_reads_unchecked_intervals_from_their_index_on_sqlite() {
    let t = TestDb::sqlite();
    let db = Db::connect(&t.url, 2).await.expect("connect");
    let sql = super::usage::INTERVALS_WITHOUT_UTIL.to_string();
    let got = plan(&db, (sql, vec!["100".into()])).await;
    assert!(
        got.contains("INDEX job_interval_unchecked") && !got.contains("TEMP B-TREE"),
        "plan: {got}"
    );
}

/// A job's page reads the job and what it shows beside it in one statement
/// ([`Db::job_detail`]), and the GPU panel the job and its last run ([`Db::job_and_last_interval`]).
/// For every stored job each part equals what the separate statements, each on its own
/// table, read: the job, its events (ties on the same millisecond in the order written), its
/// run intervals, its newest clones of its team (capped, ties on the same millisecond by id;
/// a clone launched into another team is not among them), its origin's name when of its
/// team, its template's state. The jobs cover none and many of each: a job run, preempted and
/// run again, 22 clones of one job, a clone whose origin is not stored, a template with a
/// newer version and one deprecated. An unknown id is `NotFound` from both.
async fn the_job_detail_is_what_the_separate_reads_find(t: &TestDb) {
    let db = Db::connect(&t.url, 2).await.expect("connect");
    let start = Utc.with_ymd_and_hms(2026, 11, 20, 22, 0, 0).unwrap();
    crate::seed::seed_catalog(&db, start).await.unwrap();
    let catalog = crate::seed::templates();
    let (newer, gone) = (&catalog[0], &catalog[1]);
    let mut params = serde_json::Map::new();
    params.insert("lr".into(), serde_json::json!(0.0003));
    let insert =
        |id: String, name: String, template: String, version: u32, at, origin: Option<String>| {
            let (db, params) = (&db, &params);
            async move {
                db.insert_job(
                    &NewJob {
                        template: &template,
                        template_version: version,
                        gpus: 16,
                        max_runtime_s: 7200,
                        cloned_from: origin.as_deref(),
                        ..new_job(&id, &name, "nlp", "alice", params, at)
                    },
                    "launched",
                )
                .await
                .unwrap();
            }
        };
    let step = |id: &str, from: JobState, to: JobState, at, kind: Option<&'static str>| {
        let (db, id) = (&db, id.to_string());
        async move {
            let nodes = ["hgx-01".to_string(), "hgx-02".to_string()];
            assert!(db
                .transition(&Transition {
                    job_id: &id,
                    from: &[from],
                    to,
                    at,
                    reason: "test \"step\"",
                    node_names: to.holds_gpus().then_some(&nodes[..]),
                    kind,
                })
                .await
                .unwrap());
        }
    };
    // The origin: run, preempted back to the queue, run again and ended; two intervals.
    let origin = "job-origin".to_string();
    insert(
        origin.clone(),
        "origin ü \"q\"".into(),
        newer.name.clone(),
        newer.version,
        start,
        None,
    )
    .await;
    let mut at = start + Duration::minutes(1);
    for (from, to, kind) in [
        (JobState::Queued, JobState::Admitted, None),
        (JobState::Admitted, JobState::Running, None),
        (JobState::Running, JobState::Queued, Some("preempted")),
        (JobState::Queued, JobState::Admitted, None),
        (JobState::Admitted, JobState::Running, None),
        (JobState::Running, JobState::Succeeded, None),
    ] {
        step(&origin, from, to, at, kind).await;
        // Two steps on each millisecond: the order written decides.
        at += Duration::milliseconds(i64::from(to == JobState::Running) * 90_000);
    }
    // One of its runs measured (a third: no short decimal), one not.
    let unmeasured = db.intervals_without_util(10).await.unwrap();
    assert_eq!(unmeasured.len(), 2);
    db.set_interval_util(&unmeasured[0].0, 1.0 / 3.0)
        .await
        .unwrap();
    // 22 clones, pairs on the same millisecond; one of them running.
    for i in 0..22 {
        insert(
            format!("job-clone-{i:02}"),
            format!("origin · re-run {i}"),
            newer.name.clone(),
            newer.version,
            start + Duration::minutes(10) + Duration::milliseconds(i / 2),
            Some(origin.clone()),
        )
        .await;
    }
    // After its launch, not before (the origin's last step).
    let at = start + Duration::minutes(20);
    step(
        "job-clone-05",
        JobState::Queued,
        JobState::Admitted,
        at,
        None,
    )
    .await;
    step(
        "job-clone-05",
        JobState::Admitted,
        JobState::Running,
        at,
        None,
    )
    .await;
    // A clone of a job that is not stored, of a template deprecated since.
    insert(
        "job-orphan".into(),
        "orphan".into(),
        gone.name.clone(),
        gone.version,
        start,
        Some("job-never-stored".into()),
    )
    .await;
    // The newest clone of the origin, launched into another team: neither named nor counted
    // on the origin's page, and its own page does not name the origin.
    db.insert_job(
        &NewJob {
            template: &newer.name,
            template_version: newer.version,
            cloned_from: Some(&origin),
            ..new_job(
                "job-clone-vision",
                "origin · re-run 1",
                "vision",
                "alice",
                &params,
                start + Duration::minutes(30),
            )
        },
        "launched",
    )
    .await
    .unwrap();
    let mut next = newer.clone();
    next.version += 1;
    db.insert_template(&next, start, None).await.unwrap();
    assert!(db.deprecate_template(&gone.name, None).await.unwrap());

    let ids: Vec<String> = sqlx::query_scalar("SELECT job_id FROM job ORDER BY job_id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(ids.len(), 25);
    let mut seen_clones = 0;
    for id in &ids {
        let d = db.job_detail(id).await.unwrap();
        let row = db.get_job(id).await.unwrap();
        assert_eq!(format!("{:?}", d.row), format!("{row:?}"), "{id}");
        let events = db
            .events_for(&[id.as_str()])
            .await
            .unwrap()
            .remove(id)
            .unwrap_or_default();
        assert_eq!(d.more.events, events, "{id}");
        let intervals = db.job_intervals(id).await.unwrap();
        assert_eq!(d.more.intervals.len(), intervals.len(), "{id}");
        for (a, b) in d.more.intervals.iter().zip(&intervals) {
            assert_eq!((a.0, a.1, a.2), (b.0, b.1, b.2), "{id}");
            // SQLite's JSON writes a real to 15 significant digits.
            match (a.3, b.3) {
                (Some(x), Some(y)) => assert!((x - y).abs() < 1e-12, "{id}: {x} against {y}"),
                (x, y) => assert_eq!(x, y, "{id}"),
            }
        }
        let clones: Vec<(String, String)> = db
            .clones_of(id)
            .await
            .unwrap()
            .into_iter()
            .map(|(id, name, _)| (id, name))
            .collect();
        assert_eq!(d.more.clones, clones, "{id}");
        assert_eq!(
            d.more.clone_count,
            db.count_clones(id).await.unwrap(),
            "{id}"
        );
        seen_clones += clones.len();
        let origin = match &row.cloned_from {
            Some(o) => db.job_names(&[o.as_str()]).await.unwrap().remove(o),
            None => None,
        };
        let elsewhere = origin.as_ref().is_some_and(|o| o.team != row.team);
        let origin_name = origin.filter(|o| o.team == row.team).map(|o| o.name);
        assert_eq!(d.more.origin_name, origin_name, "{id}");
        assert_eq!(d.more.origin_elsewhere, elsewhere, "{id}");
        assert_eq!(
            d.more.template,
            db.template_state(&row.template).await.unwrap(),
            "{id}"
        );
        let (r, last) = db.job_and_last_interval(id).await.unwrap();
        assert_eq!(format!("{r:?}"), format!("{row:?}"), "{id}");
        assert_eq!(last, db.last_interval(id).await.unwrap(), "{id}");
    }
    // What the cases were meant to cover, so a change to the data cannot empty them.
    assert_eq!(seen_clones, super::MAX_CLONES);
    let o = db.job_detail(&origin).await.unwrap();
    assert_eq!(o.more.clones.len(), super::MAX_CLONES);
    assert_eq!(o.more.clones[0].0, "job-clone-21");
    assert_eq!(o.more.clone_count, 22);
    assert_eq!(o.more.intervals.len(), 2);
    assert_eq!(o.more.intervals.iter().filter(|i| i.3.is_some()).count(), 1);
    assert_eq!(o.more.events.len(), 7);
    assert_eq!(o.more.events[3].kind, "preempted");
    assert_eq!(o.more.template, Some((newer.version + 1, false)));
    let c = db.job_detail("job-clone-05").await.unwrap();
    assert_eq!(c.more.origin_name.as_deref(), Some("origin ü \"q\""));
    assert!(!c.more.origin_elsewhere);
    let v = db.job_detail("job-clone-vision").await.unwrap();
    assert_eq!((v.more.origin_name, v.more.origin_elsewhere), (None, true));
    assert!(c.more.clones.is_empty());
    let (_, last) = db.job_and_last_interval("job-clone-05").await.unwrap();
    assert!(matches!(last, Some((_, None))), "{last:?}");
    let orphan = db.job_detail("job-orphan").await.unwrap();
    assert_eq!(orphan.more.origin_name, None);
    assert!(
        !orphan.more.origin_elsewhere,
        "not stored is not another team's"
    );
    assert_eq!(orphan.more.template, Some((gone.version, true)));
    assert!(orphan.more.intervals.is_empty());
    assert!(matches!(
        db.job_detail("job-none").await,
        Err(super::DbError::NotFound)
    ));
    assert!(matches!(
        db.job_and_last_interval("job-none").await,
        Err(super::DbError::NotFound)
    ));
}

#[tokio::test]
async fn the_job_detail_is_what_the_separate_reads_find_on_sqlite() {
    the_job_detail_is_what_the_separate_reads_find(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn the_job_detail_is_what_the_separate_reads_find_on_postgres() {
    let db = TestDb::postgres().await;
    the_job_detail_is_what_the_separate_reads_find(&db).await;
    db.drop_database().await;
}

/// A re-run's number is the next after the highest `"{base} · re-run N"` of its team: exact
/// names only (LIKE's `%` and `_` in a name are literal, case counts, the suffix is digits),
/// and another team's names do not count.
async fn the_last_re_run_number_is_of_exact_names_in_the_team(t: &TestDb) {
    let db = Db::connect(&t.url, 2).await.expect("connect");
    crate::seed::seed_catalog(&db, Utc::now()).await.unwrap();
    let params = serde_json::Map::new();
    let at = Utc.with_ymd_and_hms(2026, 11, 20, 22, 0, 0).unwrap();
    let names = [
        ("nlp", "100%_eval · re-run 2"),
        ("nlp", "100%_eval · re-run 7"),
        // Not of "100%_eval": LIKE's wildcards would match these, the names do not.
        ("nlp", "100xyeval · re-run 40"),
        ("nlp", "100%_EVAL · re-run 30"),
        ("nlp", "100%_eval · re-run 9b"),
        ("nlp", "100%_eval · re-run "),
        ("nlp", "100%_eval · re-run 3 · re-run 1"),
        // Another team's.
        ("vision", "100%_eval · re-run 50"),
    ];
    for (i, (team, name)) in names.iter().enumerate() {
        db.insert_job(
            &new_job(
                &format!("rerun-{i}"),
                name,
                team,
                if *team == "nlp" { "alice" } else { "dave" },
                &params,
                at,
            ),
            "launched",
        )
        .await
        .unwrap();
    }
    assert_eq!(db.last_rerun_number("nlp", "100%_eval").await.unwrap(), 7);
    assert_eq!(
        db.last_rerun_number("vision", "100%_eval").await.unwrap(),
        50
    );
    assert_eq!(
        db.last_rerun_number("nlp", "100%_eval · re-run 3")
            .await
            .unwrap(),
        1
    );
    assert_eq!(db.last_rerun_number("nlp", "plain").await.unwrap(), 0);
    assert_eq!(
        db.last_rerun_number("speech", "100%_eval").await.unwrap(),
        0
    );
}

/// An interval rolled up while no metrics back end was configured is final: a back end
/// configured later does not measure it (it once did, and the same hours then read as
/// unmeasured in whole days and as measured at a report's partial edge days).
async fn an_interval_rolled_up_unmeasured_is_not_measured_later(t: &TestDb) {
    let db = Db::connect(&t.url, 2).await.expect("connect");
    crate::seed::seed_catalog(&db, Utc::now()).await.unwrap();
    let params = serde_json::Map::new();
    let at = Utc.with_ymd_and_hms(2026, 11, 20, 22, 0, 0).unwrap();
    for (id, ends) in [("rolled", true), ("running", false)] {
        db.insert_job(&new_job(id, id, "nlp", "alice", &params, at), "launched")
            .await
            .unwrap();
        let mut steps = vec![(JobState::Queued, JobState::Admitted)];
        if ends {
            steps.push((JobState::Admitted, JobState::Succeeded));
        }
        for (i, (from, to)) in steps.into_iter().enumerate() {
            assert!(db
                .transition(&Transition {
                    job_id: id,
                    from: &[from],
                    to,
                    at: at + Duration::hours(i as i64),
                    reason: "test",
                    node_names: None,
                    kind: None,
                })
                .await
                .unwrap());
        }
    }
    assert_eq!(db.intervals_without_util(10).await.unwrap().len(), 1);
    assert_eq!(db.roll_up(chrono_tz::Tz::UTC, 10, false).await.unwrap(), 1);
    assert!(db.intervals_without_util(10).await.unwrap().is_empty());
    let left = db.job_intervals("rolled").await.unwrap();
    assert_eq!(left[0].3, None, "unmeasured, as rolled up");
}

#[tokio::test]
async fn an_interval_rolled_up_unmeasured_is_not_measured_later_on_sqlite() {
    an_interval_rolled_up_unmeasured_is_not_measured_later(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn an_interval_rolled_up_unmeasured_is_not_measured_later_on_postgres() {
    let db = TestDb::postgres().await;
    an_interval_rolled_up_unmeasured_is_not_measured_later(&db).await;
    db.drop_database().await;
}

/// The sim clock resumes at the saved clock, or at the latest job event when that is later
/// (a crash between two saves); nothing saved yet is `None` (first start: the real time).
async fn the_sim_clock_resumes_no_earlier_than_the_last_event(t: &TestDb) {
    let db = Db::connect(&t.url, 2).await.expect("connect");
    crate::seed::seed_catalog(&db, Utc::now()).await.unwrap();
    assert_eq!(db.sim_clock().await.unwrap(), None);
    let saved = Utc.with_ymd_and_hms(2026, 11, 20, 22, 0, 0).unwrap();
    db.save_sim_clock(saved).await.unwrap();
    assert_eq!(db.sim_clock().await.unwrap(), Some(saved));
    let params = serde_json::Map::new();
    let earlier = saved - chrono::Duration::minutes(30);
    db.insert_job(
        &new_job("before", "before", "nlp", "alice", &params, earlier),
        "launched",
    )
    .await
    .unwrap();
    assert_eq!(db.sim_clock().await.unwrap(), Some(saved));
    let later = saved + chrono::Duration::seconds(100);
    db.insert_job(
        &new_job("after", "after", "nlp", "alice", &params, later),
        "launched",
    )
    .await
    .unwrap();
    assert_eq!(db.sim_clock().await.unwrap(), Some(later));
}

#[tokio::test]
async fn the_sim_clock_resumes_no_earlier_than_the_last_event_on_sqlite() {
    the_sim_clock_resumes_no_earlier_than_the_last_event(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn the_sim_clock_resumes_no_earlier_than_the_last_event_on_postgres() {
    let db = TestDb::postgres().await;
    the_sim_clock_resumes_no_earlier_than_the_last_event(&db).await;
    db.drop_database().await;
}

#[tokio::test]
async fn the_last_re_run_number_is_of_exact_names_in_the_team_on_sqlite() {
    the_last_re_run_number_is_of_exact_names_in_the_team(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn the_last_re_run_number_is_of_exact_names_in_the_team_on_postgres() {
    let db = TestDb::postgres().await;
    the_last_re_run_number_is_of_exact_names_in_the_team(&db).await;
    db.drop_database().await;
}

/// A reader that goes on from the last event id it saw (the notifier's cursor) sees every
/// event, though two write transactions overlap: the one that began first and commits last
/// must not leave its event behind the cursor. Postgres gave each transaction its UUIDv7 id
/// when it wrote, so without write transactions taking turns the later one committed first,
/// the cursor passed it, and the earlier one's event was never read.
async fn events_are_read_past_a_cursor_in_commit_order(t: &TestDb) {
    let db = Db::connect(&t.url, 4).await.expect("connect");
    crate::seed::seed_catalog(&db, Utc::now()).await.unwrap();
    let params = serde_json::Map::new();
    let now = Utc::now();
    db.insert_job(&new_job("j", "j", "nlp", "alice", &params, now), "launched")
        .await
        .unwrap();
    let mut cursor = db.notifier_cursor().await.unwrap();
    let mut seen = Vec::new();

    let mut first = db.begin_events().await.unwrap();
    super::jobs::insert_event(&mut first, "j", now, "started", "first")
        .await
        .unwrap();
    let second = {
        let db = db.clone();
        tokio::spawn(async move {
            let mut tx = db.begin_events().await.unwrap();
            super::jobs::insert_event(&mut tx, "j", now, "succeeded", "second")
                .await
                .unwrap();
            db.commit(tx).await.unwrap();
        })
    };
    // Time for the second transaction to commit, were it let through.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for e in db.job_events_after(&cursor, 100).await.unwrap() {
        cursor = e.id.clone();
        seen.push(e.reason);
    }
    db.commit(first).await.unwrap();
    second.await.unwrap();
    for e in db.job_events_after(&cursor, 100).await.unwrap() {
        seen.push(e.reason);
    }
    assert_eq!(
        seen,
        ["first", "second"],
        "read in commit order, none passed over"
    );
}

#[tokio::test]
async fn events_are_read_past_a_cursor_in_commit_order_on_sqlite() {
    events_are_read_past_a_cursor_in_commit_order(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn events_are_read_past_a_cursor_in_commit_order_on_postgres() {
    let db = TestDb::postgres().await;
    events_are_read_past_a_cursor_in_commit_order(&db).await;
    db.drop_database().await;
}

/// The audit log's target filter is a prefix, compared as written on both databases: no
/// case folding (SQLite's `LIKE` ignored ASCII case, Postgres' did not) and no wildcards.
async fn the_audit_target_filter_is_the_same_prefix_on_both(t: &TestDb) {
    let db = Db::connect(&t.url, 2).await.expect("connect");
    let at = Utc::now();
    for target in [
        "nlp/hgx-h100",
        "NLP/hgx-h200",
        "nlpx/hgx-h100",
        "nl%p/a",
        "vision/hgx-h100",
    ] {
        db.append_audit(&crate::domain::audit::AuditEntry::new(
            "carol",
            "quota.update",
            target,
            at,
        ))
        .await
        .unwrap();
    }
    let targets = |prefix: &str| {
        let db = db.clone();
        let f = crate::domain::audit::AuditFilter {
            target: Some(prefix.to_string()),
            limit: 100,
            ..Default::default()
        };
        async move {
            let mut t: Vec<String> = db
                .audit(&f)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.target)
                .collect();
            t.sort();
            (t, db.count_audit(&f).await.unwrap())
        }
    };
    assert_eq!(targets("nlp/").await, (vec!["nlp/hgx-h100".to_string()], 1));
    assert_eq!(targets("NLP/").await, (vec!["NLP/hgx-h200".to_string()], 1));
    assert_eq!(
        targets("nl_/").await,
        (vec![], 0),
        "_ is a character, not a wildcard"
    );
    assert_eq!(targets("nl%p").await, (vec!["nl%p/a".to_string()], 1));
    assert_eq!(targets("nlp").await.1, 2);
}

#[tokio::test]
async fn the_audit_target_filter_is_the_same_prefix_on_both_on_sqlite() {
    the_audit_target_filter_is_the_same_prefix_on_both(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn the_audit_target_filter_is_the_same_prefix_on_both_on_postgres() {
    let db = TestDb::postgres().await;
    the_audit_target_filter_is_the_same_prefix_on_both(&db).await;
    db.drop_database().await;
}

/// An admin's change and its audit entry are one transaction: when the entry cannot be
/// written (here: an entry with an id already in the log), the change is not stored either
/// (a template created, a version added, a template deprecated, another team's job
/// cancelled); when it can, both are.
async fn an_admin_change_is_stored_with_its_audit_entry_or_not_at_all(t: &TestDb) {
    use crate::domain::audit::AuditEntry;
    let db = Db::connect(&t.url, 2).await.expect("connect");
    let now = Utc::now();
    crate::seed::seed_catalog(&db, now).await.unwrap();
    let taken = AuditEntry::new("carol", "test.first", "x", now);
    db.append_audit(&taken).await.unwrap();
    let clash = |action: &str| {
        let mut e = AuditEntry::new("carol", action, "x", now);
        e.id = taken.id.clone();
        e
    };
    let entries = |db: Db| async move {
        db.count_audit(&crate::domain::audit::AuditFilter::default())
            .await
            .unwrap()
    };

    let mut tv = db
        .template_version("llama-3.1-8b-fsdp", 1)
        .await
        .unwrap()
        .unwrap();
    tv.name = "audited-template".into();
    assert!(db
        .insert_template(&tv, now, Some(&clash("template.create")))
        .await
        .is_err());
    assert_eq!(
        db.template_state("audited-template").await.unwrap(),
        None,
        "not stored"
    );
    let made = AuditEntry::new("carol", "template.create", "audited-template", now);
    db.insert_template(&tv, now, Some(&made)).await.unwrap();
    assert_eq!(
        db.template_state("audited-template").await.unwrap(),
        Some((1, false))
    );
    assert_eq!(entries(db.clone()).await, 2);

    tv.version = 2;
    assert!(db
        .insert_template(&tv, now, Some(&clash("template.version")))
        .await
        .is_err());
    assert_eq!(
        db.template_state("audited-template").await.unwrap(),
        Some((1, false))
    );

    assert!(db
        .deprecate_template("audited-template", Some(&clash("template.deprecate")))
        .await
        .is_err());
    assert_eq!(
        db.template_state("audited-template").await.unwrap(),
        Some((1, false))
    );
    let gone = AuditEntry::new("carol", "template.deprecate", "audited-template", now);
    assert!(db
        .deprecate_template("audited-template", Some(&gone))
        .await
        .unwrap());
    assert_eq!(
        db.template_state("audited-template").await.unwrap(),
        Some((1, true))
    );

    let params = serde_json::Map::new();
    db.insert_job(
        &new_job("j1", "j1", "vision", "dave", &params, now),
        "launched",
    )
    .await
    .unwrap();
    let cancel = Transition {
        job_id: "j1",
        from: &[JobState::Queued],
        to: JobState::Cancelled,
        at: now,
        reason: "Cancelled by carol",
        node_names: None,
        kind: None,
    };
    assert!(db
        .transition_audited(&cancel, Some(&clash("job.cancel")))
        .await
        .is_err());
    assert_eq!(
        db.get_job("j1").await.unwrap().state,
        JobState::Queued,
        "not cancelled"
    );
    let cancelled = AuditEntry::new("carol", "job.cancel", "j1", now);
    assert!(db
        .transition_audited(&cancel, Some(&cancelled))
        .await
        .unwrap());
    assert_eq!(db.get_job("j1").await.unwrap().state, JobState::Cancelled);
    assert_eq!(entries(db.clone()).await, 4);
}

#[tokio::test]
async fn an_admin_change_is_stored_with_its_audit_entry_or_not_at_all_on_sqlite() {
    an_admin_change_is_stored_with_its_audit_entry_or_not_at_all(&TestDb::sqlite()).await;
}

#[tokio::test]
async fn an_admin_change_is_stored_with_its_audit_entry_or_not_at_all_on_postgres() {
    let db = TestDb::postgres().await;
    an_admin_change_is_stored_with_its_audit_entry_or_not_at_all(&db).await;
    db.drop_database().await;
}

/// First sign-ins through the provider at the same moment: two people whose names give the
/// same id get a user each, with their own teams, and one person signing in twice at once
/// (two tabs) is one user. Raced many times over a pool of several connections; on Postgres
/// each transaction's reads see nothing the other has not committed.
async fn first_sign_ins_at_once_never_share_a_user(t: &TestDb) {
    use crate::domain::identity::IdentitySignIn;
    use app::model::domain::{Membership, Role};
    fn sign_in<'a>(
        subject: &'a str,
        wanted: &'a str,
        teams: &'a [Membership],
    ) -> IdentitySignIn<'a> {
        IdentitySignIn {
            issuer: "https://idp.example.com",
            subject,
            wanted_user_id: wanted,
            display_name: subject,
            email: None,
            is_admin: false,
            teams,
            groups: &[],
            at: Utc::now(),
        }
    }
    let db = Db::connect(&t.url, 4).await.expect("connect");
    crate::seed::seed_catalog(&db, Utc::now()).await.unwrap();
    let teams = db.team_ids().await.unwrap();
    let member = |team: &str| {
        vec![Membership {
            team: team.to_string(),
            role: Role::Member,
        }]
    };
    let (ours, theirs) = (member(&teams[0]), member(&teams[1]));
    for round in 0..12 {
        let (wanted, a, b) = (
            format!("sam-{round}"),
            format!("a-{round}"),
            format!("b-{round}"),
        );
        let (sa, sb) = (sign_in(&a, &wanted, &ours), sign_in(&b, &wanted, &theirs));
        let (x, y) = tokio::join!(db.sign_in_identity(&sa), db.sign_in_identity(&sb));
        let (x, y) = (x.unwrap(), y.unwrap());
        assert_ne!(x, y, "round {round}: two people, one user");
        for (user, teams) in [(&x, &ours), (&y, &theirs)] {
            let v = db.get_viewer(user).await.unwrap().expect("the user");
            assert_eq!(&v.teams, teams, "round {round}: {user}'s teams");
        }
        // Each signs in again as the user they were given.
        assert_eq!(
            db.sign_in_identity(&sign_in(&a, &wanted, &ours))
                .await
                .unwrap(),
            x
        );
        assert_eq!(
            db.sign_in_identity(&sign_in(&b, &wanted, &theirs))
                .await
                .unwrap(),
            y
        );

        // One person, two tabs: one user, and no second one left behind.
        let (same, c) = (format!("tabs-{round}"), format!("c-{round}"));
        let (sc, sd) = (sign_in(&c, &same, &ours), sign_in(&c, &same, &ours));
        let (p, q) = tokio::join!(db.sign_in_identity(&sc), db.sign_in_identity(&sd));
        assert_eq!(
            p.unwrap(),
            q.unwrap(),
            "round {round}: one person, two users"
        );
        assert!(
            db.get_viewer(&format!("{same}-2")).await.unwrap().is_none(),
            "round {round}: a user of the tab that lost stayed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_sign_ins_at_once_never_share_a_user_on_sqlite() {
    first_sign_ins_at_once_never_share_a_user(&TestDb::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_sign_ins_at_once_never_share_a_user_on_postgres() {
    let db = TestDb::postgres().await;
    first_sign_ins_at_once_never_share_a_user(&db).await;
    db.drop_database().await;
}

/// A page of the audit log and its count are one read: while entries are written, a first
/// page that holds every entry the filter selects says exactly that many (two reads said one
/// more now and then: "10 of 11", and no next page), and a filtered page counts only its own.
async fn an_audit_page_and_its_count_agree_while_entries_are_written(t: &TestDb) {
    use crate::domain::audit::{AuditEntry, AuditFilter};
    let db = Db::connect(&t.url, 4).await.expect("connect");
    let writer = {
        let db = db.clone();
        tokio::spawn(async move {
            for i in 0..150 {
                let action = if i % 3 == 0 {
                    "quota.set"
                } else {
                    "auth.sign_in"
                };
                db.append_audit(&AuditEntry::new(
                    "carol",
                    action,
                    "nlp/hgx-h100",
                    Utc::now(),
                ))
                .await
                .unwrap();
            }
        })
    };
    let mut reads = 0;
    let checked = |f: AuditFilter| {
        let db = db.clone();
        async move {
            let (rows, total) = db.audit_page(&f).await.unwrap();
            assert!(rows.len() < 200);
            assert_eq!(rows.len() as u64, total, "{f:?}");
            if let Some(a) = &f.action {
                assert!(rows.iter().all(|e| &e.action == a));
            }
        }
    };
    while !writer.is_finished() {
        checked(AuditFilter {
            limit: 200,
            ..Default::default()
        })
        .await;
        checked(AuditFilter {
            action: Some("quota.set".into()),
            limit: 200,
            ..Default::default()
        })
        .await;
        reads += 1;
    }
    writer.await.unwrap();
    assert!(
        reads > 10,
        "only {reads} reads while the entries were written"
    );
    // An empty page past the last entry still says how many there are.
    let all = db
        .audit(&AuditFilter {
            limit: 200,
            ..Default::default()
        })
        .await
        .unwrap();
    let last = all.last().unwrap();
    let (rows, total) = db
        .audit_page(&AuditFilter {
            after: Some((last.at, last.id.clone())),
            limit: 200,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((rows.len(), total), (0, 150));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_page_and_its_count_agree_while_entries_are_written_on_sqlite() {
    an_audit_page_and_its_count_agree_while_entries_are_written(&TestDb::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_page_and_its_count_agree_while_entries_are_written_on_postgres() {
    let db = TestDb::postgres().await;
    an_audit_page_and_its_count_agree_while_entries_are_written(&db).await;
    db.drop_database().await;
}
