//! Background work that keeps the database in step with the cluster and the metrics: the
//! event writer with its resync ([`reconciler`]), the resender and the clock saver
//! ([`resender`]), the usage recorder ([`recorder`]), and the log keeper ([`keeper`]).

pub mod keeper;
pub mod notifier;
pub mod reconciler;
pub mod recorder;
pub mod resender;
