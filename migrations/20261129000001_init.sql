-- Gantry's first schema. Written once for both SQLite (the embedded default) and Postgres
-- (production): only types both understand, BIGINT for integers and flags, times as
-- milliseconds since the Unix epoch (UTC), JSON documents as TEXT.

-- A team shares the GPU pools under a quota; its name is its key ('nlp').
CREATE TABLE team (
    team_id      TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);

-- A person. `app_user` because `user` is reserved in Postgres. Admin is a flag, not a team role.
CREATE TABLE app_user (
    user_id      TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    email        TEXT,
    is_admin     BIGINT NOT NULL DEFAULT 0 CHECK (is_admin IN (0, 1)),
    created_at   BIGINT NOT NULL
);

-- Role per team: a lead also sees the team's usage and may cancel its jobs.
CREATE TABLE membership (
    user_id TEXT NOT NULL REFERENCES app_user (user_id),
    team_id TEXT NOT NULL REFERENCES team (team_id),
    role    TEXT NOT NULL CHECK (role IN ('member', 'lead')),
    PRIMARY KEY (user_id, team_id)
);

-- A pool of identical HGX nodes (a Kueue ResourceFlavor).
CREATE TABLE pool (
    pool_id           TEXT PRIMARY KEY,
    gpu_model         TEXT NOT NULL,
    node_count        BIGINT NOT NULL CHECK (node_count > 0),
    gpus_per_node     BIGINT NOT NULL CHECK (gpus_per_node > 0),
    queueing_strategy TEXT NOT NULL DEFAULT 'BestEffortFIFO'
                      CHECK (queueing_strategy IN ('BestEffortFIFO', 'StrictFIFO')),
    created_at        BIGINT NOT NULL
);

-- A team's share of a pool (a Kueue ClusterQueue's nominal quota for nvidia.com/gpu).
CREATE TABLE quota (
    team_id      TEXT NOT NULL REFERENCES team (team_id),
    pool_id      TEXT NOT NULL REFERENCES pool (pool_id),
    nominal_gpus BIGINT NOT NULL CHECK (nominal_gpus >= 0),
    updated_at   BIGINT NOT NULL,
    PRIMARY KEY (team_id, pool_id)
);

-- A model template; what it launches lives in its immutable versions.
CREATE TABLE template (
    template_id  TEXT PRIMARY KEY,
    display_name TEXT NOT NULL,
    family       TEXT NOT NULL,
    model_size   TEXT NOT NULL,
    method       TEXT NOT NULL,
    description  TEXT NOT NULL,
    default_pool TEXT NOT NULL REFERENCES pool (pool_id),
    deprecated   BIGINT NOT NULL DEFAULT 0 CHECK (deprecated IN (0, 1)),
    created_at   BIGINT NOT NULL
);

-- Never updated once written: a job always points at the exact version it ran.
CREATE TABLE template_version (
    template_id           TEXT NOT NULL REFERENCES template (template_id),
    version               BIGINT NOT NULL CHECK (version >= 1),
    image                 TEXT NOT NULL,
    command               TEXT NOT NULL, -- JSON array of strings
    params                TEXT NOT NULL, -- JSON array of parameter specs
    allowed_gpus          TEXT NOT NULL, -- JSON array of GPU counts
    default_gpus          BIGINT NOT NULL,
    default_max_runtime_s BIGINT NOT NULL,
    created_at            BIGINT NOT NULL,
    PRIMARY KEY (template_id, version)
);

-- A launch. Written before the cluster sees it (sent_at stays NULL until it has).
CREATE TABLE job (
    job_id           TEXT PRIMARY KEY,
    name             TEXT NOT NULL,
    template_id      TEXT NOT NULL,
    template_version BIGINT NOT NULL,
    team_id          TEXT NOT NULL REFERENCES team (team_id),
    user_id          TEXT NOT NULL REFERENCES app_user (user_id),
    pool_id          TEXT NOT NULL REFERENCES pool (pool_id),
    gpus             BIGINT NOT NULL CHECK (gpus > 0),
    priority         TEXT NOT NULL CHECK (priority IN ('low', 'normal', 'high')),
    state            TEXT NOT NULL
                     CHECK (state IN ('queued', 'admitted', 'running', 'succeeded', 'failed', 'cancelled')),
    params           TEXT NOT NULL, -- JSON object, checked against the template version
    max_runtime_s    BIGINT NOT NULL CHECK (max_runtime_s > 0),
    node_names       TEXT NOT NULL DEFAULT '[]', -- JSON array while the job holds nodes
    idempotency_key  TEXT,
    request_body     TEXT, -- the launch as first sent, to refuse a key reused for another launch
    created_at       BIGINT NOT NULL,
    admitted_at      BIGINT,
    finished_at      BIGINT,
    sent_at          BIGINT,
    FOREIGN KEY (template_id, template_version) REFERENCES template_version (template_id, version)
);

-- A repeated launch with the same key returns the first job; NULL keys never collide.
CREATE UNIQUE INDEX job_idempotency ON job (user_id, idempotency_key);
CREATE INDEX job_team_created ON job (team_id, created_at);
CREATE INDEX job_state ON job (state);

-- Every state change of a job, with its time (cluster clock) and reason.
CREATE TABLE job_event (
    job_event_id TEXT PRIMARY KEY, -- UUIDv7: sorts in the order written
    job_id       TEXT NOT NULL REFERENCES job (job_id),
    at           BIGINT NOT NULL,
    kind         TEXT NOT NULL,
    reason       TEXT NOT NULL
);
CREATE INDEX job_event_job ON job_event (job_id, at);

-- The sim cluster's clock, so a restart resumes where it stopped.
CREATE TABLE sim_clock (
    sim_clock_id BIGINT PRIMARY KEY CHECK (sim_clock_id = 1),
    now_ms       BIGINT NOT NULL
);
