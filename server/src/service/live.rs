//! Live changes: what open pages and streams are told, and the sync that makes the cluster
//! and the database agree before a read.

use super::*;

/// A change a live page may want to know about.
#[derive(Clone, Debug)]
pub struct LiveChange {
    pub job_id: String,
    /// Who launched the job (empty for a change that is not one job's).
    pub user: String,
    /// A notification was written for `user`: their open pages refetch their list.
    pub notify: bool,
    pub team: String,
    pub pool: String,
    pub state: JobState,
    pub at: DateTime<Utc>,
}

impl Portal {
    pub fn subscribe_live(&self) -> broadcast::Receiver<LiveChange> {
        self.live.subscribe()
    }

    pub fn publish(&self, change: LiveChange) {
        // No receivers is fine: nobody is watching.
        let _ = self.live.send(change);
    }

    /// What a viewer's live stream says of a change: the job's id when it is their team's
    /// (or they are an admin); of another team's job only which pool moved (queue positions
    /// may have changed). `None` (changes were missed): nothing but the time, so pages
    /// refetch everything.
    pub fn live_event(&self, viewer: &Viewer, change: Option<LiveChange>) -> LiveEvent {
        match change {
            Some(c) => {
                let visible = Self::may_see(viewer, &c.team);
                LiveEvent::Job {
                    notify: c.notify && c.user == viewer.user,
                    job_id: if visible { c.job_id } else { String::new() },
                    user: if visible { c.user } else { String::new() },
                    pool: c.pool,
                    state: c.state,
                    now: c.at,
                }
            }
            None => LiveEvent::Job {
                job_id: String::new(),
                user: String::new(),
                notify: false,
                pool: String::new(),
                state: JobState::Queued,
                now: self.cluster.now(),
            },
        }
    }

    /// The live stream's clock tick.
    pub fn live_tick(&self) -> LiveEvent {
        LiveEvent::Tick {
            now: self.cluster.now(),
        }
    }

    /// Waits until every cluster event so far is in the database, so a response reflects
    /// what the cluster already did (an immediate admission, a freed slot).
    pub async fn sync(&self) {
        let target = self.cluster.last_seq();
        let mut rx = self.applied.clone();
        let _ =
            tokio::time::timeout(StdDuration::from_secs(2), rx.wait_for(|v| *v >= target)).await;
    }
}
