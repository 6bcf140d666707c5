//! The Launch form: the template on one side, the choices on the other, defaults already
//! right, a live "fits now / would wait" line, and one big Launch.

use leptos::prelude::*;
use leptos_router::hooks::{use_navigate, use_params_map, use_query_map};
use serde_json::Map;

use crate::app::{Authed, Require};
use crate::components::{loaded, ErrorBox, PageError};
use crate::error::ApiError;
use crate::format;
use crate::functions::{
    check_launch, get_job, launch_job, launch_manifest, list_pools, list_templates,
    manifests_available,
};
use crate::live::use_live;
use crate::model::{nodes_for, Job, LaunchRequest, ParamKind, ParamSpec, Pool, Priority, Template};

#[component]
pub fn LaunchFormPage() -> impl IntoView {
    view! {
        <Authed require=Require::Team>
            <LaunchForm/>
        </Authed>
    }
}

#[component]
fn LaunchForm() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let name = move || params.read().get("template").unwrap_or_default();
    // `?from_job=ID`: a clone, the form filled with that job's values.
    let from_job = move || query.read().get("from_job").filter(|s| !s.is_empty());
    let data = Resource::new(
        move || (name(), from_job()),
        |(n, from)| async move {
            let templates = list_templates().await?;
            let pools = list_pools().await?;
            let manifests = manifests_available().await?;
            let from = match from {
                Some(id) => Some(get_job(id).await?.job),
                None => None,
            };
            Ok::<_, ApiError>((
                templates.into_iter().find(|t| t.name == n),
                pools,
                manifests,
                from,
            ))
        },
    );
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                loaded(data).await.map(|r| match r {
                    Ok((Some(t), pools, manifests, from)) => {
                        view! { <LaunchFormBody t=t pools=pools manifests=manifests from=from/> }.into_any()
                    }
                    Ok((None, _, _, _)) => {
                        view! {
                            <PageError err=ApiError::not_found(
                                "There is no template by that name; it may have been deprecated.",
                            )/>
                            <a href="/launch">"Back to the templates"</a>
                        }
                            .into_any()
                    }
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Suspense>
    }
}

/// A fresh idempotency key per form (and per re-run confirmation): a double click or a retry
/// never launches twice.
pub(crate) fn new_idempotency_key() -> String {
    #[cfg(feature = "hydrate")]
    {
        let a = (js_sys::Math::random() * 1e15) as u64;
        let b = (js_sys::Math::random() * 1e15) as u64;
        format!("ui-{a:x}{b:x}")
    }
    #[cfg(not(feature = "hydrate"))]
    {
        String::new()
    }
}

#[component]
fn LaunchFormBody(
    t: Template,
    pools: Vec<Pool>,
    manifests: bool,
    from: Option<Job>,
) -> impl IntoView {
    let live = use_live();
    let template_name = t.name.clone();
    // A clone starts from the original's values, where this version still takes them.
    let same_template = from.as_ref().filter(|j| j.template == t.name);
    let first_gpus = same_template
        .map(|j| j.gpus)
        .filter(|g| t.allowed_gpus.contains(g))
        .unwrap_or(t.default_gpus);
    let first_pool = same_template
        .map(|j| j.pool.clone())
        .unwrap_or_else(|| t.default_pool.clone());
    let gpus = RwSignal::new(first_gpus);
    let pool = RwSignal::new(first_pool.clone());
    let priority = RwSignal::new(
        same_template
            .map(|j| j.priority)
            .unwrap_or(Priority::Normal),
    );
    let max_hours = RwSignal::new(format::hours(
        same_template.map_or(t.default_max_runtime_s, |j| j.max_runtime_s),
    ));
    let job_name = RwSignal::new(
        same_template
            .map(|j| format!("{} · clone", j.name))
            .unwrap_or_default(),
    );
    let text_of = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let values: Vec<(ParamSpec, RwSignal<String>)> = t
        .params
        .iter()
        .map(|p| {
            let first = same_template
                .and_then(|j| j.params.get(&p.name))
                .map(text_of)
                .unwrap_or_else(|| p.default_text());
            (p.clone(), RwSignal::new(first))
        })
        .collect();
    let values = StoredValue::new(values);
    let server_error = RwSignal::new(None::<ApiError>);
    let ready = crate::components::use_ready();
    let key = StoredValue::new(String::new());
    Effect::new(move |_| key.set_value(new_idempotency_key()));

    let hours_error = move || -> Option<String> {
        match max_hours.get().trim().parse::<f64>() {
            Ok(h) if (1.0 / 60.0..=336.0).contains(&h) => None,
            Ok(_) => Some("must be between 1 minute (0.017 h) and 336 h (14 days)".to_string()),
            Err(_) => Some("must be a number of hours, e.g. 4 or 1.5".to_string()),
        }
    };
    let has_errors = move || {
        hours_error().is_some()
            || values.with_value(|vs| vs.iter().any(|(p, v)| p.parse_input(&v.get()).is_err()))
    };

    let check_template = template_name.clone();
    // The chosen pool's queue moved: the fit line again, at most once a second.
    let pool_moved = live.throttled(std::time::Duration::from_secs(1), move |c| {
        pool.try_get_untracked().is_some_and(|p| p == c.pool)
    });
    let check = Resource::new(
        move || (gpus.get(), pool.get(), priority.get(), pool_moved.get()),
        move |(g, p, pr, _)| {
            let req = LaunchRequest {
                template: check_template.clone(),
                gpus: g,
                pool: Some(p),
                priority: Some(pr),
                ..Default::default()
            };
            check_launch(req)
        },
    );

    let launch = Action::new(move |req: &LaunchRequest| {
        let req = req.clone();
        let key = key.get_value();
        async move { launch_job(req, key).await }
    });
    let navigate = use_navigate();
    Effect::new(move |_| match launch.value().get() {
        Some(Ok(job)) => navigate(&format!("/jobs/{}", job.id), Default::default()),
        Some(Err(e)) => server_error.set(Some(e)),
        None => {}
    });

    let submit_template = StoredValue::new(template_name.clone());
    let from_id = StoredValue::new(from.as_ref().map(|j| j.id.clone()));
    // The launch as the form stands now.
    let current_request = move || {
        let mut params = Map::new();
        values.with_value(|vs| {
            for (p, v) in vs {
                if let Ok(value) = p.parse_input(&v.get_untracked()) {
                    params.insert(p.name.clone(), value);
                }
            }
        });
        let hours: f64 = max_hours.get_untracked().trim().parse().unwrap_or(1.0);
        let name = job_name.get_untracked();
        LaunchRequest {
            template: submit_template.get_value(),
            gpus: gpus.get_untracked(),
            pool: Some(pool.get_untracked()),
            params,
            max_runtime_s: Some((hours * 3600.0).round() as u64),
            name: (!name.trim().is_empty()).then(|| name.trim().to_string()),
            priority: Some(priority.get_untracked()),
            team: None,
            template_version: None,
            from_job: from_id.get_value(),
        }
    };
    // A job the team cannot hold under the current quotas is accepted and waits; the first
    // click says so, the second launches.
    let confirmed = RwSignal::new(false);
    Effect::new(move |_| {
        let _ = (gpus.get(), pool.get(), priority.get());
        confirmed.set(false);
    });
    let cannot_start = move || matches!(check.get(), Some(Ok(c)) if c.cannot_start);
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        if has_errors() {
            return;
        }
        if cannot_start() && !confirmed.get_untracked() {
            confirmed.set(true);
            return;
        }
        server_error.set(None);
        launch.dispatch(current_request());
    };
    let manifest = Action::new(move |req: &LaunchRequest| {
        let req = req.clone();
        async move { launch_manifest(req).await }
    });
    let field_error = move |field: &'static str| {
        move || {
            server_error
                .get()
                .filter(|e| e.field.as_deref() == Some(field))
                .map(|e| view! { <p class="field-error" role="alert">{e.message}</p> })
        }
    };

    let (basic, advanced): (Vec<_>, Vec<_>) = values
        .get_value()
        .into_iter()
        .partition(|(p, _)| !p.advanced);
    let allowed = t.allowed_gpus.clone();
    let command = t.command.join(" ");
    let clone_note = from.map(|j| {
        let original = StoredValue::new(j);
        let version = t.version;
        // What the form now launches that differs from the original, one line each.
        let differences = move || {
            original.with_value(|j| {
                let mut out = Vec::new();
                if j.template_version != version {
                    out.push(format!(
                        "template version: v{} → v{version} (the current one)",
                        j.template_version
                    ));
                    if let Some(note) = &j.version_note {
                        out.extend(note.differences.iter().map(|d| format!("  {d}")));
                    }
                }
                if gpus.get() != j.gpus {
                    out.push(format!("GPUs: {} → {}", j.gpus, gpus.get()));
                }
                if pool.get() != j.pool {
                    out.push(format!("pool: {} → {}", j.pool, pool.get()));
                }
                if priority.get() != j.priority {
                    out.push(format!(
                        "priority: {} → {}",
                        j.priority.as_str(),
                        priority.get().as_str()
                    ));
                }
                let hours = format::hours(j.max_runtime_s);
                if max_hours.get().trim() != hours {
                    out.push(format!("max runtime: {hours} h → {} h", max_hours.get().trim()));
                }
                values.with_value(|vs| {
                    for (p, v) in vs {
                        let was = j.params.get(&p.name).map(text_of);
                        let now = v.get();
                        match was {
                            Some(w) if w.trim() != now.trim() => {
                                out.push(format!("{}: {w} → {}", p.name, now.trim()))
                            }
                            None => out.push(format!("{}: (not set) → {}", p.name, now.trim())),
                            _ => {}
                        }
                    }
                });
                out
            })
        };
        let (id, name) = original.with_value(|j| (j.id.clone(), j.name.clone()));
        view! {
            <section class="panel clone-note" data-testid="clone-note">
                <p>
                    "Cloned from "
                    <a href=format!("/jobs/{id}")>{name}</a>
                    ". Change what you need; the job records what it was cloned from."
                </p>
                {move || {
                    let d = differences();
                    if d.is_empty() {
                        view! { <p class="muted" data-testid="clone-same">"Same values as the original so far."</p> }.into_any()
                    } else {
                        view! {
                            <p class="small">"What differs from the original:"</p>
                            <ul class="diff" data-testid="clone-differences">
                                {d.into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}
                            </ul>
                        }
                            .into_any()
                    }
                }}
            </section>
        }
    });
    view! {
        <div class="page-head">
            <h1>"Launch " {t.display_name.clone()}</h1>
            <a href="/launch" class="muted">"← All templates"</a>
        </div>
        {clone_note}
        <div class="launch-grid">
            <aside class="panel template-summary">
                <h2>{t.display_name.clone()}</h2>
                <p class="muted small">
                    {format!("{} · {} · {} · v{}", t.family, t.model_size, t.method, t.version)}
                </p>
                <p>{t.description.clone()}</p>
                <dl class="kv">
                    <dt>"Image"</dt>
                    <dd><code>{t.image.clone()}</code></dd>
                    <dt>"Command"</dt>
                    <dd><code>{command}</code></dd>
                    <dt>"Allowed GPUs"</dt>
                    <dd>
                        {t.allowed_gpus.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(", ")}
                    </dd>
                </dl>
            </aside>
            <form
                class="panel launch-form"
                on:submit=on_submit
                novalidate
                data-ready=move || ready.get().to_string()
            >
                <fieldset class="segmented">
                    <legend>"GPUs"</legend>
                    {allowed
                        .into_iter()
                        .map(|g| {
                            let nodes = nodes_for(g);
                            view! {
                                <label class:selected=move || gpus.get() == g>
                                    <input
                                        type="radio"
                                        name="gpus"
                                        value=g
                                        prop:checked=move || gpus.get() == g
                                        on:change=move |_| gpus.set(g)
                                    />
                                    <span class="seg-main">{g}</span>
                                    <span class="seg-sub">
                                        {if nodes == 1 { "1 node".to_string() } else { format!("{nodes} nodes") }}
                                    </span>
                                </label>
                            }
                        })
                        .collect_view()}
                </fieldset>
                {field_error("gpus")}
                <label class="field">
                    <span>"Pool"</span>
                    <select
                        name="pool"
                        on:change=move |ev| pool.set(event_target_value(&ev))
                        prop:value=move || pool.get()
                    >
                        {pools
                            .into_iter()
                            .map(|p| {
                                let label = format!(
                                    "{} · {} · {} GPUs free ({} whole nodes)",
                                    p.name,
                                    p.gpu_model,
                                    p.gpus_free,
                                    p.free_nodes,
                                );
                                let value = p.name.clone();
                                let selected = p.name == first_pool;
                                view! {
                                    <option value=value selected=selected>
                                        {label}
                                    </option>
                                }
                            })
                            .collect_view()}
                    </select>
                </label>
                {field_error("pool")}
                <div class="fit-line" aria-live="polite" data-testid="fit-line">
                    <Transition fallback=|| view! { <span class="muted">"Checking the queue…"</span> }>
                        {move || Suspend::new(async move {
                            loaded(check).await.map(|r| match r {
                                Ok(c) if c.fits_now => {
                                    view! {
                                        <span class="fits">
                                            {format!("✓ Fits now: {} would start at once", format::gpus_nodes(gpus.get_untracked()))}
                                        </span>
                                    }
                                        .into_any()
                                }
                                Ok(c) if c.cannot_start => {
                                    view! {
                                        <span class="field-error" data-testid="fit-cannot-start">
                                            {format!("⚠ {}", c.reason.unwrap_or_default())}
                                        </span>
                                    }
                                        .into_any()
                                }
                                Ok(c) => {
                                    let ahead = match c.jobs_ahead {
                                        0 => "no jobs ahead".to_string(),
                                        1 => "1 job ahead".to_string(),
                                        n => format!("{n} jobs ahead"),
                                    };
                                    let wait = match c.eta {
                                        Some(t) if (t - c.now).num_seconds() < 60 => "should start any moment".to_string(),
                                        Some(t) => format!(
                                            "about {} wait (≈{})",
                                            format::duration((t - c.now).num_seconds()),
                                            format::clock_time(c.now, t),
                                        ),
                                        None => "no estimate".to_string(),
                                    };
                                    let what = format!(
                                        "{} in {}",
                                        format::gpus_nodes(gpus.get_untracked()),
                                        pool.get_untracked(),
                                    );
                                    view! {
                                        <span class="waits">{format!("◷ {what}: {wait}, {ahead}.")}</span>
                                        <span class="muted">{format!(" {}", c.reason.unwrap_or_default())}</span>
                                    }
                                        .into_any()
                                }
                                Err(e) => view! { <span class="field-error">{e.message}</span> }.into_any(),
                            })
                        })}
                    </Transition>
                </div>
                <fieldset class="segmented small">
                    <legend>"Priority"</legend>
                    {Priority::ALL
                        .into_iter()
                        .map(|p| {
                            view! {
                                <label class:selected=move || priority.get() == p>
                                    <input
                                        type="radio"
                                        name="priority"
                                        value=p.as_str()
                                        prop:checked=move || priority.get() == p
                                        on:change=move |_| priority.set(p)
                                    />
                                    <span class="seg-main">{p.as_str()}</span>
                                </label>
                            }
                        })
                        .collect_view()}
                </fieldset>
                <div class="row">
                    <label class="field">
                        <span>"Max runtime (hours)"</span>
                        <input
                            type="text"
                            inputmode="decimal"
                            name="max_runtime_h"
                            prop:value=move || max_hours.get()
                            on:input=move |ev| max_hours.set(event_target_value(&ev))
                        />
                        {move || hours_error().map(|e| view! { <p class="field-error">{e}</p> })}
                        {field_error("max_runtime_s")}
                    </label>
                    <label class="field">
                        <span>"Job name (optional)"</span>
                        <input
                            type="text"
                            name="name"
                            placeholder="generated from the template"
                            prop:value=move || job_name.get()
                            on:input=move |ev| job_name.set(event_target_value(&ev))
                        />
                        {field_error("name")}
                    </label>
                </div>
                <h3>"Parameters"</h3>
                <div class="params">
                    {basic.into_iter().map(|(p, v)| view! { <ParamField spec=p value=v server_error/> }).collect_view()}
                </div>
                <details class="advanced">
                    <summary>"Advanced"</summary>
                    <div class="params">
                        {advanced
                            .into_iter()
                            .map(|(p, v)| view! { <ParamField spec=p value=v server_error/> })
                            .collect_view()}
                    </div>
                </details>
                {move || {
                    server_error
                        .get()
                        .filter(|e| e.field.is_none())
                        .map(|e| view! { <ErrorBox err=e/> })
                }}
                {move || {
                    (cannot_start() && confirmed.get())
                        .then(|| {
                            view! {
                                <p class="field-error" role="alert" data-testid="launch-confirm">
                                    "This job cannot start under the current quotas: it will wait in the queue until the team's quota or borrowing limit in this pool is raised. Press the button again to queue it anyway."
                                </p>
                            }
                        })
                }}
                <button
                    type="submit"
                    class="button primary big"
                    data-testid="launch-submit"
                    disabled=move || launch.pending().get() || has_errors()
                >
                    {move || {
                        if launch.pending().get() {
                            "Launching…".to_string()
                        } else if cannot_start() && confirmed.get() {
                            format!("Queue anyway on {}", format::gpus_nodes(gpus.get()))
                        } else {
                            format!("Launch on {}", format::gpus_nodes(gpus.get()))
                        }
                    }}
                </button>
                // On the Kubernetes back end: the JobSet or TrainJob this launch would submit.
                <Show when=move || manifests>
                    <div class="manifest">
                        <button
                            type="button"
                            class="button"
                            data-testid="show-manifest"
                            disabled=move || manifest.pending().get() || has_errors()
                            on:click=move |_| {
                                manifest.dispatch(current_request());
                            }
                        >
                            {move || if manifest.value().get().is_some() { "Refresh manifest" } else { "Show manifest" }}
                        </button>
                        {move || match manifest.value().get() {
                            Some(Ok(Some(yaml))) => Some(view! {
                                <pre class="manifest-yaml" data-testid="manifest">{yaml}</pre>
                            }.into_any()),
                            Some(Err(e)) => Some(view! { <ErrorBox err=e/> }.into_any()),
                            _ => None,
                        }}
                    </div>
                </Show>
            </form>
        </div>
    }
}

#[component]
fn ParamField(
    spec: ParamSpec,
    value: RwSignal<String>,
    server_error: RwSignal<Option<ApiError>>,
) -> impl IntoView {
    let spec = StoredValue::new(spec);
    let field_key = StoredValue::new(spec.with_value(|s| format!("params.{}", s.name)));
    let error = move || {
        let local = spec.with_value(|s| s.parse_input(&value.get()).err());
        local.or_else(|| {
            server_error
                .get()
                .filter(|e| field_key.with_value(|k| e.field.as_deref() == Some(k.as_str())))
                .map(|e| e.message)
        })
    };
    let (label, help, kind, name, bounds) = spec.with_value(|s| {
        (
            s.label.clone(),
            s.help.clone(),
            s.kind,
            s.name.clone(),
            s.bounds_text(),
        )
    });
    let input = match kind {
        ParamKind::Bool => view! {
            <input
                type="checkbox"
                name=name.clone()
                prop:checked=move || value.get() == "true"
                on:change=move |ev| value.set(event_target_checked(&ev).to_string())
            />
        }
        .into_any(),
        ParamKind::Int | ParamKind::Float => view! {
            <input
                type="text"
                inputmode="decimal"
                name=name.clone()
                prop:value=move || value.get()
                on:input=move |ev| value.set(event_target_value(&ev))
                aria-invalid=move || error().is_some().to_string()
            />
        }
        .into_any(),
        ParamKind::String | ParamKind::Path => view! {
            <input
                type="text"
                name=name.clone()
                prop:value=move || value.get()
                on:input=move |ev| value.set(event_target_value(&ev))
                aria-invalid=move || error().is_some().to_string()
            />
        }
        .into_any(),
    };
    let hint = match (help.is_empty(), bounds) {
        (false, Some(b)) => format!("{help} ({b})"),
        (false, None) => help,
        (true, Some(b)) => b,
        (true, None) => String::new(),
    };
    view! {
        <label class="field">
            <span>{label}</span>
            {input}
            <small class="muted">{hint}</small>
            {move || error().map(|e| view! { <p class="field-error">{e}</p> })}
        </label>
    }
}
