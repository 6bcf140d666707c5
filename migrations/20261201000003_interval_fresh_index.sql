-- The few intervals not rolled up yet (running, or ended moments ago): a partial index, so
-- reports and the recorder find them without touching the million that are. It replaces the
-- first index on (rolled_up, end_ms). Written to run on a database that has either index.
DROP INDEX IF EXISTS job_interval_pending;
CREATE INDEX IF NOT EXISTS job_interval_fresh ON job_interval (start_ms) WHERE rolled_up = 0;
