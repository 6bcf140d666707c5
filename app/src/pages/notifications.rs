//! Notifications: the bell in the top bar (the viewer's list, unread first, and the browser
//! notifications they asked for), and the settings on the profile page (channels per event,
//! webhooks with their delivery logs, a team webhook for leads).

use std::collections::HashSet;

use leptos::prelude::*;

use crate::components::ErrorBox;
use crate::format::absolute;
use crate::functions::{
    create_webhook, delete_webhook, get_notification_settings, get_webhook_deliveries,
    mark_all_notifications_read, save_notification_prefs,
};
use crate::live::use_live;
use crate::model::{
    NewWebhook, NotificationPref, WebhookInfo, NEWEST_DELIVERIES, NEWEST_NOTIFICATIONS,
};

const EVENT_LABELS: [(&str, &str); 5] = [
    ("started", "Started (all pods running)"),
    ("succeeded", "Succeeded"),
    ("failed", "Failed"),
    ("preempted", "Preempted"),
    ("idle", "Idle for 30 minutes (every GPU under 5 %)"),
];

fn label(event: &str) -> &'static str {
    EVENT_LABELS
        .iter()
        .find(|(e, _)| *e == event)
        .map(|(_, l)| *l)
        .unwrap_or("")
}

#[component]
pub fn NotificationBell() -> impl IntoView {
    let live = use_live();
    let open = RwSignal::new(false);
    let bump = RwSignal::new(0u32);
    // Read in the browser, again on every live event, as a plain task (not a resource, so
    // the top bar's Suspense never waits for it; the server renders no count).
    let list =
        RwSignal::new(None::<Result<crate::model::NotificationList, crate::error::ApiError>>);
    // Again when a notification was written for this person, not on others' changes.
    let told = live.throttled(std::time::Duration::from_millis(300), |c| c.notify);
    Effect::new(move |_| {
        told.get();
        bump.get();
        #[cfg(feature = "hydrate")]
        leptos::task::spawn_local(async move {
            let res = crate::functions::get_notifications().await;
            list.try_set(Some(res));
        });
    });
    let read = move || list.get();
    let mark = Action::new(move |_: &()| async move { mark_all_notifications_read().await });
    Effect::new(move |_| {
        if mark.value().get().is_some() {
            bump.update(|n| *n += 1);
        }
    });
    let seen = StoredValue::new(None::<HashSet<String>>);
    Effect::new(move |_| {
        let Some(Ok(l)) = list.get() else { return };
        let first = seen.with_value(|s| s.is_none());
        let fresh: Vec<String> = seen.with_value(|s| {
            l.items
                .iter()
                .filter(|n| !n.read && n.browser)
                .filter(|n| s.as_ref().is_none_or(|s| !s.contains(&n.id)))
                .map(|n| n.message.clone())
                .collect()
        });
        seen.update_value(|s| {
            let s = s.get_or_insert_with(HashSet::new);
            s.extend(l.items.iter().map(|n| n.id.clone()));
        });
        // Only what arrives while the page is open, never the backlog at load.
        if !first {
            for m in fresh {
                show_browser_notification(&m);
            }
        }
    });
    let unread = move || {
        list.get()
            .and_then(|r| r.ok())
            .map(|l| l.unread)
            .unwrap_or(0)
    };
    view! {
        <div class="bell">
            <button
                type="button"
                class="bell-button"
                data-testid="bell"
                aria-haspopup="true"
                aria-expanded=move || open.get().to_string()
                aria-label=move || format!("Notifications, {} unread", unread())
                on:click=move |_| open.update(|o| *o = !*o)
            >
                <svg class="bell-icon" viewBox="0 0 24 24" width="20" height="20" aria-hidden="true">
                    <path d="M12 22a2.5 2.5 0 0 0 2.45-2h-4.9A2.5 2.5 0 0 0 12 22zm7-6V11a7 7 0 0 0-5.5-6.84V3.5a1.5 1.5 0 0 0-3 0v.66A7 7 0 0 0 5 11v5l-2 2v1h18v-1z" fill="currentColor"/>
                </svg>
                {move || (unread() > 0).then(|| view! { <span class="bell-count" data-testid="bell-count">{unread()}</span> })}
            </button>
            <Show when=move || open.get()>
                <div class="bell-menu" role="dialog" aria-label="Notifications" data-testid="notifications">
                    <div class="bell-head">
                        <strong>"Notifications"</strong>
                        <button type="button" class="link" data-testid="mark-all-read" on:click=move |_| { mark.dispatch(()); }>
                            "Mark all read"
                        </button>
                    </div>
                    {move || match read() {
                        None => view! { <p class="muted">"Loading…"</p> }.into_any(),
                        Some(Err(e)) => view! { <ErrorBox err=e/> }.into_any(),
                        Some(Ok(l)) if l.items.is_empty() => view! {
                            <p class="muted" data-testid="no-notifications">"Nothing yet. You are told here when your jobs start, end, are preempted or sit idle."</p>
                        }.into_any(),
                        Some(Ok(l)) => {
                            let shown = l.items.len();
                            view! {
                            <ul class="bell-list">
                                {l.items.into_iter().map(|n| view! {
                                    <li class:unread=!n.read data-testid="notification">
                                        <a href=format!("/jobs/{}", n.job_id)>{n.message}</a>
                                        <time class="muted small" datetime=n.at.to_rfc3339()>{absolute(n.at)}</time>
                                    </li>
                                }).collect_view()}
                            </ul>
                            {newest_only(shown, NEWEST_NOTIFICATIONS, "notifications").map(|t| view! {
                                <p class="muted small" data-testid="notifications-newest">{t}</p>
                            })}
                        }.into_any()
                        }
                    }}
                    <a class="small" href="/profile#notifications">"Notification settings"</a>
                </div>
            </Show>
        </div>
    }
}

#[cfg(feature = "hydrate")]
fn show_browser_notification(message: &str) {
    if web_sys::Notification::permission() == web_sys::NotificationPermission::Granted {
        let _ = web_sys::Notification::new(&format!("Gantry: {message}"));
    }
}

#[cfg(not(feature = "hydrate"))]
fn show_browser_notification(_message: &str) {}

#[cfg(feature = "hydrate")]
fn ask_browser_permission() {
    let _ = web_sys::Notification::request_permission();
}

#[cfg(not(feature = "hydrate"))]
fn ask_browser_permission() {}

fn browser_permission() -> String {
    #[cfg(feature = "hydrate")]
    {
        match web_sys::Notification::permission() {
            web_sys::NotificationPermission::Granted => "allowed".into(),
            web_sys::NotificationPermission::Denied => "blocked in this browser".into(),
            _ => "not asked yet".into(),
        }
    }
    #[cfg(not(feature = "hydrate"))]
    {
        String::new()
    }
}

/// The profile page's Notifications section.
#[component]
pub fn NotificationSettingsPanel() -> impl IntoView {
    let changed = RwSignal::new(0u32);
    let settings = crate::components::fetched(move || {
        changed.get();
        get_notification_settings()
    });
    view! {
        <section class="panel" id="notifications" data-testid="notification-settings">
            <h2>"Notifications"</h2>
            {move || match settings.get() {
                None => view! { <p class="muted">"Loading…"</p> }.into_any(),
                Some(Err(e)) => view! { <ErrorBox err=e/> }.into_any(),
                Some(Ok(s)) => view! {
                    <Prefs prefs=s.prefs.clone()/>
                    <Webhooks hooks=s.webhooks.clone() lead_of=s.lead_of.clone() changed/>
                }.into_any(),
            }}
        </section>
    }
}

/// An event and its three channels (in Gantry, browser, webhooks), as the form edits them.
type PrefRow = (String, RwSignal<bool>, RwSignal<bool>, RwSignal<bool>);

#[component]
fn Prefs(prefs: Vec<NotificationPref>) -> impl IntoView {
    let rows: Vec<PrefRow> = prefs
        .iter()
        .map(|p| {
            (
                p.event.clone(),
                RwSignal::new(p.in_app),
                RwSignal::new(p.browser),
                RwSignal::new(p.webhook),
            )
        })
        .collect();
    let rows = StoredValue::new(rows);
    let permission = RwSignal::new(String::new());
    Effect::new(move |_| permission.set(browser_permission()));
    let save = Action::new(move |_: &()| {
        let prefs: Vec<NotificationPref> = rows.with_value(|r| {
            r.iter()
                .map(|(e, a, b, w)| NotificationPref {
                    event: e.clone(),
                    in_app: a.get_untracked(),
                    browser: b.get_untracked(),
                    webhook: w.get_untracked(),
                })
                .collect()
        });
        async move { save_notification_prefs(prefs).await }
    });
    let check = move |s: RwSignal<bool>, name: String| {
        view! {
            <input type="checkbox" aria-label=name prop:checked=move || s.get()
                on:change=move |ev| s.set(event_target_checked(&ev))/>
        }
    };
    view! {
        <p class="muted">"Choose how you are told when your jobs change. Browser notifications show while a Gantry tab is open."</p>
        <table class="table compact prefs" data-testid="notification-prefs">
            <thead><tr><th>"Event"</th><th>"In Gantry"</th><th>"Browser"</th><th>"My webhooks"</th></tr></thead>
            <tbody>
                {rows.get_value().into_iter().map(|(e, a, b, w)| {
                    let l = label(&e);
                    view! {
                        <tr data-testid=format!("pref-{e}")>
                            <th scope="row">{l}</th>
                            <td>{check(a, format!("{l}: in Gantry"))}</td>
                            <td>{check(b, format!("{l}: browser"))}</td>
                            <td>{check(w, format!("{l}: webhooks"))}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
        <div class="row-actions">
            <button type="button" class="button primary" data-testid="save-prefs"
                disabled=move || save.pending().get()
                on:click=move |_| { save.dispatch(()); }>"Save"</button>
            <button type="button" class="button" data-testid="allow-browser"
                on:click=move |_| { ask_browser_permission(); }>"Allow browser notifications"</button>
            <span class="muted small">{move || format!("Browser notifications: {}", permission.get())}</span>
            {move || match save.value().get() {
                Some(Ok(_)) => Some(view! { <span class="small" data-testid="prefs-saved">"Saved."</span> }.into_any()),
                Some(Err(e)) => Some(view! { <ErrorBox err=e/> }.into_any()),
                None => None,
            }}
        </div>
    }
}

#[component]
fn Webhooks(
    hooks: Vec<WebhookInfo>,
    lead_of: Vec<String>,
    changed: RwSignal<u32>,
) -> impl IntoView {
    let url = RwSignal::new(String::new());
    let kind = RwSignal::new("slack".to_string());
    let owner = RwSignal::new(String::new());
    let events: Vec<(&'static str, RwSignal<bool>)> = EVENT_LABELS
        .iter()
        .map(|(e, _)| (*e, RwSignal::new(matches!(*e, "failed" | "idle"))))
        .collect();
    let events = StoredValue::new(events);
    let create = Action::new(move |_: &()| {
        let team = owner.get_untracked();
        let req = NewWebhook {
            url: url.get_untracked().trim().to_string(),
            kind: kind.get_untracked(),
            events: events.with_value(|v| {
                v.iter()
                    .filter(|(_, s)| s.get_untracked())
                    .map(|(e, _)| e.to_string())
                    .collect()
            }),
            team: (!team.is_empty()).then_some(team),
        };
        async move { create_webhook(req).await }
    });
    // Added: the address leaves the field (it may be a credential in itself, or hold one).
    Effect::new(move |_| {
        if matches!(create.value().get(), Some(Ok(_))) {
            url.set(String::new());
        }
    });
    let remove = Action::new(move |id: &String| {
        let id = id.clone();
        async move { delete_webhook(id).await }
    });
    Effect::new(move |_| {
        if matches!(remove.value().get(), Some(Ok(_))) {
            changed.update(|n| *n += 1);
        }
    });
    let has_hooks = !hooks.is_empty();
    view! {
        <h3>"Webhooks"</h3>
        <p class="muted small">
            "Slack-compatible (" <code>"{\"text\": …}"</code> ") or generic JSON signed with HMAC-SHA256 over the body in "
            <code>"X-Gantry-Signature: sha256=…"</code> ", with " <code>"X-Gantry-Delivery"</code>
            " (the same on every retry: use it to drop a repeat). Failed deliveries are retried with backoff, up to 8 times."
        </p>
        {move || (!has_hooks && create.value().get().is_none()).then(|| view! { <p class="muted" data-testid="no-webhooks">"No webhooks yet."</p> })}
        <ul class="hooks">
            {hooks.into_iter().map(|h| {
                let id = h.id.clone();
                let open = RwSignal::new(false);
                let hid = StoredValue::new(h.id.clone());
                let log = crate::components::fetched(move || {
                    let _ = open.get();
                    get_webhook_deliveries(hid.get_value())
                });
                let owner = match &h.team {
                    Some(t) => format!("team {t}"),
                    None => "mine".to_string(),
                };
                view! {
                    <li class="hook" data-testid="webhook">
                        <div>
                            <code>{h.url.clone()}</code>
                            {format!(" · {} · {} · {}", h.kind, owner, h.events.join(", "))}
                        </div>
                        <div class="row-actions">
                            <button type="button" class="button" data-testid="webhook-log-toggle" on:click=move |_| open.update(|o| *o = !*o)>
                                {move || if open.get() { "Hide deliveries" } else { "Deliveries" }}
                            </button>
                            <button type="button" class="button danger-outline" on:click=move |_| { remove.dispatch(id.clone()); }>"Remove"</button>
                        </div>
                        <Show when=move || open.get()>
                            {move || match log.get() {
                                None => view! { <p class="muted">"Loading…"</p> }.into_any(),
                                Some(Err(e)) => view! { <ErrorBox err=e/> }.into_any(),
                                Some(Ok(d)) if d.is_empty() => view! { <p class="muted small">"No deliveries yet."</p> }.into_any(),
                                Some(Ok(d)) => {
                                    let shown = d.len();
                                    view! {
                                    <table class="table compact" data-testid="deliveries">
                                        <thead><tr><th>"When (UTC)"</th><th>"Event"</th><th>"State"</th><th class="num">"Attempts"</th><th>"Last answer"</th></tr></thead>
                                        <tbody>
                                            {d.into_iter().map(|x| view! {
                                                <tr>
                                                    <td>{absolute(x.created_at)}</td>
                                                    <td><a href=format!("/jobs/{}", x.job_id)>{x.event.clone()}</a></td>
                                                    <td>{match (x.state.as_str(), x.next_at) {
                                                        ("pending", Some(t)) => format!("retrying at {}", absolute(t)),
                                                        (s, _) => s.to_string(),
                                                    }}</td>
                                                    <td class="num">{x.attempts}</td>
                                                    <td>{x.last_status.map(|s| s.to_string()).or(x.last_error.clone()).unwrap_or_else(|| "—".into())}</td>
                                                </tr>
                                            }).collect_view()}
                                        </tbody>
                                    </table>
                                    {newest_only(shown, NEWEST_DELIVERIES, "deliveries").map(|t| view! {
                                        <p class="muted small" data-testid="deliveries-newest">{t}</p>
                                    })}
                                }.into_any()
                                }
                            }}
                        </Show>
                    </li>
                }
            }).collect_view()}
        </ul>
        <div class="webhook-form" data-testid="webhook-form">
            <label class="field">"URL"
                <input type="url" placeholder="https://hooks.slack.com/services/…" data-testid="webhook-url"
                    prop:value=move || url.get() on:input=move |ev| url.set(event_target_value(&ev))/>
            </label>
            <label class="field">"Format"
                <select data-testid="webhook-kind" on:change=move |ev| kind.set(event_target_value(&ev))>
                    <option value="slack" selected=true>"Slack-compatible"</option>
                    <option value="generic">"Generic JSON, signed"</option>
                </select>
            </label>
            {(!lead_of.is_empty()).then(|| view! {
                <label class="field">"For"
                    <select data-testid="webhook-owner" on:change=move |ev| owner.set(event_target_value(&ev))>
                        <option value="" selected=true>"me"</option>
                        {lead_of.iter().map(|t| view! { <option value=t.clone()>{format!("team {t} (failures and idle jobs)")}</option> }).collect_view()}
                    </select>
                </label>
            })}
            <fieldset class="events">
                <legend>"Events"</legend>
                {events.get_value().into_iter().map(|(e, s)| view! {
                    <label><input type="checkbox" prop:checked=move || s.get() on:change=move |ev| s.set(event_target_checked(&ev))/>{format!(" {e}")}</label>
                }).collect_view()}
            </fieldset>
            <button type="button" class="button primary" data-testid="webhook-add"
                disabled=move || create.pending().get()
                on:click=move |_| { create.dispatch(()); }>"Add webhook"</button>
        </div>
        {move || match create.value().get() {
            Some(Ok(c)) => Some(view! {
                <div class="notice" data-testid="webhook-created">
                    <p><strong>"Webhook added."</strong>" Its signing secret, shown once:"</p>
                    <input class="token-secret" type="text" readonly aria-label="Webhook secret" prop:value=c.secret.clone()/>
                    <button type="button" class="button" on:click=move |_| changed.update(|n| *n += 1)>"Done"</button>
                </div>
            }.into_any()),
            Some(Err(e)) => Some(view! { <ErrorBox err=e/> }.into_any()),
            None => None,
        }}
    }
}

/// "The 50 newest notifications are shown; older ones are not." under a list that the server
/// cut at `cap`; `None` when it holds fewer, so all of them.
fn newest_only(shown: usize, cap: usize, what: &str) -> Option<String> {
    (shown >= cap).then(|| format!("The {cap} newest {what} are shown; older ones are not."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_cut_at_its_cap_says_so_and_a_shorter_one_does_not() {
        assert_eq!(
            newest_only(NEWEST_NOTIFICATIONS, NEWEST_NOTIFICATIONS, "notifications").as_deref(),
            Some("The 50 newest notifications are shown; older ones are not.")
        );
        assert_eq!(
            newest_only(NEWEST_DELIVERIES, NEWEST_DELIVERIES, "deliveries").as_deref(),
            Some("The 100 newest deliveries are shown; older ones are not.")
        );
        assert_eq!(newest_only(49, NEWEST_NOTIFICATIONS, "notifications"), None);
        assert_eq!(newest_only(0, NEWEST_DELIVERIES, "deliveries"), None);
    }
}
