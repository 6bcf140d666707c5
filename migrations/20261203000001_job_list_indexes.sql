-- The Jobs list and the home page read newest first, a page at a time. Indexes in that order
-- (submission time, then id) let both databases stop after the page instead of reading and
-- sorting every job of a team. The active jobs (queued, admitted, running) are a few among
-- many that ended: the home page's list and count read them from an index of their own.
DROP INDEX IF EXISTS job_team_created;
CREATE INDEX IF NOT EXISTS job_team_newest ON job (team_id, created_at, job_id);
CREATE INDEX IF NOT EXISTS job_newest ON job (created_at, job_id);
CREATE INDEX IF NOT EXISTS job_active_newest ON job (team_id, created_at, job_id)
    WHERE state IN ('queued', 'admitted', 'running');
