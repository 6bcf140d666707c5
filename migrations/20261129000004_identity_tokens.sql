-- A person's account at an OpenID provider. (issuer, subject) is what the provider promises
-- never changes; user names and e-mail addresses may.
CREATE TABLE user_identity (
    issuer          TEXT NOT NULL,
    subject         TEXT NOT NULL,
    user_id         TEXT NOT NULL REFERENCES app_user (user_id),
    idp_groups      TEXT NOT NULL, -- JSON array: the groups at the last sign-in
    last_sign_in_at BIGINT NOT NULL,
    PRIMARY KEY (issuer, subject)
);
CREATE UNIQUE INDEX user_identity_user ON user_identity (user_id);

-- Personal API tokens. Only a SHA-256 of the token is kept; the token is shown once.
CREATE TABLE api_token (
    token_id     TEXT PRIMARY KEY,        -- UUIDv7
    user_id      TEXT NOT NULL REFERENCES app_user (user_id),
    name         TEXT NOT NULL,
    token_hash   TEXT NOT NULL UNIQUE,    -- hex SHA-256 of the whole token
    prefix       TEXT NOT NULL,           -- the token's first characters, to recognise it
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    last_used_at BIGINT,
    revoked_at   BIGINT
);
CREATE INDEX api_token_user ON api_token (user_id);
