-- Notifications (issue 15): what each user wants to be told, per event and channel; the
-- in-app list; outgoing webhooks (a user's own, or a team's set by one of its leads) and
-- every delivery, at most one per webhook and job event.
CREATE TABLE notification_pref (
    user_id TEXT NOT NULL REFERENCES app_user (user_id),
    event   TEXT NOT NULL CHECK (event IN ('started', 'succeeded', 'failed', 'preempted', 'idle')),
    in_app  BIGINT NOT NULL CHECK (in_app IN (0, 1)),
    browser BIGINT NOT NULL CHECK (browser IN (0, 1)),
    webhook BIGINT NOT NULL CHECK (webhook IN (0, 1)),
    PRIMARY KEY (user_id, event)
);

CREATE TABLE notification (
    notification_id TEXT PRIMARY KEY, -- UUIDv7
    user_id         TEXT NOT NULL REFERENCES app_user (user_id),
    job_id          TEXT NOT NULL REFERENCES job (job_id),
    event           TEXT NOT NULL,
    event_key       TEXT NOT NULL,    -- the job event it tells of: one notification each
    at              BIGINT NOT NULL,
    message         TEXT NOT NULL,
    browser         BIGINT NOT NULL DEFAULT 0 CHECK (browser IN (0, 1)),
    read_at         BIGINT
);
CREATE UNIQUE INDEX notification_once ON notification (user_id, event_key);
CREATE INDEX notification_user ON notification (user_id, at);

CREATE TABLE webhook (
    webhook_id TEXT PRIMARY KEY,
    user_id    TEXT REFERENCES app_user (user_id), -- a user's own webhook
    team_id    TEXT REFERENCES team (team_id),     -- or a team's, set by a lead
    url        TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('slack', 'generic')),
    secret     TEXT NOT NULL,
    events     TEXT NOT NULL, -- JSON array of events
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    CHECK ((user_id IS NULL) <> (team_id IS NULL))
);

CREATE TABLE webhook_delivery (
    delivery_id  TEXT PRIMARY KEY, -- UUIDv7, sent as X-Gantry-Delivery
    webhook_id   TEXT NOT NULL REFERENCES webhook (webhook_id),
    event_key    TEXT NOT NULL,
    event        TEXT NOT NULL,
    job_id       TEXT NOT NULL,
    payload      TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts     BIGINT NOT NULL DEFAULT 0,
    next_at      BIGINT NOT NULL,
    last_status  BIGINT,
    last_error   TEXT,
    created_at   BIGINT NOT NULL,
    delivered_at BIGINT
);
CREATE UNIQUE INDEX webhook_delivery_once ON webhook_delivery (webhook_id, event_key);
CREATE INDEX webhook_delivery_due ON webhook_delivery (state, next_at);

-- The last job event the notifier has turned into notifications and deliveries.
CREATE TABLE notifier_cursor (
    notifier_cursor_id BIGINT PRIMARY KEY CHECK (notifier_cursor_id = 1),
    last_event_id      TEXT NOT NULL
);
