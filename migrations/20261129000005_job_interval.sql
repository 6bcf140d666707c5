-- GPU accounting: one row per run interval of a job, from admission to the end of that run
-- (preemption, success, failure, cancel). A preempted job that runs again gets a second row.
-- Team, user, pool, template and GPUs are copied from the job so reports read one table.
CREATE TABLE job_interval (
    interval_id TEXT PRIMARY KEY,   -- UUIDv7
    job_id      TEXT NOT NULL REFERENCES job (job_id),
    team_id     TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    pool_id     TEXT NOT NULL,
    template_id TEXT NOT NULL,
    gpus        BIGINT NOT NULL CHECK (gpus > 0),
    start_ms    BIGINT NOT NULL,
    end_ms      BIGINT,             -- NULL while the job holds its GPUs
    util_mean   DOUBLE PRECISION,   -- mean GPU utilization over the interval, 0..1, once known
    CHECK (end_ms IS NULL OR end_ms >= start_ms)
);
CREATE INDEX job_interval_start ON job_interval (start_ms);
CREATE INDEX job_interval_job ON job_interval (job_id, end_ms);

-- Jobs admitted before this migration: their last run, from admission to its end (or still
-- open). Earlier runs of a job preempted before the upgrade are not recovered.
INSERT INTO job_interval (interval_id, job_id, team_id, user_id, pool_id, template_id, gpus, start_ms, end_ms)
SELECT 'backfill-' || job_id, job_id, team_id, user_id, pool_id, template_id, gpus, admitted_at,
       CASE WHEN state IN ('admitted', 'running') THEN NULL ELSE finished_at END
FROM job
WHERE admitted_at IS NOT NULL
  AND (state IN ('admitted', 'running') OR (finished_at IS NOT NULL AND finished_at >= admitted_at));
