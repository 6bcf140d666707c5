//! Admin · Quotas: every team's share of every pool, with what it uses now, and an edit that
//! can be previewed (the last 30 days replayed under the draft) before it is saved.

use leptos::prelude::*;

use crate::app::{Authed, Require};
use crate::components::{loaded, ErrorBox, PageError};
use crate::error::ErrorCode;
use crate::format;
use crate::functions::{admin_quotas, preview_quota, save_quota};
use crate::live::use_live;
use crate::model::{QuotaCell, QuotaDraft, QuotaPreview};

#[component]
pub fn AdminQuotasPage() -> impl IntoView {
    view! {
        <Authed require=Require::Admin>
            <AdminQuotas/>
        </Authed>
    }
}

#[component]
fn AdminQuotas() -> impl IntoView {
    let live = use_live();
    // Saving bumps this: the grid reloads with the new figures and versions.
    let changed = live.throttled(std::time::Duration::from_secs(2), |_| true);
    let saved = RwSignal::new(0u32);
    // The rows with unsaved edits, by team/pool, with what was typed in them. A reload
    // builds the rows again from the server's values, and each row then takes its draft
    // back from here: a save of one row (which reloads the grid at once) keeps what was
    // typed in the others. While any row is edited the live changes reload nothing (they
    // once threw the admin's typing and preview away every couple of seconds); the last one
    // is caught up once no row is edited.
    let editing = RwSignal::new(Drafts::new());
    let live_key = Memo::new(move |prev: Option<&u64>| {
        let c = changed.get();
        match prev {
            Some(p) if editing.with(|e| !e.is_empty()) => *p,
            _ => c,
        }
    });
    let cells = Resource::new(move || (saved.get(), live_key.get()), |_| admin_quotas());
    view! {
        <section class="page-head">
            <h1>"Quotas"</h1>
            <p class="muted">
                "GPUs each team is guaranteed in each pool (a Kueue ClusterQueue in the pool's cohort), and how much of its pool-mates' idle quota it may borrow. Preview replays the last 30 days of launches under your draft before you save."
            </p>
        </section>
        {move || editing.with(|e| !e.is_empty()).then(|| view! {
            <p class="muted small" data-testid="quotas-paused">
                "While you edit, the figures in use, borrowed and queued do not update; they catch up when you save or put your changes back."
            </p>
        })}
        <Transition fallback=|| view! { <p class="muted">"Loading quotas…"</p> }>
            {move || Suspend::new(async move {
                loaded(cells).await.map(|r| match r {
                    Ok(cells) => {
                        let mut pools: Vec<String> = cells.iter().map(|c| c.pool.clone()).collect();
                        pools.sort();
                        pools.dedup();
                        pools
                            .into_iter()
                            .map(|pool| {
                                let rows: Vec<QuotaCell> = cells.iter().filter(|c| c.pool == pool).cloned().collect();
                                view! { <PoolQuotas pool=pool rows=rows saved editing/> }
                            })
                            .collect_view()
                            .into_any()
                    }
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Transition>
    }
}

#[component]
fn PoolQuotas(
    pool: String,
    rows: Vec<QuotaCell>,
    saved: RwSignal<u32>,
    editing: RwSignal<Drafts>,
) -> impl IntoView {
    let size = rows.first().map_or(0, |c| c.pool_gpus);
    let sum = rows.first().map_or(0, |c| c.pool_nominal_sum);
    let over = sum > size;
    view! {
        <section class="panel" data-testid=format!("quotas-{pool}")>
            <h2>{format!("{pool} · {size} GPUs")}</h2>
            <p class=if over { "warning" } else { "muted" }>
                {if over {
                    format!("⚠ Nominal quotas add up to {sum} GPUs, more than the pool's {size}: teams cannot all use their full quota at once.")
                } else {
                    format!("Nominal quotas add up to {sum} of {size} GPUs.")
                }}
            </p>
            <div class="table-scroll">
            <table class="quota-table">
                <thead>
                    <tr>
                        <th>"Team"</th>
                        <th>"Nominal (GPUs)"</th>
                        <th>"Borrowing limit (GPUs)"</th>
                        <th>"Lending limit (GPUs)"</th>
                        <th>"Queue order"</th>
                        <th class="num">"In use"</th>
                        <th class="num">"Borrowed"</th>
                        <th class="num">"Lent"</th>
                        <th class="num">"Queued demand"</th>
                        <th></th>
                    </tr>
                </thead>
                <tbody>
                    {rows.into_iter().map(|c| view! { <QuotaRow cell=c saved editing/> }).collect_view()}
                </tbody>
            </table>
            </div>
        </section>
    }
}

/// Unsaved rows of the grid by "team/pool" (see `AdminQuotas`).
type Drafts = std::collections::HashMap<String, RowDraft>;

/// What an admin typed in a row and has not saved.
#[derive(Clone, Debug, PartialEq)]
struct RowDraft {
    nominal: String,
    borrow: String,
    lend: String,
    strategy: String,
    /// The version of the quota the draft was begun on. Read again at another version,
    /// someone else saved the quota meanwhile: the row says so (and what is stored now)
    /// before a Save puts the draft in place of theirs.
    version: i64,
}

/// A whole number of GPUs from a field, or what is wrong with it. Empty is `None` only where
/// `empty_ok` (no borrowing limit).
fn gpus_field(raw: &str, empty_ok: bool, max: u32) -> Result<Option<u32>, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return if empty_ok {
            Ok(None)
        } else {
            Err("required".into())
        };
    }
    match raw.parse::<i64>() {
        Ok(n) if n < 0 => Err("cannot be negative".into()),
        Ok(n) if n > max as i64 => Err(format!("at most {max} (the pool)")),
        Ok(n) => Ok(Some(n as u32)),
        Err(_) => Err("a whole number of GPUs".into()),
    }
}

#[component]
fn QuotaRow(cell: QuotaCell, saved: RwSignal<u32>, editing: RwSignal<Drafts>) -> impl IntoView {
    let key = format!("{}/{}", cell.team, cell.pool);
    let kept = editing.with_untracked(|d| d.get(&key).cloned());
    let limit = |l: Option<u32>| l.map(|b| b.to_string()).unwrap_or_default();
    let nominal = RwSignal::new(
        kept.as_ref()
            .map_or_else(|| cell.nominal_gpus.to_string(), |d| d.nominal.clone()),
    );
    let borrow = RwSignal::new(
        kept.as_ref()
            .map_or_else(|| limit(cell.borrowing_limit_gpus), |d| d.borrow.clone()),
    );
    let lend = RwSignal::new(
        kept.as_ref()
            .map_or_else(|| limit(cell.lending_limit_gpus), |d| d.lend.clone()),
    );
    let strategy = RwSignal::new(
        kept.as_ref()
            .map_or_else(|| cell.queueing_strategy.clone(), |d| d.strategy.clone()),
    );
    // The version the draft was begun on; a row read at a newer one was saved by someone
    // else meanwhile (found on reading the grid again, or by a save refused with a 409).
    let base = kept.as_ref().map_or(cell.version, |d| d.version);
    let conflict = base != cell.version;
    let max = cell.pool_gpus;
    let nominal_ok = move || gpus_field(&nominal.get(), false, max);
    let borrow_ok = move || gpus_field(&borrow.get(), true, max);
    // Kueue: a lending limit is at most the nominal quota.
    let lend_ok = move || {
        let n = nominal_ok().ok().flatten().unwrap_or(0);
        match gpus_field(&lend.get(), true, max)? {
            Some(l) if l > n => Err(format!("at most the nominal quota ({n})")),
            l => Ok(l),
        }
    };
    let original = StoredValue::new((
        cell.nominal_gpus,
        cell.borrowing_limit_gpus,
        cell.lending_limit_gpus,
        cell.queueing_strategy.clone(),
    ));
    let changed = move || match (nominal_ok(), borrow_ok(), lend_ok()) {
        (Ok(Some(n)), Ok(b), Ok(l)) => original.with_value(|o| (n, b, l, strategy.get()) != *o),
        _ => false,
    };
    let valid = move || nominal_ok().is_ok() && borrow_ok().is_ok() && lend_ok().is_ok();
    // Edited (a value that is not the saved one, or one that is not valid yet): the draft
    // is kept in the grid's drafts, which the row reads back when the grid is read again
    // (see `AdminQuotas`); a row back at the stored values has none.
    let edited = move || changed() || !valid();
    Effect::new(move |_| {
        let draft = edited().then(|| RowDraft {
            nominal: nominal.get(),
            borrow: borrow.get(),
            lend: lend.get(),
            strategy: strategy.get(),
            version: base,
        });
        if editing.with_untracked(|d| d.get(&key) != draft.as_ref()) {
            editing.update(|d| match draft {
                Some(draft) => {
                    d.insert(key.clone(), draft);
                }
                None => {
                    d.remove(&key);
                }
            });
        }
    });
    let draft = move || QuotaDraft {
        nominal_gpus: nominal_ok().ok().flatten().unwrap_or(0),
        borrowing_limit_gpus: borrow_ok().ok().flatten(),
        lending_limit_gpus: lend_ok().ok().flatten(),
        queueing_strategy: strategy.get(),
    };
    let team = StoredValue::new(cell.team.clone());
    let pool = StoredValue::new(cell.pool.clone());
    let version = cell.version;
    let preview = Action::new(move |_: &()| {
        let d = draft();
        async move { preview_quota(team.get_value(), pool.get_value(), d).await }
    });
    let save = Action::new(move |_: &()| {
        let d = draft();
        async move { save_quota(team.get_value(), pool.get_value(), d, version).await }
    });
    Effect::new(move |_| match save.value().get() {
        Some(Ok(_)) => saved.update(|n| *n += 1),
        // Someone saved this quota after the grid was read: read it again (the row then
        // shows what is stored now and its new version) and keep the draft, to be saved over
        // theirs or put back.
        Some(Err(e)) if e.code == ErrorCode::Conflict => saved.update(|n| *n += 1),
        _ => {}
    });
    let stored = format!(
        "{} GPUs nominal, borrowing limit {}, lending limit {}, {}",
        cell.nominal_gpus,
        cell.borrowing_limit_gpus
            .map_or_else(|| "none".to_string(), |b| format!("{b} GPUs")),
        cell.lending_limit_gpus
            .map_or_else(|| "none (lends all)".to_string(), |b| format!("{b} GPUs")),
        if cell.queueing_strategy == "StrictFIFO" {
            "strict FIFO"
        } else {
            "best effort FIFO"
        },
    );
    let testid = format!("quota-{}-{}", cell.team, cell.pool);
    let conflict_id = format!("{testid}-conflict");
    view! {
        <tr data-testid=testid.clone()>
            <th scope="row">{cell.team.clone()}</th>
            <td>
                <input
                    type="number"
                    min="0"
                    step="1"
                    aria-label=format!("Nominal GPUs of {} in {}", cell.team, cell.pool)
                    data-testid=format!("{testid}-nominal")
                    prop:value=move || nominal.get()
                    on:input=move |ev| nominal.set(event_target_value(&ev))
                />
                {move || nominal_ok().err().map(|e| view! { <p class="field-error">{e}</p> })}
            </td>
            <td>
                <input
                    type="number"
                    min="0"
                    step="1"
                    placeholder="no limit"
                    aria-label=format!("Borrowing limit of {} in {}", cell.team, cell.pool)
                    data-testid=format!("{testid}-borrow")
                    prop:value=move || borrow.get()
                    on:input=move |ev| borrow.set(event_target_value(&ev))
                />
                {move || borrow_ok().err().map(|e| view! { <p class="field-error">{e}</p> })}
            </td>
            <td>
                <input
                    type="number"
                    min="0"
                    step="1"
                    placeholder="lends all"
                    aria-label=format!("Lending limit of {} in {}", cell.team, cell.pool)
                    data-testid=format!("{testid}-lend")
                    prop:value=move || lend.get()
                    on:input=move |ev| lend.set(event_target_value(&ev))
                />
                {move || lend_ok().err().map(|e| view! { <p class="field-error">{e}</p> })}
            </td>
            <td>
                <select
                    aria-label=format!("Queue order of {} in {}", cell.team, cell.pool)
                    data-testid=format!("{testid}-strategy")
                    prop:value=move || strategy.get()
                    on:change=move |ev| strategy.set(event_target_value(&ev))
                >
                    <option value="BestEffortFIFO" selected=cell.queueing_strategy == "BestEffortFIFO">"Best effort FIFO"</option>
                    <option value="StrictFIFO" selected=cell.queueing_strategy == "StrictFIFO">"Strict FIFO"</option>
                </select>
            </td>
            <td class="num">{format!("{} GPUs", cell.used_gpus)}</td>
            <td class="num">{format!("{} GPUs", cell.borrowed_gpus)}</td>
            <td class="num">{format!("{} GPUs", cell.lent_gpus)}</td>
            <td class="num">{format!("{} GPUs", cell.queued_gpus)}</td>
            <td class="actions">
                <button
                    type="button"
                    class="button"
                    data-testid=format!("{testid}-preview")
                    disabled=move || !valid() || !changed() || preview.pending().get()
                    on:click=move |_| { preview.dispatch(()); }
                >
                    {move || if preview.pending().get() { "Replaying…" } else { "Preview" }}
                </button>
                <button
                    type="button"
                    class="button primary"
                    data-testid=format!("{testid}-save")
                    disabled=move || !valid() || !changed() || save.pending().get()
                    on:click=move |_| { save.dispatch(()); }
                >
                    "Save"
                </button>
            </td>
        </tr>
        {move || (conflict && edited()).then(|| {
            let stored = stored.clone();
            view! {
                <tr><td colspan="10">
                    <p class="warning row-note" data-testid=conflict_id.clone()>
                        {format!("Someone else saved this quota while you edited it. Stored now: {stored}. Your values are still in the fields: Save puts them in place of these, or change them back.")}
                    </p>
                </td></tr>
            }
        })}
        {move || {
            let result = save.value().get();
            match result {
                // Told by the line above, once the grid is read again.
                Some(Err(e)) if e.code == ErrorCode::Conflict => None,
                Some(Err(e)) => Some(view! { <tr><td colspan="10"><div class="row-note"><ErrorBox err=e/></div></td></tr> }.into_any()),
                _ => preview.value().get().map(|p| match p {
                    Ok(p) => view! { <tr><td colspan="10"><PreviewTable p=p team=team.get_value()/></td></tr> }.into_any(),
                    Err(e) => view! { <tr><td colspan="10"><ErrorBox err=e/></td></tr> }.into_any(),
                }),
            }
        }}
    }
}

#[component]
fn PreviewTable(p: QuotaPreview, team: String) -> impl IntoView {
    let rows: Vec<_> = p
        .current
        .iter()
        .map(|now| {
            let draft = p.draft.iter().find(|d| d.team == now.team).cloned();
            (now.clone(), draft)
        })
        .collect();
    let arrow = |a: String, b: String| if a == b { a } else { format!("{a} → {b}") };
    view! {
        <div class="preview" data-testid="quota-preview">
            <p class="muted">
                {format!(
                    "The {} since {} replayed with the same rules under today's quotas → your draft (replayed in {} ms). Waits are the median and 90th percentile time queued.",
                    if p.launches == 1 { "1 launch".to_string() } else { format!("{} launches", p.launches) },
                    format::absolute(p.from),
                    p.elapsed_ms,
                )}
            </p>
            <div class="chart" data-testid="quota-preview-chart" inner_html=p.chart_svg.clone()></div>
            <table>
                <thead>
                    <tr>
                        <th>"Team"</th>
                        <th class="num">"Median wait"</th>
                        <th class="num">"90th percentile wait"</th>
                        <th class="num">"GPU-hours"</th>
                        <th class="num">"Preemptions"</th>
                    </tr>
                </thead>
                <tbody>
                    {rows
                        .into_iter()
                        .map(|(now, draft)| {
                            let d = draft.unwrap_or_else(|| now.clone());
                            let mine = now.team == team;
                            view! {
                                <tr class:mine=mine>
                                    <th scope="row">{now.team.clone()}</th>
                                    <td class="num">{arrow(format::duration(now.median_wait_s), format::duration(d.median_wait_s))}</td>
                                    <td class="num">{arrow(format::duration(now.p90_wait_s), format::duration(d.p90_wait_s))}</td>
                                    <td class="num">{arrow(format!("{:.1} h", now.gpu_hours), format!("{:.1} h", d.gpu_hours))}</td>
                                    <td class="num">{arrow(now.preemptions.to_string(), d.preemptions.to_string())}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </div>
    }
}

#[component]
pub fn AdminAuditPage() -> impl IntoView {
    view! {
        <Authed require=Require::Admin>
            <AdminAudit/>
        </Authed>
    }
}

/// The audit log: who changed what, when, from where; filters live in the URL.
#[component]
fn AdminAudit() -> impl IntoView {
    let query = leptos_router::hooks::use_query_map();
    let get = move |k: &str| query.read().get(k).filter(|v| !v.is_empty());
    let records = Resource::new(
        move || (get("actor"), get("action"), get("target"), get("cursor")),
        |(actor, action, target, cursor)| {
            crate::functions::audit_records(actor, action, target, cursor)
        },
    );
    // The filters as this page's URL has them, each value encoded whole (a `+`, `#` or `%`
    // in an actor or a target is that character, not a space, a fragment or an escape).
    let filters = move || -> Vec<String> {
        ["actor", "action", "target"]
            .into_iter()
            .filter_map(|k| get(k).map(|v| format!("{k}={}", crate::format::query_value(&v))))
            .collect()
    };
    // This page's URL with another cursor (or none: the newest page).
    let page_link = move |cursor: Option<&str>| {
        let mut q = filters();
        if let Some(c) = cursor {
            q.push(format!("cursor={c}"));
        }
        if q.is_empty() {
            "/admin/audit".to_string()
        } else {
            format!("/admin/audit?{}", q.join("&"))
        }
    };
    // The download selects what the page does.
    let csv = move || {
        let mut q: Vec<String> = vec!["format=csv".into()];
        q.extend(filters());
        format!("/api/v1/audit?{}", q.join("&"))
    };
    let json = |v: &Option<serde_json::Value>| {
        v.as_ref()
            .map(|v| v.to_string())
            .unwrap_or_else(|| "—".into())
    };
    view! {
        <section class="page-head">
            <h1>"Audit log"</h1>
            <p class="muted">"Every quota and template change, admin action and admin sign-in, newest first. Entries are never edited or removed."</p>
        </section>
        <form class="filters" method="get" action="/admin/audit">
            <label>"Who " <input name="actor" placeholder="e.g. carol" prop:value=move || get("actor").unwrap_or_default()/></label>
            <label>"Action "
                <select name="action" prop:value=move || get("action").unwrap_or_default()>
                    <option value="">"any"</option>
                    {["quota.set", "template.create", "template.version", "template.deprecate", "job.cancel", "token.create", "token.revoke", "auth.sign_in"]
                        .into_iter()
                        .map(|a| view! { <option value=a>{a}</option> })
                        .collect_view()}
                </select>
            </label>
            <label>"Target starts with " <input name="target" placeholder="e.g. vision/" prop:value=move || get("target").unwrap_or_default()/></label>
            <button class="button" type="submit">"Filter"</button>
            <a class="button" href=csv rel="external" data-testid="audit-csv">"Download CSV"</a>
        </form>
        <Transition fallback=|| view! { <p class="muted">"Loading the audit log…"</p> }>
            {move || Suspend::new(async move {
                loaded(records).await.map(|r| match r {
                    Ok(list) if list.records.is_empty() => view! { <p class="muted" data-testid="audit-empty">"No entries match these filters."</p> }.into_any(),
                    Ok(list) => {
                        let older = list.next_cursor.clone().map(|c| page_link(Some(&c)));
                        let newest = get("cursor").map(|_| page_link(None));
                        let shown = list.records.len() as u64;
                        let count = if shown == list.total {
                            format!("{} entr{}, newest first", format::thousands(list.total), if list.total == 1 { "y" } else { "ies" })
                        } else {
                            format!("{} of {} entries, newest first{}", format::thousands(shown), format::thousands(list.total), if newest.is_some() { " (an older page)" } else { "" })
                        };
                        view! {
                        <p class="muted small" data-testid="audit-count">{count}</p>
                        <div class="table-scroll">
                        <table class="audit-table" data-testid="audit-table">
                            <thead><tr><th>"When"</th><th>"Who"</th><th>"Action"</th><th>"Target"</th><th>"Before"</th><th>"After"</th><th>"From"</th></tr></thead>
                            <tbody>
                                {list.records.into_iter().map(|r| view! {
                                    <tr>
                                        <td>{format::absolute(r.at)}</td>
                                        <td>{r.actor.clone()}</td>
                                        <td><code>{r.action.clone()}</code></td>
                                        <td>{r.target.clone()}</td>
                                        <td><code class="json">{json(&r.before)}</code></td>
                                        <td><code class="json">{json(&r.after)}</code></td>
                                        <td>{r.address.clone().unwrap_or_else(|| "—".into())}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                        </div>
                        <nav class="pager" aria-label="Pages">
                            {newest.map(|h| view! { <a class="button" href=h data-testid="audit-newest">"← Newest"</a> })}
                            {older.map(|h| view! { <a class="button" href=h data-testid="audit-older">"Older entries →"</a> })}
                        </nav>
                    }.into_any()
                    },
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Transition>
    }
}

/// A paged list's URL at `path` with its one filter (`key=value`, when set) and a page's
/// cursor (none: the first page), each value percent-encoded.
fn list_link(path: &str, key: &str, value: Option<String>, cursor: Option<&str>) -> String {
    let mut parts = Vec::new();
    if let Some(v) = value {
        parts.push(format!("{key}={}", crate::format::query_value(&v)));
    }
    if let Some(c) = cursor {
        parts.push(format!("cursor={}", crate::format::query_value(c)));
    }
    if parts.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", parts.join("&"))
    }
}

#[component]
pub fn AdminTemplatesPage() -> impl IntoView {
    view! {
        <Authed require=Require::Admin>
            <AdminTemplates/>
        </Authed>
    }
}

const EXAMPLE_TEMPLATE: &str = "name: gpt-neox-20b
display_name: GPT-NeoX 20B fine-tune
family: GPT-NeoX
model_size: 20B
method: Full fine-tune
description: Full fine-tune of GPT-NeoX 20B with DeepSpeed.
default_pool: hgx-h100
image: registry.internal/ml/neox:2026.11
command: [torchrun, train.py]
allowed_gpus: [8, 16, 32]
default_gpus: 16
default_max_runtime_s: 28800
# trainer_runtime: torch-distributed   # run as a Kubeflow TrainJob instead of a JobSet
params:
  - name: learning_rate
    kind: float
    default: 0.0001
    min: 0.0000001
    max: 0.01
    help: Peak learning rate after warm-up
  - name: epochs
    kind: int
    default: 3
    min: 1
    max: 50
";

/// Templates: create one or a new (immutable) version from a YAML definition; deprecate.
#[component]
fn AdminTemplates() -> impl IntoView {
    let changed = RwSignal::new(0u32);
    // The page and search live in the URL: `?q=…&cursor=…`.
    let query = leptos_router::hooks::use_query_map();
    let get = move |k: &str| query.read().get(k).filter(|v| !v.trim().is_empty());
    let templates = Resource::new(
        move || (get("q"), get("cursor"), changed.get()),
        |(q, cursor, _)| crate::functions::templates_page(q, cursor),
    );
    let link = move |cursor: Option<&str>| list_link("/admin/templates", "q", get("q"), cursor);
    let definition = RwSignal::new(EXAMPLE_TEMPLATE.to_string());
    // `None`: a new template; `Some(name)`: a new version of it.
    let target = RwSignal::new(None::<String>);
    let save = Action::new(move |_: &()| {
        let (name, text) = (target.get_untracked(), definition.get_untracked());
        async move { crate::functions::save_template(name, text).await }
    });
    let deprecate = Action::new(move |name: &String| {
        let name = name.clone();
        async move { crate::functions::deprecate_template(name).await }
    });
    // Reload the list after either succeeds (both read, so both are tracked).
    Effect::new(move |_| {
        let saved = matches!(save.value().get(), Some(Ok(_)));
        let deprecated = matches!(deprecate.value().get(), Some(Ok(_)));
        if saved || deprecated {
            changed.update(|n| *n += 1);
        }
    });
    view! {
        <section class="page-head">
            <h1>"Templates"</h1>
            <p class="muted">"What Launch offers. A version never changes once saved: a job always shows the exact version it ran. Deprecated templates leave Launch but stay on old jobs."</p>
        </section>
        // A plain GET form: the search is the page's URL and works before hydration.
        <form class="filters job-search" method="get" action="/admin/templates" data-testid="template-search">
            <label class="grow">"Search "
                <input type="search" name="q" placeholder="name, display name or family" data-testid="template-q" prop:value=move || get("q").unwrap_or_default()/>
            </label>
            <button class="button" type="submit">"Search"</button>
        </form>
        <Transition fallback=|| view! { <p class="muted">"Loading templates…"</p> }>
            {move || Suspend::new(async move {
                loaded(templates).await.map(|r| match r {
                    Ok(page) => {
                    let first = get("cursor").map(|_| link(None));
                    let next = page.next_cursor.as_deref().map(|c| link(Some(c)));
                    let count = if page.templates.len() as u64 == page.total {
                        format!("{} template{}", page.total, if page.total == 1 { "" } else { "s" })
                    } else {
                        format!("{} of {} templates, by name", page.templates.len(), page.total)
                    };
                    let list = page.templates;
                    view! {
                        <p class="muted small" data-testid="templates-count">{count}</p>
                        <div class="table-scroll">
                        <table class="audit-table template-table" data-testid="template-table">
                            <thead><tr><th>"Template"</th><th>"Version"</th><th>"Image"</th><th>"GPUs"</th><th>"Runs as"</th><th></th></tr></thead>
                            <tbody>
                                {list.into_iter().map(|t| {
                                    let name = t.name.clone();
                                    let for_version = t.name.clone();
                                    view! {
                                        <tr data-testid=format!("template-{}", t.name)>
                                            <td><strong>{t.display_name.clone()}</strong><br/><code>{t.name.clone()}</code></td>
                                            <td>{format!("v{}", t.version)}</td>
                                            <td><code>{t.image.clone()}</code></td>
                                            <td>{t.allowed_gpus.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(", ")}</td>
                                            <td>{t.trainer_runtime.clone().map(|r| format!("TrainJob ({r})")).unwrap_or_else(|| "JobSet".into())}</td>
                                            <td class="actions">
                                                <button type="button" class="button" on:click=move |_| target.set(Some(for_version.clone()))>"New version…"</button>
                                                <button type="button" class="button" data-testid=format!("deprecate-{name}") on:click=move |_| { deprecate.dispatch(name.clone()); }>"Deprecate"</button>
                                            </td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                        </div>
                        <nav class="pager" aria-label="Pages">
                            {first.map(|h| view! { <a class="button" href=h data-testid="templates-first">"← First"</a> })}
                            {next.map(|h| view! { <a class="button" href=h data-testid="templates-next">"More templates →"</a> })}
                        </nav>
                    }.into_any()
                    }
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Transition>
        <section class="panel">
            <h2>{move || match target.get() {
                None => "New template".to_string(),
                Some(n) => format!("New version of {n}"),
            }}</h2>
            <p class="muted">"YAML. Parameter kinds: int, float, string, bool, path; numbers may have min and max."</p>
            <textarea
                class="definition"
                rows="24"
                spellcheck="false"
                aria-label="Template definition (YAML)"
                data-testid="template-definition"
                prop:value=move || definition.get()
                on:input=move |ev| definition.set(event_target_value(&ev))
            ></textarea>
            {move || match save.value().get() {
                Some(Ok(t)) => Some(view! { <p class="fits" data-testid="template-saved">{format!("Saved {} v{}.", t.name, t.version)}</p> }.into_any()),
                Some(Err(e)) => Some(view! { <ErrorBox err=e/> }.into_any()),
                None => None,
            }}
            {move || deprecate.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorBox err=e/> })}
            <div class="actions">
                <button type="button" class="button primary" data-testid="template-save" disabled=move || save.pending().get() on:click=move |_| { save.dispatch(()); }>
                    {move || if target.get().is_some() { "Save as a new version" } else { "Create template" }}
                </button>
                {move || target.get().map(|_| view! { <button type="button" class="button" on:click=move |_| target.set(None)>"Create a new template instead"</button> })}
            </div>
        </section>
    }
}

#[component]
pub fn AdminTokensPage() -> impl IntoView {
    view! {
        <Authed require=Require::Admin>
            <AdminTokens/>
        </Authed>
    }
}

/// API tokens: every user's live tokens, to revoke one that leaked or whose owner left; the
/// user filter and the page live in the URL (`?user=…&cursor=…`).
#[component]
fn AdminTokens() -> impl IntoView {
    let changed = RwSignal::new(0u32);
    let query = leptos_router::hooks::use_query_map();
    let get = move |k: &str| query.read().get(k).filter(|v| !v.trim().is_empty());
    let user = move || get("user");
    let tokens = Resource::new(
        move || (user(), get("cursor"), changed.get()),
        |(user, cursor, _)| crate::functions::admin_api_tokens(user, cursor),
    );
    // This page's URL with another cursor (or none: the first page).
    let link = move |cursor: Option<&str>| list_link("/admin/tokens", "user", user(), cursor);
    // The token whose revocation waits for a second click.
    let confirming = RwSignal::new(None::<String>);
    let revoke = Action::new(move |id: &String| {
        let id = id.clone();
        async move { crate::functions::revoke_api_token(id).await }
    });
    // Done or refused (its owner may have revoked it first): the list is read again.
    Effect::new(move |_| {
        if revoke.value().get().is_some() {
            confirming.set(None);
            changed.update(|n| *n += 1);
        }
    });
    view! {
        <section class="page-head">
            <h1>"API tokens"</h1>
            <p class="muted">"Every user's live personal API tokens (not revoked, not expired). A token acts as its owner; revoke one that leaked or whose owner left, and it is refused from its next call on. Each revocation is in the audit log."</p>
        </section>
        <form class="filters" method="get" action="/admin/tokens">
            <label>"User " <input name="user" placeholder="e.g. alice" prop:value=move || user().unwrap_or_default()/></label>
            <button class="button" type="submit">"Filter"</button>
        </form>
        {move || revoke.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorBox err=e/> })}
        <Transition fallback=|| view! { <p class="muted">"Loading tokens…"</p> }>
            {move || Suspend::new(async move {
                loaded(tokens).await.map(|r| match r {
                    Ok(list) if list.tokens.is_empty() => {
                        // A later page that emptied: its tokens were revoked or expired since.
                        let first = get("cursor").map(|_| link(None));
                        view! {
                            <p class="muted" data-testid="admin-tokens-empty">
                                {if first.is_some() {
                                    format!(
                                        "No more live tokens on this page: they were revoked or expired since. {} live token{} in all.",
                                        format::thousands(list.total),
                                        if list.total == 1 { "" } else { "s" },
                                    )
                                } else if user().is_some() {
                                    "This user has no live API tokens.".to_string()
                                } else {
                                    "Nobody has a live API token.".to_string()
                                }}
                            </p>
                            {first.map(|h| view! { <p><a class="button" href=h data-testid="admin-tokens-first">"← First page"</a></p> })}
                        }.into_any()
                    }
                    Ok(list) => {
                        let shown = list.tokens.len() as u64;
                        let first = get("cursor").map(|_| link(None));
                        let next = list.next_cursor.as_deref().map(|c| link(Some(c)));
                        let count = if shown == list.total && first.is_none() {
                            format!("{} live token{}, by user", format::thousands(list.total), if list.total == 1 { "" } else { "s" })
                        } else {
                            format!("{} of {} live tokens, by user{}", format::thousands(shown), format::thousands(list.total), if first.is_some() { " (a later page)" } else { "" })
                        };
                        view! {
                            <p class="muted small" data-testid="admin-tokens-count">{count}</p>
                            <div class="table-scroll">
                            <table class="audit-table" data-testid="admin-tokens">
                                <thead><tr><th>"User"</th><th>"Name"</th><th>"Token"</th><th>"Created (UTC)"</th><th>"Expires (UTC)"</th><th>"Last used (UTC)"</th><th><span class="sr-only">"Actions"</span></th></tr></thead>
                                <tbody>
                                    {list.tokens.into_iter().map(|t| {
                                        let id = t.info.id.clone();
                                        let asking = {
                                            let id = id.clone();
                                            move || confirming.with(|c| c.as_deref() == Some(id.as_str()))
                                        };
                                        let label = format!("{}'s token \u{201c}{}\u{201d}", t.user, t.info.name);
                                        view! {
                                            <tr data-testid=format!("admin-token-{}-{}", t.user, t.info.name)>
                                                <td>{t.user.clone()}</td>
                                                <td>{t.info.name.clone()}</td>
                                                <td><code>{format!("{}…", t.info.prefix)}</code></td>
                                                <td>{format::absolute(t.info.created_at)}</td>
                                                <td>{t.info.expires_at.map(format::absolute).unwrap_or_else(|| "never".into())}</td>
                                                <td>{t.info.last_used_at.map(format::absolute).unwrap_or_else(|| "never".into())}</td>
                                                <td class="actions">
                                                    {move || if asking() {
                                                        let id = id.clone();
                                                        view! {
                                                            <button type="button" class="button danger" data-testid="admin-token-revoke-confirm"
                                                                aria-label=format!("Revoke {label} now")
                                                                disabled=move || revoke.pending().get()
                                                                on:click=move |_| { revoke.dispatch(id.clone()); }>"Revoke now"</button>
                                                            <button type="button" class="button" on:click=move |_| confirming.set(None)>"Keep"</button>
                                                        }.into_any()
                                                    } else {
                                                        let id = id.clone();
                                                        view! {
                                                            <button type="button" class="button" data-testid="admin-token-revoke"
                                                                aria-label=format!("Revoke {label}…")
                                                                on:click=move |_| confirming.set(Some(id.clone()))>"Revoke…"</button>
                                                        }.into_any()
                                                    }}
                                                </td>
                                            </tr>
                                        }
                                    }).collect_view()}
                                </tbody>
                            </table>
                            </div>
                            <nav class="pager" aria-label="Pages">
                                {first.map(|h| view! { <a class="button" href=h data-testid="admin-tokens-first">"← First page"</a> })}
                                {next.map(|h| view! { <a class="button" href=h data-testid="admin-tokens-next">"Next page →"</a> })}
                            </nav>
                        }.into_any()
                    }
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Transition>
    }
}
