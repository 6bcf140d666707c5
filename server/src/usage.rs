//! The usage report as the database holds it: daily rollups for whole days, the exact pieces
//! for the rest. The rules of GPU accounting are in [`crate::domain::accounting`], re-exported
//! here.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::db::{Db, DbError};
pub use crate::domain::accounting::*;

/// Rollups plus the exact pieces they cannot hold: the report over `[from, to)` read from
/// the database. Equal to [`report`] over every interval (see the tests).
#[allow(clippy::too_many_arguments)]
pub async fn from_database(
    db: &Db,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    now: DateTime<Utc>,
    group_by: GroupBy,
    bucket: Bucket,
    tz: Tz,
    teams: Option<&[String]>,
) -> Result<Vec<UsageRow>, DbError> {
    let mut acc = Accumulator::default();
    let (first, end) = whole_days(from, to, tz);
    // One snapshot: a rollup batch committing meanwhile is either wholly in the rollups or
    // wholly among the fresh intervals, never both or neither.
    let snap = &mut db.snapshot().await?;
    // Rolled-up intervals: whole days from the daily rollups, the partial days at the
    // edges exactly; with no whole day inside, the whole range exactly.
    let exact: Vec<(DateTime<Utc>, DateTime<Utc>)> = if first < end {
        for (day, key, gpu_ms, measured, used) in db
            .rollup_days(snap, tz.name(), first, end, group_by, teams)
            .await?
        {
            acc.add_day(day, &key, gpu_ms, measured, used, bucket);
        }
        vec![
            (from, local_midnight(first, tz)),
            (local_midnight(end, tz), to),
        ]
    } else {
        vec![(from, to)]
    };
    for (a, b) in exact {
        if a < b {
            let edge = db
                .rolled_up_overlapping(snap, tz.name(), a, b, teams)
                .await?;
            acc.add_intervals(&edge, a, b, now, group_by, bucket, tz);
        }
    }
    // Open intervals and ended ones not rolled up yet, exactly.
    let fresh = db.intervals_not_rolled_up(snap, from, to, teams).await?;
    acc.add_intervals(&fresh, from, to, now, group_by, bucket, tz);
    Ok(acc.rows())
}
