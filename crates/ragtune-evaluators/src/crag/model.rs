//! The model-based CRAG evaluator: a relevance scorer over the top candidates, one aggregate and two thresholds
//! (CRAG's retrieval evaluator, arXiv:2401.15884, section 3.1).

use std::fmt::Write as _;
use std::sync::Arc;

use async_trait::async_trait;
use ragtune_core::{Candidate, Cost, Ctx, Error, RelevanceEvaluator, RelevanceJudgement, Reranker, Result, Verdict};
use serde::{Deserialize, Serialize};

/// How the candidates' normalised scores become one score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// The best candidate's score: one relevant document suffices (CRAG's choice and the default).
    #[default]
    Max,
    /// The mean over all scored candidates.
    Mean,
    /// The mean of the best `n` scored candidates (all of them when fewer were scored).
    TopMean(usize),
}

impl Aggregate {
    /// Aggregates `scores`; 0 when there are none.
    fn apply(self, scores: &[f32]) -> f32 {
        if scores.is_empty() {
            return 0.0;
        }
        match self {
            // Raw scores (logits) can be negative: the fold starts below all of them.
            Self::Max => scores.iter().copied().fold(f32::NEG_INFINITY, f32::max),
            Self::Mean => mean(scores),
            Self::TopMean(n) => {
                let mut sorted = scores.to_vec();
                sorted.sort_by(|a, b| b.total_cmp(a));
                sorted.truncate(n.max(1));
                mean(&sorted)
            }
        }
    }

    fn label(self) -> String {
        match self {
            Self::Max => "max".into(),
            Self::Mean => "mean".into(),
            Self::TopMean(n) => format!("top_mean({n})"),
        }
    }
}

fn mean(scores: &[f32]) -> f32 {
    let sum: f64 = scores.iter().map(|s| f64::from(*s)).sum();
    (sum / scores.len().max(1) as f64) as f32
}

/// How a scorer's raw scores map to `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoreScale {
    /// Already in `[0, 1]` (cosine similarities, probabilities); values outside are clamped.
    Unit,
    /// Logits, as cross-encoders return them: `1 / (1 + e^-x)`.
    Sigmoid,
    /// A linear range, such as an LLM judge's 0 to 10: `(x - min) / (max - min)`, clamped.
    Range {
        /// The raw score that maps to 0.
        min: f32,
        /// The raw score that maps to 1.
        max: f32,
    },
}

impl ScoreScale {
    /// Maps a raw score to `[0, 1]`; NaN maps to 0.
    ///
    /// A degenerate range (`max <= min`, which [`ModelEvaluator::new`] refuses) maps scores at or above `max` to
    /// 1 and others to 0, rather than dividing by zero.
    ///
    /// ```
    /// use ragtune_evaluators::crag::ScoreScale;
    ///
    /// assert_eq!(ScoreScale::Range { min: 0.0, max: 10.0 }.normalize(7.0), 0.7);
    /// assert_eq!(ScoreScale::Sigmoid.normalize(0.0), 0.5);
    /// assert_eq!(ScoreScale::Unit.normalize(f32::NAN), 0.0);
    /// ```
    #[must_use]
    pub fn normalize(&self, raw: f32) -> f32 {
        if raw.is_nan() {
            return 0.0;
        }
        let x = f64::from(raw);
        let v = match *self {
            Self::Unit => x,
            Self::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Self::Range { min, max } => {
                let (min, max) = (f64::from(min), f64::from(max));
                if max > min && (max - min).is_finite() {
                    (x - min) / (max - min)
                } else if x >= max {
                    1.0
                } else {
                    0.0
                }
            }
        };
        if v.is_nan() { 0.0 } else { v.clamp(0.0, 1.0) as f32 }
    }

    fn validate(&self) -> Result<()> {
        if let Self::Range { min, max } = *self
            && !(min.is_finite() && max.is_finite() && min < max)
        {
            return Err(Error::invalid_input(format!(
                "model evaluator: the score range needs finite min < max, got min {min}, max {max}"
            )));
        }
        Ok(())
    }
}

/// The criterion of a [`ModelEvaluator`] judgement that holds the aggregate of the scorer's raw scores.
pub const RAW_AGGREGATE: &str = "raw_aggregate";

/// Configuration of [`ModelEvaluator`]; the defaults are CRAG's thresholds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// An aggregate at or above this is CORRECT.
    pub upper: f32,
    /// An aggregate at or below this is INCORRECT; between the two it is AMBIGUOUS.
    pub lower: f32,
    /// How the candidates' scores become one.
    pub aggregate: Aggregate,
    /// The most candidates scored, from the top of the list.
    pub top_k: usize,
    /// For a scorer whose scores are logits ([`ScoreScale::Sigmoid`], a cross-encoder): each is read as
    /// `sigmoid(logit_scale × logit + logit_shift)`. `ragtune calibrate` fits both on a train split (Platt scaling
    /// against "retrieval succeeded"), so the thresholds sit on a probability instead of a sigmoid that saturates
    /// at a trained model's large logits. Greater than 0, so the order of the scores is kept. Other scales ignore it.
    pub logit_scale: f32,
    /// See [`logit_scale`](Self::logit_scale).
    pub logit_shift: f32,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self { upper: 0.7, lower: 0.3, aggregate: Aggregate::Max, top_k: 5, logit_scale: 1.0, logit_shift: 0.0 }
    }
}

impl ModelConfig {
    /// Checks the thresholds and limits.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming the field unless `0 <= lower < upper <= 1`,
    /// `top_k >= 1` and a `top_mean` count is at least 1.
    pub fn validate(&self) -> Result<()> {
        super::check_thresholds("model evaluator", ("lower", self.lower), ("upper", self.upper))?;
        if self.top_k == 0 {
            return Err(Error::invalid_input("model evaluator: top_k must be at least 1"));
        }
        if !(self.logit_scale.is_finite() && self.logit_scale > 0.0 && self.logit_shift.is_finite()) {
            return Err(Error::invalid_input(format!(
                "model evaluator: logit_scale must be finite and greater than 0 and logit_shift finite, got {} and {}",
                self.logit_scale, self.logit_shift
            )));
        }
        if self.aggregate == Aggregate::TopMean(0) {
            return Err(Error::invalid_input("model evaluator: aggregate top_mean needs a count of at least 1"));
        }
        Ok(())
    }
}

/// CRAG's retrieval evaluator with any [`Reranker`] as the relevance model.
///
/// It scores the first `top_k` candidates in one scorer call, maps each raw score to `[0, 1]` with its
/// [`ScoreScale`], aggregates them ([`Aggregate::Max`] by default) and reads the verdict: CORRECT
/// ([`Verdict::Correct`]) when the aggregate is at or above `upper`, INCORRECT when at or below `lower`, AMBIGUOUS
/// in between. Candidates beyond `top_k` get a `per_candidate` score of 0. The criteria map holds `aggregate`,
/// `max` and `mean` of the scored candidates, and `raw_aggregate`, the aggregate of the scorer's raw scores (what
/// a calibration maps to a probability).
///
/// Scorers: a cross-encoder ([`ScoreScale::Sigmoid`]), an LLM judge ([`ScoreScale::Range`] 0 to 10), or the free
/// scorers of this module, [`RetrievalScoreScorer`](super::RetrievalScoreScorer) and
/// [`DenseSimilarityScorer`](super::DenseSimilarityScorer).
///
/// Cost model: the scorer's estimate for the scored candidates; no candidates cost nothing.
#[derive(Debug)]
pub struct ModelEvaluator {
    scorer: Arc<dyn Reranker>,
    scale: ScoreScale,
    config: ModelConfig,
    name: String,
}

impl ModelEvaluator {
    /// An evaluator that judges with `scorer`, whose raw scores are on `scale`.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when [`ModelConfig::validate`] fails or the scale is
    /// a range without finite `min < max`.
    pub fn new(scorer: Arc<dyn Reranker>, scale: ScoreScale, config: ModelConfig) -> Result<Self> {
        config.validate()?;
        scale.validate()?;
        let name = format!("model:{}", scorer.name());
        Ok(Self { scorer, scale, config, name })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// A raw score on `[0, 1]`: logits through `[logit_scale, logit_shift]` first ([`ModelConfig::logit_scale`]).
    fn normalize(&self, raw: f32) -> f32 {
        match self.scale {
            // With the default map (1, 0) this is the raw logit exactly.
            ScoreScale::Sigmoid => self.scale.normalize(self.config.logit_scale.mul_add(raw, self.config.logit_shift)),
            ScoreScale::Unit | ScoreScale::Range { .. } => self.scale.normalize(raw),
        }
    }

    fn verdict(&self, aggregate: f32) -> Verdict {
        if aggregate >= self.config.upper {
            Verdict::Correct
        } else if aggregate <= self.config.lower {
            Verdict::Incorrect
        } else {
            Verdict::Ambiguous
        }
    }
}

#[async_trait]
impl RelevanceEvaluator for ModelEvaluator {
    fn name(&self) -> &str {
        &self.name
    }

    /// Scores the first `top_k` candidates with the scorer and judges their aggregate.
    ///
    /// # Errors
    /// The scorer's errors, unchanged (callers degrade to the retrieval as it is); a
    /// [`Permanent`](ragtune_core::ErrorKind::Permanent) error when the scorer returns the wrong number of scores.
    async fn evaluate(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<RelevanceJudgement> {
        ctx.check()?;
        if candidates.is_empty() {
            return Ok(RelevanceJudgement {
                verdict: Verdict::Incorrect,
                score: 0.0,
                per_candidate: Vec::new(),
                criteria: [("aggregate", 0.0), ("max", 0.0), ("mean", 0.0)]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
                reasons: vec!["no candidates".into()],
                cost: Cost::ZERO,
            });
        }
        let n = self.config.top_k.min(candidates.len());
        let scored = &candidates[..n];
        let raw = self.scorer.score(ctx, query, scored).await?;
        if raw.len() != n {
            return Err(Error::permanent(format!(
                "scorer `{}` returned {} scores for {n} candidates",
                self.scorer.name(),
                raw.len()
            )));
        }
        let scores: Vec<f32> = raw.iter().map(|r| self.normalize(*r)).collect();
        let raw_aggregate = self.config.aggregate.apply(&raw);
        let aggregate = self.config.aggregate.apply(&scores);
        let max = Aggregate::Max.apply(&scores);
        let mean = Aggregate::Mean.apply(&scores);
        let verdict = self.verdict(aggregate);

        let mut scored_reason = format!("scored {n} of {} candidates with `{}`", candidates.len(), self.scorer.name());
        if n < candidates.len() {
            let _ = write!(
                scored_reason,
                "; {} beyond top_k {} were not scored and count 0.00",
                candidates.len() - n,
                self.config.top_k
            );
        }
        let label = self.config.aggregate.label();
        let (upper, lower) = (self.config.upper, self.config.lower);
        let verdict_reason = match verdict {
            Verdict::Correct => format!("CORRECT: {label} {aggregate:.2} >= upper {upper:.2}"),
            Verdict::Incorrect => format!("INCORRECT: {label} {aggregate:.2} <= lower {lower:.2}"),
            Verdict::Ambiguous => {
                format!("AMBIGUOUS: {label} {aggregate:.2} between lower {lower:.2} and upper {upper:.2}")
            }
        };

        let mut per_candidate = scores;
        per_candidate.resize(candidates.len(), 0.0);
        Ok(RelevanceJudgement {
            verdict,
            score: aggregate,
            per_candidate,
            criteria: [("aggregate", aggregate), ("max", max), ("mean", mean), (RAW_AGGREGATE, raw_aggregate)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            reasons: vec![scored_reason, verdict_reason],
            cost: self.scorer.cost_model().estimate(n),
        })
    }
}

#[cfg(test)]
mod tests {
    use ragtune_core::ErrorKind;
    use ragtune_testkit::fakes::{ScriptedFailure, ScriptedReranker};

    use super::*;
    use crate::crag::test_candidate;

    fn candidates(texts: &[&str]) -> Vec<Candidate> {
        texts.iter().map(|t| test_candidate(t, t, t, 0.5, &[])).collect()
    }

    /// Evaluates candidates named `texts` with a scorer that gives each text its scripted raw score, and checks the
    /// verdict, the aggregate and the per-candidate scores.
    async fn check(
        script: &[(&str, f32)],
        scale: ScoreScale,
        config: ModelConfig,
        texts: &[&str],
        verdict: Verdict,
        score: f32,
        per_candidate: &[f32],
    ) -> RelevanceJudgement {
        let scorer = script.iter().fold(ScriptedReranker::new().named("judge"), |r, (t, s)| r.with_score(*t, *s));
        let evaluator = ModelEvaluator::new(Arc::new(scorer), scale, config).expect("test configs are valid");
        let j = evaluator.evaluate(&Ctx::new(), "q", &candidates(texts)).await.expect("the scripted scorer works");
        assert_eq!(j.verdict, verdict, "{j:#?}");
        assert!((j.score - score).abs() < 1e-6, "score: got {}, want {score}", j.score);
        assert_eq!(j.per_candidate.len(), per_candidate.len());
        for (got, want) in j.per_candidate.iter().zip(per_candidate) {
            assert!((got - want).abs() < 1e-6, "per candidate: got {:?}, want {per_candidate:?}", j.per_candidate);
        }
        j
    }

    const SCRIPT: &[(&str, f32)] = &[("a", 0.9), ("b", 0.5), ("c", 0.1), ("d", 0.2)];

    #[tokio::test(flavor = "current_thread")]
    async fn aggregates_max_mean_and_top_mean() {
        let abc = ["a", "b", "c"];
        let j = check(SCRIPT, ScoreScale::Unit, ModelConfig::default(), &abc, Verdict::Correct, 0.9, &[0.9, 0.5, 0.1])
            .await;
        assert_eq!(j.criteria["max"], 0.9);
        assert!((j.criteria["mean"] - 0.5).abs() < 1e-6);
        assert_eq!(j.reasons, ["scored 3 of 3 candidates with `judge`", "CORRECT: max 0.90 >= upper 0.70"]);
        assert_eq!(j.cost, Cost::new(0, 3, 1));

        let mean = ModelConfig { aggregate: Aggregate::Mean, ..ModelConfig::default() };
        let j = check(SCRIPT, ScoreScale::Unit, mean, &abc, Verdict::Ambiguous, 0.5, &[0.9, 0.5, 0.1]).await;
        assert_eq!(j.reasons[1], "AMBIGUOUS: mean 0.50 between lower 0.30 and upper 0.70");

        let top2 = ModelConfig { aggregate: Aggregate::TopMean(2), ..ModelConfig::default() };
        check(SCRIPT, ScoreScale::Unit, top2, &abc, Verdict::Correct, 0.7, &[0.9, 0.5, 0.1]).await;
        let top9 = ModelConfig { aggregate: Aggregate::TopMean(9), ..ModelConfig::default() };
        check(SCRIPT, ScoreScale::Unit, top9, &abc, Verdict::Ambiguous, 0.5, &[0.9, 0.5, 0.1]).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn thresholds_are_inclusive() {
        let at_upper = [("x", 0.7)];
        check(&at_upper, ScoreScale::Unit, ModelConfig::default(), &["x"], Verdict::Correct, 0.7, &[0.7]).await;
        let at_lower = [("x", 0.3)];
        let j =
            check(&at_lower, ScoreScale::Unit, ModelConfig::default(), &["x"], Verdict::Incorrect, 0.3, &[0.3]).await;
        assert_eq!(j.reasons[1], "INCORRECT: max 0.30 <= lower 0.30");
        let strict = ModelConfig { upper: 0.95, lower: 0.8, ..ModelConfig::default() };
        check(SCRIPT, ScoreScale::Unit, strict, &["a"], Verdict::Ambiguous, 0.9, &[0.9]).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn scales_raw_scores() {
        let judge = [("a", 8.0), ("b", 2.0), ("c", 15.0), ("d", f32::NAN)];
        let range = ScoreScale::Range { min: 0.0, max: 10.0 };
        let mean = ModelConfig { aggregate: Aggregate::Mean, ..ModelConfig::default() };
        // 0.8, 0.2, 15 clamps to 1, NaN to 0: mean 0.5.
        check(&judge, range, mean, &["a", "b", "c", "d"], Verdict::Ambiguous, 0.5, &[0.8, 0.2, 1.0, 0.0]).await;
        let logits = [("a", 0.0), ("b", -2.0)];
        let s = 1.0 / (1.0 + 2.0_f32.exp());
        check(&logits, ScoreScale::Sigmoid, ModelConfig::default(), &["a", "b"], Verdict::Ambiguous, 0.5, &[0.5, s])
            .await;
        assert_eq!(ScoreScale::Sigmoid.normalize(f32::INFINITY), 1.0);
        assert_eq!(ScoreScale::Sigmoid.normalize(f32::NEG_INFINITY), 0.0);
        assert_eq!(ScoreScale::Unit.normalize(-3.0), 0.0);
        assert_eq!(ScoreScale::Unit.normalize(3.0), 1.0);
        assert_eq!(ScoreScale::Range { min: 5.0, max: 5.0 }.normalize(5.0), 1.0);
        assert_eq!(ScoreScale::Range { min: 5.0, max: 5.0 }.normalize(4.0), 0.0);
    }

    #[test]
    fn sigmoid_maps_logits_into_the_unit_interval_keeping_their_order() {
        // A cross-encoder's logits are unbounded, higher more relevant. The sigmoid keeps their order, so a failure
        // AUC over the normalised scores is the AUC over the logits, and thresholds fitted on them lie in [0, 1];
        // a logit of 0 is the even point, and σ(-x) = 1 - σ(x).
        let logits = [-12.0_f32, -4.5, -0.25, 0.0, 0.25, 3.0, 9.5];
        let p: Vec<f32> = logits.iter().map(|l| ScoreScale::Sigmoid.normalize(*l)).collect();
        assert!(p.windows(2).all(|w| w[0] < w[1]), "strictly increasing: {p:?}");
        assert!(p.iter().all(|v| (0.0..=1.0).contains(v)), "{p:?}");
        assert_eq!(p[3], 0.5);
        for l in logits {
            let (pos, neg) = (ScoreScale::Sigmoid.normalize(l), ScoreScale::Sigmoid.normalize(-l));
            assert!((neg - (1.0 - pos)).abs() < 1e-6, "{l}: {pos} {neg}");
        }
        assert_eq!(serde_json::to_string(&ScoreScale::Sigmoid).unwrap(), r#""sigmoid""#);
        assert!(ScoreScale::Sigmoid.validate().is_ok(), "no parameters to refuse");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn scores_only_the_top_k_in_one_call() {
        let scorer = Arc::new(ScriptedReranker::new().with_score("d", 0.95).with_default(0.1));
        let config = ModelConfig { top_k: 2, ..ModelConfig::default() };
        let evaluator = ModelEvaluator::new(scorer.clone(), ScoreScale::Unit, config).unwrap();
        assert_eq!(evaluator.name(), "model:scripted");
        let j = evaluator.evaluate(&Ctx::new(), "q", &candidates(&["a", "b", "c", "d"])).await.unwrap();
        // "d" would score 0.95 but lies beyond top_k.
        assert_eq!(j.verdict, Verdict::Incorrect);
        assert_eq!(j.per_candidate, [0.1, 0.1, 0.0, 0.0]);
        assert_eq!(
            j.reasons[0],
            "scored 2 of 4 candidates with `scripted`; 2 beyond top_k 2 were not scored and count 0.00"
        );
        assert_eq!(j.cost, Cost::new(0, 2, 1));
        assert_eq!(scorer.calls(), 1);
        let j = evaluator.evaluate(&Ctx::new(), "q", &[]).await.unwrap();
        assert_eq!(
            (j.verdict, j.score, j.reasons.as_slice(), j.cost),
            (Verdict::Incorrect, 0.0, &["no candidates".to_owned()][..], Cost::ZERO)
        );
        assert_eq!(scorer.calls(), 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn scorer_failures_propagate() {
        let scorer = Arc::new(ScriptedReranker::new().failing(ScriptedFailure::Always));
        let evaluator = ModelEvaluator::new(scorer, ScoreScale::Unit, ModelConfig::default()).unwrap();
        let err = evaluator.evaluate(&Ctx::new(), "q", &candidates(&["a"])).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient);
    }

    #[test]
    fn validate_names_the_field() {
        let cases = [
            (ModelConfig { lower: 0.7, ..ModelConfig::default() }, "lower (0.7) must be below upper"),
            (ModelConfig { upper: 1.2, ..ModelConfig::default() }, "upper"),
            (ModelConfig { lower: f32::NAN, ..ModelConfig::default() }, "lower"),
            (ModelConfig { top_k: 0, ..ModelConfig::default() }, "top_k"),
            (ModelConfig { aggregate: Aggregate::TopMean(0), ..ModelConfig::default() }, "top_mean"),
        ];
        for (config, needle) in cases {
            let err = ModelEvaluator::new(Arc::new(ScriptedReranker::new()), ScoreScale::Unit, config).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
            assert!(err.message().contains(needle), "{needle}: {}", err.message());
        }
        let bad_range = ScoreScale::Range { min: 10.0, max: 0.0 };
        let err =
            ModelEvaluator::new(Arc::new(ScriptedReranker::new()), bad_range, ModelConfig::default()).unwrap_err();
        assert!(err.message().contains("min < max"), "{}", err.message());
    }

    #[test]
    fn serde_forms() {
        let config: ModelConfig = serde_json::from_str(r#"{"aggregate": {"top_mean": 3}, "upper": 0.8}"#).unwrap();
        assert_eq!(config, ModelConfig { aggregate: Aggregate::TopMean(3), upper: 0.8, ..ModelConfig::default() });
        assert_eq!(serde_json::to_string(&Aggregate::Max).unwrap(), r#""max""#);
        let scale: ScoreScale = serde_json::from_str(r#"{"range": {"min": 0, "max": 10}}"#).unwrap();
        assert_eq!(scale, ScoreScale::Range { min: 0.0, max: 10.0 });
        assert_eq!(serde_json::from_str::<ScoreScale>(r#""sigmoid""#).unwrap(), ScoreScale::Sigmoid);
        assert!(serde_json::from_str::<ModelConfig>(r#"{"threshold": 0.5}"#).is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_logit_map_reads_logits_before_the_sigmoid_and_leaves_other_scales_alone() {
        let script: &[(&str, f32)] = &[("a", 18.0), ("b", 12.0), ("c", -3.0)];
        let mapped = ModelConfig { logit_scale: 0.25, logit_shift: -3.0, ..ModelConfig::default() };
        let p = |x: f32| 1.0 / (1.0 + (-(0.25 * x - 3.0)).exp());
        let j = check(
            script,
            ScoreScale::Sigmoid,
            mapped.clone(),
            &["b", "a", "c"],
            Verdict::Correct,
            p(18.0),
            &[p(12.0), p(18.0), p(-3.0)],
        )
        .await;
        // The aggregate of the raw scores travels beside: what a calibration maps.
        assert_eq!(j.criteria["raw_aggregate"], 18.0);
        // All negative logits: the raw maximum is the largest of them, not 0.
        let j = check(
            &[("x", -4.0), ("y", -2.0)],
            ScoreScale::Sigmoid,
            mapped.clone(),
            &["x", "y"],
            Verdict::Incorrect,
            p(-2.0),
            &[p(-4.0), p(-2.0)],
        )
        .await;
        assert_eq!(j.criteria["raw_aggregate"], -2.0);
        // Unit scores are not logits: the map does not apply.
        check(SCRIPT, ScoreScale::Unit, mapped, &["a"], Verdict::Correct, 0.9, &[0.9]).await;
    }

    #[test]
    fn a_logit_map_must_keep_the_order_and_be_finite() {
        for (scale, shift) in [(0.0, 0.0), (-1.0, 0.0), (f32::NAN, 0.0), (f32::INFINITY, 0.0), (1.0, f32::NAN)] {
            let config = ModelConfig { logit_scale: scale, logit_shift: shift, ..ModelConfig::default() };
            let err = config.validate().unwrap_err();
            assert!(err.to_string().contains("logit_scale"), "{scale} {shift}: {err}");
        }
        let parsed: ModelConfig = serde_json::from_str(r#"{"logit_scale": 0.2, "logit_shift": -1.5}"#).unwrap();
        assert_eq!((parsed.logit_scale, parsed.logit_shift, parsed.upper), (0.2, -1.5, 0.7));
    }
}
