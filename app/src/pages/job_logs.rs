//! The job page's Logs view: one node rank (rank 0 first) or all ranks interleaved with a
//! rank prefix, a live tail that follows new lines (pause and resume), search with the
//! matches highlighted, error lines marked, and Download of the whole log. The browser keeps
//! the last [`MAX_LINES`] lines and says so; older ones are in the download.

use leptos::prelude::*;

use crate::components::{loaded, ErrorBox};
use crate::functions::get_job_logs;
use crate::model::{is_error_line, Job, JobFailure, LogLine, GPUS_PER_NODE};

/// Lines the browser keeps; the oldest go first.
pub const MAX_LINES: usize = 5_000;
/// How long followed lines gather before they are drawn.
#[cfg(feature = "hydrate")]
const BATCH: std::time::Duration = std::time::Duration::from_millis(100);
/// Lines read when the view opens.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
const FIRST_READ: usize = 500;

/// `text` split around case-insensitive matches of `q`: (piece, is it a match).
pub fn split_matches(text: &str, q: &str) -> Vec<(String, bool)> {
    if q.is_empty() {
        return vec![(text.to_string(), false)];
    }
    let lower = text.to_lowercase();
    let ql = q.to_lowercase();
    // Lowercasing may change byte lengths outside ASCII: then no highlight rather than a
    // wrong one.
    if lower.len() != text.len() {
        return vec![(text.to_string(), false)];
    }
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = lower[at..].find(&ql) {
        let start = at + i;
        if start > at {
            out.push((text[at..start].to_string(), false));
        }
        out.push((text[start..start + ql.len()].to_string(), true));
        at = start + ql.len();
    }
    if at < text.len() {
        out.push((text[at..].to_string(), false));
    }
    out
}

fn rank_label(job: &Job, rank: u32) -> String {
    let first = rank * GPUS_PER_NODE;
    let last = (first + job.gpus.min(GPUS_PER_NODE)).saturating_sub(1);
    match job.node_names.get(rank as usize) {
        Some(n) => format!("rank {rank} · {n} · GPUs {first}–{last}"),
        None => format!("rank {rank} · GPUs {first}–{last}"),
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Shown {
    seq: u64,
    line: LogLine,
}

#[component]
pub fn LogsPanel(job: Job) -> impl IntoView {
    let ranks = job.nodes.max(1);
    let active = job.state.is_active();
    let id = StoredValue::new(job.id.clone());
    // `None`: all ranks.
    let rank = RwSignal::new(Some(0u32));
    let query = RwSignal::new(String::new());
    let paused = RwSignal::new(false);
    let lines = RwSignal::new(Vec::<Shown>::new());
    let held = RwSignal::new(Vec::<LogLine>::new());
    let dropped = RwSignal::new(0usize);
    let seq = StoredValue::new(0u64);
    let stream_ended = RwSignal::new(!active);
    let push = move |new: Vec<LogLine>| {
        if new.is_empty() {
            return;
        }
        // The panel may be gone (a batch flushed after navigating away): then nothing.
        let Some(mut n) = seq.try_get_value() else {
            return;
        };
        let cut = lines.try_update(|v| {
            for l in new {
                n += 1;
                v.push(Shown { seq: n, line: l });
            }
            let cut = v.len().saturating_sub(MAX_LINES);
            v.drain(..cut);
            cut
        });
        seq.try_set_value(n);
        if let Some(cut @ 1..) = cut {
            dropped.try_update(|d| *d += cut);
        }
    };
    // The first read of the chosen rank, in the browser only and as a plain task, not a
    // resource: no Suspense above waits for a log (the page shows at once; its GPU panel
    // and logs each load in place), and the server renders "Loading logs…".
    let first = RwSignal::new(None::<Result<crate::model::JobLogs, crate::error::ApiError>>);
    Effect::new(move |_| {
        let r = rank.get();
        first.set(None);
        #[cfg(feature = "hydrate")]
        {
            let id = id.get_value();
            leptos::task::spawn_local(async move {
                let res = get_job_logs(id, r, FIRST_READ).await;
                // The panel may be gone, or another rank chosen meanwhile: then nothing.
                if rank.try_get_untracked() == Some(r) {
                    first.try_set(Some(res));
                }
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (r, id);
    });
    let note = RwSignal::new(None::<Result<Option<String>, crate::error::ApiError>>);
    // A fresh start whenever the rank changes.
    Effect::new(move |_| match first.get() {
        Some(Ok(l)) => {
            lines.set(Vec::new());
            held.set(Vec::new());
            dropped.set(0);
            note.set(Some(Ok(l.message.clone())));
            push(l.lines);
        }
        Some(Err(e)) => note.set(Some(Err(e))),
        None => {}
    });
    #[cfg(feature = "hydrate")]
    follow(id, rank, active, first, paused, held, stream_ended, push);
    let resume = move |_| {
        paused.set(false);
        let h = held.get_untracked();
        held.set(Vec::new());
        push(h);
    };
    let download = move || {
        let which = rank.get().map_or("all".to_string(), |r| r.to_string());
        format!(
            "/api/v1/jobs/{}/logs?rank={which}&download=true",
            id.get_value()
        )
    };
    let matches = move || {
        let q = query.get();
        if q.trim().is_empty() {
            return None;
        }
        let q = q.to_lowercase();
        Some(lines.with(|v| {
            v.iter()
                .filter(|s| s.line.text.to_lowercase().contains(&q))
                .count()
        }))
    };
    let job_for_labels = StoredValue::new(job);
    // Following: the view stays at the newest line (Pause holds it where it is).
    let pane = NodeRef::<leptos::html::Div>::new();
    Effect::new(move |_| {
        lines.with(|v| v.len());
        if paused.get_untracked() {
            return;
        }
        if let Some(el) = pane.get() {
            el.set_scroll_top(el.scroll_height());
        }
    });
    view! {
        <section class="panel logs" data-testid="logs">
            <div class="logs-head">
                <h2>"Logs"</h2>
                <label class="field inline">
                    <span class="sr-only">"Rank"</span>
                    <select
                        data-testid="logs-rank"
                        on:change=move |ev| {
                            let v = event_target_value(&ev);
                            rank.set(v.parse::<u32>().ok());
                        }
                    >
                        {(0..ranks)
                            .map(|r| {
                                let label = job_for_labels.with_value(|j| rank_label(j, r));
                                view! { <option value=r.to_string() selected=r == 0>{label}</option> }
                            })
                            .collect_view()}
                        {(ranks > 1).then(|| view! { <option value="all">"all ranks (interleaved)"</option> })}
                    </select>
                </label>
                <input
                    type="search"
                    class="logs-search"
                    placeholder="Search the lines shown"
                    aria-label="Search the log"
                    data-testid="logs-search"
                    prop:value=move || query.get()
                    on:input=move |ev| query.set(event_target_value(&ev))
                />
                {move || matches().map(|n| view! {
                    <span class="muted small" data-testid="logs-matches">
                        {if n == 1 { "1 matching line".to_string() } else { format!("{n} matching lines") }}
                    </span>
                })}
                <span class="logs-actions">
                    {move || {
                        if stream_ended.get() {
                            view! { <span class="muted small" data-testid="logs-state">"Ended: no more lines will come"</span> }.into_any()
                        } else if paused.get() {
                            view! {
                                <button class="button" data-testid="logs-resume" on:click=resume>
                                    {move || format!("Resume ({} new)", held.with(Vec::len))}
                                </button>
                            }
                                .into_any()
                        } else {
                            view! {
                                <span class="live-dot" title="following new lines"></span>
                                <button class="button" data-testid="logs-pause" on:click=move |_| paused.set(true)>
                                    "Pause"
                                </button>
                            }
                                .into_any()
                        }
                    }}
                    <a class="button" data-testid="logs-download" href=download download="">
                        "Download"
                    </a>
                </span>
            </div>
            {move || match note.get() {
                None => Some(view! { <p class="muted small">"Loading logs…"</p> }.into_any()),
                Some(Ok(m)) => m.map(|m| view! { <p class="muted small" data-testid="logs-message">{m}</p> }.into_any()),
                Some(Err(e)) => Some(view! { <ErrorBox err=e/> }.into_any()),
            }}
            {move || (dropped.get() > 0).then(|| view! {
                <p class="muted small" data-testid="logs-bounded">
                    {format!("Showing the last {} lines; {} older lines were let go to keep the page fast. Download has the whole log.", crate::format::thousands(MAX_LINES as u64), crate::format::thousands(dropped.get() as u64))}
                </p>
            })}
            // Hidden while it has no lines to show and the message above says why (loading,
            // or no logs kept): an empty black box read as a broken panel.
            <div
                class="log-view"
                class:log-empty=move || lines.with(Vec::is_empty) && !matches!(note.get(), Some(Ok(None)))
                role="log"
                aria-live="off"
                data-testid="log-lines"
                node_ref=pane
            >
                <For
                    each=move || lines.get()
                    key=|s| s.seq
                    children=move |s| {
                        let all = rank.get_untracked().is_none();
                        let err = is_error_line(&s.line.text);
                        let text = s.line.text.clone();
                        view! {
                            <div class="log-line" class:log-error=err data-rank=s.line.rank>
                                <time class="log-time" datetime=s.line.at.to_rfc3339()>
                                    {s.line.at.format("%H:%M:%S").to_string()}
                                </time>
                                {all.then(|| view! { <span class="log-rank">{format!("[{}]", s.line.rank)}</span> })}
                                <span class="log-text">
                                    {move || {
                                        split_matches(&text, query.get().trim())
                                            .into_iter()
                                            .map(|(piece, hit)| {
                                                if hit {
                                                    view! { <mark>{piece}</mark> }.into_any()
                                                } else {
                                                    piece.into_any()
                                                }
                                            })
                                            .collect_view()
                                    }}
                                </span>
                            </div>
                        }
                    }
                />
                {move || (lines.with(Vec::is_empty) && matches!(note.get(), Some(Ok(None)))).then(|| view! {
                    <p class="muted">"No lines yet."</p>
                })}
            </div>
        </section>
    }
}

/// The failing rank's last lines, error lines highlighted, under the failure's reason.
#[component]
pub fn FailureLines(job_id: String, failure: JobFailure) -> impl IntoView {
    let rank = failure.rank;
    let lines = Resource::new(|| (), move |_| get_job_logs(job_id.clone(), rank, 16));
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Reading the failing rank's last lines…"</p> }>
            {move || Suspend::new(async move {
                loaded(lines).await.map(|r| match r {
                    Ok(l) if !l.lines.is_empty() => view! {
                        <p class="small">{format!("Last lines of rank {}:", rank.unwrap_or(0))}</p>
                        <div class="log-view short" data-testid="failure-lines">
                            {l.lines.into_iter().map(|line| {
                                let err = is_error_line(&line.text);
                                view! { <div class="log-line" class:log-error=err>{line.text}</div> }
                            }).collect_view()}
                        </div>
                    }.into_any(),
                    Ok(l) => view! { <p class="muted small">{l.message.unwrap_or_else(|| "No lines were kept.".into())}</p> }.into_any(),
                    Err(e) => view! { <ErrorBox err=e/> }.into_any(),
                })
            })}
        </Suspense>
    }
}

#[cfg(feature = "hydrate")]
#[allow(clippy::too_many_arguments)]
fn follow(
    id: StoredValue<String>,
    rank: RwSignal<Option<u32>>,
    active: bool,
    first: RwSignal<Option<Result<crate::model::JobLogs, crate::error::ApiError>>>,
    paused: RwSignal<bool>,
    held: RwSignal<Vec<LogLine>>,
    stream_ended: RwSignal<bool>,
    push: impl Fn(Vec<LogLine>) + Copy + Send + Sync + 'static,
) {
    use send_wrapper::SendWrapper;
    use wasm_bindgen::{closure::Closure, JsCast};
    if !active {
        return;
    }
    Effect::new(move |_| {
        // After the first read of this rank: follow from its last line.
        let Some(Ok(l)) = first.get() else { return };
        if l.ended {
            stream_ended.set(true);
            return;
        }
        let which = rank
            .get_untracked()
            .map_or("all".to_string(), |r| r.to_string());
        let since = l
            .lines
            .last()
            .map(|x| {
                format!(
                    "&since={}",
                    x.at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
                        .replace('+', "%2B")
                )
            })
            .unwrap_or_default();
        let url = format!(
            "/api/v1/jobs/{}/logs?follow=true&rank={which}&tail=200{since}",
            id.get_value()
        );
        let Ok(source) = web_sys::EventSource::new(&url) else {
            return;
        };
        // Lines are drawn in batches, one every BATCH at most: a burst of thousands of lines
        // is a few redraws, not one per line.
        let batch = std::rc::Rc::new(std::cell::RefCell::new(Vec::<LogLine>::new()));
        let on_message =
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
                let Some(text) = ev.data().as_string() else {
                    return;
                };
                let Ok(line) = serde_json::from_str::<LogLine>(&text) else {
                    return;
                };
                if paused.try_get_untracked().unwrap_or(true) {
                    held.try_update(|h| {
                        h.push(line);
                        let cut = h.len().saturating_sub(MAX_LINES);
                        h.drain(..cut);
                    });
                    return;
                }
                let first = {
                    let mut b = batch.borrow_mut();
                    b.push(line);
                    b.len() == 1
                };
                if first {
                    let batch = batch.clone();
                    set_timeout(
                        move || {
                            let lines = std::mem::take(&mut *batch.borrow_mut());
                            push(lines);
                        },
                        BATCH,
                    );
                }
            });
        let closer = source.clone();
        let on_end = Closure::<dyn FnMut()>::new(move || {
            closer.close();
            stream_ended.try_set(true);
        });
        source.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        let _ = source.add_event_listener_with_callback("end", on_end.as_ref().unchecked_ref());
        let kept = SendWrapper::new((source, on_message, on_end));
        on_cleanup(move || {
            let (source, ..) = kept.take();
            source.close();
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_are_split_out_case_insensitively() {
        assert_eq!(
            split_matches("NCCL WARN peer nccl", "nccl"),
            vec![
                ("NCCL".to_string(), true),
                (" WARN peer ".to_string(), false),
                ("nccl".to_string(), true)
            ]
        );
        assert_eq!(split_matches("abc", ""), vec![("abc".to_string(), false)]);
        assert_eq!(split_matches("abc", "x"), vec![("abc".to_string(), false)]);
    }
}
