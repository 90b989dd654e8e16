//! Gradient-boosted decision stumps for the learned CRAG evaluator (ADR 0016): Newton boosting of the logistic loss,
//! one stump (a single split on a single feature) per round.
//!
//! Hand-written: the Rust boosting crates either bind C++ libraries or bring their own matrix, threading and
//! serialisation stacks for what is here about a hundred lines, and the model has to live in ragtune's own
//! configuration file with a per-feature explanation anyway.

/// The L2 penalty on a leaf's value (XGBoost's `lambda`): keeps a leaf of a few samples from jumping far.
const LEAF_L2: f64 = 1.0;

/// A split must gain more than this (in the second-order loss reduction) to be taken; otherwise boosting stops.
const MIN_GAIN: f64 = 1e-9;

/// A stump over column `col` of the fitting table, shrinkage already applied.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RawStump {
    pub col: usize,
    pub threshold: f64,
    pub below: f64,
    pub above: f64,
}

impl RawStump {
    pub fn output(&self, row: &[Option<f64>]) -> f64 {
        match row[self.col] {
            Some(v) if v <= self.threshold => self.below,
            Some(_) => self.above,
            None => 0.0,
        }
    }
}

/// How one boosting run fits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Boosting {
    /// Each leaf's Newton step is multiplied by this.
    pub shrinkage: f64,
    /// Each side of a split holds at least this many of the samples that have the feature.
    pub min_leaf: usize,
    /// At most this many stumps (fewer when no split gains anything).
    pub rounds: usize,
}

/// Boosts stumps on the samples `rows` of `x` (one row per sample, one column per feature, `None` when unavailable:
/// such a sample goes to neither side of a split on that feature and gets nothing from it) for the labels `y`.
/// Returns the bias (the log-odds of success on `rows`) and the stumps in the order they were fitted.
///
/// Each round computes every sample's gradient `p - y` and Hessian `p (1 - p)` of the log loss at the current
/// logit, and takes the split with the largest second-order gain
/// `G_L² / (H_L + λ) + G_R² / (H_R + λ) - G² / (H + λ)` over every feature and every midpoint between two adjacent
/// distinct values with at least `min_leaf` samples on each side; the leaves get `-shrinkage * G / (H + λ)`. Ties go
/// to the first feature, then the lowest threshold, so the same input gives the same stumps.
pub(super) fn boost(x: &[Vec<Option<f64>>], y: &[bool], rows: &[usize], settings: Boosting) -> (f64, Vec<RawStump>) {
    let d = x.first().map_or(0, Vec::len);
    let n = rows.len();
    let successes = rows.iter().filter(|&&i| y[i]).count();
    // Smoothed so a one-class subset still has a finite bias.
    let bias = ((successes as f64 + 0.5) / ((n - successes) as f64 + 0.5)).ln();
    // For each column, the positions (in `rows`) of the samples that have it, by value, ties by position.
    let sorted: Vec<Vec<usize>> = (0..d)
        .map(|col| {
            let mut present: Vec<usize> = (0..n).filter(|&k| x[rows[k]][col].is_some()).collect();
            present.sort_by(|&a, &b| value(x, rows[a], col).total_cmp(&value(x, rows[b], col)).then(a.cmp(&b)));
            present
        })
        .collect();
    let mut logit = vec![bias; n];
    let mut stumps = Vec::new();
    let (mut g, mut h) = (vec![0.0; n], vec![0.0; n]);
    for _ in 0..settings.rounds {
        for k in 0..n {
            let p = sigmoid(logit[k]);
            g[k] = p - if y[rows[k]] { 1.0 } else { 0.0 };
            h[k] = (p * (1.0 - p)).max(1e-12);
        }
        let mut best: Option<(f64, RawStump)> = None;
        for (col, order) in sorted.iter().enumerate() {
            let (gp, hp): (f64, f64) = order.iter().fold((0.0, 0.0), |(a, b), &k| (a + g[k], b + h[k]));
            let parent = gp * gp / (hp + LEAF_L2);
            let (mut gl, mut hl) = (0.0, 0.0);
            for (left, pair) in order.windows(2).enumerate() {
                gl += g[pair[0]];
                hl += h[pair[0]];
                let (a, b) = (value(x, rows[pair[0]], col), value(x, rows[pair[1]], col));
                let count = left + 1;
                if a == b || count < settings.min_leaf || order.len() - count < settings.min_leaf {
                    continue;
                }
                let (gr, hr) = (gp - gl, hp - hl);
                let gain = gl * gl / (hl + LEAF_L2) + gr * gr / (hr + LEAF_L2) - parent;
                if gain > MIN_GAIN && best.as_ref().is_none_or(|(b, _)| gain > *b) {
                    let stump = RawStump {
                        col,
                        threshold: a + (b - a) / 2.0,
                        below: -settings.shrinkage * gl / (hl + LEAF_L2),
                        above: -settings.shrinkage * gr / (hr + LEAF_L2),
                    };
                    best = Some((gain, stump));
                }
            }
        }
        let Some((_, stump)) = best else { break };
        for (k, &i) in rows.iter().enumerate() {
            logit[k] += stump.output(&x[i]);
        }
        stumps.push(stump);
    }
    (bias, stumps)
}

/// The value of column `col` of sample `i`, which has it.
fn value(x: &[Vec<Option<f64>>], i: usize, col: usize) -> f64 {
    x[i][col].expect("invariant: only samples with the value are sorted")
}

/// Stumps on the same column with the same threshold, summed into one; ordered by column, then threshold. The
/// model computes the same logit (up to the order of floating-point additions).
pub(super) fn merge(stumps: &[RawStump]) -> Vec<RawStump> {
    let mut merged: Vec<RawStump> = Vec::new();
    let mut sorted = stumps.to_vec();
    sorted.sort_by(|a, b| a.col.cmp(&b.col).then(a.threshold.total_cmp(&b.threshold)));
    for s in sorted {
        match merged.last_mut() {
            Some(last) if last.col == s.col && last.threshold.total_cmp(&s.threshold).is_eq() => {
                last.below += s.below;
                last.above += s.above;
            }
            _ => merged.push(s),
        }
    }
    merged
}

/// `1 / (1 + e^-x)`, without overflow.
pub(super) fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize) -> Vec<usize> {
        (0..n).collect()
    }

    const SETTINGS: Boosting = Boosting { shrinkage: 0.5, min_leaf: 1, rounds: 50 };

    #[test]
    fn separable_data_is_split_at_the_gap() {
        // Column 0 is noise-free: failures at 1..=4, successes at 10..=15; column 1 is constant.
        let x: Vec<Vec<Option<f64>>> = [1.0, 2.0, 3.0, 4.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
            .iter()
            .map(|v| vec![Some(*v), Some(7.0)])
            .collect();
        let y: Vec<bool> = x.iter().map(|r| r[0].unwrap() > 5.0).collect();
        let (bias, stumps) = boost(&x, &y, &rows(10), SETTINGS);
        assert!((bias - (6.5_f64 / 4.5).ln()).abs() < 1e-12);
        // Every round takes the same split, midway across the gap: nothing splits the constant column.
        assert!(stumps.iter().all(|s| s.col == 0 && s.threshold == 7.0), "{stumps:?}");
        assert!(stumps[0].below < 0.0 && stumps[0].above > 0.0);
        let logit = |r: &[Option<f64>]| bias + stumps.iter().map(|s| s.output(r)).sum::<f64>();
        assert!(x.iter().zip(&y).all(|(r, ok)| (sigmoid(logit(r)) > 0.9) == *ok));
        // Merged, it is one stump computing the same logit.
        let merged = merge(&stumps);
        assert_eq!(merged.len(), 1);
        let sum: f64 = stumps.iter().map(|s| s.below).sum();
        assert!((merged[0].below - sum).abs() < 1e-12);
    }

    #[test]
    fn ties_go_to_the_first_feature_and_the_fit_is_deterministic() {
        // Two identical columns: the first wins. Labels 0 0 1 1 1 1 split equally well at 2.5 only.
        let values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let x: Vec<Vec<Option<f64>>> = values.iter().map(|v| vec![Some(*v), Some(*v)]).collect();
        let y = vec![false, false, true, true, true, true];
        let settings = Boosting { rounds: 1, ..SETTINGS };
        let (_, stumps) = boost(&x, &y, &rows(6), settings);
        assert_eq!((stumps[0].col, stumps[0].threshold), (0, 2.5));
        // Symmetric labels: two splits (1.5 and 5.5) equally good up to rounding; either way on the first column.
        let y = vec![false, true, true, true, true, false];
        let (_, a) = boost(&x, &y, &rows(6), settings);
        assert!(a[0].col == 0 && (a[0].threshold == 1.5 || a[0].threshold == 5.5), "{a:?}");
        let (_, b) = boost(&x, &y, &rows(6), Boosting { rounds: 20, ..SETTINGS });
        let (_, c) = boost(&x, &y, &rows(6), Boosting { rounds: 20, ..SETTINGS });
        assert_eq!(b, c);
    }

    #[test]
    fn min_leaf_missing_values_and_nothing_to_gain() {
        // min_leaf 3 forbids the split at 1.5 (one sample below).
        let x: Vec<Vec<Option<f64>>> = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0].iter().map(|v| vec![Some(*v)]).collect();
        let y = vec![false, true, true, true, true, true];
        let (_, s) = boost(&x, &y, &rows(6), Boosting { min_leaf: 3, rounds: 1, ..SETTINGS });
        assert_eq!(s[0].threshold, 3.5, "{s:?}");
        // A sample without the value gets nothing from a stump on it.
        assert_eq!(s[0].output(&[None]), 0.0);
        // A constant column has no split: no stumps, only the bias.
        let x = vec![vec![Some(1.0)]; 4];
        let (bias, s) = boost(&x, &[false, true, true, true], &rows(4), SETTINGS);
        assert!(s.is_empty() && bias > 0.0);
        // Only the rows given are fitted on.
        let x: Vec<Vec<Option<f64>>> = [1.0, 2.0, 3.0, 4.0].iter().map(|v| vec![Some(*v)]).collect();
        let (_, s) = boost(&x, &[false, true, false, true], &[0, 1], Boosting { rounds: 1, ..SETTINGS });
        assert_eq!(s[0].threshold, 1.5);
    }
}
