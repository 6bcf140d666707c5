-- A team's borrowing and lending limits in a pool (Kueue's borrowingLimit and lendingLimit
-- for nvidia.com/gpu). NULL means no limit (Kueue's default): borrow any unused quota, lend
-- all of it. These columns were once added by editing the landed init migration; a database
-- that ran that edited text already has them, and Gantry records this migration as applied
-- there instead of running it (db::legacy, before the migrator runs).
ALTER TABLE quota ADD COLUMN borrowing_limit_gpus BIGINT CHECK (borrowing_limit_gpus >= 0);
ALTER TABLE quota ADD COLUMN lending_limit_gpus BIGINT CHECK (lending_limit_gpus >= 0);
