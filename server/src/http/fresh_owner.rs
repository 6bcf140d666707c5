//! Each request starts with no Leptos owner on its thread.
//!
//! Leptos' `Owner::new_root`, which every page render calls, also makes the new root the
//! thread's current owner and leaves it there (`reactive_graph` 0.2.16, `owner.rs`). The next
//! request that a worker thread polls then finds that page's root as its current owner.
//! leptos_axum's site-file handler and its server-function handler both start with
//! `Owner::new()`, a child of whatever is current. So a site file (`/favicon.svg`, `/pkg/…`)
//! served while a page was still rendering read that *page's* `ResponseOptions`, and moved its
//! headers onto the file's answer (leptos_axum takes them out with `mem::take`). The page then
//! went out without its Content-Security-Policy: the browser refused its hydration scripts and
//! the page never became interactive (`api::pages_keep_their_policy_while_site_files_are_served`).
//!
//! [`middleware`] clears the current owner before and after every poll of a request, so a
//! handler's `Owner::new()` is a root of its own, as it would be on a fresh thread.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use leptos::reactive::owner::Owner;

/// Middleware: runs the rest of the request with no inherited Leptos owner.
pub async fn middleware(req: Request, next: Next) -> Response {
    WithoutOwner(Box::pin(next.run(req))).await
}

struct WithoutOwner<F>(Pin<Box<F>>);

impl<F: Future> Future for WithoutOwner<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        clear();
        let out = self.0.as_mut().poll(cx);
        clear();
        out
    }
}

/// Forgets the thread's current owner, if any (the owner itself lives on with its holders).
fn clear() {
    if let Some(owner) = Owner::current() {
        owner.unset();
    }
}
