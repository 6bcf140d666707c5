-- Optimistic concurrency for quota edits: every change bumps the version (the API's ETag).
ALTER TABLE quota ADD COLUMN version BIGINT NOT NULL DEFAULT 1;

-- Who changed what, append-only: no route updates or deletes a row.
CREATE TABLE audit (
    audit_id TEXT PRIMARY KEY,   -- UUIDv7: time-ordered
    at       BIGINT NOT NULL,
    actor    TEXT NOT NULL,
    action   TEXT NOT NULL,      -- e.g. quota.set, auth.sign_in
    target   TEXT NOT NULL,      -- e.g. nlp/hgx-h100
    before   TEXT,               -- JSON, NULL when there was nothing before
    after    TEXT,               -- JSON
    address  TEXT                -- the client's address, when known
);
CREATE INDEX audit_at ON audit (at);
