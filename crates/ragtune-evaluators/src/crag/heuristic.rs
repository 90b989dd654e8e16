//! The heuristic CRAG evaluator: four cheap criteria, a weighted sum and two thresholds, with no model at all.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use async_trait::async_trait;
use ragtune_core::text::{keywords, words};
use ragtune_core::{Candidate, Cost, Ctx, Error, RelevanceEvaluator, RelevanceJudgement, Result, Verdict};
use serde::{Deserialize, Serialize};

use crate::text::estimate_tokens;

/// The criteria keys of [`RelevanceJudgement::criteria`] written by [`HeuristicEvaluator`].
const KEYWORD_OVERLAP: &str = "keyword_overlap";
const SEMANTIC_COHERENCE: &str = "semantic_coherence";
const LENGTH_ADEQUACY: &str = "length_adequacy";
const DIVERSITY: &str = "diversity";

/// Keywords at least this long (in characters) also match words that start with them, so plurals and simple
/// inflections count ("vitamin" matches "vitamins"); shorter keywords must match whole words.
const PREFIX_MATCH_MIN_CHARS: usize = 5;

/// The most a similarity's variance lowers semantic coherence (`min(variance, 0.3)` in docs/pipeline.md, "Evaluate").
const MAX_VARIANCE_PENALTY: f64 = 0.3;

/// Weights of the four heuristic criteria; the defaults are 30 / 40 / 15 / 15 per cent (docs/pipeline.md, "Evaluate").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CriteriaWeights {
    /// Weight of the share of query keywords found in the candidates.
    pub keyword_overlap: f32,
    /// Weight of the mean-and-variance summary of the candidates' similarities.
    pub semantic_coherence: f32,
    /// Weight of whether the candidates hold enough text to answer from.
    pub length_adequacy: f32,
    /// Weight of the share of distinct documents among the candidates.
    pub diversity: f32,
}

impl Default for CriteriaWeights {
    fn default() -> Self {
        Self { keyword_overlap: 0.30, semantic_coherence: 0.40, length_adequacy: 0.15, diversity: 0.15 }
    }
}

/// Configuration of [`HeuristicEvaluator`]; the defaults are those of docs/pipeline.md ("Evaluate").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeuristicConfig {
    /// How the four criteria are weighted into the aggregate score.
    pub weights: CriteriaWeights,
    /// A score strictly above this is RELEVANT ([`Verdict::Correct`]).
    pub relevant_threshold: f32,
    /// A score strictly above this (and not above `relevant_threshold`) is PARTIAL ([`Verdict::Ambiguous`]);
    /// anything else is IRRELEVANT ([`Verdict::Incorrect`]).
    pub partial_threshold: f32,
    /// The estimated tokens each candidate should hold for the text to count as adequate.
    pub min_tokens_per_chunk: usize,
    /// The candidate source whose score is the similarity for semantic coherence (`"dense"` for the cosine of a
    /// dense or hybrid retrieval). Candidates without it use their own score.
    pub similarity_source: String,
}

impl Default for HeuristicConfig {
    fn default() -> Self {
        Self {
            weights: CriteriaWeights::default(),
            relevant_threshold: 0.75,
            partial_threshold: 0.50,
            min_tokens_per_chunk: 100,
            similarity_source: "dense".into(),
        }
    }
}

impl HeuristicConfig {
    /// Checks that the weights and thresholds make sense.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming the field when a weight is negative or not
    /// finite, when the weights do not sum to 1 (within 0.001), or unless
    /// `0 <= partial_threshold < relevant_threshold <= 1`.
    pub fn validate(&self) -> Result<()> {
        let w = &self.weights;
        let weights = [
            ("keyword_overlap", w.keyword_overlap),
            ("semantic_coherence", w.semantic_coherence),
            ("length_adequacy", w.length_adequacy),
            ("diversity", w.diversity),
        ];
        for (name, value) in weights {
            if !value.is_finite() || value < 0.0 {
                return Err(Error::invalid_input(format!(
                    "heuristic evaluator: weights.{name} must be a finite number >= 0, got {value}"
                )));
            }
        }
        let sum: f64 = weights.iter().map(|(_, v)| f64::from(*v)).sum();
        if (sum - 1.0).abs() > 1e-3 {
            return Err(Error::invalid_input(format!(
                "heuristic evaluator: the weights (keyword_overlap, semantic_coherence, length_adequacy, diversity) \
                 must sum to 1, they sum to {sum:.4}"
            )));
        }
        super::check_thresholds(
            "heuristic evaluator",
            ("partial_threshold", self.partial_threshold),
            ("relevant_threshold", self.relevant_threshold),
        )?;
        Ok(())
    }
}

/// The LLM-free CRAG evaluator (docs/pipeline.md, "Evaluate"): keyword overlap, semantic coherence, length adequacy and
/// source diversity, weighted into one score in `[0, 1]` and read against two thresholds.
///
/// - **Keyword overlap**: the query's keywords ([`text::keywords`](ragtune_core::text::keywords): lower-cased words
///   without stop words, request words and words of at most two characters, repeats removed). The criterion is
///   the share of these keywords found as words of the candidates' titles and texts (a keyword of five or more
///   characters also matches words it begins, so "vitamin" finds "vitamins").
/// - **Semantic coherence**: each candidate's similarity is its `sources[similarity_source]` score, else its own
///   score; a value in `[0, 1]` is used as it is, a larger one (a BM25 score) is squashed to `s / (1 + s)`, a
///   negative or NaN one counts as 0. Coherence is `mean * (1 - min(variance, 0.3))` (population variance), so
///   uniformly similar candidates score higher than a mix of good and bad ones.
/// - **Length adequacy**: estimated tokens over all candidate texts divided by `min_tokens_per_chunk` times the
///   number of candidates, at most 1. Tokens are estimated per candidate as whitespace-separated words times 4/3,
///   rounded up ([`text::estimate_tokens`](crate::text::estimate_tokens), about how subword tokenisers split
///   English).
/// - **Diversity**: distinct document ids divided by the number of candidates.
///
/// The verdict is RELEVANT ([`Verdict::Correct`]) when the weighted score is strictly above
/// `relevant_threshold`, PARTIAL ([`Verdict::Ambiguous`]) when strictly above `partial_threshold`, and IRRELEVANT
/// ([`Verdict::Incorrect`]) otherwise; see [`heuristic_category`].
///
/// Each `per_candidate` entry is that candidate's own mix of keyword overlap (keywords found in its title and
/// text) and similarity, weighted by the `keyword_overlap` and `semantic_coherence` weights (equally when both are
/// zero). The evaluator costs nothing ([`Cost::ZERO`]).
#[derive(Debug, Clone)]
pub struct HeuristicEvaluator {
    config: HeuristicConfig,
}

impl HeuristicEvaluator {
    /// An evaluator with `config`.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when [`HeuristicConfig::validate`] fails.
    pub fn new(config: HeuristicConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &HeuristicConfig {
        &self.config
    }

    /// Judges the candidates synchronously: everything [`evaluate`](RelevanceEvaluator::evaluate) does.
    pub(super) fn judge(&self, query: &str, candidates: &[Candidate]) -> RelevanceJudgement {
        let criteria_keys = [KEYWORD_OVERLAP, SEMANTIC_COHERENCE, LENGTH_ADEQUACY, DIVERSITY];
        if candidates.is_empty() {
            return RelevanceJudgement {
                verdict: Verdict::Incorrect,
                score: 0.0,
                per_candidate: Vec::new(),
                criteria: criteria_keys.iter().map(|k| ((*k).to_owned(), 0.0)).collect(),
                reasons: vec!["no candidates".into()],
                cost: Cost::ZERO,
            };
        }
        let c = &self.config;
        let keywords = keywords(query);
        let token_sets: Vec<BTreeSet<String>> = candidates.iter().map(candidate_tokens).collect();
        let combined: BTreeSet<&str> = token_sets.iter().flat_map(|s| s.iter().map(String::as_str)).collect();

        let mut reasons = Vec::with_capacity(5);
        let (overlap, overlap_reason) = keyword_overlap(&keywords, &combined);
        reasons.push(overlap_reason);
        let similarities: Vec<f64> = candidates.iter().map(|cand| similarity(cand, &c.similarity_source)).collect();
        let (coherence, coherence_reason) = semantic_coherence(candidates, &similarities, &c.similarity_source);
        reasons.push(coherence_reason);
        let (adequacy, adequacy_reason) = length_adequacy(candidates, c.min_tokens_per_chunk);
        reasons.push(adequacy_reason);
        let (diverse, diversity_reason) = diversity(candidates);
        reasons.push(diversity_reason);

        let w = &c.weights;
        let score = f64::from(w.keyword_overlap) * overlap
            + f64::from(w.semantic_coherence) * coherence
            + f64::from(w.length_adequacy) * adequacy
            + f64::from(w.diversity) * diverse;
        let score = unit_f32(score);
        let verdict = band(score, c.relevant_threshold, c.partial_threshold);
        reasons.push(verdict_reason(verdict, score, c));

        let (wk, ws) = (f64::from(w.keyword_overlap), f64::from(w.semantic_coherence));
        let (wk, ws) = if wk + ws > 0.0 { (wk / (wk + ws), ws / (wk + ws)) } else { (0.5, 0.5) };
        let per_candidate = token_sets
            .iter()
            .zip(&similarities)
            .map(|(tokens, sim)| {
                let own: BTreeSet<&str> = tokens.iter().map(String::as_str).collect();
                let found = keywords.iter().filter(|k| contains_keyword(&own, k)).count();
                let own_overlap = if keywords.is_empty() { 0.0 } else { found as f64 / keywords.len() as f64 };
                unit_f32(wk * own_overlap + ws * sim)
            })
            .collect();

        let values = [overlap, coherence, adequacy, diverse];
        RelevanceJudgement {
            verdict,
            score,
            per_candidate,
            criteria: criteria_keys.iter().zip(values).map(|(k, v)| ((*k).to_owned(), unit_f32(v))).collect(),
            reasons,
            cost: Cost::ZERO,
        }
    }
}

#[async_trait]
impl RelevanceEvaluator for HeuristicEvaluator {
    fn name(&self) -> &str {
        "heuristic"
    }

    /// Judges the candidates with the four heuristics.
    ///
    /// # Errors
    /// Only cancellation or a passed deadline in `ctx`; the heuristics themselves cannot fail.
    async fn evaluate(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<RelevanceJudgement> {
        ctx.check()?;
        Ok(self.judge(query, candidates))
    }
}

/// The heuristic evaluator's category name for a verdict: `"RELEVANT"`, `"PARTIAL"` or `"IRRELEVANT"`.
#[must_use]
pub fn heuristic_category(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Correct => "RELEVANT",
        Verdict::Ambiguous => "PARTIAL",
        Verdict::Incorrect => "IRRELEVANT",
    }
}

/// The verdict band of `score`: strictly above a threshold to enter its band (docs/pipeline.md, "Evaluate").
fn band(score: f32, relevant: f32, partial: f32) -> Verdict {
    if score > relevant {
        Verdict::Correct
    } else if score > partial {
        Verdict::Ambiguous
    } else {
        Verdict::Incorrect
    }
}

fn verdict_reason(verdict: Verdict, score: f32, c: &HeuristicConfig) -> String {
    let category = heuristic_category(verdict);
    match verdict {
        Verdict::Correct => format!("{category}: score {score:.2} > {:.2}", c.relevant_threshold),
        Verdict::Ambiguous => {
            format!("{category}: score {score:.2} > {:.2} and <= {:.2}", c.partial_threshold, c.relevant_threshold)
        }
        Verdict::Incorrect => format!("{category}: score {score:.2} <= {:.2}", c.partial_threshold),
    }
}

/// The distinct words of a candidate's title and text.
pub(super) fn candidate_tokens(candidate: &Candidate) -> BTreeSet<String> {
    let title = candidate.chunk.title.as_deref().unwrap_or_default();
    words(title).chain(words(&candidate.chunk.text)).collect()
}

/// Whether `keyword` is one of `words`, or begins one of them when it is long enough for prefix matching.
pub(super) fn contains_keyword(words: &BTreeSet<&str>, keyword: &str) -> bool {
    if words.contains(keyword) {
        return true;
    }
    // Words that start with `keyword` sort right after it, so the first word at or after it decides.
    keyword.chars().count() >= PREFIX_MATCH_MIN_CHARS
        && words.range(keyword..).next().is_some_and(|w| w.starts_with(keyword))
}

fn keyword_overlap(keywords: &[String], words: &BTreeSet<&str>) -> (f64, String) {
    if keywords.is_empty() {
        return (
            0.0,
            "keyword overlap 0.00: the query has no keywords once stopwords and short words are removed".into(),
        );
    }
    let (found, missing): (Vec<&String>, Vec<&String>) = keywords.iter().partition(|k| contains_keyword(words, k));
    let overlap = found.len() as f64 / keywords.len() as f64;
    let list = |ks: &[&String]| ks.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ");
    let mut reason =
        format!("keyword overlap {overlap:.2}: {} of {} query keywords found", found.len(), keywords.len());
    if !found.is_empty() {
        let _ = write!(reason, " ({})", list(&found));
    }
    if !missing.is_empty() {
        let _ = write!(reason, "; missing ({})", list(&missing));
    }
    (overlap, reason)
}

/// A candidate's similarity in `[0, 1]`: its `source` score if it has one, else its own score.
fn similarity(candidate: &Candidate, source: &str) -> f64 {
    let raw = candidate.sources.get(source).map_or(candidate.score, |s| s.score);
    squash(f64::from(raw))
}

/// Maps a score to `[0, 1]`: kept inside it, `s / (1 + s)` above it (unbounded scores such as BM25), 0 below it.
fn squash(s: f64) -> f64 {
    if s.is_nan() || s <= 0.0 {
        0.0
    } else if s <= 1.0 {
        s
    } else if s.is_infinite() {
        1.0
    } else {
        s / (1.0 + s)
    }
}

fn semantic_coherence(candidates: &[Candidate], similarities: &[f64], source: &str) -> (f64, String) {
    let n = similarities.len().max(1) as f64;
    let mean = similarities.iter().sum::<f64>() / n;
    let variance = similarities.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / n;
    let coherence = (mean * (1.0 - variance.min(MAX_VARIANCE_PENALTY))).clamp(0.0, 1.0);
    let without = candidates.iter().filter(|c| !c.sources.contains_key(source)).count();
    let mut reason = format!(
        "semantic coherence {coherence:.2}: mean similarity {mean:.2}, variance {variance:.3} over {} candidates",
        similarities.len()
    );
    if without > 0 {
        let _ = write!(reason, " ({without} without a `{source}` score used their own score)");
    }
    (coherence, reason)
}

fn length_adequacy(candidates: &[Candidate], min_tokens_per_chunk: usize) -> (f64, String) {
    let total = candidates.iter().fold(0_u64, |acc, c| acc.saturating_add(estimate_tokens(&c.chunk.text) as u64));
    let expected = (min_tokens_per_chunk as u64).saturating_mul(candidates.len() as u64);
    let adequacy = if expected == 0 { 1.0 } else { (total as f64 / expected as f64).min(1.0) };
    let reason = format!(
        "length adequacy {adequacy:.2}: about {total} tokens in {} candidates, {expected} expected",
        candidates.len()
    );
    (adequacy, reason)
}

fn diversity(candidates: &[Candidate]) -> (f64, String) {
    let distinct = candidates.iter().map(|c| c.chunk.doc_id.as_str()).collect::<BTreeSet<_>>().len();
    let diversity = distinct as f64 / candidates.len().max(1) as f64;
    let reason =
        format!("diversity {diversity:.2}: {distinct} distinct documents among {} candidates", candidates.len());
    (diversity, reason)
}

/// Narrows to `f32` within `[0, 1]`, NaN as 0.
fn unit_f32(v: f64) -> f32 {
    if v.is_nan() { 0.0 } else { v.clamp(0.0, 1.0) as f32 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crag::test_candidate as cand;

    /// Judges `candidates` for `query` under `config` and checks the verdict and each expected criterion.
    fn check(
        config: &HeuristicConfig,
        query: &str,
        candidates: &[Candidate],
        verdict: Verdict,
        criteria: &[(&str, f32)],
    ) -> RelevanceJudgement {
        let evaluator = HeuristicEvaluator::new(config.clone()).expect("test configs are valid");
        let judgement = evaluator.judge(query, candidates);
        assert_eq!(judgement.verdict, verdict, "{judgement:#?}");
        for (key, want) in criteria {
            let got = if *key == "score" { judgement.score } else { judgement.criteria[*key] };
            assert!((got - want).abs() < 1e-6, "{key}: got {got}, want {want}\n{judgement:#?}");
        }
        assert_eq!(judgement.per_candidate.len(), candidates.len());
        assert!(judgement.per_candidate.iter().all(|s| (0.0..=1.0).contains(s)));
        assert_eq!(judgement.cost, Cost::ZERO);
        judgement
    }

    /// Only the keyword criterion counts, so the score is exactly the keyword overlap.
    fn keywords_only() -> HeuristicConfig {
        HeuristicConfig {
            weights: CriteriaWeights {
                keyword_overlap: 1.0,
                semantic_coherence: 0.0,
                length_adequacy: 0.0,
                diversity: 0.0,
            },
            ..HeuristicConfig::default()
        }
    }

    fn scurvy() -> Vec<Candidate> {
        vec![
            // 9 words: ceil(9 * 4 / 3) = 12 tokens.
            cand("a#0", "a", "Scurvy is caused by a lack of vitamin C.", 0.02, &[("dense", 0.9)]),
            // 6 words: 8 tokens.
            cand("b#0", "b", "Vitamin C deficiency leads to scurvy.", 0.01, &[("dense", 0.7)]),
        ]
    }

    #[test]
    fn keywords_drop_stopwords_short_words_and_repeats() {
        assert_eq!(
            keywords("What vitamin deficiency causes scurvy? Which VITAMIN, and why do we care about it?"),
            ["vitamin", "deficiency", "causes", "scurvy", "care"]
        );
        assert!(keywords("").is_empty());
        assert!(keywords("what is it?").is_empty());
    }

    #[test]
    fn keyword_overlap_matches_whole_words_and_plurals_of_long_keywords() {
        // Keywords: vitamin, deficiency, causes, scurvy. "vitamins" matches "vitamin" (7 chars, prefix allowed);
        // "multivitamin" would match as a substring but is not the word; "caused" is not "causes".
        let c = [cand("a#0", "a", "Scurvy: a lack of vitamins; multivitamin pills; caused", 0.5, &[])];
        let j = check(
            &keywords_only(),
            "What vitamin deficiency causes scurvy?",
            &c,
            Verdict::Incorrect,
            &[("keyword_overlap", 0.5), ("score", 0.5)],
        );
        assert_eq!(
            j.reasons[0],
            "keyword overlap 0.50: 2 of 4 query keywords found (vitamin, scurvy); missing (deficiency, causes)"
        );
        // A keyword under five characters needs the whole word: "cat" does not find "category".
        check(
            &keywords_only(),
            "the cat",
            &[cand("a#0", "a", "a category", 0.5, &[])],
            Verdict::Incorrect,
            &[("keyword_overlap", 0.0)],
        );
    }

    #[test]
    fn keyword_overlap_reads_titles_and_all_candidates() {
        let mut titled = cand("a#0", "a", "Symptoms include bleeding gums.", 0.5, &[]);
        titled.chunk.title = Some("Scurvy".into());
        let other = cand("b#0", "b", "Citrus fruit holds vitamin C.", 0.5, &[]);
        check(&keywords_only(), "scurvy vitamin gums", &[titled, other], Verdict::Correct, &[("keyword_overlap", 1.0)]);
    }

    #[test]
    fn no_keywords_scores_zero_overlap_with_a_reason() {
        let j = check(&keywords_only(), "what is it?", &scurvy(), Verdict::Incorrect, &[("keyword_overlap", 0.0)]);
        assert!(j.reasons[0].contains("no keywords"), "{:?}", j.reasons);
    }

    #[test]
    fn semantic_coherence_from_the_similarity_source() {
        // Dense similarities 0.9 and 0.7: mean 0.8, population variance 0.01, coherence 0.8 * 0.99 = 0.792.
        let j = check(
            &HeuristicConfig::default(),
            "vitamin scurvy",
            &scurvy(),
            Verdict::Correct,
            &[("semantic_coherence", 0.792)],
        );
        assert_eq!(j.reasons[1], "semantic coherence 0.79: mean similarity 0.80, variance 0.010 over 2 candidates");
    }

    #[test]
    fn semantic_coherence_falls_back_to_the_own_score_and_squashes_bm25() {
        // No `dense` source: a BM25 score of 3.0 squashes to 3 / 4 = 0.75, a score of 0.5 stays.
        // Mean 0.625, variance 0.015625, coherence 0.625 * (1 - 0.015625) = 0.615234375.
        let c = [cand("a#0", "a", "x", 3.0, &[("bm25", 3.0)]), cand("b#0", "b", "y", 0.5, &[])];
        let j = check(&HeuristicConfig::default(), "q", &c, Verdict::Incorrect, &[("semantic_coherence", 0.615_234_4)]);
        assert!(j.reasons[1].ends_with("(2 without a `dense` score used their own score)"), "{:?}", j.reasons);
        // Negative and NaN scores count as zero similarity; a NaN never reaches the score.
        let c = [cand("a#0", "a", "x", f32::NAN, &[]), cand("b#0", "b", "y", 0.0, &[("dense", -0.4)])];
        check(&HeuristicConfig::default(), "q", &c, Verdict::Incorrect, &[("semantic_coherence", 0.0)]);
        // High variance lowers coherence: similarities 1 and 0 have mean 0.5, variance 0.25, coherence 0.375.
        let c = [cand("a#0", "a", "x", 1.0, &[]), cand("b#0", "b", "y", 0.0, &[])];
        check(&HeuristicConfig::default(), "q", &c, Verdict::Incorrect, &[("semantic_coherence", 0.375)]);
    }

    #[test]
    fn length_adequacy_estimates_four_tokens_per_three_words() {
        assert_eq!([0, 1, 2, 3, 4, 5, 6, 9].map(|w| estimate_tokens(&"w ".repeat(w))), [0, 2, 3, 4, 6, 7, 8, 12]);
        // 12 + 8 = 20 tokens against 100 * 2 expected.
        let j = check(
            &HeuristicConfig::default(),
            "vitamin scurvy",
            &scurvy(),
            Verdict::Correct,
            &[("length_adequacy", 0.1)],
        );
        assert_eq!(j.reasons[2], "length adequacy 0.10: about 20 tokens in 2 candidates, 200 expected");
        let config = HeuristicConfig { min_tokens_per_chunk: 15, ..HeuristicConfig::default() };
        check(&config, "vitamin scurvy", &scurvy(), Verdict::Correct, &[("length_adequacy", 20.0 / 30.0)]);
        let config = HeuristicConfig { min_tokens_per_chunk: 5, ..HeuristicConfig::default() };
        check(&config, "vitamin scurvy", &scurvy(), Verdict::Correct, &[("length_adequacy", 1.0)]);
        let config = HeuristicConfig { min_tokens_per_chunk: 0, ..HeuristicConfig::default() };
        check(&config, "vitamin scurvy", &scurvy(), Verdict::Correct, &[("length_adequacy", 1.0)]);
    }

    #[test]
    fn diversity_is_the_share_of_distinct_documents() {
        let c = [cand("a#0", "a", "x", 0.5, &[]), cand("a#1", "a", "y", 0.5, &[]), cand("b#0", "b", "z", 0.5, &[])];
        let j = check(&HeuristicConfig::default(), "q", &c, Verdict::Incorrect, &[("diversity", 2.0 / 3.0)]);
        assert_eq!(j.reasons[3], "diversity 0.67: 2 distinct documents among 3 candidates");
    }

    #[test]
    fn weighted_score_verdict_and_per_candidate_mix() {
        // 0.30 * 1.0 + 0.40 * 0.792 + 0.15 * 0.1 + 0.15 * 1.0 = 0.7818.
        let j = check(
            &HeuristicConfig::default(),
            "Vitamin and scurvy",
            &scurvy(),
            Verdict::Correct,
            &[("keyword_overlap", 1.0), ("diversity", 1.0), ("score", 0.7818)],
        );
        assert_eq!(j.reasons.len(), 5);
        assert_eq!(j.reasons[4], "RELEVANT: score 0.78 > 0.75");
        assert_eq!(
            j.criteria.keys().collect::<Vec<_>>(),
            ["diversity", "keyword_overlap", "length_adequacy", "semantic_coherence"]
        );
        // Own overlap 1 for both; mix (0.3 * 1 + 0.4 * sim) / 0.7.
        let want = [(0.3 + 0.4 * 0.9) / 0.7, (0.3 + 0.4 * 0.7) / 0.7];
        for (got, want) in j.per_candidate.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{:?}", j.per_candidate);
        }
    }

    #[test]
    fn config_changes_the_verdict() {
        let strict = HeuristicConfig { relevant_threshold: 0.9, ..HeuristicConfig::default() };
        let j = check(&strict, "vitamin scurvy", &scurvy(), Verdict::Ambiguous, &[("score", 0.7818)]);
        assert_eq!(j.reasons[4], "PARTIAL: score 0.78 > 0.50 and <= 0.90");
        let lenient = HeuristicConfig { min_tokens_per_chunk: 10, ..strict.clone() };
        // Length adequacy reaches 1: 0.7818 + 0.15 * 0.9 = 0.9168.
        check(&lenient, "vitamin scurvy", &scurvy(), Verdict::Correct, &[("score", 0.9168)]);
        let coherence_only = HeuristicConfig {
            weights: CriteriaWeights {
                keyword_overlap: 0.0,
                semantic_coherence: 1.0,
                length_adequacy: 0.0,
                diversity: 0.0,
            },
            partial_threshold: 0.8,
            relevant_threshold: 0.9,
            ..HeuristicConfig::default()
        };
        let j = check(&coherence_only, "vitamin scurvy", &scurvy(), Verdict::Incorrect, &[("score", 0.792)]);
        assert_eq!(j.reasons[4], "IRRELEVANT: score 0.79 <= 0.80");
    }

    #[test]
    fn verdict_bands_are_strictly_above_their_thresholds() {
        assert_eq!(band(0.75, 0.75, 0.5), Verdict::Ambiguous);
        assert_eq!(band(0.750_001, 0.75, 0.5), Verdict::Correct);
        assert_eq!(band(0.5, 0.75, 0.5), Verdict::Incorrect);
        assert_eq!(band(0.500_001, 0.75, 0.5), Verdict::Ambiguous);
        assert_eq!(band(0.0, 0.75, 0.5), Verdict::Incorrect);
        // End to end with exact scores: 3, 2 and 4 of 4 keywords found.
        let q = "alpha bravo charlie delta";
        let c = |text: &str| [cand("a#0", "a", text, 0.5, &[])];
        check(&keywords_only(), q, &c("alpha bravo charlie"), Verdict::Ambiguous, &[("score", 0.75)]);
        check(&keywords_only(), q, &c("alpha bravo"), Verdict::Incorrect, &[("score", 0.5)]);
        check(&keywords_only(), q, &c("alpha bravo charlie delta"), Verdict::Correct, &[("score", 1.0)]);
        assert_eq!(
            [Verdict::Correct, Verdict::Ambiguous, Verdict::Incorrect].map(heuristic_category),
            ["RELEVANT", "PARTIAL", "IRRELEVANT"]
        );
    }

    #[test]
    fn no_candidates_is_incorrect() {
        let j = check(&HeuristicConfig::default(), "vitamin", &[], Verdict::Incorrect, &[("score", 0.0)]);
        assert_eq!(j.reasons, ["no candidates"]);
        assert_eq!(j.criteria.len(), 4);
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        let huge = "vitamin ".repeat(200_000);
        let c = [
            cand("", "", "", f32::NAN, &[("dense", f32::INFINITY)]),
            cand("b", "b", &huge, f32::NEG_INFINITY, &[]),
            cand("c", "c", "ünïcödé ß İstanbul", f32::MAX, &[]),
        ];
        for query in ["", "   ", "?!", &huge, "İstanbul ÜNÏCÖDÉ"] {
            let j = HeuristicEvaluator::new(HeuristicConfig::default()).unwrap().judge(query, &c);
            assert!((0.0..=1.0).contains(&j.score), "{query:.20}: {j:?}");
        }
    }

    #[test]
    fn validate_names_the_field() {
        let cases: [(HeuristicConfig, &str); 6] = [
            (
                HeuristicConfig {
                    weights: CriteriaWeights { diversity: 0.05, ..CriteriaWeights::default() },
                    ..HeuristicConfig::default()
                },
                "sum to 1",
            ),
            (
                HeuristicConfig {
                    weights: CriteriaWeights { diversity: -0.15, length_adequacy: 0.45, ..CriteriaWeights::default() },
                    ..HeuristicConfig::default()
                },
                "weights.diversity",
            ),
            (
                HeuristicConfig {
                    weights: CriteriaWeights { keyword_overlap: f32::NAN, ..CriteriaWeights::default() },
                    ..HeuristicConfig::default()
                },
                "weights.keyword_overlap",
            ),
            (HeuristicConfig { partial_threshold: 0.8, ..HeuristicConfig::default() }, "below relevant_threshold"),
            (HeuristicConfig { relevant_threshold: 1.5, ..HeuristicConfig::default() }, "relevant_threshold"),
            (HeuristicConfig { partial_threshold: -0.1, ..HeuristicConfig::default() }, "partial_threshold"),
        ];
        for (config, needle) in cases {
            let err = HeuristicEvaluator::new(config).unwrap_err();
            assert_eq!(err.kind(), ragtune_core::ErrorKind::InvalidInput);
            assert!(err.message().contains(needle), "{needle}: {}", err.message());
        }
        HeuristicConfig::default().validate().unwrap();
    }

    #[test]
    fn config_reads_partial_json_and_refuses_unknown_fields() {
        let config: HeuristicConfig =
            serde_json::from_str(r#"{"relevant_threshold": 0.8, "weights": {"diversity": 0.15}}"#).unwrap();
        assert_eq!(config, HeuristicConfig { relevant_threshold: 0.8, ..HeuristicConfig::default() });
        assert!(serde_json::from_str::<HeuristicConfig>(r#"{"relevant": 0.8}"#).is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn evaluates_through_the_seam() {
        let evaluator: std::sync::Arc<dyn RelevanceEvaluator> =
            std::sync::Arc::new(HeuristicEvaluator::new(HeuristicConfig::default()).unwrap());
        assert_eq!(evaluator.name(), "heuristic");
        let j = evaluator.evaluate(&Ctx::new(), "vitamin scurvy", &scurvy()).await.unwrap();
        assert_eq!(j.verdict, Verdict::Correct);
        let ctx = Ctx::new();
        ctx.cancel.cancel();
        assert!(evaluator.evaluate(&ctx, "vitamin scurvy", &scurvy()).await.is_err());
    }
}
