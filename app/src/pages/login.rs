//! The local demo sign-in of the embedded default: pick a user, no password.

use leptos::prelude::*;

use crate::functions::list_demo_users;
use crate::model::Role;

#[component]
pub fn LoginPage() -> impl IntoView {
    let users = Resource::new(|| (), |_| list_demo_users());
    view! {
        <section class="panel narrow">
            <h1>"Sign in"</h1>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match users.await {
                        Ok(list) if !list.is_empty() => {
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
                    }
                })}
            </Suspense>
        </section>
    }
}
