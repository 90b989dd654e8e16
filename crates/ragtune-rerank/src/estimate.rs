//! Estimators: value every candidate of the pool from the evidence so far. They never schedule and never spend.

use std::fmt::Debug;

use crate::calibrate::{CalibrationConfig, Fit, normal_tail};
use crate::pool::{CandidatePool, Estimate, ItemState, Valuation};

/// What an estimator knows about the request besides the pool.
#[derive(Debug, Clone, Copy)]
pub struct EstimateInput<'a> {
    /// The query being reranked for.
    pub query: &'a str,
    /// How many top results matter (the `k` of top-k).
    pub k: usize,
    /// The controller's iteration, from 0.
    pub iteration: usize,
}

/// Values the pool: one [`Estimate`] per candidate, written into the pool by the controller before scheduling.
///
/// An estimator answers "what is each candidate worth right now?": a priority for scheduling and, when it can,
/// a prediction of the reranker score with an upper bound. It reads the pool, never changes it, never spends
/// budget and never decides what runs next; that is the [`Scheduler`](crate::Scheduler)'s job.
///
/// Implementations must be deterministic: the same pool gives the same valuation.
pub trait Estimator: Send + Sync + Debug {
    /// The name recorded in reports and traces.
    fn name(&self) -> &str;
    /// Values the candidates (`CANDIDATE` items) of `pool`.
    fn value(&self, pool: &CandidatePool, input: &EstimateInput<'_>) -> Valuation;
}

/// Priority is the retrieval score; no score prediction. Cheap and stable: scheduling follows retrieval order.
#[derive(Debug, Clone, Copy, Default)]
pub struct BaselineEstimator;

impl Estimator for BaselineEstimator {
    fn name(&self) -> &str {
        "baseline"
    }

    fn value(&self, pool: &CandidatePool, _input: &EstimateInput<'_>) -> Valuation {
        Valuation { scale: None, estimates: baseline(pool), notes: Default::default() }
    }
}

fn baseline(pool: &CandidatePool) -> Vec<(String, Estimate)> {
    pool.eligible().map(|it| (it.id().to_owned(), Estimate::priority(it.retrieval_score()))).collect()
}

/// Re-estimates the remaining candidates after every batch from what the reranker said about the reranked ones.
///
/// After every batch it refits a calibration from retrieval evidence (retrieval score, initial rank, and each
/// fused strategy's rank) to the reranker score on the scale with the most evidence (see
/// [`CalibrationConfig`]), then predicts every candidate's reranker score with a standard error. Priority is the
/// prediction: the candidates most likely to score high go first, which differs from retrieval order when, say,
/// the dense strategy predicts the reranker better than BM25. Until [`CalibrationConfig::min_evidence`] items are reranked it behaves like
/// [`BaselineEstimator`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DynamicEstimator {
    /// Calibration settings.
    pub config: CalibrationConfig,
}

impl DynamicEstimator {
    /// An estimator with `config`.
    #[must_use]
    pub fn new(config: CalibrationConfig) -> Self {
        Self { config }
    }
}

impl Estimator for DynamicEstimator {
    fn name(&self) -> &str {
        "dynamic"
    }

    fn value(&self, pool: &CandidatePool, _input: &EstimateInput<'_>) -> Valuation {
        let Some(fit) = Fit::from_pool(pool, &self.config) else {
            return Valuation { scale: None, estimates: baseline(pool), notes: Default::default() };
        };
        let mut row = Vec::with_capacity(fit.space.dim());
        let estimates = pool
            .eligible()
            .map(|it| {
                let (m, se) = fit.predict(it, &mut row);
                let upper = m + self.config.z * se;
                (it.id().to_owned(), Estimate { priority: m as f32, score: Some(m as f32), upper: Some(upper as f32) })
            })
            .collect();
        Valuation { scale: Some(fit.scale.clone()), estimates, notes: notes(&fit) }
    }
}

fn notes(fit: &Fit) -> std::collections::BTreeMap<String, serde_json::Value> {
    let mut notes = std::collections::BTreeMap::new();
    notes.insert("evidence".into(), fit.evidence.into());
    notes.insert("sigma".into(), ((fit.sigma() * 1e4).round() / 1e4).into());
    notes
}

/// Settings of the [`UncertaintyEstimator`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UncertaintyConfig {
    /// The calibration that predicts scores and their standard errors.
    pub calibration: CalibrationConfig,
    /// How much disagreement between the retrieval strategies widens an item's uncertainty: the standard error
    /// is multiplied by `1 + weight * disagreement` (disagreement in `[0, 1]`).
    pub disagreement_weight: f64,
}

impl Default for UncertaintyConfig {
    fn default() -> Self {
        Self { calibration: CalibrationConfig::default(), disagreement_weight: 1.0 }
    }
}

/// Prefers the candidates whose reranking is most likely to change the top-k.
///
/// With the calibration of [`DynamicEstimator`], each candidate gets a predicted score `m` and a standard error
/// `se`, widened where the fused strategies disagree about it (one ranked it 2nd, another missed it). The
/// top-k boundary `b` is the k-th highest score on the scale among reranked items and predictions. Priority is
/// the probability that the true score lies on the other side of the boundary, `P(Z > |m - b| / se)`: small
/// margins and high disagreement first, items far above or below the boundary last. While fewer than `k` items
/// are on the scale everything is in the top-k and the priority is the prediction. Before there is evidence it
/// behaves like [`BaselineEstimator`].
#[derive(Debug, Clone, Copy, Default)]
pub struct UncertaintyEstimator {
    /// Settings.
    pub config: UncertaintyConfig,
}

impl UncertaintyEstimator {
    /// An estimator with `config`.
    #[must_use]
    pub fn new(config: UncertaintyConfig) -> Self {
        Self { config }
    }
}

impl Estimator for UncertaintyEstimator {
    fn name(&self) -> &str {
        "uncertainty"
    }

    fn value(&self, pool: &CandidatePool, input: &EstimateInput<'_>) -> Valuation {
        let Some(fit) = Fit::from_pool(pool, &self.config.calibration) else {
            return Valuation { scale: None, estimates: baseline(pool), notes: Default::default() };
        };
        let mut row = Vec::with_capacity(fit.space.dim());
        let predicted: Vec<(&str, f64, f64)> = pool
            .eligible()
            .map(|it| {
                let (m, se) = fit.predict(it, &mut row);
                let widen = 1.0 + self.config.disagreement_weight.max(0.0) * fit.space.disagreement(it);
                (it.id(), m, se * widen)
            })
            .collect();
        let mut on_scale: Vec<f64> = pool
            .in_state(ItemState::Reranked)
            .filter(|it| it.reranker_strategy() == Some(fit.scale.as_str()))
            .filter_map(|it| it.reranker_score().map(f64::from))
            .chain(predicted.iter().map(|p| p.1))
            .collect();
        let k = input.k.max(1);
        let boundary = (on_scale.len() >= k).then(|| {
            on_scale.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
            on_scale[k - 1]
        });
        let z = self.config.calibration.z;
        let estimates = predicted
            .into_iter()
            .map(|(id, m, se)| {
                let priority = match boundary {
                    Some(b) => normal_tail((m - b).abs() / se.max(1e-12)),
                    None => m,
                };
                let e = Estimate { priority: priority as f32, score: Some(m as f32), upper: Some((m + z * se) as f32) };
                (id.to_owned(), e)
            })
            .collect();
        let mut notes = notes(&fit);
        if let Some(b) = boundary {
            notes.insert("boundary".into(), ((b * 1e4).round() / 1e4).into());
        }
        Valuation { scale: Some(fit.scale.clone()), estimates, notes }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::pool::render_ranking;
    use ragtune_core::{Candidate, Chunk, SourceScore};

    /// A pool of `(id, bm25 rank, dense rank)` items (0 = not found by that strategy), ordered by fused score;
    /// `reranked` items get the given scores on the `ce` scale.
    fn pool(items: &[(&str, u32, u32)], reranked: &[(&str, f32)]) -> CandidatePool {
        let candidates = items
            .iter()
            .enumerate()
            .map(|(i, &(id, bm25, dense))| {
                let mut sources = BTreeMap::new();
                for (name, rank) in [("bm25", bm25), ("dense", dense)] {
                    if rank > 0 {
                        sources.insert(name.to_owned(), SourceScore { score: 1.0 / rank as f32, rank });
                    }
                }
                Candidate { chunk: Chunk::new(id, id, id), score: 1.0 - i as f32 * 0.05, sources }
            })
            .collect();
        let mut p = CandidatePool::new(candidates).unwrap();
        let ids: Vec<&str> = reranked.iter().map(|r| r.0).collect();
        p.transition(&ids, ItemState::InFlight).unwrap();
        p.update_scores("ce", reranked).unwrap();
        p
    }

    /// Runs `estimator` on the pool and renders the candidates by priority with their predicted scores.
    fn check(estimator: &dyn Estimator, pool: &mut CandidatePool, k: usize, expect: &str) {
        let v = estimator.value(pool, &EstimateInput { query: "q", k, iteration: 0 });
        pool.apply_valuation(&v).unwrap();
        let by_priority = pool.by_priority();
        let got = render_ranking(by_priority.iter().copied());
        assert_eq!(got.trim_end(), expect.trim(), "{}", estimator.name());
    }

    #[test]
    fn baseline_follows_retrieval() {
        let mut p = pool(&[("a", 1, 0), ("b", 2, 0), ("c", 3, 0)], &[]);
        check(
            &BaselineEstimator,
            &mut p,
            2,
            "1. a  1.0000  (retrieval)\n2. b  0.9500  (retrieval)\n3. c  0.9000  (retrieval)",
        );
    }

    #[test]
    fn dynamic_learns_that_dense_predicts_the_reranker() {
        // BM25 ranks a, b, c... in order; the reranker scores 10 / (dense rank), which BM25 does not predict.
        let items =
            [("a", 1, 6), ("b", 2, 1), ("c", 3, 5), ("d", 4, 2), ("e", 5, 7), ("f", 6, 3), ("g", 7, 8), ("h", 8, 4)];
        let mut p = pool(&items, &[("a", 10.0 / 6.0), ("b", 10.0), ("c", 2.0), ("d", 5.0)]);
        check(
            &DynamicEstimator::default(),
            &mut p,
            2,
            "1. f  3.3671  (estimate)\n2. h  2.5549  (estimate)\n3. e  1.5107  (estimate)\n4. g  1.3366  (estimate)",
        );
        // Without evidence on enough items it is the baseline.
        let mut few = pool(&items, &[("a", 0.0), ("b", 1.0)]);
        check(
            &DynamicEstimator::default(),
            &mut few,
            2,
            "1. c  0.9000  (retrieval)\n2. d  0.8500  (retrieval)\n3. e  0.8000  (retrieval)\n4. f  0.7500  (retrieval)\n\
             5. g  0.7000  (retrieval)\n6. h  0.6500  (retrieval)",
        );
    }

    #[test]
    fn uncertainty_prefers_items_near_the_boundary() {
        let items: Vec<(String, u32, u32)> = (0..10).map(|i| (format!("d{i}"), i + 1, i + 1)).collect();
        let refs: Vec<(&str, u32, u32)> = items.iter().map(|(id, a, b)| (id.as_str(), *a, *b)).collect();
        let mut p = pool(&refs, &[("d0", 9.0), ("d1", 8.0), ("d2", 7.0), ("d3", 6.0)]);
        // With k = 5 the boundary is the 5th highest score: d4's prediction. d4 and d5 straddle it; d9 is far below.
        let v = UncertaintyEstimator::default().value(&p, &EstimateInput { query: "q", k: 5, iteration: 0 });
        p.apply_valuation(&v).unwrap();
        let order: Vec<&str> = p.by_priority().iter().map(|it| it.id()).collect();
        assert_eq!(order, ["d4", "d5", "d6", "d7", "d8", "d9"]);
        assert!(v.notes.contains_key("boundary"));
    }

    #[test]
    fn disagreement_raises_uncertainty() {
        // x and y get the same prediction inputs except that the strategies disagree about y.
        let mut p = pool(
            &[("a", 1, 1), ("b", 2, 2), ("c", 3, 3), ("x", 4, 4), ("y", 9, 1), ("z", 6, 6)],
            &[("a", 3.0), ("b", 2.0), ("c", 1.0)],
        );
        let v = UncertaintyEstimator::default().value(&p, &EstimateInput { query: "q", k: 1, iteration: 0 });
        p.apply_valuation(&v).unwrap();
        let x = p.get("x").unwrap().estimate().unwrap();
        let y = p.get("y").unwrap().estimate().unwrap();
        assert!(y.upper - y.score > x.upper - x.score, "x: {x:?}, y: {y:?}");
    }
}
