//! Corrective-RAG relevance evaluators: judge whether retrieved candidates can answer a query, so that a pipeline
//! answers from them (CORRECT), expands and re-retrieves (AMBIGUOUS) or searches elsewhere (INCORRECT).
//!
//! Three evaluators implement [`RelevanceEvaluator`](ragtune_core::RelevanceEvaluator):
//!
//! - [`HeuristicEvaluator`]: free and model-less; keyword overlap, semantic coherence of the retrieval
//!   similarities, length adequacy and source diversity, weighted into one score with RELEVANT / PARTIAL /
//!   IRRELEVANT bands.
//! - [`ModelEvaluator`]: CRAG's retrieval evaluator with any [`Reranker`](ragtune_core::Reranker) as the relevance
//!   model (a cross-encoder, an LLM judge, or the free [`RetrievalScoreScorer`] and [`DenseSimilarityScorer`]),
//!   with an upper and a lower threshold that [`calibrate`] fits on labelled training queries.
//! - [`LearnedEvaluator`]: a logistic regression or gradient-boosted stumps of "retrieval succeeded" over
//!   [`features`] the retrieval already computed (BM25 and dense scores, their agreement, the heuristic criteria,
//!   the query's length, query-performance predictors), fitted by [`fit_learned`] on a training split, free at query
//!   time, explaining which features pushed each decision.
//!
//! ```
//! use ragtune_evaluators::crag::{CalibrationSample, ScoreScale, calibrate, detection_stats};
//!
//! // An LLM judge answers 0 to 10; the evaluator reads that as 0 to 1.
//! let judge = ScoreScale::Range { min: 0.0, max: 10.0 };
//! assert_eq!(judge.normalize(8.0), 0.8);
//! assert_eq!(judge.normalize(12.0), 1.0);
//!
//! // Fit the thresholds on queries whose retrieval is known to have failed or succeeded.
//! let labelled = [(0.05, false), (0.15, false), (0.4, true), (0.55, true), (0.6, false), (0.8, true), (0.9, true)];
//! let samples: Vec<CalibrationSample> =
//!     labelled.into_iter().map(|(score, succeeded)| CalibrationSample { score, succeeded }).collect();
//! let fit = calibrate(&samples, 0.9)?;
//! assert_eq!((fit.lower, fit.upper), (0.15, 0.8));
//! assert_eq!(detection_stats(&samples, fit.lower), (1.0, 2.0 / 3.0, 0.8));
//! # Ok::<(), ragtune_core::Error>(())
//! ```

mod calibrate;
mod heuristic;
mod learned;
mod model;
mod scorers;
mod stumps;

pub use calibrate::{
    Calibration, CalibrationSample, IncorrectFloor, calibrate, calibrate_with_floor, detection_stats, failure_auc,
    fit_logit_map,
};
pub use heuristic::{CriteriaWeights, HeuristicConfig, HeuristicEvaluator, heuristic_category};
pub use learned::{
    Contribution, FEATURE_DEPTH, FEATURE_NAMES, FIRST_VERSION_FEATURES, Features, FitOptions, FitSummary,
    LearnedEvaluator, LearnedFit, LearnedModel, LearnedSample, ModelKind, OperatingPoint, Stump, StumpGrid, features,
    fit_learned,
};
pub use model::{Aggregate, ModelConfig, ModelEvaluator, RAW_AGGREGATE, ScoreScale};
pub use scorers::{DenseSimilarityScorer, RetrievalScoreScorer};

/// Checks a pair of thresholds of the evaluator `who`: both within `[0, 1]` and `lower < upper`, each named as
/// its setting is (`("lower", x)`, `("partial_threshold", y)`).
fn check_thresholds(
    who: &str,
    (lower_name, lower): (&str, f32),
    (upper_name, upper): (&str, f32),
) -> ragtune_core::Result<()> {
    for (name, value) in [(lower_name, lower), (upper_name, upper)] {
        if !(0.0..=1.0).contains(&value) {
            return Err(ragtune_core::Error::invalid_input(format!(
                "{who}: {name} must be within [0, 1], got {value}"
            )));
        }
    }
    if lower >= upper {
        return Err(ragtune_core::Error::invalid_input(format!(
            "{who}: {lower_name} ({lower}) must be below {upper_name} ({upper})"
        )));
    }
    Ok(())
}

/// A candidate for tests: chunk `id` of document `doc` with `text`, its own `score` and `sources` as
/// (strategy, score) pairs ranked in the given order.
#[cfg(test)]
fn test_candidate(id: &str, doc: &str, text: &str, score: f32, sources: &[(&str, f32)]) -> ragtune_core::Candidate {
    ragtune_core::Candidate {
        chunk: ragtune_core::Chunk::new(id, doc, text),
        score,
        sources: sources
            .iter()
            .enumerate()
            .map(|(i, (name, s))| {
                ((*name).to_owned(), ragtune_core::SourceScore { score: *s, rank: u32::try_from(i + 1).unwrap_or(0) })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ragtune_core::RelevanceEvaluator;

    use super::*;

    /// Checks that an evaluator can be shared across threads behind the seam.
    fn check(evaluator: Arc<dyn RelevanceEvaluator>, name: &str) {
        fn send_sync<T: Send + Sync + ?Sized>(_: &T) {}
        send_sync(&evaluator);
        assert_eq!(evaluator.name(), name);
    }

    #[test]
    fn evaluators_are_seams() {
        check(Arc::new(HeuristicEvaluator::new(HeuristicConfig::default()).unwrap()), "heuristic");
        let scorer = Arc::new(RetrievalScoreScorer::new("dense"));
        check(
            Arc::new(ModelEvaluator::new(scorer, ScoreScale::Unit, ModelConfig::default()).unwrap()),
            "model:retrieval:dense",
        );
    }
}
