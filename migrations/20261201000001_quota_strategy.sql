-- The queueing strategy belongs to a ClusterQueue (a team's quota in a pool), as in Kueue.
-- NULL: the pool's default (pool.queueing_strategy, or the sim.strict_fifo_pools setting).
ALTER TABLE quota ADD COLUMN queueing_strategy TEXT
    CHECK (queueing_strategy IN ('BestEffortFIFO', 'StrictFIFO'));
