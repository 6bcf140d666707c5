//! A job's logs as Gantry asks for them: which job's pods (the source), which ranks, how many
//! lines and from when (the query), and the bounds of what Gantry keeps after a job ends.

use app::model::domain::{nodes_for, JobState, LogLine};
use chrono::{DateTime, Utc};

/// What a back end needs to find a job's pods (kube) or to write their log (sim).
#[derive(Clone, Debug, PartialEq)]
pub struct LogSource {
    pub job_id: String,
    pub team: String,
    pub gpus: u32,
    pub template: String,
    pub params: Vec<(String, serde_json::Value)>,
    pub max_runtime_s: u64,
    /// When the last run's pods were created: its admission. `None`: it never ran.
    pub started_at: Option<DateTime<Utc>>,
    /// When and how it ended; `None` while it is active.
    pub ended: Option<(DateTime<Utc>, JobState)>,
    /// Where it ran, one node per node rank.
    pub nodes: Vec<String>,
}

impl LogSource {
    /// How many pods (node ranks) the job has.
    pub fn ranks(&self) -> u32 {
        nodes_for(self.gpus).max(1)
    }
}

/// Which ranks to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ranks {
    One(u32),
    /// Every rank, interleaved by time.
    All,
}

impl Ranks {
    pub fn includes(self, rank: u32) -> bool {
        match self {
            Ranks::One(r) => r == rank,
            Ranks::All => true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogQuery {
    pub ranks: Ranks,
    /// The last this many lines (of the selection, after `since`).
    pub tail: Option<usize>,
    /// Only lines stamped after this time.
    pub since: Option<DateTime<Utc>>,
}

/// The most lines one read returns; a longer log is read with `since`, or downloaded whole.
pub const MAX_LINES_PER_READ: usize = 50_000;

/// What Gantry keeps of each rank's log when a job ends (compressed in its database): the
/// last `KEEP_LINES_PER_RANK` lines, at most `KEEP_BYTES_PER_RANK` bytes of them, for at most
/// `KEEP_RANKS` ranks (the failing rank always among them).
pub const KEEP_LINES_PER_RANK: usize = 2_000;
pub const KEEP_BYTES_PER_RANK: usize = 256 * 1024;
pub const KEEP_RANKS: u32 = 32;

/// Applies `since` and `tail` to lines already in time order.
pub fn select(lines: Vec<LogLine>, q: &LogQuery) -> Vec<LogLine> {
    let mut lines: Vec<LogLine> = lines
        .into_iter()
        .filter(|l| q.ranks.includes(l.rank) && q.since.is_none_or(|s| l.at > s))
        .collect();
    let tail = q.tail.unwrap_or(MAX_LINES_PER_READ).min(MAX_LINES_PER_READ);
    if lines.len() > tail {
        lines.drain(..lines.len() - tail);
    }
    lines
}

/// Interleaves per-rank lines by time (stable: a rank's own order is kept, lower ranks first
/// on a tie).
pub fn interleave(mut per_rank: Vec<Vec<LogLine>>) -> Vec<LogLine> {
    per_rank.sort_by_key(|v| v.first().map(|l| l.rank));
    let mut all: Vec<LogLine> = per_rank.into_iter().flatten().collect();
    all.sort_by_key(|l| (l.at, l.rank));
    all
}

/// The last lines of one rank as kept after the job ends: at most `KEEP_LINES_PER_RANK`
/// lines and `KEEP_BYTES_PER_RANK` bytes of text. Returns the lines and whether any were cut.
pub fn keep_tail(mut lines: Vec<LogLine>) -> (Vec<LogLine>, bool) {
    let mut cut = false;
    if lines.len() > KEEP_LINES_PER_RANK {
        lines.drain(..lines.len() - KEEP_LINES_PER_RANK);
        cut = true;
    }
    let mut bytes = 0usize;
    let mut keep_from = lines.len();
    for (i, l) in lines.iter().enumerate().rev() {
        bytes += l.text.len() + 32;
        if bytes > KEEP_BYTES_PER_RANK {
            break;
        }
        keep_from = i;
    }
    if keep_from > 0 {
        lines.drain(..keep_from);
        cut = true;
    }
    (lines, cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn line(rank: u32, s: i64, text: &str) -> LogLine {
        LogLine {
            rank,
            at: Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap(),
            text: text.into(),
        }
    }

    #[test]
    fn select_keeps_the_rank_the_time_and_the_tail() {
        let all = interleave(vec![
            vec![line(1, 1, "b1"), line(1, 3, "b3")],
            vec![line(0, 1, "a1"), line(0, 2, "a2"), line(0, 4, "a4")],
        ]);
        let texts = |v: Vec<LogLine>| v.into_iter().map(|l| l.text).collect::<Vec<_>>();
        assert_eq!(texts(all.clone()), ["a1", "b1", "a2", "b3", "a4"]);
        let q = |ranks, tail, since: Option<i64>| LogQuery {
            ranks,
            tail,
            since: since.map(|s| Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()),
        };
        assert_eq!(
            texts(select(all.clone(), &q(Ranks::One(0), None, None))),
            ["a1", "a2", "a4"]
        );
        assert_eq!(
            texts(select(all.clone(), &q(Ranks::All, Some(2), None))),
            ["b3", "a4"]
        );
        assert_eq!(
            texts(select(all.clone(), &q(Ranks::One(1), None, Some(1)))),
            ["b3"]
        );
        assert_eq!(texts(select(all, &q(Ranks::All, Some(0), None))).len(), 0);
    }

    #[test]
    fn kept_tails_are_bounded_in_lines_and_bytes() {
        let many: Vec<LogLine> = (0..5_000).map(|i| line(0, i, "short")).collect();
        let (kept, cut) = keep_tail(many);
        assert!(cut);
        assert_eq!(kept.len(), KEEP_LINES_PER_RANK);
        assert_eq!(kept.last().unwrap().at, line(0, 4_999, "").at);
        let wide = "x".repeat(1_000);
        let big: Vec<LogLine> = (0..1_000).map(|i| line(0, i, &wide)).collect();
        let (kept, cut) = keep_tail(big);
        assert!(cut);
        let bytes: usize = kept.iter().map(|l| l.text.len() + 32).sum();
        assert!(bytes <= KEEP_BYTES_PER_RANK, "{bytes}");
        assert!(kept.len() > 200, "{}", kept.len());
        let (kept, cut) = keep_tail(vec![line(0, 0, "one")]);
        assert!(!cut);
        assert_eq!(kept.len(), 1);
    }
}
