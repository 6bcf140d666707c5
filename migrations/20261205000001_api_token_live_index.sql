-- The admins' list of everyone's live API tokens pages by user, newest first within each,
-- and counts them in the same statement. Revoked tokens are kept (the audit trail names
-- them) and were scanned by both; a partial index of the unrevoked ones, in the list's
-- order, holds only what the list can show.
CREATE INDEX IF NOT EXISTS api_token_live ON api_token (user_id, created_at DESC, token_id DESC) WHERE revoked_at IS NULL;
