//! Gantry's web front end: Leptos pages rendered on the server and hydrated in the browser.
#![recursion_limit = "256"]

pub mod app;
pub mod components;
pub mod error;
pub mod format;
pub mod functions;
pub mod live;
pub mod model;
pub mod pages;
pub mod site;
pub mod sync_html;
pub mod wire;

#[cfg(feature = "ssr")]
pub mod backend;

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(app::App);
    // From here on the page's controls work: `style/main.css` shows them unavailable until
    // then, so a click made while the wasm loads is visibly not taken rather than lost.
    if let Some(root) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.document_element())
    {
        let _ = root.class_list().add_1("hydrated");
    }
}
