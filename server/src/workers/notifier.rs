//! The notifier and the webhook sender. The notifier turns new job events into
//! notifications and deliveries every second (and checks running jobs for 30 idle minutes);
//! the sender posts due deliveries every second, with retries and backoff. Both keep their
//! state in the database: a restart resumes from the stored cursor and the pending
//! deliveries, and the unique keys keep every event told at most once.

use std::sync::Arc;
use std::time::Duration;

use crate::service::Portal;

pub fn spawn(portal: Arc<Portal>) -> Vec<tokio::task::JoinHandle<()>> {
    let notifier = {
        let portal = portal.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut round: u64 = 0;
            loop {
                every.tick().await;
                if let Err(e) = portal.notify_once().await {
                    tracing::warn!(error = %e.message, "notifier: will retry");
                }
                // Idleness needs metrics reads: once a minute is enough for a 30-minute rule.
                if round.is_multiple_of(60) {
                    if let Err(e) = portal.notify_idle().await {
                        tracing::warn!(error = %e.message, "idle check: will retry");
                    }
                }
                round += 1;
            }
        })
    };
    let sender = tokio::spawn(async move {
        let http = crate::service::webhook_client(portal.webhook_networks());
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if let Err(e) = portal.deliver_once(&http).await {
                tracing::warn!(error = %e.message, "webhook sender: will retry");
            }
        }
    });
    vec![notifier, sender]
}
