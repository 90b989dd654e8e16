//! Evaluators for ragtune: the models and measures that judge retrieval quality.
//!
//! This crate will hold the CRAG-style relevance evaluators, query refinement, faithfulness judges and the
//! information-retrieval metrics that `cargo xtask eval` reports.
//! For now it holds the metrics: nDCG, recall, precision, MRR and MAP at a cutoff, defined exactly as
//! `trec_eval` (and so `pytrec_eval` in the BEIR benchmark) defines them, so that our numbers compare with
//! published scores, plus a percentile helper for latency summaries.
//!
//! ```
//! use std::collections::BTreeMap;
//!
//! use ragtune_evaluators::metrics::{Metric, Qrels, Runs, evaluate};
//!
//! // One query whose only relevant document comes third.
//! let qrels: Qrels = BTreeMap::from([("q1".into(), BTreeMap::from([("d3".into(), 1)]))]);
//! let runs: Runs =
//!     BTreeMap::from([("q1".into(), vec![("d1".into(), 0.9), ("d2".into(), 0.8), ("d3".into(), 0.7)])]);
//!
//! let metrics: Vec<Metric> = ["ndcg@10", "mrr@10"].iter().map(|m| m.parse()).collect::<Result<_, _>>()?;
//! let report = evaluate(&qrels, &runs, &metrics);
//! assert_eq!(report.queries, 1);
//! assert_eq!(report.mean["ndcg@10"], 0.5); // 1 / log2(3 + 1)
//! assert_eq!(report.mean["mrr@10"], 1.0 / 3.0);
//! # Ok::<(), ragtune_core::Error>(())
//! ```

pub mod crag;
pub mod extract;
pub mod faithfulness;
pub mod metrics;
pub mod refine;
pub mod retry;
