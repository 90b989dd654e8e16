//! The named reranking policies: each is an estimator paired with a scheduler. The pipeline's `[rerank] policy`
//! setting and the budget evaluation both name policies through [`RerankPolicy`], so the list lives here once.

use std::fmt;
use std::sync::Arc;

use ragtune_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::{
    BaselineEstimator, BatchConfig, CalibrationConfig, DynamicEstimator, Estimator, GreedyScheduler, Scheduler,
    UncertaintyConfig, UncertaintyEstimator, UncertaintyScheduler,
};

/// A reranking policy: which estimator values the pool and which scheduler picks the batches.
///
/// Spelled `greedy`, `dynamic` or `uncertainty` in configuration files and on the command line.
///
/// ```
/// use ragtune_rerank::RerankPolicy;
///
/// let policy: RerankPolicy = "uncertainty".parse()?;
/// assert_eq!(policy, RerankPolicy::Uncertainty);
/// assert_eq!(policy.to_string(), "uncertainty");
/// let (estimator, scheduler) = policy.parts(5);
/// assert_eq!((estimator.name(), scheduler.name()), ("uncertainty", "uncertainty"));
/// assert!("random".parse::<RerankPolicy>().is_err());
/// # Ok::<(), ragtune_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RerankPolicy {
    /// The retrieval score as the estimate ([`BaselineEstimator`]), batches in estimate order
    /// ([`GreedyScheduler`]).
    Greedy,
    /// A calibration from retrieval evidence to reranker scores, refitted after every batch
    /// ([`DynamicEstimator`]), batches in estimate order ([`GreedyScheduler`]).
    Dynamic,
    /// The candidates most likely to change the top-k ([`UncertaintyEstimator`]), stopping early when none can
    /// ([`UncertaintyScheduler`]).
    Uncertainty,
}

impl RerankPolicy {
    /// Every policy, in the order they are listed to users.
    pub const ALL: [Self; 3] = [Self::Greedy, Self::Dynamic, Self::Uncertainty];

    /// The policy's name in configuration files and on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Greedy => "greedy",
            Self::Dynamic => "dynamic",
            Self::Uncertainty => "uncertainty",
        }
    }

    /// The estimator and the scheduler of the policy, dispatching batches of `batch_size` documents.
    #[must_use]
    pub fn parts(self, batch_size: usize) -> (Arc<dyn Estimator>, Arc<dyn Scheduler>) {
        let batch = BatchConfig { batch_size, ..BatchConfig::default() };
        match self {
            Self::Greedy => (Arc::new(BaselineEstimator), Arc::new(GreedyScheduler::new(batch))),
            Self::Dynamic => {
                (Arc::new(DynamicEstimator::new(CalibrationConfig::default())), Arc::new(GreedyScheduler::new(batch)))
            }
            Self::Uncertainty => (
                Arc::new(UncertaintyEstimator::new(UncertaintyConfig::default())),
                Arc::new(UncertaintyScheduler::new(batch)),
            ),
        }
    }
}

impl fmt::Display for RerankPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for RerankPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|p| p.name()).collect();
            Error::invalid_input(format!("unknown rerank policy `{s}`; available: {}", names.join(", ")))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_match_the_serde_spelling() {
        for policy in RerankPolicy::ALL {
            assert_eq!(policy.name().parse::<RerankPolicy>().unwrap(), policy);
            assert_eq!(serde_json::to_value(policy).unwrap(), serde_json::json!(policy.name()));
            let back: RerankPolicy = serde_json::from_value(serde_json::json!(policy.name())).unwrap();
            assert_eq!(back, policy);
        }
        let err = "random".parse::<RerankPolicy>().unwrap_err();
        assert_eq!(err.message(), "unknown rerank policy `random`; available: greedy, dynamic, uncertainty");
    }

    #[test]
    fn each_policy_pairs_its_estimator_with_its_scheduler() {
        let names = |p: RerankPolicy| {
            let (e, s) = p.parts(5);
            (e.name().to_owned(), s.name().to_owned())
        };
        assert_eq!(names(RerankPolicy::Greedy), ("baseline".to_owned(), "greedy".to_owned()));
        assert_eq!(names(RerankPolicy::Dynamic), ("dynamic".to_owned(), "greedy".to_owned()));
        assert_eq!(names(RerankPolicy::Uncertainty), ("uncertainty".to_owned(), "uncertainty".to_owned()));
    }
}
