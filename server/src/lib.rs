//! Gantry's server: configuration, services, persistence, the cluster back ends, the JSON
//! API and the Leptos handler. `main.rs` only parses the command line and calls [`startup`].

pub mod clock;
pub mod cluster;
pub mod config;
pub mod context;
pub mod db;
pub mod domain;
pub mod error;
pub mod http;
pub mod input;
pub mod metrics;
pub mod render;
pub mod seed;
pub mod service;
pub mod startup;
#[cfg(test)]
mod testkit;
pub mod usage;
pub mod whatif;
pub mod workers;

/// The event writer, the resync and the resender, under the name tests and tools know.
pub use workers::reconciler;
