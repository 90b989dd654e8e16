//! The `trec_eval` ordering of a run.

use std::cmp::Ordering;
use std::collections::HashSet;

/// Orders one query's run the way `trec_eval` does before computing any metric.
///
/// The order is by score descending, with ties broken by document id *descending* (byte-wise reverse
/// lexicographic, `strcmp(b, a)` in `trec_eval`'s `comp_sim_docno`).
/// The input order of the pairs plays no part.
/// This is deliberately not the order ragtune's own retrievers emit (ties by ascending id): the metric follows
/// `trec_eval` so that its numbers compare with the literature, whatever order the system under test used.
///
/// Scores compare as numbers, so `-0.0` ties with `0.0`; a NaN score ranks below every number.
/// A document id that occurs more than once keeps only its highest-ranked occurrence (`trec_eval` rejects such
/// runs; we keep the first rather than fail an evaluation on one sloppy line).
///
/// Returns the ranked `(document id, score)` pairs, best first, borrowing the ids from `run`.
#[must_use]
pub fn trec_ranking<S: AsRef<str>>(run: &[(S, f32)]) -> Vec<(&str, f32)> {
    let mut ranked: Vec<(&str, f32)> = run.iter().map(|(id, score)| (id.as_ref(), *score)).collect();
    ranked.sort_by(|a, b| trec_order(*a, *b));
    let mut seen = HashSet::with_capacity(ranked.len());
    ranked.retain(|(id, _)| seen.insert(*id));
    ranked
}

/// The comparator behind [`trec_ranking`]: a total order, so the sort is deterministic.
fn trec_order((a_id, a_score): (&str, f32), (b_id, b_score): (&str, f32)) -> Ordering {
    let by_score = match (a_score.is_nan(), b_score.is_nan()) {
        // Neither is NaN, so `partial_cmp` always answers; `Equal` is never taken.
        (false, false) => b_score.partial_cmp(&a_score).unwrap_or(Ordering::Equal),
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (true, true) => Ordering::Equal,
    };
    by_score.then_with(|| b_id.cmp(a_id))
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use insta::assert_snapshot;

    use super::*;

    /// Renders the `trec_eval` ranking of `run` one line per document, as `1. d2  0.5000`, for a snapshot.
    fn check(run: &[(&str, f32)]) -> String {
        let mut out = String::new();
        for (rank, (id, score)) in trec_ranking(run).iter().enumerate() {
            writeln!(out, "{}. {id}  {score:.4}", rank + 1).expect("invariant: writing to a String cannot fail");
        }
        out
    }

    #[test]
    fn sorts_by_score_descending_whatever_the_input_order() {
        assert_snapshot!(check(&[("d1", 0.2), ("d2", 0.9), ("d3", 0.5)]), @r"
        1. d2  0.9000
        2. d3  0.5000
        3. d1  0.2000
        ");
    }

    #[test]
    fn breaks_ties_by_doc_id_descending() {
        // trec_eval's comp_sim_docno: equal scores fall back to strcmp(b, a), so "d3" outranks "d10" outranks "d1"
        // (byte order: "d1" < "d10" < "d3"). Our engine would emit d1, d10, d3 for these ties.
        assert_snapshot!(check(&[("d1", 0.5), ("d10", 0.5), ("d3", 0.5), ("d0", 0.7)]), @r"
        1. d0  0.7000
        2. d3  0.5000
        3. d10  0.5000
        4. d1  0.5000
        ");
    }

    #[test]
    fn keeps_the_highest_ranked_occurrence_of_a_duplicate() {
        assert_snapshot!(check(&[("a", 0.3), ("b", 0.6), ("a", 0.9), ("b", 0.1)]), @r"
        1. a  0.9000
        2. b  0.6000
        ");
    }

    #[test]
    fn negative_zero_ties_with_zero_and_nan_ranks_last() {
        assert_snapshot!(check(&[("n", f32::NAN), ("a", 0.0), ("b", -0.0), ("m", -1.0)]), @r"
        1. b  -0.0000
        2. a  0.0000
        3. m  -1.0000
        4. n  NaN
        ");
    }

    #[test]
    fn empty_run_is_an_empty_ranking() {
        assert_snapshot!(check(&[]), @"");
    }
}
