//! The document shell, the router and the frame every page shares (navigation, sign-in gate).

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Title};
use leptos_router::{
    components::{Route, Router, Routes, A},
    path, SsrMode,
};

use crate::error::ApiError;
use crate::functions::get_viewer;
use crate::live::provide_live;
use crate::model::{PageViewer, Viewer};
use crate::pages::{
    home::HomePage, job::JobDetailPage, jobs::JobsPage, launch::LaunchGallery,
    launch_form::LaunchFormPage, login::LoginPage,
};
use crate::sync_html::sync_html;

pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="color-scheme" content="light dark"/>
                <link rel="icon" type="image/svg+xml" href="/favicon.svg"/>
                // Under their content-hashed names (hash-files), so they are cached as
                // immutable; the names are read once, when the server starts (`site`).
                <crate::site::Stylesheet options=options.clone()/>
                <AutoReload options=options.clone()/>
                <crate::site::Scripts options/>
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// The signed-in user for the whole page load.
/// In every page as `SwappedJson` (far fewer escapes there).
pub type ViewerResource = Resource<Result<Option<PageViewer>, ApiError>, crate::wire::SwappedJson>;

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let viewer: ViewerResource = Resource::new_with_options(|| (), |_| get_viewer(), false);
    provide_context(viewer);
    provide_live(viewer);

    view! {
        <Title text="Gantry"/>
        <Router>
            <NavBar/>
            <main id="main">
                // Async: each page is sent whole, with its data, so hydration never starts
                // while a nested Suspense is still streaming in (that race left the Launch
                // form without its handlers now and then).
                <Routes fallback=|| view! { <NotFound/> }>
                    <Route path=path!("/") view=HomePage ssr=SsrMode::Async/>
                    <Route path=path!("/login") view=LoginPage ssr=SsrMode::Async/>
                    <Route path=path!("/launch") view=LaunchGallery ssr=SsrMode::Async/>
                    <Route path=path!("/launch/:template") view=LaunchFormPage ssr=SsrMode::Async/>
                    <Route path=path!("/jobs") view=JobsPage ssr=SsrMode::Async/>
                    <Route path=path!("/jobs/:id") view=JobDetailPage ssr=SsrMode::Async/>
                    <Route path=path!("/pools") view=crate::pages::pools::PoolsPage ssr=SsrMode::Async/>
                    <Route path=path!("/usage") view=crate::pages::usage::UsagePage ssr=SsrMode::Async/>
                    <Route path=path!("/profile") view=crate::pages::profile::ProfilePage ssr=SsrMode::Async/>
                    <Route path=path!("/admin/quotas") view=crate::pages::admin::AdminQuotasPage ssr=SsrMode::Async/>
                    <Route path=path!("/admin/audit") view=crate::pages::admin::AdminAuditPage ssr=SsrMode::Async/>
                    <Route path=path!("/admin/templates") view=crate::pages::admin::AdminTemplatesPage ssr=SsrMode::Async/>
                    <Route path=path!("/admin/tokens") view=crate::pages::admin::AdminTokensPage ssr=SsrMode::Async/>
                </Routes>
            </main>
        </Router>
    }
}

#[component]
fn NavBar() -> impl IntoView {
    let viewer = expect_context::<ViewerResource>();
    let live = crate::live::use_live();
    // On a phone the links, the person and Sign out fold into a menu: a checkbox and its
    // label, so it opens before the app has hydrated too; it closes on every navigation.
    let menu_open = RwSignal::new(false);
    let location = leptos_router::hooks::use_location();
    Effect::new(move |_| {
        location.pathname.track();
        menu_open.set(false);
    });
    view! {
        <header class="topbar">
            <a class="brand" href="/">"Gantry"</a>
            <input
                type="checkbox"
                id="menu-open"
                class="menu-open"
                aria-hidden="true"
                tabindex="-1"
                prop:checked=move || menu_open.get()
                on:change=move |ev| menu_open.set(event_target_checked(&ev))
            />
            <label for="menu-open" class="menu-toggle button" data-testid="menu-toggle" aria-label="Menu">
                "☰ Menu"
            </label>
            <div class="menu">
            // One boundary for everything that depends on the viewer: each Suspense or
            // Transition is work on every page (about 20 µs each in the page bench).
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    let viewer = viewer.await;
                    crate::components::built_once().await;
                    // Not for an admin in no team: Launch would refuse them.
                    let launch = !matches!(&viewer, Ok(Some(v)) if !v.can_launch());
                    let who = match viewer {
                        Ok(Some(PageViewer { viewer: v, .. })) => {
                            let teams = v
                                .teams
                                .iter()
                                .map(|m| {
                                    format!(
                                        "{} {}",
                                        m.team,
                                        if m.role == crate::model::Role::Lead { "lead" } else { "member" },
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join(", ");
                            let role = match (v.is_admin, teams.is_empty()) {
                                (true, true) => "admin".to_string(),
                                (true, false) => format!("{teams}, admin"),
                                (false, true) => "no team".to_string(),
                                (false, false) => teams,
                            };
                            view! {
                                <div class="who">
                                    <crate::pages::notifications::NotificationBell/>
                                    {v.sees_usage().then(|| view! {
                                        <A href="/usage">"Usage"</A>
                                    })}
                                    {v.is_admin.then(|| view! {
                                        <A href="/admin/quotas">"Quotas"</A>
                                        <A href="/admin/templates">"Templates"</A>
                                        <A href="/admin/audit">"Audit log"</A>
                                        <A href="/admin/tokens">"Tokens"</A>
                                    })}
                                    <a class="who-name" href="/profile" data-testid="viewer" title="Profile and API tokens">{v.display_name}</a>
                                    <span class="muted" data-testid="viewer-role">{role}</span>
                                    <form method="post" action="/auth/logout">
                                        <button class="link" type="submit">"Sign out"</button>
                                    </form>
                                </div>
                            }
                                .into_any()
                        }
                        _ => view! { <a class="who" href="/login">"Sign in"</a> }.into_any(),
                    };
                    // Waits on nothing: written in one pass (`sync_html`).
                    sync_html(view! {
                        <nav aria-label="Main">
                            <A href="/" exact=true>"Home"</A>
                            {launch.then(|| view! { <A href="/launch">"Launch"</A> })}
                            <A href="/jobs">"Jobs"</A>
                            <A href="/pools">"Pools"</A>
                        </nav>
                        <span
                            class="live-dot"
                            class:on=move || live.connected.get()
                            title=move || {
                                if live.connected.get() { "Live: updates arrive by themselves" } else { "Not live" }
                            }
                        ></span>
                        {who}
                    })
                })}
            </Transition>
            </div>
        </header>
    }
}

/// Who may open a page beyond being signed in: the people the server lets take the page's
/// actions. Anyone else gets a 403 and one sentence saying why, never buttons that fail.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Require {
    #[default]
    SignedIn,
    /// A member of some team (launching runs on a team's quota).
    Team,
    /// A team lead or an admin (usage reports).
    LeadOrAdmin,
    Admin,
}

impl Require {
    /// Why `viewer` may not see the page, if they may not.
    pub fn refusal(self, viewer: &Viewer) -> Option<&'static str> {
        match self {
            Require::SignedIn => None,
            Require::Team if !viewer.can_launch() => Some(
                "You are not in a team, so you cannot launch jobs: a job runs on a team's quota. An admin can add you to one.",
            ),
            Require::LeadOrAdmin if !viewer.sees_usage() => {
                Some("Usage reports are for team leads and platform admins.")
            }
            Require::Admin if !viewer.is_admin => Some("This page is for platform admins."),
            _ => None,
        }
    }
}

/// The signed-in user, for the pages inside [`Authed`] (which has already loaded them).
pub fn use_viewer() -> Option<Viewer> {
    use_context::<Viewer>()
}

/// The pools' names, for the pages inside [`Authed`] (read with the viewer: `PageViewer`).
#[derive(Clone, Debug, Default)]
pub struct PoolNames(pub Vec<String>);

/// The pools' names, for the pages inside [`Authed`].
pub fn use_pool_names() -> Vec<String> {
    use_context::<PoolNames>().unwrap_or_default().0
}

/// Shows its children to a signed-in user whom `require` admits, the sign-in prompt to
/// anyone signed out, and a refusal (403) to the rest.
#[component]
pub fn Authed(#[prop(optional)] require: Require, children: ChildrenFn) -> impl IntoView {
    let viewer = expect_context::<ViewerResource>();
    let children = StoredValue::new(children);
    // Not a reactive closure: the viewer is read once per page (sign-in and sign-out load a new
    // page). A closure would run again when the viewer resolves mid-render, building the page
    // twice during SSR; the first build's resources then resolve outside their owner and the
    // serialized data no longer matches what hydration walks. The boundary stays: a page's
    // view may be built more than once in a render (the router's outlet is a closure, called
    // by each walk), and only the copy that is rendered may build what is inside the gate;
    // drawn without it, the launch form's data came out numbered differently now and then
    // and its hydration panicked, one load in 7 to 30 (the loop of
    // end2end/tests/hydration.spec.ts). `unwalked` keeps the boundary's own walks off the
    // page: perf put them at 16.9 % of the Jobs page's samples, 1.9 % after; the page bench
    // measured Jobs at 404-433 µs of CPU a request against 474-519 (3 alternating rounds).
    // For home, a job page and Pools a first run measured 6-16 % less, later runs nothing
    // beyond the machine's noise.
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {Suspend::new(async move {
                let viewer = viewer.await;
                crate::components::unwalked().await;
                match viewer {
                    // Signed in, but no IdP group maps to a team: say so, not an error.
                    Ok(Some(PageViewer { viewer: v, .. })) if v.teams.is_empty() && !v.is_admin => {
                        view! { <NoTeam name=v.display_name/> }.into_any()
                    }
                    Ok(Some(PageViewer { viewer: v, pools })) => match require.refusal(&v) {
                        Some(why) => view! { <Refused why/> }.into_any(),
                        None => {
                            provide_context(v);
                            provide_context(PoolNames(pools));
                            children.with_value(|c| c()).into_any()
                        }
                    },
                    Ok(None) => view! { <SignInPrompt/> }.into_any(),
                    Err(e) => view! { <crate::components::PageError err=e/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// A page the viewer may not see: 403, and nothing on it they could not do.
#[component]
fn Refused(why: &'static str) -> impl IntoView {
    crate::components::set_page_status(403);
    view! {
        <section class="panel narrow" data-testid="refused">
            <h1>"Not allowed"</h1>
            <p>{why}</p>
            <p><a href="/">"Go home"</a></p>
        </section>
    }
}

#[component]
fn NoTeam(name: String) -> impl IntoView {
    // Nothing here is theirs to see yet: a refusal, not a page.
    crate::components::set_page_status(403);
    view! {
        <section class="panel narrow" data-testid="no-team">
            <h1>"You are not in a team yet"</h1>
            <p>{format!("You are signed in as {name}, but none of your groups at the identity provider gives you a Gantry team, so there is nothing to launch or see yet.")}</p>
            <p>"Ask a platform admin to map one of your groups to a team (" <code>"[auth.oidc.groups]"</code> "), then sign out and in again."</p>
            <form method="post" action="/auth/logout">
                <button class="button" type="submit">"Sign out"</button>
            </form>
        </section>
    }
}

#[component]
fn SignInPrompt() -> impl IntoView {
    // Why the last session ended (it expired), and whether to go straight to the provider.
    let options = Resource::new(|| (), |_| crate::functions::get_sign_in_options());
    view! {
        <section class="panel narrow">
            <h1>"Sign in to Gantry"</h1>
            <Suspense fallback=|| ()>
                {Suspend::new(async move {
                    let o = options.await.unwrap_or_default();
                    o.ended.map(|_| view! {
                        <p class="notice" data-testid="session-ended">
                            "Your session expired. Sign in again to continue."
                        </p>
                    })
                })}
            </Suspense>
            <p>"Gantry shares the HGX GPU pools between teams. Sign in to launch jobs and see the queue."</p>
            <a class="button primary" href="/login">"Sign in"</a>
        </section>
    }
}

#[component]
fn NotFound() -> impl IntoView {
    crate::components::set_page_status(404);
    view! {
        <section class="panel narrow">
            <h1>"Page not found"</h1>
            <p>"There is nothing at this address. " <a href="/">"Go home"</a> "."</p>
        </section>
    }
}
