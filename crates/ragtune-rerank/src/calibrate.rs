//! Online calibration from retrieval evidence to reranker scores, refitted after every batch, with prediction
//! intervals.
//!
//! With three or four reranked items a multivariate regression overfits and extrapolates wildly, so the fit is
//! an ensemble of one-feature least-squares lines, weighted by how well each predicts held-out evidence
//! (leave-one-out error): "which retrieval signal predicts the reranker?". The features of an item are its
//! retrieval score, the reciprocal of its initial rank and, when the pool was fused from several strategies, each
//! strategy's reciprocal rank (0 when it missed the item). Lines are monotone (a falling fit is replaced by the
//! mean). A strategy that agrees with the reranker dominates the prediction; one that does not fades out. The standard error combines the lines' held-out errors and
//! leverages, floored at a fraction of the observed score range; predictions are clamped to the observed range
//! widened by one range on each side.

use std::collections::BTreeSet;

use crate::pool::{CandidatePool, ItemState, PoolItem};

/// Settings of the calibration shared by [`DynamicEstimator`](crate::DynamicEstimator) and
/// [`UncertaintyEstimator`](crate::UncertaintyEstimator).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalibrationConfig {
    /// Reranked items needed on one scale before any prediction is made (at least 3, the fewest for a
    /// held-out error of a line).
    pub min_evidence: usize,
    /// The standard error never falls below this fraction of the observed reranker score range, so a perfect
    /// fit on few points does not claim certainty it cannot have.
    pub sigma_floor: f64,
    /// Upper bounds are `prediction + z * standard error` (1.64: one-sided 95% under a normal error).
    pub z: f64,
}

impl Default for CalibrationConfig {
    fn default() -> Self {
        Self { min_evidence: 3, sigma_floor: 0.05, z: 1.64 }
    }
}

/// The most source strategies used as features (more would outgrow the evidence of one request).
const MAX_SOURCES: usize = 4;

/// How items map to feature rows in one pool.
#[derive(Debug)]
pub(crate) struct FeatureSpace {
    strategies: Vec<String>,
    pool_len: usize,
}

impl FeatureSpace {
    pub(crate) fn new(pool: &CandidatePool) -> Self {
        let items = pool.items();
        let all: BTreeSet<&str> = items.iter().flat_map(|it| it.sources().keys().map(String::as_str)).collect();
        // One strategy's rank is the initial rank again; only a fusion of several adds information.
        let strategies: Vec<String> =
            if all.len() >= 2 { all.into_iter().take(MAX_SOURCES).map(str::to_owned).collect() } else { Vec::new() };
        Self { strategies, pool_len: items.len() }
    }

    pub(crate) fn dim(&self) -> usize {
        2 + self.strategies.len()
    }

    pub(crate) fn row(&self, item: &PoolItem, out: &mut Vec<f64>) {
        out.clear();
        out.push(f64::from(item.retrieval_score()));
        out.push(1.0 / f64::from(item.initial_rank().max(1)));
        for s in &self.strategies {
            out.push(item.sources().get(s).map_or(0.0, |x| 1.0 / f64::from(x.rank.max(1))));
        }
    }

    /// How much the strategies that produced the pool disagree about an item, in `[0, 1]`: the spread of the
    /// log ranks they gave it (a strategy that missed it counts as ranking it just below the pool).
    pub(crate) fn disagreement(&self, item: &PoolItem) -> f64 {
        if self.strategies.len() < 2 {
            return 0.0;
        }
        let missing = (self.pool_len + 1) as f64;
        let logs: Vec<f64> = self
            .strategies
            .iter()
            .map(|s| item.sources().get(s).map_or(missing, |x| f64::from(x.rank.max(1))).ln())
            .collect();
        let n = logs.len() as f64;
        let mean = logs.iter().sum::<f64>() / n;
        let std = (logs.iter().map(|l| (l - mean) * (l - mean)).sum::<f64>() / n).sqrt();
        // The largest possible spread of two log ranks in [0, ln(missing)] is ln(missing) / 2.
        (2.0 * std / missing.ln().max(1e-12)).min(1.0)
    }
}

/// A least-squares line on one feature, with its held-out error.
#[derive(Debug, Clone, Copy)]
struct Line {
    mean_x: f64,
    sxx: f64,
    intercept: f64,
    slope: f64,
    /// Mean squared leave-one-out error.
    loo_mse: f64,
}

impl Line {
    fn fit(xs: &[f64], ys: &[f64]) -> Self {
        let n = xs.len() as f64;
        let mean_x = xs.iter().sum::<f64>() / n;
        let mean_y = ys.iter().sum::<f64>() / n;
        let sxx: f64 = xs.iter().map(|x| (x - mean_x) * (x - mean_x)).sum();
        let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mean_x) * (y - mean_y)).sum();
        // A feature that does not vary over the evidence predicts the mean. So does one that falls with the
        // reranker score: every feature is "higher is better" for retrieval, and on a handful of points a
        // falling line is far more often noise than a retriever that is truly backwards (the fit is monotone).
        let flat = sxx <= 1e-12 * (1.0 + mean_x * mean_x) || sxy <= 0.0;
        let slope = if flat { 0.0 } else { sxy / sxx };
        let intercept = mean_y - slope * mean_x;
        let mut loo = 0.0;
        for (x, y) in xs.iter().zip(ys) {
            let leverage = 1.0 / n + if flat { 0.0 } else { (x - mean_x) * (x - mean_x) / sxx };
            let residual = y - (intercept + slope * x);
            let held_out = residual / (1.0 - leverage).max(1e-6);
            loo += held_out * held_out;
        }
        Self { mean_x, sxx: if flat { 0.0 } else { sxx }, intercept, slope, loo_mse: loo / n }
    }

    fn predict(&self, x: f64, n: f64) -> (f64, f64) {
        let spread = if self.sxx > 0.0 { (x - self.mean_x) * (x - self.mean_x) / self.sxx } else { 0.0 };
        (self.intercept + self.slope * x, (self.loo_mse * (1.0 + 1.0 / n + spread)).sqrt())
    }
}

/// A fitted calibration on one reranker's scale.
#[derive(Debug)]
pub(crate) struct Fit {
    pub(crate) space: FeatureSpace,
    pub(crate) scale: String,
    lines: Vec<Line>,
    weights: Vec<f64>,
    floor: f64,
    range: (f64, f64),
    pub(crate) evidence: usize,
}

impl Fit {
    /// Picks the scale with the most reranked evidence (ties: the more trusted tier, then the name) and fits it,
    /// or `None` when no scale has `min_evidence` reranked items.
    pub(crate) fn from_pool(pool: &CandidatePool, config: &CalibrationConfig) -> Option<Self> {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for it in pool.in_state(ItemState::Reranked) {
            let s = it.reranker_strategy()?;
            match counts.iter_mut().find(|(name, _)| *name == s) {
                Some((_, n)) => *n += 1,
                None => counts.push((s, 1)),
            }
        }
        let (scale, n) = counts.into_iter().max_by(|a, b| {
            a.1.cmp(&b.1).then_with(|| pool.tier(a.0).cmp(&pool.tier(b.0))).then_with(|| b.0.cmp(a.0))
        })?;
        if n < config.min_evidence.max(3) {
            return None;
        }
        let space = FeatureSpace::new(pool);
        let p = space.dim();
        let mut columns: Vec<Vec<f64>> = vec![Vec::with_capacity(n); p];
        let mut ys = Vec::with_capacity(n);
        let mut row = Vec::with_capacity(p);
        for it in pool.in_state(ItemState::Reranked).filter(|it| it.reranker_strategy() == Some(scale)) {
            ys.push(f64::from(it.reranker_score()?));
            space.row(it, &mut row);
            for (c, x) in columns.iter_mut().zip(&row) {
                c.push(*x);
            }
        }
        let (lo, hi) = ys.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &y| (l.min(y), h.max(y)));
        let spread = hi - lo;
        let floor = if spread > 1e-12 { config.sigma_floor * spread } else { 1e-3 * hi.abs().max(1.0) };
        let lines: Vec<Line> = columns.iter().map(|xs| Line::fit(xs, &ys)).collect();
        // Inverse held-out error: a line that predicts unseen evidence well counts most.
        let weights = lines.iter().map(|l| 1.0 / (l.loo_mse + floor * floor)).collect();
        let margin = spread.max(floor);
        Some(Self {
            space,
            scale: scale.to_owned(),
            lines,
            weights,
            floor,
            range: (lo - margin, hi + margin),
            evidence: n,
        })
    }

    /// The predicted score and its standard error for one item.
    pub(crate) fn predict(&self, item: &PoolItem, row: &mut Vec<f64>) -> (f64, f64) {
        self.space.row(item, row);
        let n = self.evidence as f64;
        let (mut mean, mut se, mut total) = (0.0, 0.0, 0.0);
        for ((line, w), x) in self.lines.iter().zip(&self.weights).zip(row.iter()) {
            let (m, s) = line.predict(*x, n);
            mean += w * m;
            se += w * s;
            total += w;
        }
        ((mean / total).clamp(self.range.0, self.range.1), (se / total).max(self.floor))
    }

    /// The weighted held-out error of the ensemble (for traces).
    pub(crate) fn sigma(&self) -> f64 {
        let total: f64 = self.weights.iter().sum();
        let mse = self.lines.iter().zip(&self.weights).map(|(l, w)| w * l.loo_mse).sum::<f64>() / total;
        mse.sqrt().max(self.floor)
    }
}

/// The standard normal upper tail `P(Z > x)` (Abramowitz–Stegun 7.1.26, absolute error below 1.5e-7).
pub(crate) fn normal_tail(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly =
        t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-z * z).exp();
    if x >= 0.0 { 0.5 * erfc } else { 1.0 - 0.5 * erfc }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::{Candidate, Chunk, ScoredHit};

    #[test]
    fn normal_tail_matches_known_values() {
        for (x, p) in [(0.0, 0.5), (1.0, 0.158_655), (1.64, 0.050_503), (-2.0, 0.977_250)] {
            assert!((normal_tail(x) - p).abs() < 1e-5, "{x}: {}", normal_tail(x));
        }
    }

    #[test]
    fn a_line_recovers_a_linear_relation_and_a_flat_feature_predicts_the_mean() {
        let line = Line::fit(&[1.0, 2.0, 3.0, 4.0], &[3.0, 5.0, 7.0, 9.0]);
        assert!((line.predict(10.0, 4.0).0 - 21.0).abs() < 1e-9);
        assert!(line.loo_mse < 1e-18);
        for xs in [[1.0, 1.0, 1.0], [3.0, 2.0, 1.0]] {
            let flat = Line::fit(&xs, &[0.0, 3.0, 6.0]);
            assert_eq!(flat.predict(7.0, 3.0).0, 3.0, "{xs:?}");
            // Each held-out point is predicted by the mean of the other two: errors 4.5, 0, 4.5.
            assert!((flat.loo_mse - 13.5).abs() < 1e-9, "{}", flat.loo_mse);
        }
    }

    #[test]
    fn a_linear_relation_is_recovered_within_its_interval() {
        let candidates: Vec<Candidate> = (0..20)
            .map(|i| {
                let id = format!("d{i:02}");
                let s = 1.0 - i as f32 * 0.05;
                Candidate::from_hit(ScoredHit { chunk: Chunk::new(&id, &id, &id), score: s }, "bm25", i + 1)
            })
            .collect();
        let mut pool = CandidatePool::new(candidates).unwrap();
        let ids: Vec<String> = (0..6).map(|i| format!("d{i:02}")).collect();
        pool.transition(&ids, ItemState::InFlight).unwrap();
        let scores: Vec<(String, f32)> =
            ids.iter().map(|id| (id.clone(), pool.get(id).unwrap().retrieval_score() * 10.0)).collect();
        pool.update_scores("ce", &scores).unwrap();
        let fit = Fit::from_pool(&pool, &CalibrationConfig::default()).unwrap();
        assert_eq!((fit.scale.as_str(), fit.evidence), ("ce", 6));
        let mut row = Vec::new();
        let (m, se) = fit.predict(pool.get("d08").unwrap(), &mut row);
        // Retrieval 0.6 maps to 6.0 exactly; the reciprocal-rank line predicts worse and weighs much less.
        assert!((m - 6.0).abs() < 0.1, "prediction {m} ± {se}");
        assert!(se > 0.0);
    }
}
