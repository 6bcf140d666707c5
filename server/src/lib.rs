//! Gantry's server: configuration, services, persistence, the cluster back ends, the JSON
//! API and the Leptos handler. `main.rs` only parses the command line and calls [`startup`].

pub mod api;
pub mod assets;
pub mod auth;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod db;
pub mod input;
pub mod metrics;
pub mod oidc;
pub mod reconciler;
pub mod request_id;
pub mod seed;
pub mod serve;
pub mod service;
pub mod session_store;
pub mod startup;
pub mod template_def;
#[cfg(test)]
mod testkit;
pub mod usage;
pub mod whatif;
