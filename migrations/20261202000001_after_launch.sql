-- After a launch (issue 15): what a job was cloned or re-run from, why it failed (the first
-- pod that failed, as JSON), and the last part of each node rank's log, kept when the job
-- ends so that it outlives the pods.
ALTER TABLE job ADD COLUMN cloned_from TEXT;
ALTER TABLE job ADD COLUMN failure TEXT; -- JSON: exit code, reason, pod, rank, node
-- When Gantry kept the job's logs (NULL: not yet; the keeper tries again until it has).
ALTER TABLE job ADD COLUMN logs_kept_at BIGINT;
CREATE INDEX job_logs_to_keep ON job (finished_at) WHERE logs_kept_at IS NULL;
CREATE INDEX job_cloned_from ON job (cloned_from);

-- One node rank's last lines: gzip of the lines as JSON, in base64 (TEXT on both databases).
CREATE TABLE job_log (
    job_id     TEXT NOT NULL REFERENCES job (job_id),
    node_rank  BIGINT NOT NULL CHECK (node_rank >= 0),
    line_count BIGINT NOT NULL,
    truncated  BIGINT NOT NULL DEFAULT 0 CHECK (truncated IN (0, 1)),
    body       TEXT NOT NULL,
    PRIMARY KEY (job_id, node_rank)
);
