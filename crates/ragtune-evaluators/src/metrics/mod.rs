//! Information-retrieval metrics with `trec_eval` definitions.
//!
//! Every definition here follows `trec_eval` 9.x as `pytrec_eval` runs it for the BEIR benchmark, so a number
//! computed here can be put beside a published BEIR score:
//!
//! - A run is re-sorted by score descending, ties broken by document id descending (see [`trec_ranking`]).
//! - A document is relevant when its grade is at least 1 (`trec_eval -l1`); zero, negative and missing grades
//!   are non-relevant.
//! - [`Metric::Ndcg`] is `ndcg_cut` with linear gain, [`Metric::Recall`] is `recall`, [`Metric::Precision`] is
//!   `P`, [`Metric::Map`] is `map_cut`; [`Metric::Mrr`] is BEIR's `MRR@k` (reciprocal rank cut at `k`).
//!   Each variant documents its formula.
//! - All arithmetic is in `f64`.
//!
//! [`evaluate`] averages over the judged queries that have at least one relevant document.
//! A judged query absent from the runs counts as an empty ranking (every metric 0), as with `trec_eval -c`.
//! Plain `trec_eval` and BEIR average over the queries present in both the qrels and the run instead, and keep
//! queries whose judgements are all non-relevant (scoring 0 for them); the two agree whenever every judged query
//! has a relevant document and a run, the usual case when a BEIR test split is retrieved in full.

use std::collections::BTreeMap;

pub mod answer;
mod metric;
mod percentile;
mod ranking;
mod report;

#[cfg(test)]
mod proptests;

pub use metric::Metric;
pub use percentile::percentile;
pub use ranking::trec_ranking;
pub use report::{MetricsReport, evaluate};

/// Relevance judgements: query id to document id to graded relevance (`trec_eval` qrels).
///
/// Grades of 1 and above are relevant and count as linear gain in nDCG; 0 and negative grades are non-relevant.
pub type Qrels = BTreeMap<String, BTreeMap<String, i32>>;

/// Retrieval results of a system: query id to `(document id, score)` pairs, in any order (`trec_eval` run).
pub type Runs = BTreeMap<String, Vec<(String, f32)>>;
