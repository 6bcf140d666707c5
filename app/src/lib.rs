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

#[cfg(feature = "ssr")]
pub mod backend;

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(app::App);
}
