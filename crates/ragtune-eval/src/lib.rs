//! ragtune-eval: everything that measures the ragtune engine, kept out of the engine itself.
//!
//! - [`retrieval`]: a BEIR dataset indexed (and cached), every query of a split run, trec_eval metrics, latency and
//!   indexing time ([`run_eval`], [`summary_table`]);
//! - [`rerank`]: the budget efficiency of the reranking controller on the retrieved candidates, per
//!   [`RerankPolicy`](ragtune::rerank::RerankPolicy) and budget;
//! - [`crag`]: Corrective-RAG decision statistics and the calibration of the evaluators' thresholds;
//! - [`fusion`]: the hybrid fusion (method, weights, query-time strength) fitted on a training split;
//! - [`qa`]: answer-level evaluation on the CMU Wikipedia QA set, read by [`cmu_qa`], with [`paired`] saying how
//!   sure a difference in accuracy between two experiments is;
//! - [`cmu_set`]: a BEIR retrieval set of long documents built from the CMU QA set, with passage-level
//!   judgements that [`passages`] scores.
//!
//! The crate depends on the facade `ragtune` and reaches the layers through its re-exports. Nothing in the engine
//! depends on it: only the command-line tool, xtask, the integration tests and the benchmarks do
//! (`cargo xtask layers` checks this).
//!
//! ```
//! use ragtune_eval::{EvalOptions, run_eval, summary_table};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> ragtune::core::Result<()> {
//! // A BEIR dataset: a corpus, queries and relevance judgements.
//! let dir = tempfile::tempdir().unwrap();
//! let data = dir.path().join("tiny");
//! std::fs::create_dir_all(data.join("qrels")).unwrap();
//! std::fs::write(
//!     data.join("corpus.jsonl"),
//!     "{\"_id\": \"d1\", \"text\": \"Scurvy is caused by a lack of vitamin C.\"}\n\
//!      {\"_id\": \"d2\", \"text\": \"Rickets is caused by a lack of vitamin D.\"}\n",
//! )
//! .unwrap();
//! std::fs::write(data.join("queries.jsonl"), "{\"_id\": \"q1\", \"text\": \"scurvy\"}\n").unwrap();
//! std::fs::write(data.join("qrels/test.tsv"), "query-id\tcorpus-id\tscore\nq1\td1\t1\n").unwrap();
//!
//! // BM25 needs no model; the index is cached under `cache_dir` for the next run.
//! let mut opts = EvalOptions::new(&data);
//! opts.cache_dir = dir.path().join("cache");
//! opts.top_k = 10;
//! let report = run_eval(&opts, &mut |line| eprintln!("{line}")).await?;
//! assert_eq!(report.metrics["ndcg@10"], 1.0);
//! assert!(summary_table(&report).contains("ndcg@10"));
//! # Ok(())
//! # }
//! ```

pub mod cmu_qa;
pub mod cmu_set;
pub mod crag;
pub mod fusion;
pub mod joined;
pub mod paired;
pub mod passages;
pub mod qa;
pub mod rerank;
pub mod retrieval;
pub mod train;

pub use cmu_set::{CmuSetOptions, CmuSetReport, build_cmu_set, cmu_set_table};
pub use crag::{
    CragEvalReport, calibration_toml, crag_table, learned_table, learned_toml, run_calibration, run_crag_eval,
    run_learned_calibration,
};
pub use fusion::{
    DatasetFit, FusionFit, FusionGrid, JointFusionFit, Levels, Stress, fusion_table, fusion_toml, joint_fit,
    run_fusion_calibration, with_typos,
};
pub use joined::{JoinOptions, JoinReport, join_sets};
pub use qa::{QaEvalOptions, QaEvalReport, is_qa_dataset, qa_table, run_qa_calibration, run_qa_eval};
pub use rerank::{RerankEvalOptions, RerankEvalReport, evaluate_reranking, rerank_table};
pub use retrieval::{DocScore, EvalChunking, EvalOptions, EvalReport, run_eval, summary_table};
pub use train::{TrainEvent, TrainOptions, TrainReport, mine_groups, train_reranker};
