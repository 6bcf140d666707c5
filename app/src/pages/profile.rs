//! Your profile: who Gantry thinks you are, and your personal API tokens (create — shown
//! once —, list, revoke).

use leptos::prelude::*;

use crate::app::{Authed, ViewerResource};
use crate::components::{loaded, ErrorBox};
use crate::format::absolute;
use crate::model::{ApiTokenInfo, Role};

#[component]
pub fn ProfilePage() -> impl IntoView {
    view! {
        <Authed>
            <Profile/>
        </Authed>
    }
}

#[component]
fn Profile() -> impl IntoView {
    let viewer = expect_context::<ViewerResource>();
    let changed = RwSignal::new(0u32);
    let tokens = Resource::new(
        move || changed.get(),
        |_| crate::functions::list_api_tokens(),
    );
    let name = RwSignal::new(String::new());
    let days = RwSignal::new("90".to_string());
    let create = Action::new(move |_: &()| {
        let (name, days) = (name.get_untracked(), days.get_untracked());
        async move {
            let expires = match days.trim() {
                "" | "never" => None,
                d => Some(d.parse::<u32>().map_err(|_| {
                    crate::error::ApiError::invalid(
                        "expires_in_days",
                        "a whole number of days from 1 to 365, or empty for no expiry",
                    )
                })?),
            };
            crate::functions::create_api_token(name, expires).await
        }
    });
    let revoke = Action::new(move |id: &String| {
        let id = id.clone();
        async move { crate::functions::revoke_api_token(id).await }
    });
    Effect::new(move |_| {
        let created = matches!(create.value().get(), Some(Ok(_)));
        let revoked = matches!(revoke.value().get(), Some(Ok(_)));
        if created || revoked {
            changed.update(|n| *n += 1);
        }
    });
    view! {
        <section class="page-head">
            <h1>"Profile"</h1>
        </section>
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                let viewer = viewer.await;
                crate::components::built_once().await;
                viewer.ok().flatten().map(|v| {
                    let teams = v.teams.iter().map(|m| format!("{} ({})", m.team, if m.role == Role::Lead { "lead" } else { "member" })).collect::<Vec<_>>();
                    view! {
                        <section class="panel" data-testid="profile">
                            <dl class="facts">
                                <dt>"Name"</dt><dd>{v.display_name.clone()}</dd>
                                <dt>"User"</dt><dd><code>{v.user.clone()}</code></dd>
                                <dt>"Teams"</dt><dd data-testid="profile-teams">{if teams.is_empty() { "none".to_string() } else { teams.join(", ") }}</dd>
                                <dt>"Platform admin"</dt><dd data-testid="profile-admin">{if v.is_admin { "yes" } else { "no" }}</dd>
                            </dl>
                        </section>
                    }
                })
            })}
        </Transition>
        <section class="panel">
            <h2>"API tokens"</h2>
            <p class="muted">
                "For scripts, CI and agents: send " <code>"Authorization: Bearer <token>"</code>
                " to " <code>"/api/v1/…"</code> ". A token can do what you can do, no more. Gantry keeps only a hash: the token is shown once."
            </p>
            <div class="token-form">
                <label>"Name"
                    <input type="text" maxlength="64" placeholder="e.g. ci-pipeline" data-testid="token-name"
                        prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))/>
                </label>
                <label>"Expires after (days)"
                    <input type="number" min="1" max="365" placeholder="never" data-testid="token-days"
                        prop:value=move || days.get() on:input=move |ev| days.set(event_target_value(&ev))/>
                </label>
                <button type="button" class="button primary" data-testid="token-create"
                    disabled=move || create.pending().get()
                    on:click=move |_| { create.dispatch(()); }>"Create token"</button>
            </div>
            {move || match create.value().get() {
                Some(Ok(t)) => Some(view! {
                    <div class="notice" data-testid="token-created">
                        <p><strong>{format!("Token \u{201c}{}\u{201d} created.", t.info.name)}</strong>" Copy it now: it will not be shown again."
                            {t.sign_in_days.map(|d| format!(" It works while you sign in to Gantry at least every {d} days: your teams and role come from your sign-in."))}</p>
                        <input class="token-secret" type="text" readonly aria-label="New API token" data-testid="token-secret" prop:value=t.token.clone()/>
                    </div>
                }.into_any()),
                Some(Err(e)) => Some(view! { <ErrorBox err=e/> }.into_any()),
                None => None,
            }}
            {move || revoke.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorBox err=e/> })}
            <Transition fallback=|| view! { <p class="muted">"Loading tokens…"</p> }>
                {move || Suspend::new(async move {
                    loaded(tokens).await.map(|r| match r {
                        Ok(list) if list.is_empty() => view! { <p class="muted" data-testid="no-tokens">"You have no API tokens yet."</p> }.into_any(),
                        Ok(list) => view! { <TokenTable list revoke/> }.into_any(),
                        Err(e) => view! { <ErrorBox err=e/> }.into_any(),
                    })
                })}
            </Transition>
        </section>
        <crate::pages::notifications::NotificationSettingsPanel/>
    }
}

#[component]
fn TokenTable(
    list: Vec<ApiTokenInfo>,
    revoke: Action<String, Result<(), crate::error::ApiError>>,
) -> impl IntoView {
    view! {
        <table class="audit-table" data-testid="token-table">
            <thead><tr><th>"Name"</th><th>"Token"</th><th>"Created (UTC)"</th><th>"Expires (UTC)"</th><th>"Last used (UTC)"</th><th>"State"</th><th></th></tr></thead>
            <tbody>
                {list.into_iter().map(|t| {
                    let id = t.id.clone();
                    let live = t.revoked_at.is_none() && !t.expired;
                    view! {
                        <tr data-testid=format!("token-{}", t.name)>
                            <td>{t.name.clone()}</td>
                            <td><code>{format!("{}…", t.prefix)}</code></td>
                            <td>{absolute(t.created_at)}</td>
                            <td>{t.expires_at.map(absolute).unwrap_or_else(|| "never".into())}</td>
                            <td>{t.last_used_at.map(absolute).unwrap_or_else(|| "never".into())}</td>
                            <td>{match (t.revoked_at, t.expired) {
                                (Some(at), _) => format!("revoked {}", absolute(at)),
                                (None, true) => "expired".into(),
                                (None, false) => "live".into(),
                            }}</td>
                            <td class="actions">
                                {live.then(|| view! {
                                    <button type="button" class="button" data-testid=format!("revoke-{}", t.name)
                                        on:click=move |_| { revoke.dispatch(id.clone()); }>"Revoke"</button>
                                })}
                            </td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}
