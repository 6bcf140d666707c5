-- Daily rollups of ended run intervals, per local day of the accounting time zone, so a
-- 90-day report reads thousands of rows instead of a million. Reports stay exact: the
-- pieces a rollup cannot hold (open intervals, intervals not rolled up yet, partial days at
-- the range's edges) are computed from job_interval itself.
ALTER TABLE job_interval ADD COLUMN rolled_up BIGINT NOT NULL DEFAULT 0;
-- 1 once the metrics back end was asked for the interval's utilization (util_mean stays NULL
-- when it had no figure: the interval is then unmeasured, never invented).
ALTER TABLE job_interval ADD COLUMN util_checked BIGINT NOT NULL DEFAULT 0;
CREATE INDEX job_interval_pending ON job_interval (rolled_up, end_ms);

CREATE TABLE usage_daily (
    tz              TEXT NOT NULL,   -- the IANA time zone the day is in
    day             TEXT NOT NULL,   -- YYYY-MM-DD, local
    team_id         TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    pool_id         TEXT NOT NULL,
    template_id     TEXT NOT NULL,
    gpu_ms          DOUBLE PRECISION NOT NULL,  -- allocated GPU-milliseconds
    measured_gpu_ms DOUBLE PRECISION NOT NULL,  -- of which utilization is known
    used_gpu_ms     DOUBLE PRECISION NOT NULL,  -- measured × utilization
    PRIMARY KEY (tz, day, team_id, user_id, pool_id, template_id)
);

-- The longest rolled-up interval per time zone: how far back a range's edge must look.
CREATE TABLE usage_rollup_meta (
    tz         TEXT PRIMARY KEY,
    longest_ms BIGINT NOT NULL
);
