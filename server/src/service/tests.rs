//! Quota saves in the right order: the version checked and the change written in the
//! database, the cluster changed, the write committed; each failure leaves the cluster and the
//! database agreeing. And what a live stream shows a viewer.

use std::sync::atomic::Ordering;

use crate::cluster::QuotaSpec;
use crate::testkit::{Fixture, TestDb};

const SEEDED: QuotaSpec = QuotaSpec {
    nominal: 8,
    borrowing_limit: Some(8),
    lending_limit: None,
    strategy: None,
};

/// The seeded quota as the sim reports it: with the pool's default order resolved.
const SEEDED_IN_CLUSTER: QuotaSpec = QuotaSpec {
    strategy: Some(crate::cluster::QueueingStrategy::BestEffortFifo),
    ..SEEDED
};

fn wanted() -> QuotaSpec {
    QuotaSpec {
        nominal: 32,
        borrowing_limit: Some(0),
        lending_limit: None,
        strategy: None,
    }
}

fn edit() -> crate::service::QuotaEdit {
    crate::service::QuotaEdit {
        nominal: 32,
        borrowing_limit: Some(Some(0)),
        ..Default::default()
    }
}

async fn quota_audits(f: &Fixture) -> usize {
    f.db.audit(&crate::db::AuditFilter {
        action: Some("quota.set".into()),
        limit: 100,
        ..Default::default()
    })
    .await
    .unwrap()
    .len()
}

/// The cluster refuses: nothing is stored, neither the quota nor its audit entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_the_cluster_refuses_is_not_stored() {
    let db = TestDb::sqlite();
    let f = Fixture::start(&db).await;
    let carol = f.viewer("carol").await;
    f.cluster.refuse_quota.store(true, Ordering::SeqCst);
    let err = f
        .portal
        .set_quota(&carol, "vision", "hgx-h200", edit(), Some(1), None)
        .await
        .expect_err("the cluster refused");
    assert_eq!(err.status(), 500, "{err:?}");
    assert_eq!(
        f.db.quota("vision", "hgx-h200").await.unwrap(),
        Some((SEEDED, 1)),
        "nothing stored"
    );
    assert_eq!(quota_audits(&f).await, 0);
    assert_eq!(
        f.cluster.quota_of("vision", "hgx-h200").await,
        Some(SEEDED_IN_CLUSTER)
    );

    // Once the cluster takes it, the same edit (same version) goes through.
    f.cluster.refuse_quota.store(false, Ordering::SeqCst);
    f.portal
        .set_quota(&carol, "vision", "hgx-h200", edit(), Some(1), None)
        .await
        .expect("saved");
    assert_eq!(
        f.db.quota("vision", "hgx-h200").await.unwrap(),
        Some((wanted(), 2))
    );
    assert_eq!(
        f.cluster.quota_of("vision", "hgx-h200").await,
        Some(QuotaSpec {
            strategy: Some(crate::cluster::QueueingStrategy::BestEffortFifo),
            ..wanted()
        })
    );
    assert_eq!(quota_audits(&f).await, 1);
    f.stop().await;
    db.drop_database().await;
}

/// A stale version is refused by the database before the cluster is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_quota_edit_never_reaches_the_cluster() {
    let db = TestDb::sqlite();
    let f = Fixture::start(&db).await;
    let carol = f.viewer("carol").await;
    let err = f
        .portal
        .set_quota(&carol, "vision", "hgx-h200", edit(), Some(7), None)
        .await
        .expect_err("stale");
    assert_eq!(err.status(), 409, "{err:?}");
    assert!(f.cluster.quotas_set.lock().unwrap().is_empty());
    f.stop().await;
    db.drop_database().await;
}

/// The database connection is lost after the cluster took the quota (its transaction ended
/// on the server, so the commit fails): the save is refused and the cluster is put back to
/// the stored quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_that_cannot_be_stored_is_taken_back_from_the_cluster() {
    let db = TestDb::postgres().await;
    let f = Fixture::start(&db).await;
    let carol = f.viewer("carol").await;
    *f.cluster.kill_open_transactions.lock().unwrap() = Some(db.url.clone());
    let err = f
        .portal
        .set_quota(&carol, "vision", "hgx-h200", edit(), Some(1), None)
        .await
        .expect_err("the commit failed");
    assert_eq!(err.status(), 500, "{err:?}");
    assert_eq!(
        f.db.quota("vision", "hgx-h200").await.unwrap(),
        Some((SEEDED, 1)),
        "nothing stored"
    );
    assert_eq!(quota_audits(&f).await, 0);
    assert_eq!(
        *f.cluster.quotas_set.lock().unwrap(),
        [
            ("vision".to_string(), "hgx-h200".to_string(), wanted()),
            ("vision".to_string(), "hgx-h200".to_string(), SEEDED),
        ],
        "applied, then put back"
    );
    assert_eq!(
        f.cluster.quota_of("vision", "hgx-h200").await,
        Some(SEEDED_IN_CLUSTER)
    );
    f.stop().await;
    db.drop_database().await;
}

/// A live stream tells a viewer the job ids of their own team's changes (and an admin every
/// id); of another team's change only which pool moved; after missed changes, only the time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_stream_shows_only_what_the_viewer_may_see() {
    use app::model::{JobState, LiveEvent};
    let db = TestDb::sqlite();
    let f = Fixture::start(&db).await;
    let (alice, carol) = (f.viewer("alice").await, f.viewer("carol").await);
    let change = |team: &str| crate::service::LiveChange {
        job_id: "j-1".into(),
        user: "bob".into(),
        notify: false,
        team: team.into(),
        pool: "hgx-h100".into(),
        state: JobState::Running,
        at: chrono::Utc::now(),
        row: Default::default(),
        seq: 0,
    };
    let id_of = |e: LiveEvent| match e {
        // The state only with the id: of another team's job nothing but its pool.
        LiveEvent::Job {
            job_id,
            pool,
            state,
            ..
        } => {
            assert_eq!(state.is_some(), !job_id.is_empty(), "{job_id}: {state:?}");
            (job_id, pool)
        }
        other => panic!("{other:?}"),
    };
    let own = alice.teams[0].team.clone();
    let other = if own == "nlp" { "vision" } else { "nlp" };
    assert!(!alice.is_member_of(other) && !alice.is_admin);
    assert_eq!(
        id_of(f.portal.live_event(&alice, Some(change(&own))).await),
        ("j-1".to_string(), "hgx-h100".to_string())
    );
    assert_eq!(
        id_of(f.portal.live_event(&alice, Some(change(other))).await),
        (String::new(), "hgx-h100".to_string())
    );
    assert!(carol.is_admin);
    assert_eq!(
        id_of(f.portal.live_event(&carol, Some(change(other))).await).0,
        "j-1"
    );
    assert_eq!(
        id_of(f.portal.live_event(&alice, None).await),
        (String::new(), String::new())
    );
    // A notification written for its owner is flagged for the owner only; the owner's name
    // goes only to those who may see the job.
    let told = async |v: &app::model::Viewer, team: &str| {
        let mut c = change(team);
        c.user = "alice".into();
        c.notify = true;
        match f.portal.live_event(v, Some(c)).await {
            LiveEvent::Job { notify, user, .. } => (notify, user),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(told(&alice, &own).await, (true, "alice".to_string()));
    assert_eq!(told(&carol, &own).await, (false, "alice".to_string()));
    assert_eq!(told(&alice, other).await, (true, String::new()));

    // A real job's change carries its list row to those who may see it, with what each may
    // do: alice (a member) may not cancel bob's job, bob (its owner) and carol (admin) may.
    let (bob, dave) = (f.viewer("bob").await, f.viewer("dave").await);
    let (job, _) = f
        .portal
        .launch_job(
            &bob,
            app::model::LaunchRequest {
                template: "llama-3.1-8b-fsdp".into(),
                gpus: 8,
                name: Some("live-row".into()),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    let c = crate::service::LiveChange {
        job_id: job.id.clone(),
        user: "bob".into(),
        notify: false,
        team: job.team.clone(),
        pool: job.pool.clone(),
        state: job.state,
        at: chrono::Utc::now(),
        row: Default::default(),
        seq: 0,
    };
    let row_of = async |v: &app::model::Viewer| match f.portal.live_event(v, Some(c.clone())).await
    {
        LiveEvent::Job { row, .. } => row,
        other => panic!("{other:?}"),
    };
    let for_alice = row_of(&alice).await.expect("a teammate gets the row");
    assert_eq!(
        (
            for_alice.id.as_str(),
            for_alice.name.as_str(),
            for_alice.state
        ),
        (job.id.as_str(), "live-row", job.state)
    );
    assert_eq!(for_alice.queue_position, job.queue_position);
    assert!(for_alice.events.is_empty(), "a list row carries no events");
    assert!(!for_alice.can_cancel && for_alice.can_rerun);
    let for_bob = row_of(&bob).await.unwrap();
    assert!(for_bob.can_cancel && for_bob.can_rerun);
    let for_carol = row_of(&carol).await.unwrap();
    assert!(for_carol.can_cancel && !for_carol.can_rerun);
    assert!(
        row_of(&dave).await.is_none(),
        "another team's viewer gets no row"
    );
    // Read once for all of them: the cell now holds it.
    assert!(c.row.is_read());
    // The text a stream sends is written once per kind of viewer: two teammates who may not
    // cancel share one; the owner's says it may be cancelled; another team's has no row.
    let text = async |v: &app::model::Viewer| f.portal.live_event_text(v, Some(c.clone())).await;
    let alice_text = text(&alice).await;
    let mut teammate = alice.clone();
    teammate.user = "another-member".into();
    assert!(std::sync::Arc::ptr_eq(&alice_text, &text(&teammate).await));
    let parsed = |t: std::sync::Arc<str>| serde_json::from_str::<LiveEvent>(&t).unwrap();
    assert_eq!(
        parsed(alice_text.clone()),
        f.portal.live_event(&alice, Some(c.clone())).await
    );
    let bob_text = text(&bob).await;
    assert!(!std::sync::Arc::ptr_eq(&alice_text, &bob_text));
    match parsed(bob_text) {
        LiveEvent::Job { row: Some(r), .. } => assert!(r.can_cancel),
        other => panic!("{other:?}"),
    }
    match parsed(text(&dave).await) {
        LiveEvent::Job { row, job_id, .. } => assert!(row.is_none() && job_id.is_empty()),
        other => panic!("{other:?}"),
    }
    db.drop_database().await;
}

/// A session in memory, signed in as alice just now.
async fn alice_signed_in() -> tower_sessions::Session {
    use crate::service::session::{SIGNED_IN_KEY, USER_KEY};
    let store = std::sync::Arc::new(tower_sessions::MemoryStore::default());
    let session = tower_sessions::Session::new(None, store, None);
    session.insert(USER_KEY, "alice").await.unwrap();
    session
        .insert(SIGNED_IN_KEY, chrono::Utc::now().timestamp_millis())
        .await
        .unwrap();
    session
}

/// A page asks for its viewer once per server function it renders; with the request's
/// `ViewerMemo` the session and the user are read once, and a later request reads them again.
#[tokio::test]
async fn a_request_reads_its_viewer_once() {
    let db = TestDb::sqlite();
    let f = Fixture::start(&db).await;
    let session = alice_signed_in().await;
    let request = |memo: Option<crate::service::ViewerMemo>| {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.extensions.insert(session.clone());
        if let Some(m) = memo {
            parts.extensions.insert(m);
        }
        parts
    };
    let name = async |parts: &http::request::Parts| {
        f.portal
            .viewer(parts)
            .await
            .unwrap()
            .expect("alice is signed in")
            .display_name
    };
    let memo = crate::service::ViewerMemo::default();
    let (first, second) = (request(Some(memo.clone())), request(Some(memo)));
    let before = name(&first).await;
    sqlx::query("UPDATE app_user SET display_name = 'Alice Renamed' WHERE user_id = 'alice'")
        .execute(f.db.pool())
        .await
        .unwrap();
    assert_eq!(
        name(&second).await,
        before,
        "the same request's second server function reads the memo, not the database"
    );
    assert_eq!(name(&request(None)).await, "Alice Renamed");
    assert_eq!(
        name(&request(Some(Default::default()))).await,
        "Alice Renamed",
        "the next request reads the database again"
    );
    // A user with no team (a membership row missing) is still read, with no teams.
    sqlx::query("DELETE FROM membership WHERE user_id = 'alice'")
        .execute(f.db.pool())
        .await
        .unwrap();
    let v = f.portal.viewer(&request(None)).await.unwrap().unwrap();
    assert!(v.teams.is_empty());
}

/// Across requests (`db::memo`): a GET's viewer is answered from memory while nothing was
/// written through Gantry, even after a write around it; an action (a POST) reads the
/// database, and so follows that write at once; a write through Gantry ends the memory.
#[tokio::test]
async fn an_action_reads_its_viewer_from_the_database() {
    let db = TestDb::sqlite();
    let f = Fixture::start(&db).await;
    f.db.read_memo().set_ttl(std::time::Duration::from_secs(60));
    let session = alice_signed_in().await;
    let name = async |method: http::Method, path: &str| {
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.method = method;
        parts.uri = path.parse().unwrap();
        parts.extensions.insert(session.clone());
        f.portal
            .viewer(&parts)
            .await
            .unwrap()
            .expect("alice is signed in")
            .display_name
    };
    use leptos::server_fn::ServerFn;
    // A server function that only reads (a page calls it as it hydrates), and one that acts.
    let (reads, acts) = (
        app::functions::GetNotifications::PATH,
        app::functions::CancelJob::PATH,
    );
    let before = name(http::Method::GET, "/jobs").await;
    // Around Gantry (an operator's SQL): not counted as a write.
    sqlx::query("UPDATE app_user SET display_name = 'Alice Renamed' WHERE user_id = 'alice'")
        .execute(f.db.pool())
        .await
        .unwrap();
    assert_eq!(
        name(http::Method::GET, "/jobs").await,
        before,
        "a page, from memory"
    );
    assert_eq!(
        name(http::Method::POST, reads).await,
        before,
        "a server function that only reads, from memory"
    );
    assert_eq!(
        name(http::Method::POST, acts).await,
        "Alice Renamed",
        "an action, from the database"
    );
    f.db.insert_team("vision", "Vision", chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(
        name(http::Method::GET, "/jobs").await,
        "Alice Renamed",
        "after a write through Gantry, a read reads again"
    );
}

/// A request's [`app::functions::RequestMemo`] keeps each key's first answer for the rest of
/// the request (the job page's GPU panel is built two or three times per render on the
/// server, and its later builds read the first's answer), also when the calls overlap;
/// another key, the same key with another type of answer, and the next request's memo read
/// again.
#[tokio::test]
async fn a_request_memo_answers_each_key_once() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let reads = AtomicU32::new(0);
    let read = |answer: &'static str| {
        let reads = &reads;
        move || async move {
            reads.fetch_add(1, Ordering::SeqCst);
            Ok::<String, app::error::ApiError>(answer.to_string())
        }
    };
    let memo = app::functions::RequestMemo::default();
    let shared = memo.clone();
    assert_eq!(
        memo.once("util a".into(), read("first")).await.unwrap(),
        "first"
    );
    assert_eq!(
        shared.once("util a".into(), read("second")).await.unwrap(),
        "first"
    );
    assert_eq!(
        reads.load(Ordering::SeqCst),
        1,
        "the second call reads the memo"
    );
    assert_eq!(
        memo.once("util b".into(), read("other")).await.unwrap(),
        "other"
    );
    assert_eq!(memo.once("util a".into(), || async { 7u32 }).await, 7);
    // Calls that overlap read once: the second waits for the first's answer.
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let slow = memo.once("util c".into(), || async {
        rx.await.unwrap();
        reads.fetch_add(1, Ordering::SeqCst);
        Ok::<String, app::error::ApiError>("slow".into())
    });
    let waiting = memo.once("util c".into(), read("not read"));
    let (a, b, ()) = tokio::join!(slow, waiting, async { tx.send(()).unwrap() });
    assert_eq!(
        (a.unwrap(), b.unwrap()),
        ("slow".to_string(), "slow".to_string())
    );
    assert_eq!(reads.load(Ordering::SeqCst), 3);
    let next = app::functions::RequestMemo::default();
    assert_eq!(
        next.once("util a".into(), read("again")).await.unwrap(),
        "again"
    );
    assert_eq!(reads.load(Ordering::SeqCst), 4);
}

/// Under single sign-on a personal API token stands for its owner's teams and role as their
/// groups gave them at their last sign-in: it works only while that sign-in is recent.
#[tokio::test]
async fn under_single_sign_on_a_token_works_while_its_owner_keeps_signing_in() {
    let db = TestDb::sqlite();
    let f = Fixture::start(&db).await;
    let mut auth = crate::config::Config::default().auth;
    auth.oidc = Some(crate::config::OidcConfig {
        issuer: "https://idp.example.com".into(),
        client_id: "gantry".into(),
        client_secret: None,
        redirect_url: "https://gantry.example.com/auth/callback".into(),
        scopes: vec!["openid".into()],
        groups_claim: "groups".into(),
        groups: Default::default(),
        post_logout_redirect_url: None,
        provider_name: "Keycloak".into(),
        pending_per_address: 100,
        token_sign_in_days: 30,
    });
    // A portal on the fixture's database and cluster, signing in as `auth` says.
    let with_auth = |auth: &crate::config::AuthConfig| {
        crate::service::Portal::new(
            f.db.clone(),
            f.portal.cluster().clone(),
            tokio::sync::watch::channel(0).1,
            crate::service::LiveTx::new(16),
            false,
        )
        .with_auth(auth)
    };
    let portal = with_auth(&auth);
    let now = chrono::Utc::now();
    let teams = [app::model::Membership {
        team: "nlp".into(),
        role: app::model::Role::Member,
    }];
    let sign_in = |days_ago: i64| crate::domain::identity::IdentitySignIn {
        issuer: "https://idp.example.com",
        subject: "s-1",
        wanted_user_id: "dana",
        display_name: "Dana",
        email: None,
        is_admin: false,
        teams: &teams,
        groups: &[],
        at: now - chrono::TimeDelta::days(days_ago),
    };
    let user = portal.sign_in_identity(&sign_in(29)).await.unwrap();
    let viewer = portal.viewer_by_id(&user).await.unwrap().unwrap();
    let created = portal
        .create_token(&viewer, "ci".into(), None)
        .await
        .unwrap();
    // Its creator is told, once, with the token.
    assert_eq!(created.sign_in_days, Some(30));
    let token = created.token;
    // Signed in 29 days ago: it works.
    assert_eq!(portal.viewer_by_token(&token).await.unwrap().user, user);
    // 31 days: refused, saying why and what to do.
    portal.sign_in_identity(&sign_in(31)).await.unwrap();
    let err = portal.viewer_by_token(&token).await.unwrap_err();
    assert_eq!(err.status(), 401, "{err:?}");
    let said = err.to_string();
    assert!(
        said.contains("through Keycloak in the last 30 days") && said.contains("sign in"),
        "{said}"
    );
    // Signing in again makes it work again.
    portal.sign_in_identity(&sign_in(0)).await.unwrap();
    assert_eq!(portal.viewer_by_token(&token).await.unwrap().user, user);
    // A user who never signed in through the provider has no token that works.
    let alice = portal.viewer_by_id("alice").await.unwrap().unwrap();
    let theirs = f
        .portal
        .create_token(&alice, "old".into(), None)
        .await
        .unwrap();
    assert_eq!(
        theirs.sign_in_days, None,
        "without single sign-on, no bound"
    );
    let theirs = theirs.token;
    assert_eq!(
        portal.viewer_by_token(&theirs).await.unwrap_err().status(),
        401
    );
    // With the bound off (0), or without single sign-on, the same token works.
    auth.oidc.as_mut().unwrap().token_sign_in_days = 0;
    let unbounded = with_auth(&auth);
    assert_eq!(
        unbounded.viewer_by_token(&theirs).await.unwrap().user,
        "alice"
    );
    assert_eq!(
        f.portal.viewer_by_token(&theirs).await.unwrap().user,
        "alice"
    );
}

/// An admin sees every user's live tokens (not revoked, not expired; with how many in all)
/// and revokes anyone's, which is refused from then on and audited with its owner as the
/// target; a member sees and revokes no one else's, and is told nothing of them.
async fn an_admin_lists_and_revokes_any_users_token_on(db: TestDb) {
    let f = Fixture::start(&db).await;
    let p = &f.portal;
    let (alice, bob, carol) = (
        f.viewer("alice").await,
        f.viewer("bob").await,
        f.viewer("carol").await,
    );
    let a1 = p.create_token(&alice, "ci".into(), Some(30)).await.unwrap();
    let a2 = p.create_token(&alice, "laptop".into(), None).await.unwrap();
    let b1 = p.create_token(&bob, "agent".into(), None).await.unwrap();
    let gone = p.create_token(&bob, "old".into(), None).await.unwrap();
    p.revoke_token(&bob, &gone.info.id).await.unwrap();
    // Expired a minute ago: not live either.
    let now = chrono::Utc::now();
    f.db.insert_token(
        &crate::db::TokenRow {
            id: "t-expired".into(),
            user: "alice".into(),
            name: "expired".into(),
            prefix: "gantry_abcd".into(),
            created_at: now - chrono::TimeDelta::days(2),
            expires_at: Some(now - chrono::TimeDelta::minutes(1)),
            last_used_at: None,
            revoked_at: None,
        },
        "hash-of-an-expired-token",
    )
    .await
    .unwrap();

    let all = p.live_tokens(&carol, None, None, None).await.unwrap();
    let listed: Vec<(String, String)> = all
        .tokens
        .iter()
        .map(|t| (t.user.clone(), t.info.name.clone()))
        .collect();
    // By user, newest first within each.
    assert_eq!(
        listed,
        [("alice", "laptop"), ("alice", "ci"), ("bob", "agent")]
            .map(|(u, n)| (u.to_string(), n.to_string()))
    );
    assert_eq!((all.total, all.next_cursor.as_deref()), (3, None));
    // A page at a time: the same tokens in the same order, each once, the count on every page.
    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    // Bounded: a cursor that does not move on would walk for ever.
    for _ in 0..=listed.len() {
        let page = p
            .live_tokens(&carol, None, cursor.as_deref(), Some(1))
            .await
            .unwrap();
        assert_eq!((page.tokens.len(), page.total), (1, 3));
        walked.extend(
            page.tokens
                .iter()
                .map(|t| (t.user.clone(), t.info.name.clone())),
        );
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(walked, listed);
    assert_eq!(cursor, None, "the last page gives no cursor");
    for (cursor, limit, field) in [
        (Some("not-a-cursor"), None, "cursor"),
        (None, Some(0), "limit"),
        (None, Some(201), "limit"),
    ] {
        let err = p
            .live_tokens(&carol, None, cursor, limit)
            .await
            .unwrap_err();
        assert_eq!(
            (err.status(), err.field.as_deref()),
            (422, Some(field)),
            "{err}"
        );
    }
    // One user's, a page at a time: the filter and the place together.
    let alice_first = p
        .live_tokens(&carol, Some("alice".into()), None, Some(1))
        .await
        .unwrap();
    let alice_rest = p
        .live_tokens(
            &carol,
            Some("alice".into()),
            alice_first.next_cursor.as_deref(),
            Some(1),
        )
        .await
        .unwrap();
    // A place in one user's list is refused in another's.
    let mixed = p
        .live_tokens(
            &carol,
            Some("bob".into()),
            alice_first.next_cursor.as_deref(),
            Some(1),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (mixed.status(), mixed.field.as_deref()),
        (422, Some("cursor")),
        "{mixed}"
    );
    let names = |l: &app::model::UserApiTokens| {
        l.tokens
            .iter()
            .map(|t| t.info.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        (names(&alice_first), alice_first.total),
        (vec!["laptop".to_string()], 2)
    );
    assert_eq!(
        (names(&alice_rest), alice_rest.total, alice_rest.next_cursor),
        (vec!["ci".to_string()], 2, None)
    );
    let only_bob = p
        .live_tokens(&carol, Some(" bob ".into()), None, None)
        .await
        .unwrap();
    assert_eq!(only_bob.tokens.len(), 1);
    assert_eq!(
        (only_bob.tokens[0].info.id.as_str(), only_bob.total),
        (b1.info.id.as_str(), 1)
    );

    // An expired token is not live: nothing to revoke.
    let expired = p.revoke_token(&carol, "t-expired").await.unwrap_err();
    assert_eq!(expired.status(), 404, "{expired}");
    // A member may not list them, nor revoke another's: it answers as an unknown id.
    let refused = p.live_tokens(&alice, None, None, None).await.unwrap_err();
    assert_eq!(refused.status(), 403, "{refused}");
    let refused = p.revoke_token(&alice, &b1.info.id).await.unwrap_err();
    assert_eq!(refused.status(), 404, "{refused}");
    assert!(p.viewer_by_token(&b1.token).await.is_ok());

    // The admin revokes alice's token: refused from then on, audited with alice as target.
    p.revoke_token(&carol, &a1.info.id).await.unwrap();
    let err = p.viewer_by_token(&a1.token).await.unwrap_err();
    assert_eq!(err.status(), 401, "{err}");
    assert!(
        p.viewer_by_token(&a2.token).await.is_ok(),
        "her other token still works"
    );
    // The audit log's entry for the revocation of token `id` of `owner`, as carol reads it.
    let admin = &carol;
    let revocation = move |owner: &'static str, id: String| async move {
        p.audit_log(
            admin,
            crate::db::AuditFilter {
                action: Some("token.revoke".into()),
                target: Some(owner.into()),
                ..Default::default()
            },
            None,
            None,
        )
        .await
        .unwrap()
        .entries
        .into_iter()
        .find(|e| e.before.as_ref().is_some_and(|b| b["id"] == id.as_str()))
    };
    let entry = revocation("alice", a1.info.id.clone())
        .await
        .expect("the admin's revocation is audited");
    assert_eq!(
        (entry.actor.as_str(), entry.target.as_str()),
        ("carol", "alice")
    );
    assert_eq!(entry.before.as_ref().unwrap()["name"], "ci");
    // An owner's own revocation is audited the same way: which token, its name, whose.
    let own = revocation("bob", gone.info.id.clone())
        .await
        .expect("bob's revocation of his own token is audited");
    assert_eq!(own.actor, "bob");
    assert_eq!(
        own.before,
        Some(serde_json::json!({"id": gone.info.id, "name": "old", "user": "bob"}))
    );
    // Gone from the list; a second revocation finds no live token.
    let after = p
        .live_tokens(&carol, Some("alice".into()), None, None)
        .await
        .unwrap();
    assert_eq!(after.tokens.len(), 1);
    assert_eq!(after.tokens[0].info.id, a2.info.id);
    // A page whose tokens went since is empty and still says how many are live.
    let first = p.live_tokens(&carol, None, None, Some(1)).await.unwrap();
    assert_eq!(first.total, 2);
    p.revoke_token(&bob, &b1.info.id).await.unwrap();
    let rest = p
        .live_tokens(&carol, None, first.next_cursor.as_deref(), Some(1))
        .await
        .unwrap();
    assert_eq!(
        (rest.tokens.len(), rest.total, rest.next_cursor),
        (0, 1, None)
    );
    let again = p.revoke_token(&carol, &a1.info.id).await.unwrap_err();
    assert_eq!(again.status(), 404, "{again}");
    f.stop().await;
    db.drop_database().await;
}

#[tokio::test]
async fn an_admin_lists_and_revokes_any_users_token_on_sqlite() {
    an_admin_lists_and_revokes_any_users_token_on(TestDb::sqlite()).await;
}

#[tokio::test]
async fn an_admin_lists_and_revokes_any_users_token_on_postgres() {
    an_admin_lists_and_revokes_any_users_token_on(TestDb::postgres().await).await;
}

/// An expired token is listed to its owner as expired (not live, with no Revoke button) and
/// takes no place among the live tokens one may hold.
#[tokio::test]
async fn expired_tokens_are_shown_expired_and_take_no_place() {
    let db = TestDb::sqlite();
    let f = Fixture::start(&db).await;
    let p = &f.portal;
    let alice = f.viewer("alice").await;
    let now = chrono::Utc::now();
    for i in 0..crate::service::identity::MAX_LIVE_TOKENS {
        f.db.insert_token(
            &crate::db::TokenRow {
                id: format!("t-old-{i}"),
                user: "alice".into(),
                name: format!("old-{i}"),
                prefix: "gantry_abcd".into(),
                created_at: now - chrono::TimeDelta::days(40),
                expires_at: Some(now - chrono::TimeDelta::days(10)),
                last_used_at: None,
                revoked_at: None,
            },
            &format!("hash-{i}"),
        )
        .await
        .unwrap();
    }
    let fresh = p.create_token(&alice, "new".into(), Some(7)).await.unwrap();
    assert!(!fresh.info.expired);
    let listed = p.list_tokens(&alice).await.unwrap();
    assert_eq!(listed.len(), crate::service::identity::MAX_LIVE_TOKENS + 1);
    for t in &listed {
        assert_eq!(t.expired, t.name != "new", "{}", t.name);
    }
    f.stop().await;
}
