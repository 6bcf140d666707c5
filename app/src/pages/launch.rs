//! The Launch gallery: template cards, filterable by model family.

use leptos::prelude::*;

use crate::app::{Authed, Require};
use crate::components::{loaded, PageError};
use crate::format;
use crate::functions::list_templates;
use crate::model::Template;

#[component]
pub fn LaunchGallery() -> impl IntoView {
    view! {
        <Authed require=Require::Team>
            <Gallery/>
        </Authed>
    }
}

#[component]
fn Gallery() -> impl IntoView {
    let templates = Resource::new(|| (), |_| list_templates());
    let query = RwSignal::new(String::new());
    view! {
        <div class="page-head">
            <h1>"Launch a training job"</h1>
            <label class="search">
                <span class="sr-only">"Filter templates"</span>
                <input
                    type="search"
                    placeholder="Filter: llama, lora, 70b…"
                    prop:value=move || query.get()
                    on:input=move |ev| query.set(event_target_value(&ev))
                />
            </label>
        </div>
        <p class="muted">"Pick a template. Defaults are ready to launch; you can change them on the next page."</p>
        <Suspense fallback=|| view! { <p class="muted">"Loading templates…"</p> }>
            {move || Suspend::new(async move {
                loaded(templates).await.map(|r| match r {
                    Ok(list) if list.is_empty() => {
                        view! {
                            <div class="empty">
                                <p>"No templates yet. An admin adds them on the Admin page."</p>
                            </div>
                        }
                            .into_any()
                    }
                    Ok(list) => {
                        view! {
                            <div class="cards">
                                {list
                                    .into_iter()
                                    .map(|t| {
                                        let haystack = format!(
                                            "{} {} {} {} {}",
                                            t.display_name,
                                            t.family,
                                            t.method,
                                            t.model_size,
                                            t.name,
                                        )
                                            .to_lowercase();
                                        let shown = move || {
                                            let q = query.get().to_lowercase();
                                            q.split_whitespace().all(|w| haystack.contains(w))
                                        };
                                        view! {
                                            <Show when=shown>
                                                <TemplateCard t=t.clone()/>
                                            </Show>
                                        }
                                    })
                                    .collect_view()}
                            </div>
                        }
                            .into_any()
                    }
                    Err(e) => view! { <PageError err=e/> }.into_any(),
                })
            })}
        </Suspense>
    }
}

#[component]
fn TemplateCard(t: Template) -> impl IntoView {
    let href = format!("/launch/{}", t.name);
    let last = t
        .last_used_by_team
        .map(|at| format!("Last used by your team {}", at.format("%b %-d")))
        .unwrap_or_else(|| "Not used by your team yet".to_string());
    view! {
        <a class="card" href=href data-testid=format!("template-{}", t.name)>
            <div class="card-top">
                <span class="chip">{t.family.clone()}</span>
                <span class="chip">{t.method.clone()}</span>
            </div>
            <h3>{t.display_name.clone()}</h3>
            <p class="muted small">{format!("{} parameters · v{}", t.model_size, t.version)}</p>
            <p>{t.description.clone()}</p>
            <p class="card-foot">
                <strong>{format::gpus_nodes(t.default_gpus)}</strong>
                {format!(" in {} · up to {} h", t.default_pool, format::hours(t.default_max_runtime_s))}
            </p>
            <p class="muted small">{last}</p>
        </a>
    }
}
