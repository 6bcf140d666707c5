//! Jobs: the viewer's and their team's jobs (every team's for an admin), a page of 50 at a
//! time, searched and filtered on the server by state, text, pool, user, team and submission
//! date, with queue position or elapsed time; the query lives in the URL.

use std::sync::Arc;

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use leptos_router::params::ParamsMap;

use crate::app::{use_viewer, Authed};
use crate::components::{loaded, state_badge_html, PageError, Progress};
use crate::format;
use crate::functions::{list_jobs, JobsPageQuery};
use crate::live::{throttle, use_live, Live};
use crate::model::{Job, JobList, JobState, JobTerms};
use crate::pages::job_actions::{cancel_button, CancelAction, CancelAsk};
use crate::pages::jobs_live::{patch, Patched};
use crate::pages::jobs_wire::JobRowsCodec;
use crate::sync_html::sync_html;

#[component]
pub fn JobsPage() -> impl IntoView {
    view! {
        <Authed>
            <Jobs/>
        </Authed>
    }
}

/// The URL's query keys the page reads; a chip or the search form keeps the others.
const KEYS: [&str; 9] = [
    "scope", "state", "q", "pool", "user", "team", "from", "to", "cursor",
];

#[component]
fn Jobs() -> impl IntoView {
    let query = use_query_map();
    let get = move |k: &str| query.with(|q| nonblank(q, k).map(str::to_string));
    let state = move || get("state");
    let scope = move || get("scope").unwrap_or_else(|| DEFAULT_SCOPE.to_string());
    let page_query = move || JobsPageQuery {
        state: state(),
        scope: Some(scope()),
        q: get("q"),
        pool: get("pool"),
        user: get("user"),
        team: get("team"),
        from: get("from"),
        to: get("to"),
        cursor: get("cursor"),
    };
    // Live changes patch the shown page (see `jobs_live`); what cannot be patched exactly is
    // asked again, at most every 5 s.
    let stale = RwSignal::new(0u64);
    let refetch = throttle(std::time::Duration::from_secs(5), move || stale.get() > 0);
    // In the page as compact rows of what it reads (`jobs_wire`). Shared, not copied: the
    // page's rows are the resource's (a copy of 50 jobs for the view, and its drop, were
    // 4-5 % of the page's CPU in a profile of the page bench; without them the page took
    // 369-382 µs of CPU a request against 396-425).
    let list = Resource::<_, JobRowsCodec>::new_with_options(
        move || (page_query(), refetch.get()),
        |(q, _)| async move { list_jobs(q).await.map(Arc::new) },
        false,
    );
    // The pools come with the viewer (`PageViewer`): no read, and no boundary, of their own.
    let pool_names = crate::app::use_pool_names();
    let chosen_pool = untrack(|| get("pool")).unwrap_or_default();
    // One Cancel confirmation for the page, named by its job: it stays open when its row is
    // drawn again, and closes when the page shows another list (a filter, another page).
    let cancel = CancelAction::provide();
    Effect::new(move |_| {
        let _ = page_query();
        cancel.reset();
    });
    // A link to this page with `changes` applied to the current query.
    let link = move |changes: &[(&str, Option<&str>)]| {
        query.with(|q| jobs_link(|k| q.get_str(k), changes))
    };
    let page_query_untracked = move || untrack(page_query);
    let viewer = use_viewer();
    let can_launch = viewer.as_ref().is_some_and(|v| v.can_launch());
    let is_admin = viewer.as_ref().is_some_and(|v| v.is_admin);
    let searching = move || {
        ["q", "pool", "user", "team", "from", "to"]
            .iter()
            .any(|k| get(k).is_some())
    };
    view! {
        <div class="page-head">
            <h1>"Jobs"</h1>
            {can_launch.then(|| view! { <a class="button primary" href="/launch" data-testid="jobs-launch">"Launch a job"</a> })}
        </div>
        <nav class="filters" aria-label="Filter jobs">
            // One reading of the query for all the chips. When each chip had its own closures,
            // each link read the query nine times, and Leptos runs every closure twice a render
            // on the server (about 6 % of the page's CPU time: perf over the page bench).
            {move || query.with(|q| filter_chips(q, is_admin))}
        </nav>
        // A plain GET form: it works before the page is interactive, and the query it
        // makes is the page's URL.
        <form class="filters job-search" method="get" action="/jobs" data-testid="job-search">
            {move || state().map(|s| view! { <input type="hidden" name="state" value=s/> })}
            <input type="hidden" name="scope" value=scope/>
            <label class="grow">"Search "
                <input type="search" name="q" placeholder="name, template or user" data-testid="search-q" prop:value=move || get("q").unwrap_or_default()/>
            </label>
            <label>"Pool "
                // `selected` for the page as loaded; the property as the query changes (a
                // chip, Clear).
                <select name="pool" data-testid="search-pool" prop:value=move || get("pool").unwrap_or_default()>
                    <option value="" selected=chosen_pool.is_empty()>"any"</option>
                    {pool_names.into_iter().map(|n| {
                        let (selected, label) = (n == chosen_pool, n.clone());
                        view! { <option value=n selected=selected>{label}</option> }
                    }).collect_view()}
                </select>
            </label>
            <label>"User " <input name="user" size="10" placeholder="e.g. alice" data-testid="search-user" prop:value=move || get("user").unwrap_or_default()/></label>
            {is_admin.then(|| view! {
                <label>"Team " <input name="team" size="10" placeholder="e.g. nlp" data-testid="search-team" prop:value=move || get("team").unwrap_or_default()/></label>
            })}
            <label>"Submitted from " <input type="date" name="from" data-testid="search-from" prop:value=move || get("from").unwrap_or_default()/></label>
            <label>"to " <input type="date" name="to" data-testid="search-to" prop:value=move || get("to").unwrap_or_default()/></label>
            <button class="button" type="submit" data-testid="search-submit">"Search"</button>
            {move || searching().then(|| view! {
                <a class="button" href=link(&[("q", None), ("pool", None), ("user", None), ("team", None), ("from", None), ("to", None)]) data-testid="search-clear">"Clear"</a>
            })}
        </form>
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                let viewer_for_terms = viewer.clone();
                Suspend::new(async move {
                loaded(list).await.map(|r| match r {
                    Ok(l) => {
                        let older = l.next_cursor.clone().map(|c| link(&[("cursor", Some(c.as_str()))]));
                        let newest = get("cursor").map(|_| link(&[("cursor", None)]));
                        let terms = viewer_for_terms
                            .as_ref()
                            .and_then(|v| page_query_untracked().filter().ok()?.terms(v).ok());
                        let shown = RwSignal::new(l);
                        follow_live(shown, terms, stale);
                        // Waits on nothing: written in one pass (`sync_html`).
                        sync_html(view! {
                            <PageLine list=shown first_page=newest.is_none()/>
                            <JobTable list=shown can_launch show_team=is_admin searching=searching()/>
                            <nav class="pager" aria-label="Pages">
                                {newest.map(|h| view! { <a class="button" href=h data-testid="page-newest">"← Newest"</a> })}
                                {older.map(|h| view! { <a class="button" href=h data-testid="page-older">"Older jobs →"</a> })}
                            </nav>
                        }).into_any()
                    }
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}}
        </Transition>
    }
}

/// The scope shown when the URL names none: the viewer's team (every team for an admin).
const DEFAULT_SCOPE: &str = "team";

/// The query's value of `k`, unless it is blank.
fn nonblank<'a>(q: &'a ParamsMap, k: &str) -> Option<&'a str> {
    q.get_str(k).filter(|v| !v.trim().is_empty())
}

/// A link to the Jobs page: the query whose values `q` gives, with `changes` applied (`None`
/// removes a key, and "all" or a blank value is left out); any change starts again at the
/// first page.
fn jobs_link<'a>(q: impl Fn(&str) -> Option<&'a str>, changes: &[(&str, Option<&str>)]) -> String {
    let mut link = String::from("/jobs");
    for k in KEYS {
        let v = match changes.iter().find(|(c, _)| *c == k) {
            Some((_, v)) => *v,
            None if k == "cursor" => None,
            None => q(k),
        };
        if let Some(v) = v.filter(|v| !v.trim().is_empty() && *v != "all") {
            link.push(if link.contains('?') { '&' } else { '?' });
            link.push_str(k);
            link.push('=');
            link.push_str(&format::query_value(v));
        }
    }
    link
}

/// The scope and state chips for the query `q`.
fn filter_chips(q: &ParamsMap, is_admin: bool) -> impl IntoView {
    let value = |k: &str| q.get_str(k);
    let scope = nonblank(q, "scope").unwrap_or(DEFAULT_SCOPE);
    let state = nonblank(q, "state");
    let scopes = ["team", "mine"].map(|s| {
        let active = scope == s;
        view! {
            <a
                href=jobs_link(value, &[("scope", Some(s))])
                class="chip"
                class:active=active
                aria-current=active.then_some("true")
                data-testid=["scope-", s].concat()
            >
                {match (s, is_admin) {
                    ("mine", _) => "Mine",
                    (_, true) => "All teams",
                    _ => "My team",
                }}
            </a>
        }
    });
    let states = JobState::ALL.map(|s| {
        view! {
            <a
                href=jobs_link(value, &[("state", Some(s.as_str()))])
                class="chip"
                class:active=state == Some(s.as_str())
                data-testid=["filter-", s.as_str()].concat()
            >
                {s.as_str()}
            </a>
        }
    });
    view! {
        <span class="filter-group">{scopes.into_iter().collect_view()}</span>
        <span class="filter-group">
            <a
                href=jobs_link(value, &[("state", None)])
                class="chip"
                class:active=state.is_none()
                data-testid="filter-all"
            >
                "All states"
            </a>
            {states.into_iter().collect_view()}
        </span>
    }
}

/// Patches the shown page from the live stream; a change it cannot place exactly (or a gap
/// in the changes seen) bumps `stale`, which refetches.
fn follow_live(shown: RwSignal<Arc<JobList>>, terms: Option<JobTerms>, stale: RwSignal<u64>) {
    let live = use_live();
    let seen = StoredValue::new(live.last.with_untracked(|c| c.seq));
    // The server's changes up to `read_at` are in the list. Those told of while it was on its
    // way (numbered after it) are not, and will not come again: read it again. (A list
    // rendered with the page has none: the stream opens after it, and says what it lacks.)
    let read_at = shown.with_untracked(|l| l.live_seq);
    if live.known.get_value() > read_at {
        stale.update(|n| *n += 1);
    }
    Effect::new(move |_| {
        let c = live.last.get();
        let last = seen.get_value();
        if c.seq <= last {
            return;
        }
        seen.set_value(c.seq);
        // Sent before the list was read, and told of only now: the list holds it.
        if c.server_seq != 0 && c.server_seq <= read_at {
            return;
        }
        let done = match &terms {
            Some(t) if c.seq == last + 1 => {
                let mut done = Patched::Nothing;
                shown.maybe_update(|l| {
                    done = patch(Arc::make_mut(l), t, &c);
                    done == Patched::Changed
                });
                done
            }
            _ => Patched::Refetch,
        };
        if done == Patched::Refetch {
            stale.update(|n| *n += 1);
        }
    });
}

/// "50 of 253 jobs, newest first": how much of the list this page is.
#[component]
fn PageLine(list: RwSignal<Arc<JobList>>, first_page: bool) -> impl IntoView {
    move || list.with(|list| page_line(list, first_page))
}

fn page_line(list: &JobList, first_page: bool) -> impl IntoView {
    let shown = list.jobs.len() as u64;
    let text = if list.total == 0 {
        String::new()
    } else if shown == list.total {
        format!(
            "{} job{}, newest first",
            format::thousands(list.total),
            if list.total == 1 { "" } else { "s" }
        )
    } else {
        format!(
            "{} of {} jobs{}, newest first",
            format::thousands(shown),
            format::thousands(list.total),
            if first_page { "" } else { " (an older page)" }
        )
    };
    view! { <p class="muted small" data-testid="jobs-count">{text}</p> }
}

#[component]
fn JobTable(
    list: RwSignal<Arc<JobList>>,
    can_launch: bool,
    show_team: bool,
    searching: bool,
) -> impl IntoView {
    let live = use_live();
    let page_now = list.with_untracked(|l| l.now);
    // Only when the page turns empty or not: patched rows redraw on their own.
    let empty = Memo::new(move |_| list.with(|l| l.jobs.is_empty()));
    move || {
        if empty.get() {
            view! {
            <div class="empty panel" data-testid="jobs-empty">
                {if searching {
                    view! { <p>"No jobs match this search. Try fewer words or a wider date range."</p> }.into_any()
                } else {
                    view! { <p>"No jobs match. Jobs you and your team launch show up here."</p> }.into_any()
                }}
                {can_launch.then(|| view! { <a class="button" href="/launch">"Launch one"</a> })}
            </div>
        }
        .into_any()
        } else {
            // On a phone each row stacks (style/main.css, `jobs-table`); on a narrow screen
            // wider than that the table scrolls inside its box instead of widening the page.
            view! {
                <div class="table-scroll">
                <table class="table jobs-table" data-testid="jobs-table">
                    <thead>
                        <tr>
                            <th>"State"</th>
                            <th>"Name"</th>
                            <th>"Template"</th>
                            <th>"User"</th>
                            {show_team.then(|| view! { <th>"Team"</th> })}
                            <th class="num">"GPUs"</th>
                            <th>"Pool"</th>
                            <th>"Position / elapsed"</th>
                            <th>"Submitted"</th>
                            <th><span class="sr-only">"Actions"</span></th>
                        </tr>
                    </thead>
                    {table_body(list, show_team, page_now, live)}
                </table>
                </div>
            }
            .into_any()
        }
    }
}

/// The table's body: a row for each job of the page, patched in place by live changes.
///
/// On the server the rows the viewer cannot cancel (most of a page: jobs that have ended,
/// and others' jobs) are written straight into one string ([`rows_html`]) instead of as a
/// keyed list of views (cells, clocks, a reactive owner each), and the rows with a Cancel
/// button through their view. Written so, the page costs 30 % less CPU a request (853 to
/// 594 µs in the page benchmark). The HTML is the view's, byte for byte
/// (`the_rows_written_as_one_string_are_the_views_html`), so the browser hydrates the same
/// keyed list over it.
fn table_body(
    list: RwSignal<Arc<JobList>>,
    show_team: bool,
    page_now: chrono::DateTime<chrono::Utc>,
    live: Live,
) -> impl IntoView {
    #[cfg(feature = "ssr")]
    {
        let html = list.with_untracked(|l| rows_html(&l.jobs, show_team, page_now, live));
        view! { <tbody inner_html=html></tbody> }
    }
    #[cfg(not(feature = "ssr"))]
    {
        view! { <tbody>{rows_for(list, show_team, page_now, live)}</tbody> }
    }
}

/// The rows as a keyed list of views: in the browser, and on the server for comparison.
#[cfg(any(not(feature = "ssr"), test))]
fn rows_for(
    list: RwSignal<Arc<JobList>>,
    show_team: bool,
    page_now: chrono::DateTime<chrono::Utc>,
    live: Live,
) -> impl IntoView {
    view! {
        <For
            // A row's copy holds only what it shows: a whole job (its reason, events and
            // parameters) cloned for each of 50 rows was work on every page.
            each=move || list.with(|l| l.jobs.iter().map(Row::of).collect::<Vec<_>>())
            key=Row::key
            children=move |r: Row| row_view(r, show_team, page_now, live)
        />
    }
}

/// One row of the table.
fn row_view(
    r: Row,
    show_team: bool,
    page_now: chrono::DateTime<chrono::Utc>,
    live: Live,
) -> impl IntoView {
    let Row {
        id,
        name,
        template,
        user,
        team,
        pool,
        gpus,
        state,
        created_at,
        progress,
        cancel,
    } = r;
    let cancel = cancel.as_ref().map(cancel_button);
    let team = show_team.then_some(team);
    view! {
        // `concat`, not `format!`: sized once (format! grew these twice each).
        <tr data-testid=["job-row-", &id].concat() data-state=state.as_str()>
            <td inner_html=state_badge_html(state)></td>
            <td><a href=["/jobs/", &id].concat()>{name}</a></td>
            <td>{template}</td>
            <td>{user}</td>
            {team.map(|t| view! { <td data-testid="job-team">{t}</td> })}
            <td class="num">{format::gpus_nodes(gpus)}</td>
            <td>{pool}</td>
            <td class="num">{move || progress.text(live.now_or(page_now))}</td>
            // Only the words move with the clock; the element stays.
            <td><time datetime=created_at.to_rfc3339() title=format::absolute(created_at)>{move || format::ago(live.now_or(page_now), created_at)}</time></td>
            <td>{cancel}</td>
        </tr>
    }
}

/// What the keyed list of [`rows_for`] writes on the server, written directly: the rows with a
/// Cancel button (their own views, with the button's state) through [`row_view`], the others
/// straight into the string, as tachys writes them (its escaping, its markers).
#[cfg(feature = "ssr")]
fn rows_html(
    jobs: &[Job],
    show_team: bool,
    page_now: chrono::DateTime<chrono::Utc>,
    live: Live,
) -> String {
    use crate::sync_html::push_text as text;
    use html_escape::encode_double_quoted_attribute as attr;
    // Built with `--cfg erase_components` (as the Makefile builds), Leptos's views are
    // type-erased, and tachys writes a marker in more places: each `M` (the test below
    // compares both strings in whichever way it is built).
    const M: &str = if cfg!(erase_components) { "<!>" } else { "" };
    fn push(out: &mut String, parts: &[&str]) {
        for part in parts {
            out.push_str(part);
        }
    }
    // A cell of one text: its opening tag, the text and the marker after an element's only
    // child.
    fn cell(out: &mut String, open: &str, s: &str) {
        out.push_str(open);
        text(out, s);
        push(out, &[M, "</td>"]);
    }
    let now = live.now_or(page_now);
    let mut out = String::with_capacity(jobs.len() * 1_000 + 6);
    for j in jobs {
        if CancelAsk::of(j).is_some() {
            out.push_str(&row_view(Row::of(j), show_team, page_now, live).to_html());
            continue;
        }
        let id = attr(&j.id);
        push(
            &mut out,
            &[
                "<tr data-testid=\"job-row-",
                &id,
                "\" data-state=\"",
                j.state.as_str(),
                "\"><td>",
            ],
        );
        crate::components::state_badge_into(&mut out, j.state);
        push(&mut out, &["</td><td><a href=\"/jobs/", &id, "\">"]);
        text(&mut out, &j.name);
        push(&mut out, &[M, "</a>", M, "</td>"]);
        cell(&mut out, "<td>", &j.template);
        cell(&mut out, "<td>", &j.user);
        if show_team {
            cell(&mut out, "<td data-testid=\"job-team\">", &j.team);
        } else {
            // An absent view (`None`) is a marker.
            out.push_str("<!>");
        }
        // Digits and words: nothing to escape, never empty.
        out.push_str("<td class=\"num\">");
        format::gpus_nodes_into(&mut out, j.gpus);
        push(&mut out, &[M, "</td>"]);
        cell(&mut out, "<td>", &j.pool);
        cell(&mut out, "<td class=\"num\">", &Progress::of(j).text(now));
        push(
            &mut out,
            &[
                "<td><time datetime=\"",
                &attr(&j.created_at.to_rfc3339()),
                "\" title=\"",
                &attr(&format::absolute(j.created_at)),
                "\">",
            ],
        );
        text(&mut out, &format::ago(now, j.created_at));
        // The time's cell, then the empty Cancel cell (an absent view) and the row's end.
        push(
            &mut out,
            &[M, "</time>", M, "</td><td><!>", M, "</td>", M, M, "</tr>"],
        );
    }
    out.push_str("<!>");
    out.push_str(M);
    out
}

/// What a row of the table shows of a job.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    id: String,
    name: String,
    template: String,
    user: String,
    team: String,
    pool: String,
    gpus: u32,
    state: JobState,
    created_at: chrono::DateTime<chrono::Utc>,
    progress: Progress,
    /// Set when the viewer may cancel it: what the Cancel button asks about.
    cancel: Option<CancelAsk>,
}

impl Row {
    pub(crate) fn of(j: &Job) -> Row {
        Row {
            id: j.id.clone(),
            name: j.name.clone(),
            template: j.template.clone(),
            user: j.user.clone(),
            team: j.team.clone(),
            pool: j.pool.clone(),
            gpus: j.gpus,
            state: j.state,
            created_at: j.created_at,
            progress: Progress::of(j),
            cancel: CancelAsk::of(j),
        }
    }

    /// A row is drawn again when what it shows changed.
    #[cfg(any(not(feature = "ssr"), test))]
    fn key(&self) -> (String, JobState, Option<u32>, bool, bool) {
        (
            self.id.clone(),
            self.state,
            self.progress.queue_position(),
            self.cancel.is_some(),
            self.progress.admitted(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `link`'s path and query as `url` reads them back.
    fn read_back(link: &str) -> (String, Vec<(String, String)>) {
        let url = url::Url::parse(&format!("http://gantry.test{link}")).expect(link);
        let pairs = url.query_pairs().map(|(k, v)| (k.into(), v.into()));
        (url.path().to_string(), pairs.collect())
    }

    /// The value of `k` in `pairs`, as the query map gives it (the last one).
    fn query<'a>(pairs: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |k| pairs.iter().rev().find(|(p, _)| *p == k).map(|(_, v)| *v)
    }

    fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The rows written as one string ([`rows_html`]) are what tachys writes for the keyed
    /// list of row views ([`rows_for`]), byte for byte, so the browser hydrates that list over
    /// them: every state, queued with and without a place, running with and without an
    /// admission time, finished, with and without a Cancel button, with and without the team
    /// column, a row among other rows, text that needs escaping or is empty, and the clock
    /// as the page read it and moved on by the live stream.
    #[cfg(feature = "ssr")]
    #[test]
    fn the_rows_written_as_one_string_are_the_views_html() {
        use crate::pages::jobs_live::tests::{job, t};
        let mut jobs = Vec::new();
        for (i, state) in JobState::ALL.into_iter().enumerate() {
            let pos = (state == JobState::Queued).then_some(3);
            let mut j = job(&format!("j{i}"), i as i64 * 60, state, "h100-a", pos);
            if state.is_active() {
                j.admitted_at = (state != JobState::Queued).then(|| t(i as i64 * 60 + 30));
            } else {
                j.admitted_at = Some(t(i as i64 * 60 + 30));
                j.finished_at = Some(t(i as i64 * 60 + 3_000));
            }
            jobs.push(j.clone());
            // The same job, cancellable, between others.
            j.id = format!("c{i}");
            j.can_cancel = state.is_active();
            jobs.push(j);
        }
        // Queued with no place known, and text that needs escaping or is empty.
        let mut odd = job("q-&<>\"'", 10_000, JobState::Queued, "a&b <pool>", None);
        odd.name = "\"quoted\" <b>bold</b> & 'single' ë".into();
        odd.template = String::new();
        odd.user = "o'brien".into();
        odd.team = "r&d <x>".into();
        jobs.push(odd.clone());
        odd.id.push('c');
        odd.can_cancel = true;
        jobs.push(odd);
        let mut blank = job("blank", 10_100, JobState::Failed, "", None);
        blank.name = String::new();
        blank.user = String::new();
        blank.team = String::new();
        jobs.push(blank);
        let now = t(20_000);
        // The clock the page was read at, and one the live stream moved on (90 s later).
        for (live_now, show_team) in [(None, false), (None, true), (Some(t(20_090)), false)] {
            for n in [1, jobs.len(), 0] {
                let jobs = jobs[..n].to_vec();
                let owner = Owner::new();
                let (by_view, by_string) = owner.with(|| {
                    let live = Live {
                        last: RwSignal::new(Default::default()),
                        now: RwSignal::new(live_now),
                        connected: RwSignal::new(false),
                        known: StoredValue::new(0),
                    };
                    provide_context(live);
                    CancelAction::provide();
                    let list = RwSignal::new(Arc::new(JobList {
                        jobs: jobs.clone(),
                        total: jobs.len() as u64,
                        next_cursor: None,
                        now,
                        live_seq: 0,
                        newest: None,
                        after: None,
                    }));
                    let by_view =
                        view! { <tbody>{rows_for(list, show_team, now, live)}</tbody> }.to_html();
                    let by_string = table_body(list, show_team, now, live).to_html();
                    (by_view, by_string)
                });
                assert_eq!(
                    by_string, by_view,
                    "{n} rows, team column {show_team}, live clock {live_now:?}"
                );
            }
        }
    }

    #[test]
    fn a_link_keeps_the_query_applies_the_change_and_starts_at_the_first_page() {
        let pairs = [
            ("q", "llama 7b & co/100%"),
            ("state", "running"),
            ("cursor", "MTIzNDU"),
            ("pool", "  "),
            ("team", "all"),
            ("user", "zoë"),
            ("utm", "kept out"),
        ];
        let q = query(&pairs);
        // A change replaces its key; blank values, "all", the cursor and keys the page does
        // not read are left out; what is kept is in KEYS' order and reads back unchanged.
        assert_eq!(
            read_back(&jobs_link(&q, &[("state", Some("queued"))])),
            (
                "/jobs".into(),
                owned(&[
                    ("state", "queued"),
                    ("q", "llama 7b & co/100%"),
                    ("user", "zoë")
                ])
            )
        );
        // None removes a key; a cursor given as a change is kept.
        assert_eq!(
            read_back(&jobs_link(
                &q,
                &[("state", None), ("cursor", Some("b/c+="))]
            )),
            (
                "/jobs".into(),
                owned(&[
                    ("q", "llama 7b & co/100%"),
                    ("user", "zoë"),
                    ("cursor", "b/c+=")
                ])
            )
        );
        assert_eq!(
            jobs_link(|_| None, &[("scope", Some("team"))]),
            "/jobs?scope=team"
        );
        assert_eq!(jobs_link(|_| None, &[("state", Some("all"))]), "/jobs");
    }
}
