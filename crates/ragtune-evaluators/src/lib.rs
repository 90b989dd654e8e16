//! Evaluators for ragtune: the models and measures that judge retrieval and answer quality.
//!
//! The answer pipeline (`ragtune::Engine::ask`) and the evaluation harness build on these modules:
//!
//! - [`crag`]: Corrective-RAG relevance evaluators, the LLM-free [`HeuristicEvaluator`](crag::HeuristicEvaluator)
//!   and the model-based [`ModelEvaluator`](crag::ModelEvaluator) with free scorers, and
//!   [`calibrate`](crag::calibrate), which fits the model-based evaluator's two thresholds on labelled training
//!   queries.
//! - [`refine`]: knowledge refinement, which decomposes retrieved chunks into verbatim strips, keeps the strips
//!   relevant to the query and recomposes them.
//! - [`extract`]: query-focused extraction with one batched LLM call, every returned sentence verified against its
//!   source, falling back to the refinement strips.
//! - [`faithfulness`]: the faithfulness judge, with an LLM and a JSON schema or, as a labelled fallback, lexical
//!   overlap optionally blended with embedding similarity.
//! - [`retry`]: the smart-retry policy, a pure function of the configuration, the attempt number and what the
//!   attempt produced.
//! - [`text`]: the text analysis every judge shares (words, stop words, query keywords, sentences with one
//!   abbreviation list, cosine, token estimate), so they all see the same words and sentences.
//! - [`metrics`]: nDCG, recall, precision, MRR and MAP at a cutoff, defined exactly as `trec_eval` (and so
//!   `pytrec_eval` in the BEIR benchmark) defines them, so that our numbers compare with published scores; a
//!   percentile helper for latency summaries; and answer-level metrics in the style of SQuAD ([`metrics::answer`]).
//!
//! The crate depends on `ragtune-core` only: prompts and language models come from the caller through the core
//! seams.
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
pub mod text;
