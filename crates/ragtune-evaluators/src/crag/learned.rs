//! The learned CRAG evaluator: a logistic regression of "retrieval succeeded" over features the retrieval already
//! computed (the BM25 and dense scores and ranks each hybrid candidate carries, their agreement, the fused list's
//! shape, the heuristic criteria and the query's length), fitted on a training split, with two thresholds on its
//! probability and an explanation of every decision (docs/pipeline.md, "The learned evaluator"; ADR 0013).
//!
//! ```
//! use ragtune_evaluators::crag::{FEATURE_NAMES, FitOptions, LearnedSample, fit_learned};
//!
//! // Two features that separate the classes (dense_top high and keyword_overlap high when retrieval succeeded).
//! let mut samples = Vec::new();
//! for i in 0..40 {
//!     let succeeded = i % 4 != 0;
//!     let mut values = vec![None; FEATURE_NAMES.len()];
//!     let base = if succeeded { 0.7 } else { 0.4 };
//!     values[0] = Some(base + f64::from(i % 5) * 0.02); // dense_top
//!     values[11] = Some(base + f64::from(i % 3) * 0.05); // keyword_overlap
//!     samples.push(LearnedSample { values, succeeded });
//! }
//! let fit = fit_learned(&samples, &FitOptions::default())?;
//! assert!(fit.train_auc.unwrap() > 0.99);
//! assert!(fit.model.weights[0] > 0.0);
//! # Ok::<(), ragtune_core::Error>(())
//! ```
//!
//! Over 1,000 lines (about 530 of them tests): the features, the fit (logistic regression and stumps), the
//! thresholds and the explanation of a decision are one model whose file format (`[crag.learned]`) they all read and
//! write.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use async_trait::async_trait;
use ragtune_core::text::keywords;
use ragtune_core::{Candidate, Cost, Ctx, Error, RelevanceEvaluator, RelevanceJudgement, Result, Verdict};
use serde::{Deserialize, Serialize};

use super::calibrate::{
    Calibration, CalibrationSample, IncorrectFloor, calibrate_with_floor, detection_stats, failure_auc,
};
use super::heuristic::{HeuristicConfig, HeuristicEvaluator, candidate_tokens, contains_keyword};
use super::stumps::{self, sigmoid};

/// Features are computed from at most this many candidates, from the top of the list.
pub const FEATURE_DEPTH: usize = 10;

/// Ranks beyond this (or a strategy that did not list the candidate at all) count as this rank.
const RANK_CAP: f64 = 100.0;

/// How many features are named on each side of a decision in its reasons.
const EXPLAINED: usize = 3;

/// Contributions smaller than this (in logit units) are not named.
const NEGLIGIBLE: f64 = 0.005;

/// What a feature needs from the candidates' provenance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// Nothing: computed from the query and the texts.
    Nothing,
    /// Some candidate with a `bm25` score.
    Bm25,
    /// Some candidate with a `dense` score.
    Dense,
    /// Both, as a fused hybrid list has them.
    Both,
}

/// The features the learned evaluator knows, in the order of [`LearnedSample::values`] (see [`features`] for what
/// each one is). New features are only ever appended, so a model fitted on the first ones keeps its meaning.
pub const FEATURE_NAMES: [&str; 22] = [
    "dense_top",
    "dense_margin",
    "dense_spread",
    "bm25_top",
    "bm25_margin",
    "bm25_per_keyword",
    "top_agree",
    "top5_overlap",
    "bm25_top_dense_rank",
    "dense_top_bm25_rank",
    "fused_entropy",
    "keyword_overlap",
    "top_keyword_overlap",
    "semantic_coherence",
    "length_adequacy",
    "diversity",
    "query_keywords",
    // Query-performance predictors (ADR 0016), appended after the first version's 17.
    "dense_nqc",
    "bm25_nqc",
    "bm25_wig",
    "fused_margin",
    "mean_keyword_overlap",
];

/// How many features the first version of the learned evaluator had (the first ones of [`FEATURE_NAMES`]); files
/// fitted then name exactly these.
pub const FIRST_VERSION_FEATURES: usize = 17;

const NEEDS: [Needs; 22] = [
    Needs::Dense,
    Needs::Dense,
    Needs::Dense,
    Needs::Bm25,
    Needs::Bm25,
    Needs::Bm25,
    Needs::Both,
    Needs::Both,
    Needs::Both,
    Needs::Both,
    Needs::Both,
    Needs::Nothing,
    Needs::Nothing,
    Needs::Dense,
    Needs::Nothing,
    Needs::Nothing,
    Needs::Nothing,
    Needs::Dense,
    Needs::Bm25,
    Needs::Bm25,
    Needs::Nothing,
    Needs::Nothing,
];

/// The features of one retrieval, one per name of [`FEATURE_NAMES`].
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    /// One value per name of [`FEATURE_NAMES`], in that order; `None` when the candidates cannot give it.
    pub values: Vec<Option<f64>>,
    /// Why values are missing: one sentence per missing source.
    pub unavailable: Vec<String>,
}

impl Features {
    /// The value of the feature `name`, when it is known and available.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<f64> {
        FEATURE_NAMES.iter().position(|n| *n == name).and_then(|i| self.values[i])
    }
}

/// One strategy's scores and ranks among the candidates: `(candidate index, score, rank)`, best score first.
fn source_list(candidates: &[Candidate], source: &str) -> Vec<(usize, f64, f64)> {
    let mut list: Vec<(usize, f64, f64)> = candidates
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            c.sources
                .get(source)
                .filter(|s| s.score.is_finite())
                .map(|s| (i, f64::from(s.score), f64::from(s.rank.max(1)).min(RANK_CAP)))
        })
        .collect();
    list.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.total_cmp(&b.2)).then(a.0.cmp(&b.0)));
    list
}

/// The rank of candidate `i` under `source`, capped; a candidate the strategy did not list counts as the cap.
fn rank_under(candidate: &Candidate, source: &str) -> f64 {
    candidate.sources.get(source).map_or(RANK_CAP, |s| f64::from(s.rank.max(1)).min(RANK_CAP))
}

/// Computes the features of the first [`FEATURE_DEPTH`] candidates for `query`.
///
/// - `dense_top`, `dense_margin`, `dense_spread`: the best dense score among the candidates, its lead over the
///   second best, and its lead over their mean (need `dense` provenance).
/// - `bm25_top`, `bm25_margin`, `bm25_per_keyword`: `ln(1 + best BM25 score)`, the best's relative lead over the
///   second (`(b1 - b2) / b1`), and the best score per query keyword (need `bm25` provenance).
/// - `top_agree`: 1 when the BM25 best and the dense best are the same candidate; `top5_overlap`: the candidates in
///   both top 5s, over 5; `bm25_top_dense_rank`: `ln` of the dense rank of the BM25 best (not listed or beyond 100
///   counts as 100), `dense_top_bm25_rank` the reverse; `fused_entropy`: the entropy of the candidates' own
///   (fused) scores, normalised to `[0, 1]` (need both).
/// - `keyword_overlap`, `semantic_coherence`, `length_adequacy`, `diversity`: the heuristic evaluator's criteria
///   with its default settings (coherence needs `dense`); `top_keyword_overlap`: the share of query keywords in
///   the first candidate; `query_keywords`: `ln(1 + keywords in the query)`.
/// - Query-performance predictors (appended later; ADR 0016), from the same lists at no model cost:
///   `dense_nqc` and `bm25_nqc`, the normalised query commitment of each list (the population standard deviation of
///   its scores among the candidates over their mean; 0 when the mean is not above 0); `bm25_wig`, the weighted
///   information gain without the corpus term (the best BM25 score minus the mean of the listed ones, over
///   `sqrt(query keywords)`); `fused_margin`, the first candidate's own (fused) score minus the second's (0 for one
///   candidate); `mean_keyword_overlap`, the mean over the candidates of the share of query keywords each one holds
///   (0 without keywords). The share of keywords absent from every candidate is `1 - keyword_overlap`, so it is not
///   a feature of its own; the query terms' IDFs would need the BM25 index's statistics, which the candidates do not
///   carry.
///
/// A feature whose provenance no candidate carries is `None` and [`Features::unavailable`] says why.
#[must_use]
pub fn features(query: &str, candidates: &[Candidate]) -> Features {
    let top = &candidates[..candidates.len().min(FEATURE_DEPTH)];
    let dense = source_list(top, "dense");
    let bm25 = source_list(top, "bm25");
    let keywords = keywords(query);
    let mut values: Vec<Option<f64>> = vec![None; FEATURE_NAMES.len()];
    let mut set = |name: &str, v: f64| {
        if let Some(i) = FEATURE_NAMES.iter().position(|n| *n == name) {
            values[i] = Some(if v.is_finite() { v } else { 0.0 });
        }
    };

    if let Some(&(_, d1, _)) = dense.first() {
        let d2 = dense.get(1).map_or(d1, |d| d.1);
        let mean = dense.iter().map(|d| d.1).sum::<f64>() / dense.len() as f64;
        set("dense_top", d1);
        set("dense_margin", d1 - d2);
        set("dense_spread", d1 - mean);
    }
    if let Some(&(_, b1, _)) = bm25.first() {
        let b2 = bm25.get(1).map_or(b1, |b| b.1);
        set("bm25_top", b1.max(0.0).ln_1p());
        set("bm25_margin", if b1 > 0.0 { (b1 - b2) / b1 } else { 0.0 });
        set("bm25_per_keyword", b1.max(0.0) / keywords.len().max(1) as f64);
        let scores: Vec<f64> = bm25.iter().map(|b| b.1).collect();
        set("bm25_nqc", commitment(&scores));
        let mean = scores.iter().sum::<f64>() / scores.len() as f64;
        set("bm25_wig", (b1 - mean) / (keywords.len().max(1) as f64).sqrt());
    }
    if !dense.is_empty() {
        let scores: Vec<f64> = dense.iter().map(|d| d.1).collect();
        set("dense_nqc", commitment(&scores));
    }
    if let (Some(&(bi, _, _)), Some(&(di, _, _))) = (bm25.first(), dense.first()) {
        set("top_agree", if bi == di { 1.0 } else { 0.0 });
        let both_top5 = top.iter().filter(|c| rank_under(c, "bm25") <= 5.0 && rank_under(c, "dense") <= 5.0).count();
        set("top5_overlap", both_top5 as f64 / 5.0);
        set("bm25_top_dense_rank", rank_under(&top[bi], "dense").ln());
        set("dense_top_bm25_rank", rank_under(&top[di], "bm25").ln());
        set("fused_entropy", normalised_entropy(top.iter().map(|c| f64::from(c.score))));
    }

    if !top.is_empty() {
        let heuristic = HeuristicEvaluator::new(HeuristicConfig::default())
            .expect("invariant: the default heuristic configuration is valid");
        let judged = heuristic.judge(query, top);
        for name in ["keyword_overlap", "semantic_coherence", "length_adequacy", "diversity"] {
            if let Some(v) = judged.criteria.get(name) {
                set(name, f64::from(*v));
            }
        }
        let tokens = candidate_tokens(&top[0]);
        let own: BTreeSet<&str> = tokens.iter().map(String::as_str).collect();
        let found = keywords.iter().filter(|k| contains_keyword(&own, k)).count();
        set("top_keyword_overlap", if keywords.is_empty() { 0.0 } else { found as f64 / keywords.len() as f64 });
        let mean_overlap = if keywords.is_empty() {
            0.0
        } else {
            let found: usize = top
                .iter()
                .map(|c| {
                    let tokens = candidate_tokens(c);
                    let own: BTreeSet<&str> = tokens.iter().map(String::as_str).collect();
                    keywords.iter().filter(|k| contains_keyword(&own, k)).count()
                })
                .sum();
            found as f64 / (keywords.len() * top.len()) as f64
        };
        set("mean_keyword_overlap", mean_overlap);
        let own_score = |c: &Candidate| if c.score.is_finite() { f64::from(c.score) } else { 0.0 };
        set("fused_margin", top.get(1).map_or(0.0, |second| own_score(&top[0]) - own_score(second)));
    }
    set("query_keywords", (keywords.len() as f64).ln_1p());

    let mut unavailable = Vec::new();
    if top.is_empty() {
        values.iter_mut().for_each(|v| *v = None);
        unavailable.push("there are no candidates".to_owned());
    } else {
        if dense.is_empty() {
            unavailable.push("no candidate carries a `dense` score (BM25-only retrieval)".to_owned());
        }
        if bm25.is_empty() {
            unavailable.push("no candidate carries a `bm25` score (dense-only retrieval)".to_owned());
        }
        for (i, needs) in NEEDS.iter().enumerate() {
            let ok = match needs {
                Needs::Nothing => true,
                Needs::Bm25 => !bm25.is_empty(),
                Needs::Dense => !dense.is_empty(),
                Needs::Both => !bm25.is_empty() && !dense.is_empty(),
            };
            if !ok {
                values[i] = None;
            }
        }
    }
    Features { values, unavailable }
}

/// The normalised query commitment of a list's `scores`: their population standard deviation over their mean; 0 when
/// the mean is not above 0 or there are fewer than two scores.
fn commitment(scores: &[f64]) -> f64 {
    if scores.len() < 2 {
        return 0.0;
    }
    let n = scores.len() as f64;
    let mean = scores.iter().sum::<f64>() / n;
    if mean <= 0.0 {
        return 0.0;
    }
    let var = scores.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / n;
    var.sqrt() / mean
}

/// The entropy of the non-negative parts of `scores` as a distribution, over `ln(n)`: 1 when they are all equal
/// (or all zero), near 0 when one dominates; 0 for fewer than two scores.
fn normalised_entropy(scores: impl Iterator<Item = f64>) -> f64 {
    let s: Vec<f64> = scores.map(|x| if x.is_finite() { x.max(0.0) } else { 0.0 }).collect();
    if s.len() < 2 {
        return 0.0;
    }
    let total: f64 = s.iter().sum();
    if total <= 0.0 {
        return 1.0;
    }
    let h: f64 = s.iter().filter(|x| **x > 0.0).map(|x| x / total).map(|p| -p * p.ln()).sum();
    (h / (s.len() as f64).ln()).clamp(0.0, 1.0)
}

/// The kind of a [`LearnedModel`]: how its probability is computed from the features.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// A logistic regression over standardised features (`means`, `scales`, `weights`); the default, and the only
    /// kind of the first files.
    #[default]
    Logistic,
    /// Gradient-boosted decision stumps (`stumps`): each adds one value or another to the logit depending on which
    /// side of its threshold one feature falls.
    Stumps,
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Logistic => "logistic",
            Self::Stumps => "stumps",
        })
    }
}

impl std::str::FromStr for ModelKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "logistic" => Ok(Self::Logistic),
            "stumps" => Ok(Self::Stumps),
            other => Err(Error::invalid_input(format!(
                "learned evaluator: the model is `logistic` or `stumps`, got `{other}`"
            ))),
        }
    }
}

/// One decision stump of a [`ModelKind::Stumps`] model: it adds `below` to the logit when the feature's value is at
/// or below `threshold`, `above` when it is above, and nothing when the feature is unavailable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stump {
    /// The feature it splits on (one of the model's `features`).
    pub feature: String,
    /// The split: values at or below it go `below`.
    pub threshold: f64,
    /// Added to the logit at or below the threshold.
    pub below: f64,
    /// Added to the logit above the threshold.
    pub above: f64,
}

impl Stump {
    /// What the stump adds to the logit for `value` (nothing when unavailable).
    #[must_use]
    pub fn output(&self, value: Option<f64>) -> f64 {
        match value {
            Some(v) if v <= self.threshold => self.below,
            Some(_) => self.above,
            None => 0.0,
        }
    }
}

/// A fitted learned evaluator: the `[crag.learned]` section `ragtune calibrate --evaluator learned` writes.
///
/// With `model = "logistic"` (the default, so files without `model` read as before) the probability that retrieval
/// succeeded is `1 / (1 + e^-(bias + Σ weights[i] * (x[i] - means[i]) / scales[i]))` over the named features; with
/// `model = "stumps"` it is `1 / (1 + e^-(bias + Σ stump outputs))`. At or above `upper` it is CORRECT, at or below
/// `lower` INCORRECT, AMBIGUOUS between.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearnedModel {
    /// The kind of model (`logistic` when absent).
    #[serde(default)]
    pub model: ModelKind,
    /// The features, by name (each one of [`FEATURE_NAMES`], each once).
    pub features: Vec<String>,
    /// Logistic: each feature's mean on the training split (an unavailable feature counts as this).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub means: Vec<f64>,
    /// Logistic: each feature's standard deviation on the training split (1 for a constant feature).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scales: Vec<f64>,
    /// Logistic: each standardised feature's weight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<f64>,
    /// Stumps: the boosted stumps, shrinkage already applied (stumps with the same feature and threshold merged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stumps: Vec<Stump>,
    /// The intercept.
    pub bias: f64,
    /// A probability of success at or below this is INCORRECT.
    pub lower: f32,
    /// A probability of success at or above this is CORRECT.
    pub upper: f32,
}

impl LearnedModel {
    /// Checks the model.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming the field: no features, an unknown or repeated
    /// feature name; for a logistic model `means`/`scales`/`weights` of another length than `features`, a scale not
    /// above 0, or stumps; for a stumps model no stumps, a stump on a feature the model does not name, or
    /// `means`/`scales`/`weights`; a non-finite number; or unless `0 <= lower < upper <= 1`.
    pub fn validate(&self) -> Result<()> {
        let n = self.features.len();
        if n == 0 {
            return Err(Error::invalid_input("learned evaluator: features is empty; fit one with `ragtune calibrate`"));
        }
        let mut seen = BTreeSet::new();
        for name in &self.features {
            if !FEATURE_NAMES.contains(&name.as_str()) {
                return Err(Error::invalid_input(format!(
                    "learned evaluator: features names `{name}`, which is not a feature; known: {}",
                    FEATURE_NAMES.join(", ")
                )));
            }
            if !seen.insert(name.as_str()) {
                return Err(Error::invalid_input(format!("learned evaluator: features names `{name}` twice")));
            }
        }
        match self.model {
            ModelKind::Logistic => self.validate_logistic()?,
            ModelKind::Stumps => self.validate_stumps()?,
        }
        if !self.bias.is_finite() {
            return Err(Error::invalid_input(format!("learned evaluator: bias must be finite, got {}", self.bias)));
        }
        super::check_thresholds("learned evaluator", ("lower", self.lower), ("upper", self.upper))
    }

    fn validate_logistic(&self) -> Result<()> {
        let n = self.features.len();
        if !self.stumps.is_empty() {
            return Err(Error::invalid_input(
                "learned evaluator: a logistic model has no stumps (set model = \"stumps\" for a stumps model)",
            ));
        }
        for (field, values) in [("means", &self.means), ("scales", &self.scales), ("weights", &self.weights)] {
            if values.len() != n {
                return Err(Error::invalid_input(format!(
                    "learned evaluator: {field} has {} values for {n} features",
                    values.len()
                )));
            }
            if let Some(i) = values.iter().position(|v| !v.is_finite()) {
                return Err(Error::invalid_input(format!(
                    "learned evaluator: {field}[{i}] ({}) must be finite, got {}",
                    self.features[i], values[i]
                )));
            }
        }
        if let Some(i) = self.scales.iter().position(|s| *s <= 0.0) {
            return Err(Error::invalid_input(format!(
                "learned evaluator: scales[{i}] ({}) must be above 0, got {}",
                self.features[i], self.scales[i]
            )));
        }
        Ok(())
    }

    fn validate_stumps(&self) -> Result<()> {
        if self.stumps.is_empty() {
            return Err(Error::invalid_input("learned evaluator: a stumps model needs at least one stump"));
        }
        if !(self.means.is_empty() && self.scales.is_empty() && self.weights.is_empty()) {
            return Err(Error::invalid_input(
                "learned evaluator: a stumps model has no means, scales or weights (those are a logistic model's)",
            ));
        }
        for (i, stump) in self.stumps.iter().enumerate() {
            if !self.features.contains(&stump.feature) {
                return Err(Error::invalid_input(format!(
                    "learned evaluator: stumps[{i}] splits on `{}`, which features does not name",
                    stump.feature
                )));
            }
            for (field, v) in [("threshold", stump.threshold), ("below", stump.below), ("above", stump.above)] {
                if !v.is_finite() {
                    return Err(Error::invalid_input(format!(
                        "learned evaluator: stumps[{i}].{field} ({}) must be finite, got {v}",
                        stump.feature
                    )));
                }
            }
        }
        Ok(())
    }
}

/// One feature's part in a decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Contribution {
    /// The feature.
    pub feature: String,
    /// Its raw value; `None` when it was unavailable (then it counts as the training mean and contributes 0).
    pub value: Option<f64>,
    /// Its part of the logit: `weight * (value - mean) / scale` for a logistic model, the sum of its stumps' outputs
    /// for a stumps model. Above 0 it pushes toward CORRECT, below toward INCORRECT.
    pub contribution: f64,
}

/// The learned CRAG evaluator over a [`LearnedModel`].
///
/// It computes [`features`] of the candidates, the model's probability that retrieval succeeded (the judgement's
/// `score`), and the verdict from the model's two thresholds (inclusive, as the model-based evaluator's). The
/// criteria hold `p_success`, `logit`, and for each model feature its value (`<name>`, when available) and its
/// contribution (`<name>:contribution`); the reasons name the features that pushed most toward each side, those
/// that were unavailable and why, and the verdict. A feature that is unavailable (a BM25-only retrieval has no
/// dense scores) counts as its training mean, so it contributes nothing and the decision rests on the others.
/// `per_candidate` holds the heuristic evaluator's per-candidate scores (the model judges the list as a whole).
///
/// Cost model: free ([`Cost::ZERO`]); it reads what the retrieval computed and the candidates' texts.
#[derive(Debug, Clone)]
pub struct LearnedEvaluator {
    model: LearnedModel,
    /// Each model feature's position in [`FEATURE_NAMES`].
    index: Vec<usize>,
    /// Each stump's feature's position in the model's `features`.
    stump_feature: Vec<usize>,
}

impl LearnedEvaluator {
    /// An evaluator over `model`.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when [`LearnedModel::validate`] fails.
    pub fn new(model: LearnedModel) -> Result<Self> {
        model.validate()?;
        let index = model
            .features
            .iter()
            .map(|f| FEATURE_NAMES.iter().position(|n| n == f).expect("invariant: validated feature names"))
            .collect();
        let stump_feature = model
            .stumps
            .iter()
            .map(|s| model.features.iter().position(|f| *f == s.feature).expect("invariant: validated stump features"))
            .collect();
        Ok(Self { model, index, stump_feature })
    }

    /// The model.
    #[must_use]
    pub fn model(&self) -> &LearnedModel {
        &self.model
    }

    /// The logit of success for `features` and each model feature's contribution, in model order.
    #[must_use]
    pub fn explain(&self, features: &Features) -> (f64, Vec<Contribution>) {
        let m = &self.model;
        let value = |j: usize| features.values.get(self.index[j]).copied().flatten();
        let contributions: Vec<Contribution> = match m.model {
            ModelKind::Logistic => (0..self.index.len())
                .map(|j| {
                    let v = value(j);
                    let z = v.map_or(0.0, |v| (v - m.means[j]) / m.scales[j]);
                    Contribution { feature: m.features[j].clone(), value: v, contribution: m.weights[j] * z }
                })
                .collect(),
            ModelKind::Stumps => {
                let mut sums = vec![0.0; self.index.len()];
                for (stump, &j) in m.stumps.iter().zip(&self.stump_feature) {
                    sums[j] += stump.output(value(j));
                }
                (0..self.index.len())
                    .map(|j| Contribution { feature: m.features[j].clone(), value: value(j), contribution: sums[j] })
                    .collect()
            }
        };
        let logit = m.bias + contributions.iter().map(|c| c.contribution).sum::<f64>();
        (logit, contributions)
    }

    fn judge(&self, query: &str, candidates: &[Candidate]) -> RelevanceJudgement {
        if candidates.is_empty() {
            return RelevanceJudgement {
                verdict: Verdict::Incorrect,
                score: 0.0,
                per_candidate: Vec::new(),
                criteria: [("p_success".to_owned(), 0.0)].into_iter().collect(),
                reasons: vec!["no candidates".into()],
                cost: Cost::ZERO,
            };
        }
        let f = features(query, candidates);
        let (logit, contributions) = self.explain(&f);
        let p = sigmoid(logit);
        let score = if p.is_finite() { p.clamp(0.0, 1.0) as f32 } else { 0.0 };
        let (lower, upper) = (self.model.lower, self.model.upper);
        let verdict = if score >= upper {
            Verdict::Correct
        } else if score <= lower {
            Verdict::Incorrect
        } else {
            Verdict::Ambiguous
        };

        let mut reasons = vec![format!(
            "P(retrieval succeeded) {p:.2} from {} features: logit {logit:.2} = bias {:.2} + contributions {:.2}",
            contributions.len(),
            self.model.bias,
            logit - self.model.bias
        )];
        let mut ranked: Vec<&Contribution> =
            contributions.iter().filter(|c| c.contribution.abs() >= NEGLIGIBLE).collect();
        ranked.sort_by(|a, b| a.contribution.total_cmp(&b.contribution).then(a.feature.cmp(&b.feature)));
        let describe = |cs: &mut dyn Iterator<Item = &&Contribution>| {
            cs.take(EXPLAINED)
                .map(|c| format!("{} {:.3} ({:+.2})", c.feature, c.value.unwrap_or(f64::NAN), c.contribution))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let against = describe(&mut ranked.iter().take_while(|c| c.contribution < 0.0));
        if !against.is_empty() {
            reasons.push(format!("toward INCORRECT: {against}"));
        }
        let toward = describe(&mut ranked.iter().rev().take_while(|c| c.contribution > 0.0));
        if !toward.is_empty() {
            reasons.push(format!("toward CORRECT: {toward}"));
        }
        let missing: Vec<&str> =
            contributions.iter().filter(|c| c.value.is_none()).map(|c| c.feature.as_str()).collect();
        if !missing.is_empty() {
            let mut reason =
                format!("unavailable, counted at their training mean (contribute 0): {}", missing.join(", "));
            if !f.unavailable.is_empty() {
                let _ = write!(reason, " — {}", f.unavailable.join("; "));
            }
            reasons.push(reason);
        }
        reasons.push(match verdict {
            Verdict::Correct => format!("CORRECT: P {score:.2} >= upper {upper:.2}"),
            Verdict::Incorrect => format!("INCORRECT: P {score:.2} <= lower {lower:.2}"),
            Verdict::Ambiguous => format!("AMBIGUOUS: P {score:.2} between lower {lower:.2} and upper {upper:.2}"),
        });

        let mut criteria: std::collections::BTreeMap<String, f32> =
            [("p_success".to_owned(), score), ("logit".to_owned(), logit as f32)].into_iter().collect();
        for c in &contributions {
            if let Some(v) = c.value {
                criteria.insert(c.feature.clone(), v as f32);
            }
            criteria.insert(format!("{}:contribution", c.feature), c.contribution as f32);
        }
        let heuristic = HeuristicEvaluator::new(HeuristicConfig::default())
            .expect("invariant: the default heuristic configuration is valid");
        let per_candidate = heuristic.judge(query, candidates).per_candidate;
        RelevanceJudgement { verdict, score, per_candidate, criteria, reasons, cost: Cost::ZERO }
    }
}

#[async_trait]
impl RelevanceEvaluator for LearnedEvaluator {
    fn name(&self) -> &str {
        "learned"
    }

    /// Judges the candidates with the model.
    ///
    /// # Errors
    /// Only cancellation or a passed deadline in `ctx`.
    async fn evaluate(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<RelevanceJudgement> {
        ctx.check()?;
        Ok(self.judge(query, candidates))
    }
}

/// A labelled training retrieval: its features (one per name of [`FEATURE_NAMES`]) and whether it succeeded.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedSample {
    /// The feature values, `None` where unavailable.
    pub values: Vec<Option<f64>>,
    /// Whether a relevant document was in the top k.
    pub succeeded: bool,
}

/// The settings the stumps model tries: every combination is scored by cross-validated log loss.
#[derive(Debug, Clone, PartialEq)]
pub struct StumpGrid {
    /// Shrinkage (learning rates) tried.
    pub shrinkage: Vec<f64>,
    /// Least samples on each side of a split, tried.
    pub min_leaf: Vec<usize>,
    /// Numbers of boosting rounds tried (each run fits the largest and is read at each of these).
    pub rounds: Vec<usize>,
}

impl Default for StumpGrid {
    fn default() -> Self {
        Self { shrinkage: vec![0.3, 0.1, 0.03], min_leaf: vec![5, 10, 20, 40], rounds: vec![10, 25, 50, 100, 200, 400] }
    }
}

/// How [`fit_learned`] fits.
#[derive(Debug, Clone, PartialEq)]
pub struct FitOptions {
    /// The kind of model; `None` fits both and keeps the one with the higher cross-validated failure AUC (the
    /// logistic one on a tie or without cross-validation).
    pub model: Option<ModelKind>,
    /// The features used, by name; `None` for all of [`FEATURE_NAMES`].
    pub features: Option<Vec<String>>,
    /// Logistic: the L2 strengths tried; the one with the lowest cross-validated log loss is kept (ties: the first).
    pub l2: Vec<f64>,
    /// Stumps: the settings tried; the combination with the lowest cross-validated log loss is kept (ties: the
    /// first, in the order shrinkage, min leaf, rounds).
    pub stumps: StumpGrid,
    /// Cross-validation folds (stratified by label, in sample order).
    pub folds: usize,
    /// The precision CORRECT must reach (sets `upper`, as [`calibrate`](super::calibrate) does).
    pub target_precision: f32,
    /// The INCORRECT precision and recall `lower` should reach, when some threshold does.
    pub incorrect_floor: Option<IncorrectFloor>,
}

impl Default for FitOptions {
    fn default() -> Self {
        Self {
            model: Some(ModelKind::Logistic),
            features: None,
            l2: vec![100.0, 30.0, 10.0, 3.0, 1.0, 0.3, 0.1],
            stumps: StumpGrid::default(),
            folds: 5,
            target_precision: 0.9,
            incorrect_floor: Some(IncorrectFloor { precision: 0.4, recall: 0.6 }),
        }
    }
}

/// One fitted candidate model in brief, for comparing them.
#[derive(Debug, Clone, PartialEq)]
pub struct FitSummary {
    /// The kind of model.
    pub kind: ModelKind,
    /// How many features it used.
    pub features: usize,
    /// The settings kept (`L2 10`; `shrinkage 0.1, min leaf 20, 100 rounds`).
    pub settings: String,
    /// Failure AUC of the out-of-fold probabilities, when cross-validated.
    pub cv_auc: Option<f64>,
    /// The threshold fit (on out-of-fold probabilities when cross-validated).
    pub calibration: Calibration,
}

/// A fitted model and how it did on the split it was fitted on.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedFit {
    /// The model, with its thresholds.
    pub model: LearnedModel,
    /// The threshold fit: on out-of-fold probabilities when `out_of_fold`, else on the model's own.
    pub calibration: Calibration,
    /// Whether the thresholds were fitted on cross-validated (out-of-fold) probabilities.
    pub out_of_fold: bool,
    /// The settings kept (`L2 10`; `shrinkage 0.1, min leaf 20, 100 rounds`).
    pub settings: String,
    /// Failure AUC of the out-of-fold probabilities, when cross-validated.
    pub cv_auc: Option<f64>,
    /// Failure AUC of the final model on the samples it was fitted on.
    pub train_auc: Option<f64>,
    /// Cross-validated log loss per setting tried, in the order tried.
    pub cv_log_loss: Vec<(String, f64)>,
    /// Every model fitted, the kept one included, in the order fitted (callers may add more to compare).
    pub compared: Vec<FitSummary>,
    /// The out-of-fold probabilities of success, one per sample, when cross-validated.
    pub out_of_fold_probabilities: Option<Vec<f64>>,
    /// INCORRECT precision and recall at the fitted `lower` within each fold's out-of-fold probabilities (how
    /// stable the operating point is across parts of the split), when cross-validated.
    pub fold_detection: Vec<(f32, f32)>,
    /// The INCORRECT floor the lower threshold was fitted for (`FitOptions::incorrect_floor`).
    pub incorrect_floor: Option<IncorrectFloor>,
    /// For a few INCORRECT recalls near the usual target (0.55 to 0.75), the out-of-fold threshold that reaches it
    /// with the best precision, when cross-validated: how much precision a margin on recall would cost.
    pub operating_points: Vec<OperatingPoint>,
}

/// A lower threshold on out-of-fold probabilities and what INCORRECT does there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OperatingPoint {
    /// The recall asked for.
    pub recall: f32,
    /// The threshold: the lowest out-of-fold probability at which recall reaches `recall`.
    pub lower: f32,
    /// INCORRECT's precision at `lower`.
    pub precision: f32,
}

/// The recalls [`LearnedFit::operating_points`] reports.
const OPERATING_RECALLS: [f32; 5] = [0.55, 0.6, 0.65, 0.7, 0.75];

impl LearnedFit {
    /// This fit in brief.
    #[must_use]
    pub fn summary(&self) -> FitSummary {
        FitSummary {
            kind: self.model.model,
            features: self.model.features.len(),
            settings: self.settings.clone(),
            cv_auc: self.cv_auc,
            calibration: self.calibration.clone(),
        }
    }
}

/// Fits a [`LearnedModel`] on labelled samples.
///
/// The logistic model: features are standardised (mean, population standard deviation; a constant feature gets
/// scale 1, an unavailable value the mean). The logistic regression of "succeeded" is fitted by Newton's method
/// (iteratively reweighted least squares, step halving when the loss would rise) with an L2 penalty on the weights,
/// not the bias, until no parameter moves by more than 1e-10 (at most 100 steps). Each L2 strength of `options.l2`
/// is scored by the log loss of its stratified `options.folds`-fold out-of-fold probabilities (standardised on each
/// training part only), and the best kept.
///
/// The stumps model: gradient-boosted decision stumps on the raw features (Newton boosting of the log loss, a leaf
/// L2 of 1, an unavailable value contributing nothing), each combination of `options.stumps` scored by the same
/// out-of-fold log loss and the best kept; stumps with the same feature and threshold are merged in the model.
///
/// With `options.model` `None`, both are fitted and the one with the higher out-of-fold failure AUC kept.
/// The thresholds are fitted on the kept model's out-of-fold probabilities by [`calibrate_with_floor`] (so they are
/// not the optimistic in-sample ones); with fewer samples of a class than folds, on the final model's own
/// probabilities. Same samples in the same order, same model.
///
/// # Errors
/// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when there are no samples, a sample has another number
/// of values than [`FEATURE_NAMES`] or a non-finite value, every sample has the same label (the message says which),
/// the L2 list is empty or holds a value not above 0, the stump grid has an empty list, a shrinkage not in
/// `(0, 1]` or a zero, `options.features` is empty or names an unknown feature, or there are fewer than 2 folds.
pub fn fit_learned(samples: &[LearnedSample], options: &FitOptions) -> Result<LearnedFit> {
    let table = Table::new(samples, options)?;
    match options.model {
        Some(ModelKind::Logistic) => fit_logistic(&table, options),
        Some(ModelKind::Stumps) => fit_stumps(&table, options),
        None => {
            let logistic = fit_logistic(&table, options)?;
            let stumps = fit_stumps(&table, options)?;
            let compared = vec![logistic.summary(), stumps.summary()];
            let better = match (stumps.cv_auc, logistic.cv_auc) {
                (Some(s), Some(l)) => s > l,
                _ => false,
            };
            let mut kept = if better { stumps } else { logistic };
            kept.compared = compared;
            Ok(kept)
        }
    }
}

/// The samples projected on the fitted features, checked, with their folds.
struct Table {
    /// The feature names, in column order.
    names: Vec<String>,
    /// One row per sample, one column per feature.
    x: Vec<Vec<Option<f64>>>,
    labels: Vec<bool>,
    /// Each sample's fold (stratified: the i-th sample of each class goes to fold i mod folds).
    fold: Vec<usize>,
    folds: usize,
    /// Whether both classes have at least `folds` samples.
    cross_validate: bool,
}

impl Table {
    fn new(samples: &[LearnedSample], options: &FitOptions) -> Result<Self> {
        if options.l2.is_empty() || options.l2.iter().any(|l| !(l.is_finite() && *l > 0.0)) {
            return Err(Error::invalid_input(format!(
                "learned evaluator fit: l2 must list strengths above 0, got {:?}",
                options.l2
            )));
        }
        let grid = &options.stumps;
        if grid.shrinkage.is_empty()
            || grid.min_leaf.is_empty()
            || grid.rounds.is_empty()
            || grid.shrinkage.iter().any(|s| !(*s > 0.0 && *s <= 1.0))
            || grid.min_leaf.contains(&0)
            || grid.rounds.contains(&0)
        {
            return Err(Error::invalid_input(format!(
                "learned evaluator fit: the stump grid must list shrinkages in (0, 1] and min leaf sizes and rounds \
                 above 0, got {grid:?}"
            )));
        }
        if options.folds < 2 {
            return Err(Error::invalid_input(format!(
                "learned evaluator fit: folds must be at least 2, got {}",
                options.folds
            )));
        }
        let columns: Vec<usize> = match &options.features {
            None => (0..FEATURE_NAMES.len()).collect(),
            Some(names) if names.is_empty() => {
                return Err(Error::invalid_input("learned evaluator fit: the feature list is empty"));
            }
            Some(names) => names
                .iter()
                .map(|name| {
                    FEATURE_NAMES.iter().position(|n| n == name).ok_or_else(|| {
                        Error::invalid_input(format!("learned evaluator fit: `{name}` is not a feature"))
                    })
                })
                .collect::<Result<_>>()?,
        };
        let n = samples.len();
        if n == 0 {
            return Err(Error::invalid_input("learned evaluator fit: there are no samples"));
        }
        let d = FEATURE_NAMES.len();
        for (i, s) in samples.iter().enumerate() {
            if s.values.len() != d {
                return Err(Error::invalid_input(format!(
                    "learned evaluator fit: sample {i} has {} values for {d} features",
                    s.values.len()
                )));
            }
            if let Some(j) = s.values.iter().position(|v| v.is_some_and(|v| !v.is_finite())) {
                return Err(Error::invalid_input(format!(
                    "learned evaluator fit: sample {i} has a non-finite {}",
                    FEATURE_NAMES[j]
                )));
            }
        }
        let failures = samples.iter().filter(|s| !s.succeeded).count();
        if failures == 0 || failures == n {
            let which = if failures == 0 { "succeeded" } else { "failed" };
            return Err(Error::invalid_input(format!(
                "learned evaluator fit: every one of the {n} retrievals {which}; the fit needs both failed and \
                 successful ones"
            )));
        }
        let mut fold = vec![0usize; n];
        let (mut seen_ok, mut seen_failed) = (0usize, 0usize);
        for (i, s) in samples.iter().enumerate() {
            let counter = if s.succeeded { &mut seen_ok } else { &mut seen_failed };
            fold[i] = *counter % options.folds;
            *counter += 1;
        }
        Ok(Self {
            names: columns.iter().map(|&j| FEATURE_NAMES[j].to_owned()).collect(),
            x: samples.iter().map(|s| columns.iter().map(|&j| s.values[j]).collect()).collect(),
            labels: samples.iter().map(|s| s.succeeded).collect(),
            fold,
            folds: options.folds,
            cross_validate: failures >= options.folds && n - failures >= options.folds,
        })
    }

    fn len(&self) -> usize {
        self.labels.len()
    }

    /// The samples outside fold `k` (to fit on) and inside it (to predict).
    fn split(&self, k: usize) -> (Vec<usize>, Vec<usize>) {
        (0..self.len()).partition(|&i| self.fold[i] != k)
    }
}

/// The logistic model on `table`: L2 by cross-validated log loss, then [`finish`].
fn fit_logistic(table: &Table, options: &FitOptions) -> Result<LearnedFit> {
    let n = table.len();
    let mut cv_log_loss = Vec::new();
    let mut best: Option<(f64, f64, Vec<f64>)> = None;
    if table.cross_validate {
        for &l2 in &options.l2 {
            let mut oof = vec![0.0; n];
            for k in 0..table.folds {
                let (train, held_out) = table.split(k);
                let model = fit_on(&table.x, &table.labels, &train, l2)?;
                for i in held_out {
                    oof[i] = model.probability(&table.x[i]);
                }
            }
            let loss = log_loss(&oof, &table.labels);
            cv_log_loss.push((format!("L2 {l2}"), loss));
            if best.as_ref().is_none_or(|(_, b, _)| loss < *b) {
                best = Some((l2, loss, oof));
            }
        }
    }
    let (l2, oof) = match best {
        Some((l2, _, oof)) => (l2, Some(oof)),
        None => {
            let mut grid = options.l2.clone();
            grid.sort_by(f64::total_cmp);
            (grid[grid.len() / 2], None)
        }
    };
    let all: Vec<usize> = (0..n).collect();
    let fitted = fit_on(&table.x, &table.labels, &all, l2)?;
    let own: Vec<f64> = table.x.iter().map(|row| fitted.probability(row)).collect();
    let model = LearnedModel {
        model: ModelKind::Logistic,
        features: table.names.clone(),
        means: fitted.means,
        scales: fitted.scales,
        weights: fitted.weights,
        stumps: Vec::new(),
        bias: fitted.bias,
        lower: 0.0,
        upper: 1.0,
    };
    finish(table, options, model, format!("L2 {l2}"), cv_log_loss, &own, oof)
}

/// The stumps model on `table`: settings by cross-validated log loss, then [`finish`].
fn fit_stumps(table: &Table, options: &FitOptions) -> Result<LearnedFit> {
    let n = table.len();
    let grid = &options.stumps;
    let mut rounds = grid.rounds.clone();
    rounds.sort_unstable();
    rounds.dedup();
    let most = *rounds.last().expect("invariant: the grid is checked non-empty");
    let mut cv_log_loss = Vec::new();
    let mut best: Option<(stumps::Boosting, f64, Vec<f64>)> = None;
    if table.cross_validate {
        for &shrinkage in &grid.shrinkage {
            for &min_leaf in &grid.min_leaf {
                let settings = stumps::Boosting { shrinkage, min_leaf, rounds: most };
                // Out-of-fold logits after each number of rounds tried.
                let mut oof = vec![vec![0.0; n]; rounds.len()];
                for k in 0..table.folds {
                    let (train, held_out) = table.split(k);
                    let (bias, fitted) = stumps::boost(&table.x, &table.labels, &train, settings);
                    for i in held_out {
                        let mut logit = bias;
                        let mut done = 0;
                        for (r, &upto) in rounds.iter().enumerate() {
                            for s in fitted.iter().take(upto).skip(done) {
                                logit += s.output(&table.x[i]);
                            }
                            done = upto;
                            oof[r][i] = sigmoid(logit);
                        }
                    }
                }
                for (r, p) in rounds.iter().zip(oof) {
                    let loss = log_loss(&p, &table.labels);
                    let tried = stumps::Boosting { rounds: *r, ..settings };
                    cv_log_loss.push((describe_boosting(tried), loss));
                    if best.as_ref().is_none_or(|(_, b, _)| loss < *b) {
                        best = Some((tried, loss, p));
                    }
                }
            }
        }
    }
    let (settings, oof) = match best {
        Some((settings, _, oof)) => (settings, Some(oof)),
        None => {
            let middle = |v: &[f64]| {
                let mut v = v.to_vec();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let mut leaves = grid.min_leaf.clone();
            leaves.sort_unstable();
            let settings = stumps::Boosting {
                shrinkage: middle(&grid.shrinkage),
                min_leaf: leaves[leaves.len() / 2],
                rounds: rounds[rounds.len() / 2],
            };
            (settings, None)
        }
    };
    let all: Vec<usize> = (0..n).collect();
    let (bias, fitted) = stumps::boost(&table.x, &table.labels, &all, settings);
    let merged = stumps::merge(&fitted);
    let own: Vec<f64> =
        table.x.iter().map(|row| sigmoid(bias + merged.iter().map(|s| s.output(row)).sum::<f64>())).collect();
    // A model that found no split at all still needs a stump to be a valid stumps model: one that adds nothing.
    let stumps: Vec<Stump> = if merged.is_empty() {
        vec![Stump { feature: table.names[0].clone(), threshold: 0.0, below: 0.0, above: 0.0 }]
    } else {
        merged
            .iter()
            .map(|s| Stump {
                feature: table.names[s.col].clone(),
                threshold: s.threshold,
                below: s.below,
                above: s.above,
            })
            .collect()
    };
    let model = LearnedModel {
        model: ModelKind::Stumps,
        features: table.names.clone(),
        means: Vec::new(),
        scales: Vec::new(),
        weights: Vec::new(),
        stumps,
        bias,
        lower: 0.0,
        upper: 1.0,
    };
    finish(table, options, model, describe_boosting(settings), cv_log_loss, &own, oof)
}

fn describe_boosting(b: stumps::Boosting) -> String {
    format!("shrinkage {}, min leaf {}, {} rounds", b.shrinkage, b.min_leaf, b.rounds)
}

/// The thresholds of `model` (on the out-of-fold probabilities `oof` when there are some, else on its own
/// probabilities `own`), its AUCs, the fit.
fn finish(
    table: &Table,
    options: &FitOptions,
    mut model: LearnedModel,
    settings: String,
    cv_log_loss: Vec<(String, f64)>,
    own: &[f64],
    oof: Option<Vec<f64>>,
) -> Result<LearnedFit> {
    let as_samples = |p: &[f64]| -> Vec<CalibrationSample> {
        p.iter().zip(&table.labels).map(|(p, ok)| CalibrationSample { score: *p as f32, succeeded: *ok }).collect()
    };
    let train_auc = failure_auc(&as_samples(own));
    let cv_auc = oof.as_deref().and_then(|p| failure_auc(&as_samples(p)));
    let threshold_scores = oof.as_deref().unwrap_or(own);
    let calibration =
        calibrate_with_floor(&as_samples(threshold_scores), options.target_precision, options.incorrect_floor)?;
    model.lower = calibration.lower;
    model.upper = calibration.upper;
    model.validate()?;
    let fold_detection = match &oof {
        Some(p) => (0..table.folds)
            .map(|k| {
                let part: Vec<CalibrationSample> =
                    as_samples(p).into_iter().zip(&table.fold).filter(|(_, f)| **f == k).map(|(s, _)| s).collect();
                let (precision, recall, _) = detection_stats(&part, model.lower);
                (precision, recall)
            })
            .collect(),
        None => Vec::new(),
    };
    let operating_points = oof.as_deref().map_or_else(Vec::new, |p| operating_points(&as_samples(p)));
    let mut fit = LearnedFit {
        model,
        calibration,
        out_of_fold: oof.is_some(),
        settings,
        cv_auc,
        train_auc,
        cv_log_loss,
        compared: Vec::new(),
        out_of_fold_probabilities: oof,
        fold_detection,
        incorrect_floor: options.incorrect_floor,
        operating_points,
    };
    fit.compared.push(fit.summary());
    Ok(fit)
}

/// For each of [`OPERATING_RECALLS`], the lowest sample score at which INCORRECT (`score <= lower`) reaches that
/// recall (the one that flags the fewest queries), and its precision there.
fn operating_points(samples: &[CalibrationSample]) -> Vec<OperatingPoint> {
    let mut scores: Vec<f32> = samples.iter().map(|s| s.score.clamp(0.0, 1.0)).collect();
    scores.sort_by(f32::total_cmp);
    scores.dedup();
    OPERATING_RECALLS
        .iter()
        .filter_map(|&target| {
            scores.iter().find_map(|&lower| {
                let (precision, recall, _) = detection_stats(samples, lower);
                (recall >= target).then_some(OperatingPoint { recall: target, lower, precision })
            })
        })
        .collect()
}

/// A standardised logistic model over the table's features.
pub(crate) struct Fitted {
    pub(crate) means: Vec<f64>,
    pub(crate) scales: Vec<f64>,
    pub(crate) weights: Vec<f64>,
    pub(crate) bias: f64,
}

impl Fitted {
    fn z(&self, values: &[Option<f64>]) -> Vec<f64> {
        values
            .iter()
            .zip(self.means.iter().zip(&self.scales))
            .map(|(v, (m, s))| v.map_or(0.0, |v| (v - m) / s))
            .collect()
    }

    fn probability(&self, values: &[Option<f64>]) -> f64 {
        let z = self.z(values);
        sigmoid(self.bias + z.iter().zip(&self.weights).map(|(z, w)| z * w).sum::<f64>())
    }
}

/// Standardises on the samples `rows` of `x` and fits the logistic regression of `labels` there.
pub(crate) fn fit_on(x: &[Vec<Option<f64>>], labels: &[bool], rows: &[usize], l2: f64) -> Result<Fitted> {
    let d = x.first().map_or(0, Vec::len);
    let mut means = vec![0.0; d];
    let mut scales = vec![1.0; d];
    for j in 0..d {
        let present: Vec<f64> = rows.iter().filter_map(|&i| x[i][j]).collect();
        if present.is_empty() {
            continue;
        }
        let mean = present.iter().sum::<f64>() / present.len() as f64;
        let var = present.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / present.len() as f64;
        means[j] = mean;
        scales[j] = if var.sqrt() > 1e-9 { var.sqrt() } else { 1.0 };
    }
    let mut model = Fitted { means, scales, weights: vec![0.0; d], bias: 0.0 };
    let z: Vec<Vec<f64>> = rows.iter().map(|&i| model.z(&x[i])).collect();
    let y: Vec<f64> = rows.iter().map(|&i| if labels[i] { 1.0 } else { 0.0 }).collect();
    let theta = newton_logistic(&z, &y, l2)?;
    model.bias = theta[0];
    model.weights = theta[1..].to_vec();
    Ok(model)
}

/// The penalised negative log-likelihood of `theta` (bias first) on `x`, `y`.
fn objective(x: &[Vec<f64>], y: &[f64], theta: &[f64], l2: f64) -> f64 {
    let loss: f64 = x
        .iter()
        .zip(y)
        .map(|(xi, yi)| {
            let eta = theta[0] + xi.iter().zip(&theta[1..]).map(|(a, b)| a * b).sum::<f64>();
            // -log sigmoid(eta) for y = 1, -log(1 - sigmoid(eta)) for y = 0.
            if *yi > 0.5 { softplus(-eta) } else { softplus(eta) }
        })
        .sum();
    loss + 0.5 * l2 * theta[1..].iter().map(|w| w * w).sum::<f64>()
}

/// Newton's method for L2-penalised logistic regression; returns `[bias, weights...]`.
// Matrix code reads best with indices.
#[allow(clippy::needless_range_loop)]
fn newton_logistic(x: &[Vec<f64>], y: &[f64], l2: f64) -> Result<Vec<f64>> {
    const MAX_STEPS: usize = 100;
    const TOLERANCE: f64 = 1e-10;
    let d = x.first().map_or(0, Vec::len) + 1;
    let mut theta = vec![0.0; d];
    let mut current = objective(x, y, &theta, l2);
    for _ in 0..MAX_STEPS {
        let mut g = vec![0.0; d];
        let mut h = vec![vec![0.0; d]; d];
        for (xi, yi) in x.iter().zip(y) {
            let row: Vec<f64> = std::iter::once(1.0).chain(xi.iter().copied()).collect();
            let eta: f64 = row.iter().zip(&theta).map(|(a, b)| a * b).sum();
            let p = sigmoid(eta);
            let w = (p * (1.0 - p)).max(1e-12);
            for a in 0..d {
                g[a] += (p - yi) * row[a];
                for b in 0..=a {
                    h[a][b] += w * row[a] * row[b];
                }
            }
        }
        for a in 1..d {
            g[a] += l2 * theta[a];
            h[a][a] += l2;
        }
        h[0][0] += 1e-9;
        for a in 0..d {
            for b in a + 1..d {
                h[a][b] = h[b][a];
            }
        }
        let step = cholesky_solve(&h, &g)?;
        let mut scale = 1.0;
        let mut next = theta.clone();
        let mut improved = false;
        for _ in 0..40 {
            next = theta.iter().zip(&step).map(|(t, s)| t - scale * s).collect();
            let value = objective(x, y, &next, l2);
            if value <= current {
                current = value;
                improved = true;
                break;
            }
            scale *= 0.5;
        }
        let moved = step.iter().map(|s| (s * scale).abs()).fold(0.0, f64::max);
        if !improved {
            break;
        }
        theta = next;
        if moved < TOLERANCE {
            break;
        }
    }
    Ok(theta)
}

/// Solves `a x = b` for a symmetric positive definite `a` by Cholesky decomposition.
#[allow(clippy::needless_range_loop)]
fn cholesky_solve(a: &[Vec<f64>], b: &[f64]) -> Result<Vec<f64>> {
    let n = b.len();
    let mut l = vec![vec![0.0; n]; n];
    for i in 0..n {
        for j in 0..=i {
            let sum: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let v = a[i][i] - sum;
                if !(v > 0.0 && v.is_finite()) {
                    return Err(Error::permanent(
                        "learned evaluator fit: the Hessian is not positive definite (the features are degenerate)",
                    ));
                }
                l[i][j] = v.sqrt();
            } else {
                l[i][j] = (a[i][j] - sum) / l[j][j];
            }
        }
    }
    let mut z = vec![0.0; n];
    for i in 0..n {
        let sum: f64 = (0..i).map(|k| l[i][k] * z[k]).sum();
        z[i] = (b[i] - sum) / l[i][i];
    }
    let mut x = vec![0.0; n];
    for i in (0..n).rev() {
        let sum: f64 = (i + 1..n).map(|k| l[k][i] * x[k]).sum();
        x[i] = (z[i] - sum) / l[i][i];
    }
    Ok(x)
}

/// `ln(1 + e^x)`, without overflow.
fn softplus(x: f64) -> f64 {
    if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() }
}

/// Mean log loss of probabilities `p` for labels `y` (clamped away from 0 and 1).
fn log_loss(p: &[f64], y: &[bool]) -> f64 {
    let total: f64 = p
        .iter()
        .zip(y)
        .map(|(p, ok)| {
            let p = p.clamp(1e-12, 1.0 - 1e-12);
            if *ok { -p.ln() } else { -(1.0 - p).ln() }
        })
        .sum();
    total / p.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use ragtune_core::ErrorKind;

    use super::*;
    use crate::crag::test_candidate as cand;

    /// A deterministic pseudo-random number in `[0, 1)` from `i` (no RNG crate needed for fixtures).
    fn noise(i: u64) -> f64 {
        let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(0x2545_F491_4F6C_DD1D);
        x ^= x >> 33;
        x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        x ^= x >> 33;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `n` samples whose success depends on `dense_top` and `keyword_overlap` (plus `overlap` of noise: 0 makes
    /// them separable); other features are noise or missing.
    fn synthetic(n: u64, overlap: f64) -> Vec<LearnedSample> {
        (0..n)
            .map(|i| {
                let succeeded = noise(i * 7 + 1) > 0.25;
                let sign = if succeeded { 1.0 } else { -1.0 };
                let mut values = vec![None; FEATURE_NAMES.len()];
                values[0] = Some(0.6 + sign * 0.1 + (noise(i * 7 + 2) - 0.5) * (0.05 + overlap));
                values[11] = Some(0.5 + sign * 0.2 + (noise(i * 7 + 3) - 0.5) * (0.1 + overlap));
                values[3] = Some(noise(i * 7 + 4) * 3.0);
                values[15] = Some(1.0); // constant
                values[16] = if i % 3 == 0 { None } else { Some(noise(i * 7 + 5)) };
                LearnedSample { values, succeeded }
            })
            .collect()
    }

    /// Samples with the given labels, separable by `dense_top`.
    fn labelled(labels: &[bool]) -> Vec<LearnedSample> {
        labels
            .iter()
            .enumerate()
            .map(|(i, ok)| {
                let mut values = vec![None; FEATURE_NAMES.len()];
                values[0] = Some(if *ok { 0.7 } else { 0.4 } + noise(i as u64) * 0.1);
                LearnedSample { values, succeeded: *ok }
            })
            .collect()
    }

    /// A candidate with explicit BM25 and dense provenance `(score, rank)`.
    fn hc(id: &str, text: &str, score: f32, bm25: Option<(f32, u32)>, dense: Option<(f32, u32)>) -> Candidate {
        let mut c = cand(id, id, text, score, &[]);
        for (name, s) in [("bm25", bm25), ("dense", dense)] {
            if let Some((score, rank)) = s {
                c.sources.insert(name.to_owned(), ragtune_core::SourceScore { score, rank });
            }
        }
        c
    }

    /// Fits `samples` with the default options and checks the AUCs reach `min_auc`.
    fn check(samples: &[LearnedSample], min_auc: f64) -> LearnedFit {
        let fit = fit_learned(samples, &FitOptions::default()).expect("the fit works");
        assert!(fit.train_auc.unwrap() >= min_auc, "{fit:#?}");
        if let Some(cv) = fit.cv_auc {
            assert!(cv >= min_auc - 0.05, "{fit:#?}");
        }
        assert!(0.0 <= fit.model.lower && fit.model.lower < fit.model.upper && fit.model.upper <= 1.0);
        fit.model.validate().unwrap();
        fit
    }

    #[test]
    fn separable_data_is_separated() {
        let fit = check(&synthetic(200, 0.0), 0.999);
        assert!(fit.out_of_fold);
        let w = &fit.model.weights;
        // The two informative features carry the decision, in the right direction; the constant one nothing.
        assert!(w[0] > 0.5 && w[11] > 0.5, "{w:?}");
        assert!(w[3].abs() < w[0].abs() / 3.0, "{w:?}");
        assert_eq!(w[15], 0.0);
        assert_eq!(fit.model.scales[15], 1.0);
        assert_eq!(fit.calibration.incorrect_recall, 1.0, "{fit:#?}");
    }

    #[test]
    fn noisy_data_still_ranks() {
        let fit = check(&synthetic(300, 0.4), 0.8);
        assert_eq!(fit.cv_log_loss.len(), FitOptions::default().l2.len());
        assert!(fit.cv_log_loss.iter().all(|(_, l)| l.is_finite()));
    }

    #[test]
    fn the_fit_is_deterministic_and_standardises() {
        let samples = synthetic(120, 0.2);
        let a = fit_learned(&samples, &FitOptions::default()).unwrap();
        let b = fit_learned(&samples, &FitOptions::default()).unwrap();
        assert_eq!(a, b);
        // Means and scales are the training statistics of the available values.
        let present: Vec<f64> = samples.iter().filter_map(|s| s.values[16]).collect();
        let mean = present.iter().sum::<f64>() / present.len() as f64;
        let sd = (present.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / present.len() as f64).sqrt();
        assert!((a.model.means[16] - mean).abs() < 1e-12 && (a.model.scales[16] - sd).abs() < 1e-12);
        // Rescaling a feature changes its mean and scale but not the predictions.
        let scaled: Vec<LearnedSample> = samples
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.values[0] = s.values[0].map(|v| v * 1000.0 + 5.0);
                s
            })
            .collect();
        let c = fit_learned(&scaled, &FitOptions::default()).unwrap();
        assert!(
            (c.model.weights[0] - a.model.weights[0]).abs() < 1e-6,
            "{} {}",
            c.model.weights[0],
            a.model.weights[0]
        );
        assert!((c.model.lower - a.model.lower).abs() < 1e-6 && (c.model.upper - a.model.upper).abs() < 1e-6);
    }

    #[test]
    fn degenerate_sets_are_refused() {
        let one_class: Vec<LearnedSample> =
            synthetic(50, 0.0).into_iter().map(|s| LearnedSample { succeeded: true, ..s }).collect();
        let mut short = synthetic(10, 0.0);
        short[3].values.pop();
        let mut nan = synthetic(10, 0.0);
        nan[2].values[0] = Some(f64::NAN);
        let cases: [(Vec<LearnedSample>, FitOptions, &str); 6] = [
            (Vec::new(), FitOptions::default(), "no samples"),
            (one_class, FitOptions::default(), "every one of the 50 retrievals succeeded"),
            (short, FitOptions::default(), "sample 3 has 21 values for 22 features"),
            (nan, FitOptions::default(), "sample 2 has a non-finite dense_top"),
            (synthetic(10, 0.0), FitOptions { l2: vec![0.0], ..FitOptions::default() }, "l2 must list"),
            (synthetic(10, 0.0), FitOptions { folds: 1, ..FitOptions::default() }, "folds must be"),
        ];
        for (samples, options, needle) in cases {
            let err = fit_learned(&samples, &options).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
            assert!(err.message().contains(needle), "{needle}: {}", err.message());
        }
        // Too few of a class to cross-validate: thresholds from the model's own probabilities, said so.
        let few = labelled(&[false, true, true, true, false, true, true, true]);
        let fit = fit_learned(&few, &FitOptions::default()).unwrap();
        assert!(!fit.out_of_fold && fit.cv_auc.is_none() && fit.cv_log_loss.is_empty());
    }

    fn model() -> LearnedModel {
        LearnedModel {
            model: ModelKind::Logistic,
            features: vec!["dense_top".into(), "keyword_overlap".into(), "top_agree".into()],
            means: vec![0.6, 0.5, 0.5],
            scales: vec![0.1, 0.25, 0.5],
            weights: vec![2.0, 1.0, 0.5],
            stumps: Vec::new(),
            bias: 1.0,
            lower: 0.3,
            upper: 0.8,
        }
    }

    fn judge(model: LearnedModel, query: &str, candidates: &[Candidate]) -> RelevanceJudgement {
        LearnedEvaluator::new(model).unwrap().judge(query, candidates)
    }

    /// A strong hybrid retrieval: high cosine, the same top in both lists, every keyword of "scurvy vitamin" found.
    fn strong_retrieval() -> [Candidate; 2] {
        [
            cand("a#0", "a", "Scurvy is caused by a lack of vitamin C.", 0.9, &[("bm25", 12.0), ("dense", 0.8)]),
            cand("b#0", "b", "Vitamin C deficiency in sailors.", 0.5, &[("dense", 0.6), ("bm25", 4.0)]),
        ]
    }

    #[test]
    fn decisions_follow_the_probability_and_name_the_features_that_pushed() {
        let good = strong_retrieval();
        let j = judge(model(), "scurvy vitamin", &good);
        // z: dense_top (0.8-0.6)/0.1 = 2 → +4; keyword_overlap (1-0.5)/0.25 = 2 → +2; top_agree (1-0.5)/0.5 → +0.5.
        assert!((j.criteria["logit"] - 7.5).abs() < 1e-5, "{j:#?}");
        assert_eq!(j.verdict, Verdict::Correct);
        assert!((j.score - sigmoid(7.5) as f32).abs() < 1e-6);
        assert!((j.criteria["dense_top:contribution"] - 4.0).abs() < 1e-5);
        assert_eq!(j.criteria["dense_top"], 0.8);
        assert_eq!(
            j.reasons[0],
            "P(retrieval succeeded) 1.00 from 3 features: logit 7.50 = bias 1.00 + contributions 6.50"
        );
        assert_eq!(
            j.reasons[1],
            "toward CORRECT: dense_top 0.800 (+4.00), keyword_overlap 1.000 (+2.00), top_agree 1.000 (+0.50)"
        );
        assert_eq!(j.reasons.last().unwrap(), "CORRECT: P 1.00 >= upper 0.80");
        assert_eq!(j.per_candidate.len(), 2);
        assert_eq!(j.cost, Cost::ZERO);

        // A weak one: low cosine, the lists disagree, no keyword found.
        let bad = [
            cand("c#0", "c", "The violin is played with a bow.", 0.5, &[("bm25", 1.0), ("dense", 0.2)]),
            cand("d#0", "d", "Chess is a board game.", 0.4, &[("dense", 0.3), ("bm25", 0.5)]),
        ];
        let j = judge(model(), "scurvy vitamin", &bad);
        assert_eq!(j.verdict, Verdict::Incorrect, "{j:#?}");
        assert!(
            j.reasons[1].starts_with(
                "toward INCORRECT: dense_top 0.300 (-6.00), keyword_overlap 0.000 (-2.00), top_agree 0.000 (-0.50)"
            ),
            "{:?}",
            j.reasons
        );
        assert!(j.reasons.last().unwrap().starts_with("INCORRECT: P 0.00 <= lower 0.30"));

        // In between: AMBIGUOUS.
        let m = LearnedModel { bias: -5.5, ..model() };
        assert_eq!(judge(m, "scurvy vitamin", &good).verdict, Verdict::Ambiguous);
    }

    #[test]
    fn unavailable_features_count_as_the_mean_and_are_reported() {
        // BM25-only retrieval: no dense scores, so dense_top and top_agree are unavailable.
        let bm25_only = [
            cand("a#0", "a", "Scurvy is caused by a lack of vitamin C.", 12.0, &[("bm25", 12.0)]),
            cand("b#0", "b", "Vitamin C deficiency in sailors.", 4.0, &[("bm25", 4.0)]),
        ];
        let j = judge(model(), "scurvy vitamin", &bm25_only);
        assert!((j.criteria["logit"] - 3.0).abs() < 1e-6, "only keyword_overlap contributes: {j:#?}");
        assert_eq!(j.criteria["dense_top:contribution"], 0.0);
        assert!(!j.criteria.contains_key("dense_top"));
        let reason = j.reasons.iter().find(|r| r.starts_with("unavailable")).expect("a reason names them");
        assert!(reason.contains("dense_top, top_agree") && reason.contains("BM25-only"), "{reason}");
        assert_eq!(j.verdict, Verdict::Correct);

        let f = features("scurvy vitamin", &bm25_only);
        assert_eq!(f.get("dense_top"), None);
        assert_eq!(f.get("bm25_top"), Some(13.0_f64.ln()));
        assert_eq!(f.get("bm25_margin"), Some(8.0 / 12.0));
        assert_eq!(f.get("bm25_per_keyword"), Some(6.0));
        assert_eq!(f.get("top_agree"), None);

        // No candidates at all: INCORRECT, as every evaluator says.
        let j = judge(model(), "q", &[]);
        assert_eq!(
            (j.verdict, j.score, j.reasons.as_slice()),
            (Verdict::Incorrect, 0.0, &["no candidates".to_owned()][..])
        );
    }

    #[test]
    fn features_of_a_hybrid_list() {
        let list = [
            hc("a", "Scurvy and vitamin C.", 0.9, Some((9.0, 1)), Some((0.7, 2))),
            hc("b", "Sailors at sea.", 0.6, Some((3.0, 2)), Some((0.75, 1))),
            hc("c", "Oranges.", 0.3, None, Some((0.5, 3))),
        ];
        let f = features("scurvy vitamin sailors", &list);
        assert_eq!(f.get("dense_top"), Some(f64::from(0.75_f32)));
        assert!((f.get("dense_margin").unwrap() - 0.05).abs() < 1e-6);
        assert_eq!(f.get("bm25_margin"), Some(6.0 / 9.0));
        assert_eq!(f.get("top_agree"), Some(0.0), "the BM25 best is a, the dense best b");
        assert_eq!(f.get("top5_overlap"), Some(0.4), "a and b are in both top 5s, c in no BM25 list");
        assert_eq!(f.get("bm25_top_dense_rank"), Some(2.0_f64.ln()));
        assert_eq!(f.get("dense_top_bm25_rank"), Some(2.0_f64.ln()));
        assert_eq!(f.get("top_keyword_overlap"), Some(2.0 / 3.0));
        assert_eq!(f.get("query_keywords"), Some(3.0_f64.ln_1p()));
        let e = f.get("fused_entropy").unwrap();
        assert!(e > 0.0 && e < 1.0, "{e}");
        assert!(f.unavailable.is_empty());
        assert!(f.values.iter().all(Option::is_some), "{f:?}");
        assert!((normalised_entropy([1.0, 1.0, 1.0].into_iter()) - 1.0).abs() < 1e-12);
        assert_eq!(normalised_entropy([1.0].into_iter()), 0.0);
        assert_eq!(normalised_entropy([0.0, 0.0].into_iter()), 1.0);
    }

    #[test]
    fn query_performance_predictors_of_a_hybrid_list() {
        let list = [
            hc("a", "Scurvy and vitamin C.", 0.9, Some((9.0, 1)), Some((0.7, 2))),
            hc("b", "Sailors at sea.", 0.6, Some((3.0, 2)), Some((0.75, 1))),
            hc("c", "Oranges.", 0.3, None, Some((0.5, 3))),
        ];
        let f = features("scurvy vitamin sailors", &list);
        // BM25 lists a (9) and b (3): mean 6, standard deviation 3.
        assert_eq!(f.get("bm25_nqc"), Some(0.5));
        assert!((f.get("bm25_wig").unwrap() - 3.0 / 3.0_f64.sqrt()).abs() < 1e-12);
        // Dense 0.75, 0.7, 0.5: mean 0.65, deviations 0.1, 0.05, -0.15.
        let sd = ((0.01 + 0.0025 + 0.0225) / 3.0_f64).sqrt();
        assert!((f.get("dense_nqc").unwrap() - sd / 0.65).abs() < 1e-6, "{f:?}");
        assert!((f.get("fused_margin").unwrap() - 0.3).abs() < 1e-6);
        // a holds scurvy and vitamin, b sailors, c none: (2 + 1 + 0) / 9.
        assert!((f.get("mean_keyword_overlap").unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(commitment(&[2.0]), 0.0);
        assert_eq!(commitment(&[-1.0, 1.0]), 0.0, "a mean not above 0");
        assert_eq!(commitment(&[1.0, 1.0, 1.0]), 0.0);

        // One candidate, BM25 only: no dense predictors, and the margins and commitments of a single score are 0.
        let one = [hc("a", "Scurvy.", 4.0, Some((4.0, 1)), None)];
        let f = features("scurvy", &one);
        assert_eq!(f.get("dense_nqc"), None);
        assert_eq!((f.get("bm25_nqc"), f.get("bm25_wig"), f.get("fused_margin")), (Some(0.0), Some(0.0), Some(0.0)));
        assert_eq!(f.get("mean_keyword_overlap"), Some(1.0));
        // No keywords: the keyword share is 0 and WIG divides by 1.
        let f = features("what is it", &list);
        assert_eq!(f.get("mean_keyword_overlap"), Some(0.0));
        assert_eq!(f.get("bm25_wig"), Some(3.0));
    }

    /// A stumps model over two features: dense_top's two stumps and keyword_overlap's one.
    fn stumps_model() -> LearnedModel {
        let stump = |feature: &str, threshold, below, above| Stump { feature: feature.into(), threshold, below, above };
        LearnedModel {
            model: ModelKind::Stumps,
            features: vec!["dense_top".into(), "keyword_overlap".into()],
            means: Vec::new(),
            scales: Vec::new(),
            weights: Vec::new(),
            stumps: vec![
                stump("dense_top", 0.5, -1.0, 0.5),
                stump("keyword_overlap", 0.5, -0.75, 0.25),
                stump("dense_top", 0.7, -0.25, 1.0),
            ],
            bias: 0.5,
            lower: 0.3,
            upper: 0.8,
        }
    }

    #[test]
    fn a_stumps_model_explains_by_the_sum_of_each_features_stumps() {
        let good = strong_retrieval();
        let j = judge(stumps_model(), "scurvy vitamin", &good);
        // dense_top 0.8: 0.5 + 1.0; keyword_overlap 1: 0.25; logit 0.5 + 1.5 + 0.25.
        assert!((j.criteria["logit"] - 2.25).abs() < 1e-6, "{j:#?}");
        assert_eq!(j.criteria["dense_top:contribution"], 1.5);
        assert_eq!(j.criteria["keyword_overlap:contribution"], 0.25);
        assert_eq!(
            j.reasons[0],
            "P(retrieval succeeded) 0.90 from 2 features: logit 2.25 = bias 0.50 + contributions 1.75"
        );
        assert_eq!(j.reasons[1], "toward CORRECT: dense_top 0.800 (+1.50), keyword_overlap 1.000 (+0.25)");
        assert_eq!(j.verdict, Verdict::Correct);

        // dense_top 0.6 (+0.5 - 0.25) and no keyword found (-0.75): both sides named.
        let mixed = [cand("c#0", "c", "The violin is played with a bow.", 0.5, &[("bm25", 1.0), ("dense", 0.6)])];
        let j = judge(stumps_model(), "scurvy vitamin", &mixed);
        assert!((j.criteria["logit"] - 0.0).abs() < 1e-6, "{j:#?}");
        assert_eq!(j.reasons[1], "toward INCORRECT: keyword_overlap 0.000 (-0.75)");
        assert_eq!(j.reasons[2], "toward CORRECT: dense_top 0.600 (+0.25)");
        assert_eq!(j.verdict, Verdict::Ambiguous);

        // BM25 only: dense_top is unavailable and its stumps add nothing.
        let bm25_only = [cand("a#0", "a", "Scurvy and vitamin C.", 12.0, &[("bm25", 12.0)])];
        let j = judge(stumps_model(), "scurvy vitamin", &bm25_only);
        assert_eq!(j.criteria["dense_top:contribution"], 0.0);
        assert!((j.criteria["logit"] - 0.75).abs() < 1e-6);
        assert!(j.reasons.iter().any(|r| r.starts_with("unavailable") && r.contains("dense_top")), "{:?}", j.reasons);

        // The section round-trips, and a file without `model` is a logistic one.
        let json = serde_json::to_string(&stumps_model()).unwrap();
        assert!(json.contains(r#""model":"stumps""#) && !json.contains("means"), "{json}");
        assert_eq!(serde_json::from_str::<LearnedModel>(&json).unwrap(), stumps_model());
        let mut old = serde_json::to_value(model()).unwrap();
        old.as_object_mut().unwrap().remove("model");
        assert_eq!(serde_json::from_value::<LearnedModel>(old).unwrap(), model());
    }

    #[test]
    fn a_first_version_model_computes_what_it_did() {
        // A model over the first 17 features (as every file before the predictors were added), judged on a hybrid
        // list: the logit is the bias plus Σ weight * (value - mean) / scale over exactly those 17, whatever the
        // features appended since.
        let names: Vec<String> = FEATURE_NAMES[..FIRST_VERSION_FEATURES].iter().map(|n| (*n).to_owned()).collect();
        let n = names.len();
        let m = LearnedModel {
            model: ModelKind::Logistic,
            features: names,
            means: (0..n).map(|i| 0.1 * i as f64).collect(),
            scales: (0..n).map(|i| 0.5 + 0.1 * i as f64).collect(),
            weights: (0..n).map(|i| if i % 2 == 0 { 0.3 } else { -0.2 }).collect(),
            stumps: Vec::new(),
            bias: 0.4,
            lower: 0.3,
            upper: 0.8,
        };
        let list = [
            hc("a", "Scurvy and vitamin C.", 0.9, Some((9.0, 1)), Some((0.7, 2))),
            hc("b", "Sailors at sea.", 0.6, Some((3.0, 2)), Some((0.75, 1))),
        ];
        let f = features("scurvy vitamin sailors", &list);
        let expected =
            m.bias + (0..n).map(|i| m.weights[i] * (f.values[i].unwrap() - m.means[i]) / m.scales[i]).sum::<f64>();
        let evaluator = LearnedEvaluator::new(m).unwrap();
        let (logit, contributions) = evaluator.explain(&f);
        assert_eq!(contributions.len(), FIRST_VERSION_FEATURES);
        assert!((logit - expected).abs() < 1e-12, "{logit} {expected}");
        // And the first 17 features' values of a fixed list are pinned (the appended ones are computed after them).
        assert_eq!(FEATURE_NAMES[FIRST_VERSION_FEATURES - 1], "query_keywords");
        assert_eq!(FEATURE_NAMES[FIRST_VERSION_FEATURES], "dense_nqc");
    }

    #[test]
    fn stumps_are_fitted_separate_and_deterministic() {
        let options = FitOptions { model: Some(ModelKind::Stumps), ..FitOptions::default() };
        let samples = synthetic(200, 0.0);
        let fit = fit_learned(&samples, &options).unwrap();
        assert_eq!(fit.model.model, ModelKind::Stumps);
        assert!(fit.train_auc.unwrap() > 0.999 && fit.cv_auc.unwrap() > 0.99, "{fit:#?}");
        assert_eq!(fit.calibration.incorrect_recall, 1.0);
        let grid = &options.stumps;
        assert_eq!(fit.cv_log_loss.len(), grid.shrinkage.len() * grid.min_leaf.len() * grid.rounds.len());
        // The informative features carry the model; the constant one has no stump.
        assert!(fit.model.stumps.iter().all(|s| s.feature != "diversity"), "{:?}", fit.model.stumps);
        assert!(fit.model.stumps.iter().any(|s| s.feature == "dense_top" || s.feature == "keyword_overlap"));
        // Merged: no two stumps share a feature and a threshold.
        let keys: BTreeSet<(String, u64)> =
            fit.model.stumps.iter().map(|s| (s.feature.clone(), s.threshold.to_bits())).collect();
        assert_eq!(keys.len(), fit.model.stumps.len());
        fit.model.validate().unwrap();
        // Same input, same model.
        assert_eq!(fit_learned(&samples, &options).unwrap(), fit);

        // The evaluator over the stored (merged) stumps ranks the samples as the fit did.
        let evaluator = LearnedEvaluator::new(fit.model.clone()).unwrap();
        let scored: Vec<CalibrationSample> = samples
            .iter()
            .map(|s| {
                let (logit, _) = evaluator.explain(&Features { values: s.values.clone(), unavailable: Vec::new() });
                CalibrationSample { score: sigmoid(logit) as f32, succeeded: s.succeeded }
            })
            .collect();
        assert!((failure_auc(&scored).unwrap() - fit.train_auc.unwrap()).abs() < 1e-3);
    }

    #[test]
    fn auto_keeps_the_model_with_the_better_out_of_fold_auc() {
        // Success needs dense_top in a middle band: a step function stumps can fit and a line cannot.
        let samples: Vec<LearnedSample> = (0..300u64)
            .map(|i| {
                let x = noise(i * 3 + 1);
                let mut values = vec![None; FEATURE_NAMES.len()];
                values[0] = Some(x);
                values[11] = Some(noise(i * 3 + 2));
                LearnedSample { values, succeeded: (0.3..0.7).contains(&x) }
            })
            .collect();
        let auto = FitOptions { model: None, ..FitOptions::default() };
        let fit = fit_learned(&samples, &auto).unwrap();
        assert_eq!(fit.compared.len(), 2);
        let (logistic, stumps) = (&fit.compared[0], &fit.compared[1]);
        assert_eq!((logistic.kind, stumps.kind), (ModelKind::Logistic, ModelKind::Stumps));
        assert!(stumps.cv_auc.unwrap() > logistic.cv_auc.unwrap() + 0.2, "{:?}", fit.compared);
        assert_eq!(fit.model.model, ModelKind::Stumps);
        assert_eq!(fit.cv_auc, stumps.cv_auc);

        // On linearly separable data the logistic one is at least as good, and a tie keeps it.
        let fit = fit_learned(&synthetic(200, 0.0), &auto).unwrap();
        assert!(fit.compared[0].cv_auc >= fit.compared[1].cv_auc || fit.model.model == ModelKind::Stumps);
        if fit.compared[0].cv_auc == fit.compared[1].cv_auc {
            assert_eq!(fit.model.model, ModelKind::Logistic);
        }

        // A feature subset: the model names exactly those features.
        let subset = FitOptions { features: Some(vec!["keyword_overlap".into(), "dense_top".into()]), ..auto };
        let fit = fit_learned(&synthetic(200, 0.0), &subset).unwrap();
        assert_eq!(fit.model.features, ["keyword_overlap", "dense_top"]);
        let bad = FitOptions { features: Some(vec!["nope".into()]), ..FitOptions::default() };
        assert!(fit_learned(&synthetic(20, 0.0), &bad).unwrap_err().message().contains("`nope` is not a feature"));
    }

    #[test]
    fn validate_names_the_field() {
        let cases = [
            (LearnedModel { features: Vec::new(), ..model() }, "features is empty"),
            (
                LearnedModel { features: vec!["dense_top".into(), "nope".into(), "top_agree".into()], ..model() },
                "`nope`",
            ),
            (
                LearnedModel { features: vec!["dense_top".into(), "dense_top".into(), "top_agree".into()], ..model() },
                "twice",
            ),
            (LearnedModel { means: vec![0.0], ..model() }, "means has 1 values for 3 features"),
            (
                LearnedModel { weights: vec![0.0, f64::NAN, 0.0], ..model() },
                "weights[1] (keyword_overlap) must be finite",
            ),
            (LearnedModel { scales: vec![1.0, 0.0, 1.0], ..model() }, "scales[1] (keyword_overlap) must be above 0"),
            (LearnedModel { bias: f64::INFINITY, ..model() }, "bias"),
            (LearnedModel { lower: 0.9, ..model() }, "lower (0.9) must be below upper (0.8)"),
            (LearnedModel { upper: 1.5, ..model() }, "upper must be within [0, 1]"),
            (LearnedModel { stumps: stumps_model().stumps, ..model() }, "a logistic model has no stumps"),
            (LearnedModel { stumps: Vec::new(), ..stumps_model() }, "needs at least one stump"),
            (LearnedModel { weights: vec![1.0, 1.0], ..stumps_model() }, "has no means, scales or weights"),
            (
                LearnedModel { features: vec!["dense_top".into()], ..stumps_model() },
                "stumps[1] splits on `keyword_overlap`, which features does not name",
            ),
            (
                LearnedModel {
                    stumps: vec![Stump { feature: "dense_top".into(), threshold: f64::NAN, below: 0.0, above: 0.0 }],
                    ..stumps_model()
                },
                "stumps[0].threshold (dense_top) must be finite",
            ),
        ];
        for (m, needle) in cases {
            let err = LearnedEvaluator::new(m).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
            assert!(err.message().contains(needle), "{needle}: {}", err.message());
        }
    }

    #[test]
    fn serde_round_trip() {
        let m = model();
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<LearnedModel>(&json).unwrap(), m);
        assert!(serde_json::from_str::<LearnedModel>(r#"{"features": []}"#).is_err());
    }

    #[test]
    fn newton_matches_a_known_solution() {
        // One feature, symmetric data: the bias is 0 and the weight solves Σ (y - p) x = l2 w.
        let x = vec![vec![-1.0], vec![-1.0], vec![1.0], vec![1.0], vec![-1.0], vec![1.0]];
        let y = vec![0.0, 0.0, 1.0, 1.0, 1.0, 0.0];
        let theta = newton_logistic(&x, &y, 1.0).unwrap();
        assert!(theta[0].abs() < 1e-9, "{theta:?}");
        let w = theta[1];
        let grad: f64 = x.iter().zip(&y).map(|(xi, yi)| (yi - sigmoid(w * xi[0])) * xi[0]).sum::<f64>() - w;
        assert!(grad.abs() < 1e-9, "{theta:?}");
        assert!(w > 0.0);
    }
}
