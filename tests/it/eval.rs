//! The evaluation harness on a tiny BEIR dataset: metrics end to end, the index cache, bad options.

use std::path::Path;

use ragtune::core::ErrorKind;
use ragtune::eval::{EvalOptions, run_eval};

fn tiny_beir(dir: &Path) {
    std::fs::create_dir_all(dir.join("qrels")).unwrap();
    std::fs::write(
        dir.join("corpus.jsonl"),
        [
            r#"{"_id": "d1", "title": "Scurvy", "text": "Scurvy is caused by a lack of vitamin C."}"#,
            r#"{"_id": "d2", "title": "Rickets", "text": "Rickets is caused by a lack of vitamin D."}"#,
            r#"{"_id": "d3", "title": "Goitre", "text": "Goitre is linked to iodine deficiency."}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("queries.jsonl"),
        "{\"_id\": \"q1\", \"text\": \"scurvy vitamin C\"}\n{\"_id\": \"q2\", \"text\": \"iodine\"}\n{\"_id\": \"q3\", \"text\": \"unjudged\"}\n",
    )
    .unwrap();
    std::fs::write(dir.join("qrels/test.tsv"), "query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq2\td3\t1\r\n").unwrap();
}

#[tokio::test]
async fn metrics_cache_and_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tiny");
    tiny_beir(&data);
    let mut opts = EvalOptions::new(&data);
    opts.cache_dir = dir.path().join("cache");
    opts.top_k = 10;

    let first = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert_eq!(first.queries, 2, "only judged queries are evaluated");
    assert_eq!(first.metrics["ndcg@10"], 1.0, "both relevant documents rank first: {:?}", first.metrics);
    assert_eq!(first.metrics["mrr@10"], 1.0);
    assert!(!first.index_cached);
    assert_eq!(first.dataset, "tiny");

    let second = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert!(second.index_cached);
    assert_eq!(second.metrics, first.metrics);

    // An index without its completion marker (an interrupted run) is rebuilt, not trusted.
    let cached: Vec<_> = std::fs::read_dir(&opts.cache_dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(cached.len(), 1);
    std::fs::remove_file(cached[0].join("complete.json")).unwrap();
    let third = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert!(!third.index_cached);
    assert_eq!(third.metrics, first.metrics);

    // Other BM25 parameters are another cache entry.
    opts.bm25.k1 = 0.5;
    assert!(!run_eval(&opts, &mut |_| {}).await.unwrap().index_cached);
}

#[tokio::test]
async fn bad_options_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tiny");
    tiny_beir(&data);
    let mut opts = EvalOptions::new(&data);
    opts.cache_dir = dir.path().join("cache");
    opts.retriever = "splade".into();
    let err = run_eval(&opts, &mut |_| {}).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("available: bm25, dense, hybrid"), "{err}");
    opts.retriever = "bm25".into();
    opts.split = "train".into();
    let err = run_eval(&opts, &mut |_| {}).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[tokio::test]
async fn a_limit_judges_only_the_queries_that_ran_and_transforms_report_their_cost() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tiny");
    tiny_beir(&data);
    let mut opts = EvalOptions::new(&data);
    opts.cache_dir = dir.path().join("cache");
    opts.limit = Some(1);
    let one = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert_eq!(one.queries, 1);
    assert_eq!(one.metrics["ndcg@10"], 1.0, "the one query that ran, not averaged with ones that did not");
    assert_eq!(one.config["limit"], 1);

    // An LLM-free transformation: no LLM cost, its own config in the report.
    opts.limit = None;
    opts.transform.kind = ragtune::Transform::Expand;
    let expanded = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert_eq!(expanded.config["transform"]["kind"], "expand");
    assert_eq!(expanded.cost.llm_calls, 0);
    // An LLM transformation without an LLM is refused up front.
    opts.transform.kind = ragtune::Transform::Hyde;
    opts.llm.url = String::new();
    let err = run_eval(&opts, &mut |_| {}).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("needs an LLM"), "{err}");
}
