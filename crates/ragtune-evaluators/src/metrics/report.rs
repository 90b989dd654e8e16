//! Scoring a whole run against whole qrels.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::metric::{Judged, Metric};
use super::{Qrels, Runs};

/// The outcome of [`evaluate`]: per-query values and their means, keyed by metric name (`ndcg@10`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsReport {
    /// Metric name to its mean over the evaluated queries; 0 for every metric when no query was evaluated.
    pub mean: BTreeMap<String, f64>,
    /// Query id to metric name to value, for each evaluated query.
    pub per_query: BTreeMap<String, BTreeMap<String, f64>>,
    /// How many queries were evaluated: those of the qrels with at least one relevant document.
    pub queries: usize,
}

/// Scores `runs` against `qrels` on each of `metrics`.
///
/// The evaluated queries are those of `qrels` with at least one relevant document (grade >= 1); queries of
/// `runs` without judgements are ignored, and an evaluated query missing from `runs` scores 0 on every metric.
/// See the [module documentation](super) for how this compares with `trec_eval` and BEIR.
/// Each run is ranked once with [`trec_ranking`](super::trec_ranking); a metric listed twice appears once.
#[must_use]
pub fn evaluate(qrels: &Qrels, runs: &Runs, metrics: &[Metric]) -> MetricsReport {
    let names: Vec<(Metric, String)> = metrics.iter().map(|m| (*m, m.to_string())).collect();
    let mut sums = vec![0.0; names.len()];
    let mut per_query = BTreeMap::new();
    for (query, judgements) in qrels {
        let run = runs.get(query).map_or(&[][..], Vec::as_slice);
        let judged = Judged::new(judgements, run);
        if judged.num_relevant() == 0 {
            continue;
        }
        let mut values = BTreeMap::new();
        for ((metric, name), sum) in names.iter().zip(&mut sums) {
            let value = judged.score(*metric);
            *sum += value;
            values.insert(name.clone(), value);
        }
        per_query.insert(query.clone(), values);
    }

    let queries = per_query.len();
    let mean = names
        .into_iter()
        .zip(sums)
        .map(|((_, name), sum)| (name, if queries == 0 { 0.0 } else { sum / queries as f64 }))
        .collect();
    MetricsReport { mean, per_query, queries }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use insta::assert_snapshot;

    use super::*;

    /// Evaluates `run` lines `(query, doc, score)` against `qrels` lines `(query, doc, grade)` on `metrics` and
    /// renders the report as text, `trec_eval -q` style: one `metric  query  value` line per value, means as `all`.
    fn check(qrels: &[(&str, &str, i32)], run: &[(&str, &str, f32)], metrics: &[&str]) -> String {
        let mut q = Qrels::new();
        for (query, doc, grade) in qrels {
            q.entry((*query).to_owned()).or_default().insert((*doc).to_owned(), *grade);
        }
        let mut r = Runs::new();
        for (query, doc, score) in run {
            r.entry((*query).to_owned()).or_default().push(((*doc).to_owned(), *score));
        }
        let metrics: Vec<Metric> = metrics.iter().map(|m| m.parse().expect("test metric names are valid")).collect();
        let report = evaluate(&q, &r, &metrics);

        let mut out = String::new();
        for (query, values) in &report.per_query {
            for (name, value) in values {
                writeln!(out, "{name:<10} {query:<4} {value:.4}").expect("invariant: writing to a String cannot fail");
            }
        }
        for (name, value) in &report.mean {
            writeln!(out, "{name:<10} all  {value:.4}").expect("invariant: writing to a String cannot fail");
        }
        writeln!(out, "queries    {}", report.queries).expect("invariant: writing to a String cannot fail");
        out
    }

    #[test]
    fn means_over_queries_with_relevant_documents() {
        // q1: relevant d3 at rank 3: nDCG = 0.5, MRR = 1/3. q2: relevant e1 at rank 1: 1, 1.
        // q3 has judgements but none relevant: left out of per_query and of the mean, though it has a run.
        // q4 has a run but no judgements: ignored.
        // Means: nDCG = (0.5 + 1) / 2 = 0.75, MRR = (1/3 + 1) / 2 = 0.6667.
        let qrels = [("q1", "d3", 1), ("q1", "d9", 0), ("q2", "e1", 2), ("q3", "f1", 0)];
        let run = [
            ("q1", "d1", 0.9),
            ("q1", "d2", 0.8),
            ("q1", "d3", 0.7),
            ("q2", "e1", 0.5),
            ("q3", "f1", 0.5),
            ("q4", "g1", 0.5),
        ];
        assert_snapshot!(check(&qrels, &run, &["ndcg@10", "mrr@10"]), @r"
        mrr@10     q1   0.3333
        ndcg@10    q1   0.5000
        mrr@10     q2   1.0000
        ndcg@10    q2   1.0000
        mrr@10     all  0.6667
        ndcg@10    all  0.7500
        queries    2
        ");
    }

    #[test]
    fn judged_query_missing_from_the_run_counts_as_zero() {
        // q1 perfect (1 on every metric); q2 is judged with a relevant document but has no run: 0 everywhere.
        // Means: (1 + 0) / 2 = 0.5.
        let qrels = [("q1", "a", 1), ("q2", "b", 1)];
        let run = [("q1", "a", 1.0)];
        assert_snapshot!(check(&qrels, &run, &["recall@5", "p@1", "map@5"]), @r"
        map@5      q1   1.0000
        p@1        q1   1.0000
        recall@5   q1   1.0000
        map@5      q2   0.0000
        p@1        q2   0.0000
        recall@5   q2   0.0000
        map@5      all  0.5000
        p@1        all  0.5000
        recall@5   all  0.5000
        queries    2
        ");
    }

    #[test]
    fn no_evaluable_query_gives_zero_means() {
        assert_snapshot!(check(&[("q1", "a", 0)], &[("q1", "a", 1.0)], &["ndcg@10", "ndcg@10"]), @r"
        ndcg@10    all  0.0000
        queries    0
        ");
    }

    #[test]
    fn report_keys_are_the_metric_names() {
        let qrels = Qrels::from([("q".to_owned(), BTreeMap::from([("a".to_owned(), 1)]))]);
        let report = evaluate(&qrels, &Runs::new(), &[Metric::map(100), Metric::precision(10)]);
        assert_eq!(report.mean.keys().collect::<Vec<_>>(), ["map@100", "p@10"]);
        assert_eq!(report.per_query["q"].keys().collect::<Vec<_>>(), ["map@100", "p@10"]);
    }
}
