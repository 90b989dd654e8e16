//! The metrics themselves, computed for one query.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use ragtune_core::Error;
use serde::{Deserialize, Serialize};

use super::ranking::trec_ranking;

/// One IR metric at a rank cutoff `k`, named like `ndcg@10` (its [`Display`](fmt::Display) and
/// [`FromStr`] form, also its serde form).
///
/// In the formulas, `rel_i` is the grade of the document at rank `i` (1-based, in [`trec_ranking`] order,
/// unjudged documents grade 0), "relevant" means `rel_i >= 1`, and `R` is the number of relevant documents the
/// qrels hold for the query, retrieved or not.
/// Every value lies in `[0, 1]`, and a query with `R = 0` scores 0 on every metric.
/// A cutoff of 0 (which [`FromStr`] rejects) scores 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
#[non_exhaustive]
pub enum Metric {
    /// `ndcg@k`, `trec_eval`'s `ndcg_cut.k`: `DCG@k / IDCG@k` with linear gain,
    /// `DCG@k = sum_{i <= k, rel_i > 0} rel_i / log2(i + 1)`, and `IDCG@k` the same sum over all the query's
    /// positive grades sorted descending; 0 when `IDCG@k = 0`.
    Ndcg(usize),
    /// `recall@k`, `trec_eval`'s `recall.k`: relevant documents in the top `k` divided by `R`.
    Recall(usize),
    /// `p@k`, `trec_eval`'s `P.k`: relevant documents in the top `k` divided by `k`, even when fewer than `k`
    /// documents were retrieved.
    Precision(usize),
    /// `mrr@k`, BEIR's `MRR@k` (`trec_eval`'s `recip_rank` cut at `k`): `1 / i` for the first relevant rank
    /// `i <= k`, else 0.
    Mrr(usize),
    /// `map@k`, `trec_eval`'s `map_cut.k`: the sum of `P@i` over the ranks `i <= k` holding a relevant document,
    /// divided by `R` (not by `min(k, R)`).
    Map(usize),
}

impl Metric {
    /// `ndcg@k`.
    #[must_use]
    pub const fn ndcg(k: usize) -> Self {
        Self::Ndcg(k)
    }

    /// `recall@k`.
    #[must_use]
    pub const fn recall(k: usize) -> Self {
        Self::Recall(k)
    }

    /// `p@k`.
    #[must_use]
    pub const fn precision(k: usize) -> Self {
        Self::Precision(k)
    }

    /// `mrr@k`.
    #[must_use]
    pub const fn mrr(k: usize) -> Self {
        Self::Mrr(k)
    }

    /// `map@k`.
    #[must_use]
    pub const fn map(k: usize) -> Self {
        Self::Map(k)
    }

    /// The rank cutoff.
    #[must_use]
    pub const fn k(self) -> usize {
        match self {
            Self::Ndcg(k) | Self::Recall(k) | Self::Precision(k) | Self::Mrr(k) | Self::Map(k) => k,
        }
    }

    /// The name before the `@`: `ndcg`, `recall`, `p`, `mrr` or `map`.
    #[must_use]
    pub const fn short_name(self) -> &'static str {
        match self {
            Self::Ndcg(_) => "ndcg",
            Self::Recall(_) => "recall",
            Self::Precision(_) => "p",
            Self::Mrr(_) => "mrr",
            Self::Map(_) => "map",
        }
    }

    /// Scores one query's `run` against that query's `judgements` (document id to grade).
    ///
    /// The run may come in any order and hold duplicates; it is ranked by [`trec_ranking`] first.
    /// To score many metrics or queries, [`evaluate`](super::evaluate) ranks each run once.
    #[must_use]
    pub fn score<S: AsRef<str>>(self, judgements: &BTreeMap<String, i32>, run: &[(S, f32)]) -> f64 {
        Judged::new(judgements, run).score(self)
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.short_name(), self.k())
    }
}

impl FromStr for Metric {
    type Err = Error;

    /// Parses `ndcg@10`, `recall@100`, `p@10`, `mrr@10` or `map@100` (names case-insensitive).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for an unknown name, a missing `@`,
    /// or a cutoff that is not a positive integer.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = |why: &str| {
            Error::invalid_input(format!(
                "metric {s:?}: {why}; expected NAME@K, NAME one of ndcg, recall, p, mrr, map, K a positive integer"
            ))
        };
        let (name, k) = s.trim().split_once('@').ok_or_else(|| invalid("no '@'"))?;
        let k: usize = k.parse().map_err(|_| invalid("the cutoff is not an integer"))?;
        if k == 0 {
            return Err(invalid("the cutoff is 0"));
        }
        match name.to_ascii_lowercase().as_str() {
            "ndcg" => Ok(Self::Ndcg(k)),
            "recall" => Ok(Self::Recall(k)),
            "p" => Ok(Self::Precision(k)),
            "mrr" => Ok(Self::Mrr(k)),
            "map" => Ok(Self::Map(k)),
            _ => Err(invalid("unknown metric name")),
        }
    }
}

impl TryFrom<String> for Metric {
    type Error = Error;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<Metric> for String {
    fn from(metric: Metric) -> Self {
        metric.to_string()
    }
}

/// One query's run, ranked and looked up in the qrels once, ready to score any number of metrics.
#[derive(Debug)]
pub(crate) struct Judged {
    /// The grade of each retrieved document, best-ranked first; unjudged documents grade 0.
    ranked: Vec<i32>,
    /// The query's positive grades, descending: the ideal ranking for IDCG; its length is `R`.
    ideal: Vec<i32>,
}

impl Judged {
    pub(crate) fn new<S: AsRef<str>>(judgements: &BTreeMap<String, i32>, run: &[(S, f32)]) -> Self {
        let ranked = trec_ranking(run).into_iter().map(|(id, _)| judgements.get(id).copied().unwrap_or(0)).collect();
        let mut ideal: Vec<i32> = judgements.values().copied().filter(|&grade| grade > 0).collect();
        ideal.sort_unstable_by(|a, b| b.cmp(a));
        Self { ranked, ideal }
    }

    /// `R`, the number of relevant documents in the qrels. Relevance level 1 makes "grade > 0" the same test as
    /// "grade >= 1".
    pub(crate) fn num_relevant(&self) -> usize {
        self.ideal.len()
    }

    pub(crate) fn score(&self, metric: Metric) -> f64 {
        let k = metric.k();
        let top = &self.ranked[..k.min(self.ranked.len())];
        let relevant = |grade: &i32| *grade >= 1;
        let num_relevant = self.num_relevant();
        if num_relevant == 0 || k == 0 {
            return 0.0;
        }
        match metric {
            Metric::Ndcg(_) => {
                let idcg = dcg(&self.ideal[..k.min(self.ideal.len())]);
                if idcg > 0.0 { dcg(top) / idcg } else { 0.0 }
            }
            Metric::Recall(_) => top.iter().filter(|g| relevant(g)).count() as f64 / num_relevant as f64,
            Metric::Precision(_) => top.iter().filter(|g| relevant(g)).count() as f64 / k as f64,
            Metric::Mrr(_) => top.iter().position(relevant).map_or(0.0, |i| 1.0 / (i + 1) as f64),
            Metric::Map(_) => {
                let mut hits = 0_usize;
                let mut sum = 0.0;
                for (i, grade) in top.iter().enumerate() {
                    if relevant(grade) {
                        hits += 1;
                        sum += hits as f64 / (i + 1) as f64;
                    }
                }
                sum / num_relevant as f64
            }
        }
    }
}

/// Discounted cumulative gain of grades in rank order: linear gain, `log2(rank + 1)` discount, positive grades
/// only (`trec_eval` 9.x `ndcg_cut`; versions before 9.0.4 discounted rank 1 and 2 alike).
fn dcg(grades: &[i32]) -> f64 {
    grades
        .iter()
        .enumerate()
        .filter(|(_, grade)| **grade > 0)
        .map(|(i, grade)| f64::from(*grade) / ((i + 2) as f64).log2())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scores `run` against `judgements` on each metric named in `expect` and compares with the value there.
    fn check(judgements: &[(&str, i32)], run: &[(&str, f32)], expect: &[(&str, f64)]) {
        let judgements: BTreeMap<String, i32> = judgements.iter().map(|(id, g)| ((*id).to_owned(), *g)).collect();
        for (name, want) in expect {
            let metric: Metric = name.parse().expect("test metric names are valid");
            let got = metric.score(&judgements, run);
            assert!((got - want).abs() < 1e-12, "{name}: got {got}, want {want}");
        }
    }

    #[test]
    fn perfect_ranking() {
        // Relevant a, b, c retrieved first, in any grade order (all grade 1): DCG = IDCG, so nDCG = 1.
        // P@5 = 3 relevant / 5; AP = (1/1 + 2/2 + 3/3) / 3 = 1.
        check(
            &[("a", 1), ("b", 1), ("c", 1), ("x", 0)],
            &[("a", 0.9), ("b", 0.8), ("c", 0.7), ("x", 0.6), ("y", 0.5)],
            &[("ndcg@10", 1.0), ("recall@3", 1.0), ("p@3", 1.0), ("p@5", 0.6), ("mrr@10", 1.0), ("map@10", 1.0)],
        );
    }

    #[test]
    fn single_relevant_at_rank_three() {
        // DCG = 1 / log2(3 + 1) = 1/2; IDCG = 1 / log2(2) = 1, so nDCG = 0.5.
        // MRR = 1/3; P@5 = 1/5 = 0.2; AP = P@3 / R = (1/3) / 1.
        // recall@2 = 0 (not yet retrieved), recall@3 = 1.
        check(
            &[("c", 1)],
            &[("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.6), ("e", 0.5)],
            &[
                ("ndcg@10", 0.5),
                ("mrr@10", 1.0 / 3.0),
                ("p@5", 0.2),
                ("map@10", 1.0 / 3.0),
                ("recall@2", 0.0),
                ("recall@3", 1.0),
                ("mrr@2", 0.0),
                ("ndcg@2", 0.0),
            ],
        );
    }

    #[test]
    fn graded_relevance_in_swapped_order() {
        // Grades a = 2, b = 1, retrieved b then a.
        // DCG  = 1/log2(2) + 2/log2(3) = 1 + 1.2618595071429148 = 2.2618595071429148
        // IDCG = 2/log2(2) + 1/log2(3) = 2 + 0.6309297535714574 = 2.6309297535714574
        // nDCG = 2.2618595071429148 / 2.6309297535714574 = 0.8597186998521972
        // Relevance is binary for the other metrics: both relevant, so MRR = 1, AP = (1/1 + 2/2) / 2 = 1.
        let ndcg = (1.0 + 2.0 / 3f64.log2()) / (2.0 + 1.0 / 3f64.log2());
        assert!((ndcg - 0.859_718_699_852_197_2).abs() < 1e-12);
        check(&[("a", 2), ("b", 1)], &[("b", 0.9), ("a", 0.8)], &[("ndcg@10", ndcg), ("mrr@10", 1.0), ("map@10", 1.0)]);
        // nDCG@1 = (1/1) / (2/1) = 0.5: the cut applies to the ideal ranking too.
        check(&[("a", 2), ("b", 1)], &[("b", 0.9), ("a", 0.8)], &[("ndcg@1", 0.5)]);
    }

    #[test]
    fn ties_in_score_break_by_doc_id_descending() {
        // "a" (relevant) and "b" tie at 0.5. trec_eval ranks b before a (ids descending), so the relevant doc is
        // at rank 2: nDCG@10 = 1/log2(3) = 0.6309297535714574, MRR = 1/2, P@1 = 0.
        // Ascending ids (our engine's order) would put a first and score 1, 1, 1.
        let run = [("a", 0.5), ("b", 0.5)];
        check(&[("a", 1)], &run, &[("ndcg@10", 1.0 / 3f64.log2()), ("mrr@10", 0.5), ("p@1", 0.0), ("map@10", 0.5)]);
        // The same run with a relabelled so that it sorts after b: now it comes first.
        check(&[("c", 1)], &[("c", 0.5), ("b", 0.5)], &[("ndcg@10", 1.0), ("mrr@10", 1.0), ("p@1", 1.0)]);
    }

    #[test]
    fn k_larger_than_the_run() {
        // Two retrieved, both relevant, of three relevant in all; k = 10.
        // P@10 divides by k: 2/10. Recall@10 = 2/3. AP = (1/1 + 2/2) / 3 = 2/3.
        // DCG = 1 + 1/log2(3); IDCG = 1 + 1/log2(3) + 1/log2(4) = 1 + 1/log2(3) + 0.5.
        let ndcg = (1.0 + 1.0 / 3f64.log2()) / (1.5 + 1.0 / 3f64.log2());
        check(
            &[("a", 1), ("b", 1), ("c", 1)],
            &[("a", 0.9), ("b", 0.8)],
            &[("p@10", 0.2), ("recall@10", 2.0 / 3.0), ("map@10", 2.0 / 3.0), ("ndcg@10", ndcg), ("mrr@10", 1.0)],
        );
    }

    #[test]
    fn map_divides_by_all_relevant_not_by_k() {
        // Relevant a, b, c, d; run a, x, b. map@2 = (1/1) / 4 = 0.25 (not / min(2, 4)); map@3 = (1 + 2/3) / 4.
        let judgements = [("a", 1), ("b", 1), ("c", 1), ("d", 1)];
        let run = [("a", 0.9), ("x", 0.8), ("b", 0.7)];
        check(&judgements, &run, &[("map@2", 0.25), ("map@3", (1.0 + 2.0 / 3.0) / 4.0), ("recall@3", 0.5)]);
    }

    #[test]
    fn zero_and_negative_grades_are_not_relevant() {
        // Only b (grade 1) is relevant; a (0) and n (-1) are judged non-relevant and add no gain.
        // b at rank 3: nDCG = 0.5, P@3 = 1/3, recall = 1.
        check(
            &[("a", 0), ("n", -1), ("b", 1)],
            &[("n", 0.9), ("a", 0.8), ("b", 0.7)],
            &[("ndcg@10", 0.5), ("p@3", 1.0 / 3.0), ("recall@10", 1.0), ("mrr@10", 1.0 / 3.0)],
        );
    }

    #[test]
    fn query_without_relevant_documents_scores_zero() {
        check(&[("a", 0)], &[("a", 0.9)], &[("ndcg@10", 0.0), ("recall@10", 0.0), ("map@10", 0.0), ("p@1", 0.0)]);
    }

    #[test]
    fn duplicates_count_once_at_their_best_rank() {
        // Run a, a, b (a twice): ranked a, b. Relevant a, b: perfect. Counting a twice would give P@2 = 1 too,
        // but P@3 would be 3/3 instead of 2/3 and recall could exceed 1.
        check(
            &[("a", 1), ("b", 1)],
            &[("a", 0.9), ("a", 0.8), ("b", 0.7)],
            &[("p@3", 2.0 / 3.0), ("recall@2", 1.0), ("ndcg@2", 1.0), ("map@3", 1.0)],
        );
    }

    #[test]
    fn zero_cutoff_scores_zero() {
        let judgements = BTreeMap::from([("a".to_owned(), 1)]);
        for metric in [Metric::ndcg(0), Metric::recall(0), Metric::precision(0), Metric::mrr(0), Metric::map(0)] {
            assert_eq!(metric.score(&judgements, &[("a", 1.0)]), 0.0, "{metric}");
        }
    }

    #[test]
    fn names_round_trip() {
        for (metric, name) in [
            (Metric::ndcg(10), "ndcg@10"),
            (Metric::recall(100), "recall@100"),
            (Metric::precision(10), "p@10"),
            (Metric::mrr(10), "mrr@10"),
            (Metric::map(100), "map@100"),
        ] {
            assert_eq!(metric.to_string(), name);
            assert_eq!(name.parse::<Metric>().expect("valid"), metric);
        }
        assert_eq!("NDCG@5".parse::<Metric>().expect("case-insensitive"), Metric::ndcg(5));
        for bad in ["ndcg", "ndcg@", "ndcg@0", "ndcg@-1", "ndcg@x", "precision@10", "@10", ""] {
            let err = bad.parse::<Metric>().expect_err(bad);
            assert_eq!(err.kind(), ragtune_core::ErrorKind::InvalidInput, "{bad}");
        }
    }
}
