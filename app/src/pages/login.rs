//! Sign-in: through the company's OpenID provider when configured, else the local demo
//! sign-in of the embedded default (pick a user, no password).

use leptos::prelude::*;

use crate::functions::get_sign_in_options;
use crate::model::Role;

#[component]
pub fn LoginPage() -> impl IntoView {
    let options = Resource::new(|| (), |_| get_sign_in_options());
    view! {
        <section class="panel narrow">
            <h1>"Sign in"</h1>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    let options = options.await;
                    crate::components::built_once().await;
                    let ended = options
                        .as_ref()
                        .ok()
                        .and_then(|o| o.ended.clone())
                        .map(|_| {
                            view! {
                                <p class="notice" data-testid="session-ended">
                                    "Your session expired. Sign in again to continue."
                                </p>
                            }
                        });
                    let body = match options {
                        Ok(o) if o.sso_provider.is_some() => {
                            let provider = o.sso_provider.unwrap_or_default();
                            view! {
                                <p>"Gantry signs you in through " {provider.clone()} ". Your teams and role come from your groups there."</p>
                                <a class="button primary" href="/auth/login" data-testid="sso-login" rel="external">
                                    "Sign in with " {provider}
                                </a>
                            }
                                .into_any()
                        }
                        Ok(o) if !o.demo_users.is_empty() => {
                            let list = o.demo_users;
                            view! {
                                <p>
                                    "This is the embedded demo: choose who you are. "
                                    "In production Gantry signs you in through your company's identity provider."
                                </p>
                                <form method="post" action="/auth/dev/login" class="user-list">
                                    {list
                                        .into_iter()
                                        .map(|u| {
                                            let what = if u.is_admin {
                                                "platform admin".to_string()
                                            } else {
                                                u.teams
                                                    .iter()
                                                    .map(|m| {
                                                        format!(
                                                            "team {} {}",
                                                            m.team,
                                                            if m.role == Role::Lead { "lead" } else { "member" },
                                                        )
                                                    })
                                                    .collect::<Vec<_>>()
                                                    .join(", ")
                                            };
                                            view! {
                                                <button
                                                    type="submit"
                                                    name="user"
                                                    value=u.user.clone()
                                                    class="user-choice"
                                                    data-testid=format!("login-{}", u.user)
                                                >
                                                    <strong>{u.display_name.clone()}</strong>
                                                    <span class="muted">{what}</span>
                                                </button>
                                            }
                                        })
                                        .collect_view()}
                                </form>
                            }
                                .into_any()
                        }
                        Ok(_) => {
                            view! { <p>"Local sign-in is turned off on this server."</p> }.into_any()
                        }
                        Err(e) => view! { <crate::components::ErrorBox err=e/> }.into_any(),
                    };
                    view! { {ended} {body} }
                })}
            </Suspense>
        </section>
    }
}
