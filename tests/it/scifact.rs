//! BM25 on BEIR SciFact reproduces the published numbers (needs `../shared/data`).

use std::io::Write;

use ragtune::Bm25Settings;
use ragtune_eval::retrieval::{EvalOptions, run_eval};

use crate::shared_data;

async fn ndcg(bm25: Bm25Settings) -> Option<(f64, ragtune_eval::retrieval::EvalReport)> {
    let Some(data) = shared_data() else {
        // Written straight to stderr: libtest captures `eprintln!` of passing tests, and a skip must be seen.
        let _ =
            writeln!(std::io::stderr(), "SKIPPED: ../shared/data is absent, so BM25 on SciFact cannot be checked here");
        return None;
    };
    let cache = tempfile::tempdir().unwrap();
    let mut opts = EvalOptions::new(data.join("beir/scifact"));
    opts.bm25 = bm25;
    opts.cache_dir = cache.path().to_path_buf();
    let report = run_eval(&opts, &mut |_| {}).await.unwrap();
    Some((report.metrics["ndcg@10"], report))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bm25_default_matches_the_literature_on_scifact_test() {
    let Some((ndcg10, report)) = ndcg(Bm25Settings::default()).await else { return };
    // BEIR paper 0.665, Pyserini flat 0.679.
    assert!((0.655..=0.690).contains(&ndcg10), "nDCG@10 = {ndcg10}");
    assert_eq!(report.queries, 300);
    assert_eq!(report.documents, 5183);
    assert!(report.failed_queries.is_empty() && report.load_issues.is_empty());
    assert!(report.metrics["recall@100"] > 0.9, "{:?}", report.metrics);
    for key in ["ndcg@10", "recall@100", "mrr@10", "map@100"] {
        assert!(report.metrics.contains_key(key), "the report's stable keys include {key}");
    }
    let json = serde_json::to_value(&report).unwrap();
    for key in ["dataset", "split", "queries", "config", "metrics", "latency_ms", "index_seconds"] {
        assert!(json.get(key).is_some(), "the report JSON has `{key}`");
    }
    assert!(json["latency_ms"]["p50"].is_number() && json["latency_ms"]["p99"].is_number());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bm25_pyserini_parameters_match_the_literature_on_scifact_test() {
    let Some((ndcg10, _)) = ndcg(Bm25Settings { k1: 0.9, b: 0.4, avg_doc_len: None }).await else { return };
    assert!((0.655..=0.690).contains(&ndcg10), "nDCG@10 = {ndcg10}");
}
