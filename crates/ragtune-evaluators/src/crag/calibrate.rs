//! Fitting the two thresholds of a model-based evaluator on labelled training queries.

use ragtune_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// How far `upper` is put above `lower` when no sample score lies between them and above.
const NUDGE: f32 = 1e-4;

/// One labelled calibration sample: the evaluator's aggregate score for a training query and whether retrieval
/// succeeded for it (a relevant document in the top k; the caller decides k and says so).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CalibrationSample {
    /// The evaluator's aggregate score for the query, in `[0, 1]`.
    pub score: f32,
    /// Whether retrieval found a relevant document for the query.
    pub succeeded: bool,
}

/// Platt scaling: the `(scale, shift)` with which `sigmoid(scale × raw + shift)` is the probability that retrieval
/// succeeded, fitted by logistic regression of `succeeded` on the raw aggregate scores (a cross-encoder's logits),
/// lightly penalised so that separable samples still give a finite scale. `scale` is positive when higher scores
/// go with success, which is what a relevance scorer's are; a scorer whose scores go the other way is refused
/// rather than turned upside down.
///
/// ```
/// use ragtune_evaluators::crag::fit_logit_map;
///
/// let raw = [-8.0, -2.0, 1.0, 3.0, 7.0, 12.0, 14.0, 15.0];
/// let succeeded = [false, false, true, false, true, true, true, true];
/// let (scale, shift) = fit_logit_map(&raw, &succeeded)?;
/// assert!(scale > 0.0 && scale < 1.0, "{scale}");
/// let p = |x: f64| 1.0 / (1.0 + (-(f64::from(scale) * x + f64::from(shift))).exp());
/// assert!(p(-8.0) < 0.5 && p(15.0) > 0.5 && p(15.0) < 0.9999);
/// # Ok::<(), ragtune_core::Error>(())
/// ```
///
/// # Errors
/// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when the lengths differ, a score is not finite, every
/// sample has the same label or the same score, or the fitted scale is not positive.
pub fn fit_logit_map(raw: &[f32], succeeded: &[bool]) -> Result<(f32, f32)> {
    if raw.len() != succeeded.len() || raw.is_empty() {
        return Err(Error::invalid_input(format!(
            "a logit map needs as many labels as scores, and some: {} scores, {} labels",
            raw.len(),
            succeeded.len()
        )));
    }
    if raw.iter().any(|r| !r.is_finite()) {
        return Err(Error::invalid_input("a logit map needs finite scores"));
    }
    if succeeded.iter().all(|s| *s) || succeeded.iter().all(|s| !*s) {
        return Err(Error::invalid_input("a logit map needs both failed and successful retrievals"));
    }
    if raw.iter().all(|r| r.total_cmp(&raw[0]).is_eq()) {
        return Err(Error::invalid_input("a logit map needs scores that differ"));
    }
    // The learned evaluator's fit: standardised scores (well conditioned whatever the logits' range), mapped back.
    let x: Vec<Vec<Option<f64>>> = raw.iter().map(|r| vec![Some(f64::from(*r))]).collect();
    let rows: Vec<usize> = (0..raw.len()).collect();
    let fit = super::learned::fit_on(&x, succeeded, &rows, LOGIT_MAP_L2)?;
    let (mean, sd, weight, bias) = (fit.means[0], fit.scales[0], fit.weights[0], fit.bias);
    if weight <= 0.0 || !weight.is_finite() {
        return Err(Error::invalid_input(format!(
            "the scorer's higher scores do not go with successful retrieval on these samples (slope {weight:.3}); \
             its thresholds cannot be fitted as a probability"
        )));
    }
    #[allow(clippy::cast_possible_truncation)]
    Ok(((weight / sd) as f32, (bias - weight * mean / sd) as f32))
}

/// The L2 penalty of [`fit_logit_map`]'s slope on standardised scores: small beside the hundreds of samples a
/// calibration has, enough to keep a separable split finite.
const LOGIT_MAP_L2: f64 = 1.0;

/// Fitted thresholds and how well they separate the samples they were fitted on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Scores at or above this are CORRECT.
    pub upper: f32,
    /// Scores at or below this are INCORRECT.
    pub lower: f32,
    /// How many samples were used.
    pub samples: usize,
    /// How many of them failed.
    pub failures: usize,
    /// Of the samples at or below `lower`, the share that failed.
    pub incorrect_precision: f32,
    /// Of the failed samples, the share at or below `lower`.
    pub incorrect_recall: f32,
    /// The harmonic mean of `incorrect_precision` and `incorrect_recall`.
    pub incorrect_f1: f32,
    /// Of the samples at or above `upper`, the share that succeeded (0 when there are none).
    pub correct_precision: f32,
    /// The share of all samples at or above `upper`.
    pub correct_share: f32,
    /// The precision `upper` was fitted for.
    pub target_precision: f32,
    /// The `(logit_scale, logit_shift)` the scores were read with when the calibration fitted them
    /// ([`fit_logit_map`]), so the thresholds hold with them only; `None` when the scores were read as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit_map: Option<(f32, f32)>,
}

/// Fits the two thresholds of a model-based evaluator on labelled samples.
///
/// Candidate thresholds are the distinct sample scores (clamped to `[0, 1]`).
/// `lower` maximises the F1 of INCORRECT (`score <= lower`) as a detector of failed retrieval; of equally good
/// thresholds it takes the lowest. `upper` is the smallest candidate threshold above `lower` whose samples at or
/// above it succeed with a precision of at least `target_precision`; when none reaches it, the one with the best
/// precision (the smallest of equals). When no sample score lies above `lower`, `upper` is `lower` plus 0.0001
/// (and when `lower` is 1, `lower` moves down by that much instead), so `0 <= lower < upper <= 1` always holds.
/// F1 and precision are compared as exact fractions of counts, so the result depends only on the multiset of
/// samples, never on their order.
///
/// ```
/// use ragtune_evaluators::crag::{CalibrationSample, calibrate};
///
/// let samples: Vec<CalibrationSample> = [(0.1, false), (0.2, false), (0.6, true), (0.9, true)]
///     .into_iter()
///     .map(|(score, succeeded)| CalibrationSample { score, succeeded })
///     .collect();
/// let fit = calibrate(&samples, 0.9)?;
/// assert_eq!((fit.lower, fit.upper), (0.2, 0.6));
/// assert_eq!(fit.incorrect_f1, 1.0);
/// # Ok::<(), ragtune_core::Error>(())
/// ```
///
/// # Errors
/// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when there are no samples, when a score is not finite,
/// when no sample failed or none succeeded (the message says which), or when `target_precision` is not in
/// `(0, 1]`.
pub fn calibrate(samples: &[CalibrationSample], target_precision: f32) -> Result<Calibration> {
    calibrate_with_floor(samples, target_precision, None)
}

/// A floor on how well INCORRECT must detect failed retrieval: the lower threshold is then chosen among those whose
/// INCORRECT precision and recall both reach it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IncorrectFloor {
    /// The least INCORRECT precision.
    pub precision: f32,
    /// The least INCORRECT recall.
    pub recall: f32,
}

/// [`calibrate`], except that when `floor` is given, `lower` maximises F1 only among the thresholds whose
/// INCORRECT precision and recall both reach the floor (compared in `f32`); when none does, it is chosen as
/// [`calibrate`] chooses it. `upper` is then fitted above that `lower` as in [`calibrate`].
///
/// ```
/// use ragtune_evaluators::crag::{CalibrationSample, IncorrectFloor, calibrate, calibrate_with_floor};
///
/// let s: Vec<CalibrationSample> = [(0.1, false), (0.2, true), (0.3, false), (0.4, false), (0.5, true), (0.9, true)]
///     .into_iter()
///     .map(|(score, succeeded)| CalibrationSample { score, succeeded })
///     .collect();
/// // Best F1 is at 0.4 (precision 3/4, recall 1); a precision floor of 0.9 leaves only 0.1 (precision 1, recall 1/3)
/// // and a recall floor of 0.5 then excludes it too, so the F1 choice stands.
/// assert_eq!(calibrate(&s, 0.9)?.lower, 0.4);
/// assert_eq!(calibrate_with_floor(&s, 0.9, Some(IncorrectFloor { precision: 0.9, recall: 0.3 }))?.lower, 0.1);
/// assert_eq!(calibrate_with_floor(&s, 0.9, Some(IncorrectFloor { precision: 0.9, recall: 0.5 }))?.lower, 0.4);
/// # Ok::<(), ragtune_core::Error>(())
/// ```
///
/// # Errors
/// As [`calibrate`].
pub fn calibrate_with_floor(
    samples: &[CalibrationSample],
    target_precision: f32,
    floor: Option<IncorrectFloor>,
) -> Result<Calibration> {
    let (n, failures) = check_samples(samples, target_precision)?;

    // Sorted (score, succeeded); one sweep from the bottom counts the samples at or below each threshold.
    let mut sorted: Vec<(f32, bool)> = samples.iter().map(|s| (s.score.clamp(0.0, 1.0), s.succeeded)).collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    // (threshold, failed at or below, succeeded at or below)
    let mut levels: Vec<(f32, usize, usize)> = Vec::new();
    let (mut failed_le, mut succeeded_le) = (0, 0);
    for (i, &(score, succeeded)) in sorted.iter().enumerate() {
        if succeeded {
            succeeded_le += 1;
        } else {
            failed_le += 1;
        }
        if sorted.get(i + 1).is_none_or(|next| next.0 != score) {
            levels.push((score, failed_le, succeeded_le));
        }
    }
    let successes = n - failures;

    // lower: the best F1 = 2tp / (2tp + fp + fn), compared as fractions; strictly better to move up.
    // With a floor, only the thresholds that reach it compete, unless none does.
    let reaches = |tp: usize, fp: usize| {
        floor.is_none_or(|f| ratio(tp, tp + fp) >= f.precision && ratio(tp, failures) >= f.recall)
    };
    let any_reaches = levels.iter().any(|&(_, tp, fp)| reaches(tp, fp));
    let mut best: Option<(usize, u128, u128)> = None;
    for (i, &(_, tp, fp)) in levels.iter().enumerate() {
        if any_reaches && !reaches(tp, fp) {
            continue;
        }
        let num = 2 * tp as u128;
        let den = num + fp as u128 + (failures - tp) as u128;
        if best.is_none_or(|(_, bn, bd)| num * bd > bn * den) {
            best = Some((i, num, den));
        }
    }
    let lower_index = best.map_or(0, |(i, _, _)| i);
    let mut lower = levels[lower_index].0;

    // upper: among thresholds above lower, the samples at or above level i are those not at or below level i - 1.
    let mut upper = None;
    let mut best_precision: Option<(f32, u128, u128)> = None;
    for i in lower_index + 1..levels.len() {
        let (below_failed, below_succeeded) = (levels[i - 1].1, levels[i - 1].2);
        let above_succeeded = successes - below_succeeded;
        let above = above_succeeded + failures - below_failed;
        // Compared in f32, the type the target was written in, so that 4 of 5 meets a target of 0.8.
        if ratio(above_succeeded, above) >= target_precision {
            upper = Some(levels[i].0);
            break;
        }
        let (num, den) = (above_succeeded as u128, above as u128);
        if best_precision.is_none_or(|(_, bn, bd)| num * bd > bn * den) {
            best_precision = Some((levels[i].0, num, den));
        }
    }
    let upper = match upper.or(best_precision.map(|(t, _, _)| t)) {
        Some(t) => t,
        None if lower + NUDGE <= 1.0 => lower + NUDGE,
        None => {
            lower = 1.0 - NUDGE;
            1.0
        }
    };

    let scored: Vec<CalibrationSample> =
        sorted.iter().map(|&(score, succeeded)| CalibrationSample { score, succeeded }).collect();
    let (incorrect_precision, incorrect_recall, incorrect_f1) = detection_stats(&scored, lower);
    let at_or_above: Vec<&(f32, bool)> = sorted.iter().filter(|(s, _)| *s >= upper).collect();
    let correct_precision = ratio(at_or_above.iter().filter(|(_, ok)| *ok).count(), at_or_above.len());
    Ok(Calibration {
        upper,
        lower,
        samples: n,
        failures,
        incorrect_precision,
        incorrect_recall,
        incorrect_f1,
        correct_precision,
        correct_share: ratio(at_or_above.len(), n),
        target_precision,
        logit_map: None,
    })
}

/// The number of samples and of failed ones, after checking that the target is in (0, 1], the scores are finite and
/// both outcomes occur.
fn check_samples(samples: &[CalibrationSample], target_precision: f32) -> Result<(usize, usize)> {
    if !(target_precision > 0.0 && target_precision <= 1.0) {
        return Err(Error::invalid_input(format!(
            "calibration: target_precision must be in (0, 1], got {target_precision}"
        )));
    }
    if samples.is_empty() {
        return Err(Error::invalid_input("calibration: there are no samples"));
    }
    if let Some(i) = samples.iter().position(|s| !s.score.is_finite()) {
        return Err(Error::invalid_input(format!(
            "calibration: sample {i} has the score {}; scores must be finite",
            samples[i].score
        )));
    }
    let n = samples.len();
    let failures = samples.iter().filter(|s| !s.succeeded).count();
    if failures == 0 {
        return Err(Error::invalid_input(format!(
            "calibration: no sample failed (all {n} succeeded), so there is nothing for the lower threshold to detect"
        )));
    }
    if failures == n {
        return Err(Error::invalid_input(format!(
            "calibration: no sample succeeded (all {n} failed), so the upper threshold cannot be fitted"
        )));
    }
    Ok((n, failures))
}

/// Precision, recall and F1 of INCORRECT (`score <= lower`, scores clamped to `[0, 1]`) as a detector of failed
/// retrieval; each is 0 when undefined (nothing flagged, no failures).
#[must_use]
pub fn detection_stats(samples: &[CalibrationSample], lower: f32) -> (f32, f32, f32) {
    let flagged = |s: &&CalibrationSample| s.score.clamp(0.0, 1.0) <= lower;
    let flagged_count = samples.iter().filter(flagged).count();
    let tp = samples.iter().filter(flagged).filter(|s| !s.succeeded).count();
    let failures = samples.iter().filter(|s| !s.succeeded).count();
    let fp = flagged_count - tp;
    let fn_ = failures - tp;
    (ratio(tp, flagged_count), ratio(tp, failures), ratio(2 * tp, 2 * tp + fp + fn_))
}

/// How well the scores rank failed retrievals below successful ones, whatever the thresholds: the probability that
/// a randomly drawn failed sample scores lower than a randomly drawn successful one, ties counting half (the ROC
/// AUC of "low score" as a detector of failure). 0.5 is chance, 1 a perfect separation; `None` when there is no
/// failed or no successful sample. Non-finite scores are left out.
///
/// ```
/// use ragtune_evaluators::crag::{CalibrationSample, failure_auc};
///
/// let s = |score, succeeded| CalibrationSample { score, succeeded };
/// assert_eq!(failure_auc(&[s(0.1, false), s(0.2, true), s(0.3, false), s(0.9, true)]), Some(0.75));
/// assert_eq!(failure_auc(&[s(0.5, true)]), None);
/// ```
#[must_use]
pub fn failure_auc(samples: &[CalibrationSample]) -> Option<f64> {
    let mut failed: Vec<f32> =
        samples.iter().filter(|s| !s.succeeded && s.score.is_finite()).map(|s| s.score).collect();
    let mut ok: Vec<f32> = samples.iter().filter(|s| s.succeeded && s.score.is_finite()).map(|s| s.score).collect();
    if failed.is_empty() || ok.is_empty() {
        return None;
    }
    failed.sort_by(f32::total_cmp);
    ok.sort_by(f32::total_cmp);
    // For each failed score: successful scores strictly above it count 1, equal ones 1/2.
    let mut wins = 0.0f64;
    for f in &failed {
        let above = ok.len() - ok.partition_point(|x| x <= f);
        let equal = ok.partition_point(|x| x <= f) - ok.partition_point(|x| x < f);
        wins += above as f64 + equal as f64 / 2.0;
    }
    Some(wins / (failed.len() as f64 * ok.len() as f64))
}

fn ratio(num: usize, den: usize) -> f32 {
    if den == 0 { 0.0 } else { (num as f64 / den as f64) as f32 }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use ragtune_core::ErrorKind;

    use super::*;

    fn samples(pairs: &[(f32, bool)]) -> Vec<CalibrationSample> {
        pairs.iter().map(|&(score, succeeded)| CalibrationSample { score, succeeded }).collect()
    }

    /// Calibrates `pairs` of (score, succeeded) for `target` and checks both thresholds; also checks that the
    /// reversed order gives the same result.
    fn check(pairs: &[(f32, bool)], target: f32, lower: f32, upper: f32) -> Calibration {
        let fit = calibrate(&samples(pairs), target).expect("test samples are valid");
        assert_eq!((fit.lower, fit.upper), (lower, upper), "{fit:#?}");
        let mut reversed = samples(pairs);
        reversed.reverse();
        assert_eq!(calibrate(&reversed, target).unwrap(), fit);
        fit
    }

    /// Failures at 0.1, 0.2, 0.4 and 0.7. F1 of `score <= t`: 0.1 2/5, 0.2 4/6, 0.3 4/7, 0.4 6/8 (the best),
    /// 0.5 6/9, 0.6 6/10, 0.7 8/11, 0.8 8/12, 0.9 8/13. Precision of `score >= t` above 0.4:
    /// 0.5 4/5, 0.6 3/4, 0.7 3/4, 0.8 2/2, 0.9 1/1.
    const SET: &[(f32, bool)] = &[
        (0.7, false),
        (0.1, false),
        (0.5, true),
        (0.2, false),
        (0.9, true),
        (0.3, true),
        (0.4, false),
        (0.6, true),
        (0.8, true),
    ];

    #[test]
    fn fits_the_best_thresholds_of_a_known_set() {
        let fit = check(SET, 0.8, 0.4, 0.5);
        assert_eq!((fit.samples, fit.failures), (9, 4));
        assert_eq!((fit.incorrect_precision, fit.incorrect_recall, fit.incorrect_f1), (0.75, 0.75, 0.75));
        assert_eq!((fit.correct_precision, fit.correct_share, fit.target_precision), (0.8, 5.0 / 9.0, 0.8));
        let fit = check(SET, 0.9, 0.4, 0.8);
        assert_eq!((fit.correct_precision, fit.correct_share), (1.0, 2.0 / 9.0));
        check(SET, 1.0, 0.4, 0.8);
        check(SET, 0.01, 0.4, 0.5);
        assert_eq!(detection_stats(&samples(SET), 0.4), (0.75, 0.75, 0.75));
        // Perfect separation, its reverse, all ties, and one of each.
        assert_eq!(failure_auc(&samples(&[(0.1, false), (0.2, false), (0.8, true)])), Some(1.0));
        assert_eq!(failure_auc(&samples(&[(0.9, false), (0.2, true), (0.1, true)])), Some(0.0));
        assert_eq!(failure_auc(&samples(&[(0.5, false), (0.5, true), (0.5, true)])), Some(0.5));
        assert_eq!(failure_auc(&samples(&[(f32::NAN, false), (0.5, true)])), None);
        assert_eq!(failure_auc(&[]), None);
        assert_eq!(detection_stats(&samples(SET), 0.0), (0.0, 0.0, 0.0));
        assert_eq!(detection_stats(&samples(SET), 1.0), (4.0 / 9.0, 1.0, 8.0 / 13.0));
    }

    #[test]
    fn ties_take_the_lower_threshold_and_the_best_precision_when_none_reaches_the_target() {
        // F1 at 0.1 is 2/3, at 0.9 also 4/6: the lower one wins. Above it, precision 2/3 at 0.5 is the best.
        let fit = check(&[(0.1, false), (0.5, true), (0.6, true), (0.9, false)], 1.0, 0.1, 0.5);
        assert!((fit.correct_precision - 2.0 / 3.0).abs() < 1e-6);
    }

    #[test]
    fn nudges_upper_above_lower() {
        // All of the best F1 lies at the top score: nothing above it to choose from.
        check(&[(0.2, true), (0.8, false)], 0.9, 0.8, 0.8 + NUDGE);
        check(&[(0.5, true), (1.0, false)], 0.9, 1.0 - NUDGE, 1.0);
        // Scores outside [0, 1] are clamped first.
        check(&[(-3.0, false), (7.0, true)], 0.9, 0.0, 1.0);
    }

    #[test]
    fn refuses_degenerate_inputs() {
        let cases: [(Vec<CalibrationSample>, f32, &str); 7] = [
            (Vec::new(), 0.9, "no samples"),
            (samples(&[(0.2, true), (0.9, true)]), 0.9, "no sample failed"),
            (samples(&[(0.2, false)]), 0.9, "no sample succeeded"),
            (samples(SET), 0.0, "target_precision"),
            (samples(SET), 1.5, "target_precision"),
            (samples(SET), f32::NAN, "target_precision"),
            (samples(&[(f32::NAN, false), (0.5, true)]), 0.9, "sample 0"),
        ];
        for (samples, target, needle) in cases {
            let err = calibrate(&samples, target).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
            assert!(err.message().contains(needle), "{needle}: {}", err.message());
        }
    }

    proptest! {
        #[test]
        fn thresholds_are_ordered_in_the_unit_interval(
            mut pairs in prop::collection::vec((0.0_f32..=1.0, any::<bool>()), 0..40),
            failed in 0.0_f32..=1.0,
            succeeded in 0.0_f32..=1.0,
            target in 0.01_f32..=1.0,
        ) {
            pairs.push((failed, false));
            pairs.push((succeeded, true));
            let fit = calibrate(&samples(&pairs), target).unwrap();
            prop_assert!(0.0 <= fit.lower && fit.lower < fit.upper && fit.upper <= 1.0, "{fit:?}");
            let stats = [fit.incorrect_precision, fit.incorrect_recall, fit.incorrect_f1, fit.correct_precision];
            for v in stats.into_iter().chain([fit.correct_share]) {
                prop_assert!((0.0..=1.0).contains(&v), "{fit:?}");
            }
            pairs.reverse();
            prop_assert_eq!(calibrate(&samples(&pairs), target).unwrap(), fit);
        }
    }

    #[test]
    fn a_logit_map_needs_both_outcomes_different_scores_and_as_many_labels() {
        for (raw, ok, says) in [
            (&[1.0, 2.0][..], &[true, true][..], "both failed and successful"),
            (&[3.0, 3.0], &[true, false], "scores that differ"),
            (&[1.0, 2.0], &[true], "as many labels"),
            (&[], &[], "as many labels"),
            (&[1.0, f32::NAN], &[true, false], "finite"),
        ] {
            let err = fit_logit_map(raw, ok).unwrap_err();
            assert!(err.to_string().contains(says), "{raw:?} {ok:?}: {err}");
        }
        // Perfectly separated samples still give a finite, positive map (the penalty keeps it so).
        let (scale, shift) = fit_logit_map(&[10.0, 11.0, 20.0, 21.0], &[false, false, true, true]).unwrap();
        assert!(scale.is_finite() && scale > 0.0 && shift.is_finite(), "{scale} {shift}");
        assert!(
            scale * 15.5 + shift > -1.0 && scale * 15.5 + shift < 1.0,
            "the midpoint maps near 0.5: {scale} {shift}"
        );
    }
}
