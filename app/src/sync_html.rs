//! A part of a page written to HTML in one pass, for parts that wait on nothing.
//!
//! A page rendered in `SsrMode::Async` is written through tachys' streaming path, in which
//! every element writes its opening tag into a `String` of its own (grown attribute by
//! attribute) and its closing tag into another, and copies both into the page: for the
//! 50 rows of a Jobs page, about 1,200 such strings and their growth, a tenth of what the
//! server spent on the page (callgrind over the page benchmark). The non-streaming path
//! writes every element straight into the page's buffer. [`SyncHtml`] sends a part down that
//! path; the HTML is the same either way (the page benchmark's dumps, and the browser tests'
//! hydration, check it). A part that holds a `Suspense` or `Transition` must not be wrapped:
//! written in one pass it would show its fallback.
//!
//! In the browser it is the view it wraps: built and hydrated as before.

use leptos::prelude::*;
use leptos::tachys::html::attribute::any_attribute::AnyAttribute;
use leptos::tachys::html::attribute::Attribute;
use leptos::tachys::hydration::Cursor;
use leptos::tachys::view::add_attr::AddAnyAttr;
use leptos::tachys::view::any_view::AnyViewState;
use leptos::tachys::view::{Position, PositionState, Render, RenderHtml};

/// See the module's documentation.
pub struct SyncHtml(AnyView);

/// `view`, written to HTML in one pass on the server. It must wait on nothing (no
/// `Suspense`, `Transition` or `Suspend` inside it).
pub fn sync_html(view: impl IntoView + 'static) -> SyncHtml {
    SyncHtml(view.into_view().into_any())
}

impl Render for SyncHtml {
    type State = AnyViewState;

    fn build(self) -> Self::State {
        self.0.build()
    }

    fn rebuild(self, state: &mut Self::State) {
        self.0.rebuild(state)
    }
}

impl AddAnyAttr for SyncHtml {
    type Output<SomeNewAttr: Attribute> = <AnyView as AddAnyAttr>::Output<SomeNewAttr>;

    fn add_any_attr<NewAttr: Attribute>(self, attr: NewAttr) -> Self::Output<NewAttr>
    where
        Self::Output<NewAttr>: RenderHtml,
    {
        self.0.add_any_attr(attr)
    }
}

impl RenderHtml for SyncHtml {
    type AsyncOutput = Self;
    type Owned = Self;

    const MIN_LENGTH: usize = 0;

    fn dry_resolve(&mut self) {
        self.0.dry_resolve()
    }

    async fn resolve(self) -> Self::AsyncOutput {
        SyncHtml(self.0.resolve().await)
    }

    fn html_len(&self) -> usize {
        self.0.html_len()
    }

    fn to_html_with_buf(
        self,
        buf: &mut String,
        position: &mut Position,
        escape: bool,
        mark_branches: bool,
        extra_attrs: Vec<AnyAttribute>,
    ) {
        self.0
            .to_html_with_buf(buf, position, escape, mark_branches, extra_attrs)
    }

    // `to_html_async_with_buf` is the trait's own: `to_html_with_buf` into the stream's
    // buffer, which is the point.

    fn hydrate<const FROM_SERVER: bool>(
        self,
        cursor: &Cursor,
        position: &PositionState,
    ) -> Self::State {
        self.0.hydrate::<FROM_SERVER>(cursor, position)
    }

    async fn hydrate_async(self, cursor: &Cursor, position: &PositionState) -> Self::State {
        self.0.hydrate_async(cursor, position).await
    }

    fn into_owned(self) -> Self::Owned {
        self
    }
}

/// `s` as tachys writes a text node into the page: escaped, and an empty text as one space
/// (a text node to hydrate). For parts written straight into a string on the server.
#[cfg(feature = "ssr")]
pub(crate) fn push_text(out: &mut String, s: &str) {
    if s.is_empty() {
        out.push(' ');
    } else {
        out.push_str(&html_escape::encode_text(s));
    }
}

/// `s` as tachys writes an attribute's value between double quotes: escaped.
#[cfg(feature = "ssr")]
pub(crate) fn push_attr(out: &mut String, s: &str) {
    out.push_str(&html_escape::encode_double_quoted_attribute(s));
}
