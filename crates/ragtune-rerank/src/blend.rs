//! Blending a reranker's scores with retrieval's: `(1 − w)·z(reranker) + w·z(retrieval)`, each score standardised
//! over the reranked passages (mean 0, deviation 1; a constant list counts 0), so that the reranker refines
//! retrieval instead of replacing it. A cross-encoder trained in an hour on one corpus sorts the top of a list
//! better than retrieval but its scores do not carry the rest (docs/experiments/2026-11-29-reranker.md); the blend,
//! with `w` fitted on held-out train queries, is what kept its gain.

use ragtune_core::Candidate;

/// `values` standardised: minus their mean, over their standard deviation (all 0 when it is 0).
#[must_use]
pub fn standardised(values: &[f32]) -> Vec<f32> {
    #[allow(clippy::cast_precision_loss)]
    let n = values.len().max(1) as f32;
    let mean = values.iter().sum::<f32>() / n;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / n).sqrt();
    values.iter().map(|v| if sd > 0.0 { (v - mean) / sd } else { 0.0 }).collect()
}

/// The blended score of each passage: `(1 − w)·z(reranker) + w·z(retrieval)` over the passages given
/// (`reranker[i]` and `retrieval[i]` are passage `i`'s). `w = 0` is the reranker's order, `w = 1` retrieval's.
///
/// # Panics
/// Never; lists of different lengths blend over the shorter.
#[must_use]
pub fn blend(reranker: &[f32], retrieval: &[f32], retrieval_weight: f32) -> Vec<f32> {
    let w = retrieval_weight.clamp(0.0, 1.0);
    let (m, r) = (standardised(reranker), standardised(retrieval));
    m.iter().zip(&r).map(|(m, r)| (1.0 - w) * m + w * r).collect()
}

/// Reorders the reranked candidates of `ranked` (those with a `reranker` source) among their own positions by
/// `(1 − w)·z(reranker) + w·z(retrieval)` ([`blend`]; `retrieval` holds each candidate's score
/// before reranking); the blend becomes their score. The others keep their places.
pub fn blend_reranked(
    ranked: &mut [Candidate],
    reranker: &str,
    retrieval: &std::collections::HashMap<String, f32>,
    weight: f32,
) {
    let slots: Vec<usize> = (0..ranked.len()).filter(|&i| ranked[i].sources.contains_key(reranker)).collect();
    if slots.len() < 2 {
        return;
    }
    let model: Vec<f32> = slots.iter().map(|&i| ranked[i].sources[reranker].score).collect();
    let before: Vec<f32> = slots.iter().map(|&i| retrieval.get(&ranked[i].chunk.id).copied().unwrap_or(0.0)).collect();
    let blended = blend(&model, &before, weight);
    let mut items: Vec<(f32, Candidate)> = slots.iter().zip(blended).map(|(&i, s)| (s, ranked[i].clone())).collect();
    items.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.chunk.id.cmp(&b.1.chunk.id)));
    for (&slot, (score, mut c)) in slots.iter().zip(items) {
        c.score = score;
        ranked[slot] = c;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weight_moves_the_order_from_the_reranker_to_retrieval() {
        let reranker = [3.0, 2.0, 1.0];
        let retrieval = [0.1, 0.2, 0.9];
        let order = |scores: Vec<f32>| {
            let mut idx: Vec<usize> = (0..scores.len()).collect();
            idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
            idx
        };
        assert_eq!(order(blend(&reranker, &retrieval, 0.0)), [0, 1, 2]);
        assert_eq!(order(blend(&reranker, &retrieval, 1.0)), [2, 1, 0]);
        assert_eq!(standardised(&[2.0, 2.0]), [0.0, 0.0], "a constant list counts 0");
        let z = standardised(&[1.0, 3.0]);
        assert!((z[0] + 1.0).abs() < 1e-6 && (z[1] - 1.0).abs() < 1e-6);
        assert!(blend(&[], &[], 0.5).is_empty());
    }
}
