//! Plain types and pure functions that every layer may use: what a workload is, pools and
//! quotas, GPU accounting, template definitions, API tokens. Nothing here does I/O or imports
//! another module of this crate.

pub mod accounting;
pub mod audit;
pub mod csv;
pub mod identity;
pub mod logs;
pub mod notify;
pub mod quota;
pub mod template;
pub mod template_def;
pub mod token;
pub mod workload;
