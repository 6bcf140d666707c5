//! Pools and quotas as Kueue has them: a pool of identical nodes (a ResourceFlavor), a team's
//! quota in it (a ClusterQueue's nominal quota, borrowing and lending limits) and the order its
//! queue is taken in.

/// A pool of identical HGX nodes (a Kueue ResourceFlavor).
#[derive(Clone, Debug)]
pub struct PoolSpec {
    pub name: String,
    pub gpu_model: String,
    pub nodes: u32,
    pub strategy: QueueingStrategy,
}

/// A team's ClusterQueue quota in a pool, in GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaSpec {
    pub nominal: u32,
    /// `None`: may borrow any unused quota of the cohort.
    pub borrowing_limit: Option<u32>,
    /// `None`: lends all of its unused nominal quota.
    pub lending_limit: Option<u32>,
    /// The ClusterQueue's queueing strategy; `None`: the pool's default.
    pub strategy: Option<QueueingStrategy>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueingStrategy {
    #[default]
    BestEffortFifo,
    StrictFifo,
}

impl QueueingStrategy {
    /// Kueue's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueingStrategy::BestEffortFifo => "BestEffortFIFO",
            QueueingStrategy::StrictFifo => "StrictFIFO",
        }
    }

    pub fn parse(s: &str) -> Option<QueueingStrategy> {
        match s {
            "BestEffortFIFO" => Some(QueueingStrategy::BestEffortFifo),
            "StrictFIFO" => Some(QueueingStrategy::StrictFifo),
            _ => None,
        }
    }
}
