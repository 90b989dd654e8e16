//! Property tests of the metric invariants.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn all_metrics(k: usize) -> [Metric; 5] {
    [Metric::ndcg(k), Metric::recall(k), Metric::precision(k), Metric::mrr(k), Metric::map(k)]
}

/// Judgements over a small id space so that runs hit judged documents often; grades include 0 and -1.
fn judgements() -> impl Strategy<Value = BTreeMap<String, i32>> {
    prop::collection::btree_map((0..10_u8).prop_map(|i| format!("d{i}")), -1..=3_i32, 0..8)
}

/// A run with duplicates and, from the few score values, many ties.
fn run() -> impl Strategy<Value = Vec<(String, f32)>> {
    prop::collection::vec(((0..15_u8).prop_map(|i| format!("d{i}")), (0..4_u8).prop_map(f32::from)), 0..20)
}

/// Checks one property over `(judgements, run, k)`; the single helper of this module.
fn check(
    judgements: &BTreeMap<String, i32>,
    run: &[(String, f32)],
    k: usize,
    property: impl Fn(Metric, f64) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    for metric in all_metrics(k) {
        property(metric, metric.score(judgements, run))?;
    }
    Ok(())
}

proptest! {
    #[test]
    fn every_metric_lies_in_the_unit_interval(judgements in judgements(), run in run(), k in 0..25_usize) {
        check(&judgements, &run, k, |metric, value| {
            prop_assert!((0.0..=1.0).contains(&value), "{metric} = {value}");
            Ok(())
        })?;
    }

    #[test]
    fn ideal_ranking_has_ndcg_one(judgements in judgements(), junk in 0..5_usize, k in 1..25_usize) {
        prop_assume!(judgements.values().any(|&grade| grade >= 1));
        // Judged documents by grade descending with distinct descending scores, then unjudged ones below them.
        let mut by_grade: Vec<(&String, i32)> = judgements.iter().map(|(id, g)| (id, *g)).collect();
        by_grade.sort_by_key(|(_, grade)| std::cmp::Reverse(*grade));
        let mut run: Vec<(String, f32)> =
            by_grade.iter().enumerate().map(|(i, (id, _))| ((*id).clone(), 100.0 - i as f32)).collect();
        run.extend((0..junk).map(|i| (format!("unjudged{i}"), -(i as f32))));
        check(&judgements, &run, k, |metric, value| {
            if let Metric::Ndcg(_) = metric {
                prop_assert!((value - 1.0).abs() < 1e-12, "{metric} = {value}");
            }
            Ok(())
        })?;
    }

    #[test]
    fn recall_is_monotone_in_k(judgements in judgements(), run in run()) {
        let mut previous = 0.0;
        for k in 1..=25 {
            let recall = Metric::recall(k).score(&judgements, &run);
            prop_assert!(recall >= previous, "recall@{k} = {recall} < recall@{} = {previous}", k - 1);
            previous = recall;
        }
    }

    #[test]
    fn input_order_of_a_run_does_not_matter(
        judgements in judgements(),
        (run, shuffled) in run().prop_flat_map(|run| (Just(run.clone()), Just(run).prop_shuffle())),
        k in 1..25_usize,
    ) {
        // The generated runs hold ties and duplicates, so this covers the distinct-score case and more: the
        // trec_eval order is total, so any permutation ranks the same.
        check(&judgements, &run, k, |metric, value| {
            prop_assert_eq!(value, metric.score(&judgements, &shuffled), "{}", metric);
            Ok(())
        })?;
    }

    #[test]
    fn names_round_trip(k in 1..100_000_usize) {
        for metric in all_metrics(k) {
            prop_assert_eq!(metric.to_string().parse::<Metric>().ok(), Some(metric));
        }
    }

    #[test]
    fn means_lie_between_the_per_query_extremes(
        queries in prop::collection::vec((judgements(), run()), 0..6),
        k in 1..25_usize,
    ) {
        let mut qrels = Qrels::new();
        let mut runs = Runs::new();
        for (i, (judgements, run)) in queries.into_iter().enumerate() {
            qrels.insert(format!("q{i}"), judgements);
            runs.insert(format!("q{i}"), run);
        }
        let report = evaluate(&qrels, &runs, &all_metrics(k));
        prop_assert_eq!(report.queries, report.per_query.len());
        for (name, mean) in &report.mean {
            let values = report.per_query.values().map(|v| v[name]);
            let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
            if report.queries == 0 {
                prop_assert_eq!(*mean, 0.0);
            } else {
                prop_assert!(lo - 1e-12 <= *mean && *mean <= hi + 1e-12, "{} = {} not in [{}, {}]", name, mean, lo, hi);
            }
        }
    }
}
