//! One module per page.
pub mod admin;
pub mod home;
pub mod job;
pub mod job_actions;
pub mod job_gpu;
pub mod job_logs;
pub mod jobs;
pub mod jobs_live;
pub mod jobs_wire;
pub mod launch;
pub mod launch_form;
pub mod login;
pub mod notifications;
pub mod pools;
pub mod pools_wire;
pub mod profile;
pub mod usage;
