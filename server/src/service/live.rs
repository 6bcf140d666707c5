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
    /// The job's list row, read once when the first stream that may show it asks.
    pub row: RowCell,
    /// Its number among the changes sent ([`LiveTx::send`] sets it; 0 before).
    pub seq: u64,
}

/// Sends the live changes, numbering them as it sends them (one more each, in the order they
/// are sent). A change is sent once the database holds it, so a read that starts after
/// [`LiveTx::seq`] answered `n` holds every change up to `n`; a stream's reader that is told
/// of change `n + 2` after `n` knows it missed one, and a page knows which changes it lacks.
/// The count starts at the time the process started, in microseconds since 1970: a
/// restarted server's numbers are above every number the one before it sent (it would have
/// had to send a million changes a second to catch up), so a page open across a restart
/// sees that it missed changes, and takes none of the new ones for old.
#[derive(Clone, Debug)]
pub struct LiveTx(Arc<LiveTxInner>);

#[derive(Debug)]
struct LiveTxInner {
    tx: broadcast::Sender<LiveChange>,
    /// The changes sent; a send happens under it, so numbers go out in order.
    sent: std::sync::Mutex<Sent>,
}

#[derive(Debug)]
struct Sent {
    /// The number of the last change sent.
    last: u64,
    /// The last [`REPLAY`] changes, oldest first, for streams that open after a page was
    /// read (see [`LiveTx::subscribe_since`]).
    recent: std::collections::VecDeque<LiveChange>,
}

/// How many of the last changes a stream that opens late is sent again. A page opens its
/// stream a second or two after it was read (its wasm loads in between); more changes than
/// this in that time and it reads everything again instead.
pub const REPLAY: usize = 256;

/// A new stream's receiver, where it starts and the changes sent since then.
pub struct Subscribed {
    pub rx: broadcast::Receiver<LiveChange>,
    /// The count the stream starts from: the one asked for when every change after it could
    /// be sent again, else the count now.
    pub from: u64,
    /// The changes after `from` already sent, oldest first.
    pub replay: Vec<LiveChange>,
}

impl LiveTx {
    /// A sender whose streams may fall `capacity` changes behind before they miss some.
    pub fn new(capacity: usize) -> LiveTx {
        let (tx, _) = broadcast::channel(capacity);
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2));
        LiveTx(Arc::new(LiveTxInner {
            tx,
            sent: std::sync::Mutex::new(Sent {
                last: start,
                recent: std::collections::VecDeque::with_capacity(REPLAY),
            }),
        }))
    }

    /// Numbers `change` and sends it; no receivers is fine (nobody is watching).
    pub fn send(&self, mut change: LiveChange) {
        let mut sent = self.0.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.last += 1;
        change.seq = sent.last;
        if sent.recent.len() == REPLAY {
            sent.recent.pop_front();
        }
        sent.recent.push_back(change.clone());
        let _ = self.0.tx.send(change);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<LiveChange> {
        self.0.tx.subscribe()
    }

    /// A receiver for a stream whose reader holds every change up to `since` (a page read
    /// with that count, or the last change its stream was sent before it reconnected), and
    /// the changes sent after it, when they are all still kept: subscribed and copied under
    /// the send lock, so none is missed or sent twice. Otherwise (none asked, too old, or a
    /// count of another process) it starts from the count now, and the reader sees from the
    /// first tick that it missed changes.
    pub fn subscribe_since(&self, since: Option<u64>) -> Subscribed {
        let sent = self.0.sent.lock().unwrap_or_else(|e| e.into_inner());
        let rx = self.0.tx.subscribe();
        let oldest_held = sent.last - sent.recent.len() as u64;
        match since {
            Some(s) if s <= sent.last && s >= oldest_held => Subscribed {
                rx,
                from: s,
                replay: sent.recent.iter().filter(|c| c.seq > s).cloned().collect(),
            },
            _ => Subscribed {
                rx,
                from: sent.last,
                replay: Vec::new(),
            },
        }
    }

    /// How many changes have been sent.
    pub fn seq(&self) -> u64 {
        self.0.sent.lock().unwrap_or_else(|e| e.into_inner()).last
    }
}

/// Where a receiver that fell behind (`Lagged`) goes on from: the oldest change the channel
/// still holds for it, and the count just before that change. A stream tells its page that
/// count (as a first tick does), so the page reads everything once and applies the changes
/// after it in order; told only "missed some", the page took the next change for a second
/// gap and read twice. `None` once the sender is gone.
pub async fn resume_after_lag(
    rx: &mut broadcast::Receiver<LiveChange>,
) -> Option<(u64, LiveChange)> {
    loop {
        match rx.recv().await {
            Ok(c) => return Some((c.seq.saturating_sub(1), c)),
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

/// A changed job's list row, shared by every stream told of the change: read from the
/// database once, however many viewers are connected; and the event's text for each kind of
/// viewer, written once for all the streams of that kind.
#[derive(Clone, Debug, Default)]
pub struct RowCell(std::sync::Arc<Shared>);

#[derive(Debug, Default)]
pub struct Shared {
    row: tokio::sync::OnceCell<Option<Job>>,
    texts: std::sync::Mutex<HashMap<Said, std::sync::Arc<str>>>,
}

/// What differs between viewers in what a change says: whether they see the job, whether a
/// notification was written for them, what they may do with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Said {
    visible: bool,
    notify: bool,
    can_cancel: bool,
    can_rerun: bool,
}

impl RowCell {
    /// Whether some stream has read the row already.
    pub fn is_read(&self) -> bool {
        self.0.row.initialized()
    }
}

impl Portal {
    pub fn subscribe_live(&self) -> broadcast::Receiver<LiveChange> {
        self.live.subscribe()
    }

    /// A live stream's receiver from `since` on (see [`LiveTx::subscribe_since`]).
    pub fn subscribe_live_since(&self, since: Option<u64>) -> Subscribed {
        self.live.subscribe_since(since)
    }

    pub fn publish(&self, change: LiveChange) {
        self.live.send(change);
    }

    /// How many live changes have been sent: a read that starts now holds them all.
    pub fn live_seq(&self) -> u64 {
        self.live.seq()
    }

    /// What a viewer's live stream says of a change: the job's id and its list row when it
    /// is their team's (or they are an admin), with what this viewer may do with it; of
    /// another team's job only which pool moved (queue positions may have changed). `None`
    /// (changes were missed): nothing but the time, so pages refetch everything.
    pub async fn live_event(&self, viewer: &Viewer, change: Option<LiveChange>) -> LiveEvent {
        match change {
            Some(c) => {
                let visible = Self::may_see(viewer, &c.team);
                let row = if visible && !c.job_id.is_empty() {
                    self.live_row(&c).await.map(|mut j| {
                        (j.can_cancel, j.can_rerun) =
                            Self::may_act(viewer, &j.team, &j.user, j.state);
                        Box::new(j)
                    })
                } else {
                    None
                };
                LiveEvent::Job {
                    notify: c.notify && c.user == viewer.user,
                    job_id: if visible { c.job_id } else { String::new() },
                    user: if visible { c.user } else { String::new() },
                    pool: c.pool,
                    state: visible.then_some(c.state),
                    now: c.at,
                    row,
                    seq: c.seq,
                }
            }
            None => LiveEvent::Job {
                job_id: String::new(),
                user: String::new(),
                notify: false,
                pool: String::new(),
                state: None,
                now: self.cluster.now(),
                row: None,
                seq: 0,
            },
        }
    }

    /// [`Portal::live_event`] as the stream sends it (JSON), written once per kind of viewer
    /// for every stream of that kind.
    pub async fn live_event_text(
        &self,
        viewer: &Viewer,
        change: Option<LiveChange>,
    ) -> std::sync::Arc<str> {
        let Some(c) = change else {
            let event = self.live_event(viewer, None).await;
            return serde_json::to_string(&event).unwrap_or_default().into();
        };
        let visible = Self::may_see(viewer, &c.team);
        let (can_cancel, can_rerun) = if visible {
            Self::may_act(viewer, &c.team, &c.user, c.state)
        } else {
            (false, false)
        };
        let said = Said {
            visible,
            notify: c.notify && c.user == viewer.user,
            can_cancel,
            can_rerun,
        };
        let texts = c.row.0.clone();
        if let Some(t) = texts.texts.lock().ok().and_then(|m| m.get(&said).cloned()) {
            return t;
        }
        let event = self.live_event(viewer, Some(c)).await;
        let text: std::sync::Arc<str> = serde_json::to_string(&event).unwrap_or_default().into();
        if let Ok(mut m) = texts.texts.lock() {
            m.entry(said).or_insert_with(|| text.clone());
        }
        text
    }

    /// The changed job as a list shows it (no events: the list does not show them), read
    /// once per change. `None` when it cannot be read; the page then refetches.
    async fn live_row(&self, c: &LiveChange) -> Option<Job> {
        c.row
            .0
            .row
            .get_or_init(|| async {
                let row = match self.db.get_job(&c.job_id).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(job.id = %c.job_id, error = %e, "live: could not read the changed job");
                        return None;
                    }
                };
                // Nothing in a list row depends on who reads it but what they may do,
                // which each stream sets for its viewer.
                let nobody = Viewer {
                    user: String::new(),
                    display_name: String::new(),
                    teams: Vec::new(),
                    is_admin: false,
                };
                match self.to_jobs(&nobody, vec![(row, None)]).await {
                    Ok(mut jobs) => jobs.pop().map(|mut j| {
                        j.events.clear();
                        j
                    }),
                    Err(e) => {
                        tracing::warn!(job.id = %c.job_id, error = %e, "live: could not build the changed job's row");
                        None
                    }
                }
            })
            .await
            .clone()
    }

    /// The live stream's clock tick.
    pub fn live_tick(&self) -> LiveEvent {
        LiveEvent::Tick {
            now: self.cluster.now(),
            seq: None,
        }
    }

    /// A stream's first event: the clock, and the count the stream starts from
    /// ([`Subscribed::from`]): every later change comes on the stream, and a page read before
    /// lacks those it was not read with.
    pub fn live_first_tick(&self, from: u64) -> LiveEvent {
        LiveEvent::Tick {
            now: self.cluster.now(),
            seq: Some(from),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn change(job: &str) -> LiveChange {
        LiveChange {
            job_id: job.into(),
            user: String::new(),
            notify: false,
            team: "nlp".into(),
            pool: "hgx-h100".into(),
            state: JobState::Queued,
            at: Utc::now(),
            row: RowCell::default(),
            seq: 0,
        }
    }

    /// A stream from a count the server still keeps every change after is sent them all, in
    /// order; from one a change older (REPLAY + 1 back), none, and it starts from the count
    /// now; so from a count above the one now (another process's).
    #[test]
    fn a_stream_is_sent_again_what_the_server_keeps_and_only_that() {
        let live = LiveTx::new(16);
        for i in 0..REPLAY + 40 {
            live.send(change(&format!("j{i}")));
        }
        let last = live.seq();
        let oldest_kept = last - REPLAY as u64 + 1;

        let s = live.subscribe_since(Some(oldest_kept - 1));
        assert_eq!(s.from, oldest_kept - 1);
        let seqs: Vec<u64> = s.replay.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, (oldest_kept..=last).collect::<Vec<_>>());
        assert_eq!(s.replay.last().unwrap().job_id, format!("j{}", REPLAY + 39));

        let s = live.subscribe_since(Some(last - 3));
        assert_eq!((s.from, s.replay.len()), (last - 3, 3));
        let s = live.subscribe_since(Some(last));
        assert_eq!((s.from, s.replay.len()), (last, 0));

        for since in [Some(oldest_kept - 2), Some(last + 1), Some(0), None] {
            let s = live.subscribe_since(since);
            assert_eq!((s.from, s.replay.len()), (last, 0), "{since:?}");
        }
        // What is sent after subscribing comes on the receiver, once.
        let mut s = live.subscribe_since(Some(last - 1));
        live.send(change("after"));
        assert_eq!(s.rx.try_recv().unwrap().seq, last + 1);
        assert!(s.rx.try_recv().is_err());
        assert_eq!(s.replay.len(), 1);
    }

    /// A stream that fell behind goes on from the oldest change still held, with the count
    /// before it; a page told that count (the rule `app::live::missed` applies) reads
    /// everything once and applies every later change: one read, where a "missed some"
    /// event with no number followed by the next change made two.
    #[tokio::test]
    async fn a_stream_that_fell_behind_makes_its_page_read_once() {
        use app::live::missed;
        let live = LiveTx::new(4);
        let mut rx = live.subscribe();
        live.send(change("seen"));
        let seen = rx.recv().await.unwrap().seq;
        for i in 0..10 {
            live.send(change(&format!("j{i}")));
        }
        assert!(matches!(
            rx.recv().await,
            Err(broadcast::error::RecvError::Lagged(_))
        ));
        let (from, next) = resume_after_lag(&mut rx).await.unwrap();
        let last = live.seq();
        assert_eq!(next.seq, last - 3, "the oldest of the 4 the channel holds");
        assert_eq!(from, next.seq - 1);

        // The page, as `app::live` reads the stream: it holds everything up to `seen`.
        let mut reads = 0;
        let (m, mut known) = missed(seen, from, true);
        reads += m as u32;
        for c in std::iter::once(next).chain(std::iter::from_fn(|| rx.try_recv().ok())) {
            let (m, k) = missed(known, c.seq, false);
            reads += m as u32;
            known = k;
        }
        assert_eq!(
            (reads, known),
            (1, last),
            "one read, and every change after it applied"
        );
        // As before: a "missed" event (no number), then the next change, a gap again.
        assert!(!missed(seen, 0, false).0 && missed(seen, from + 1, false).0);
    }
}
