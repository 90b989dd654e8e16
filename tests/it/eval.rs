//! The evaluation harness on a tiny BEIR dataset: metrics end to end, the index cache, bad options.

use ragtune::core::ErrorKind;
use ragtune_eval::retrieval::{EvalOptions, run_eval};
use ragtune_testkit::fixtures::tiny_beir;

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
    assert!(err.to_string().contains("need an LLM"), "{err}");
}

#[tokio::test]
async fn rerank_budget_efficiency_compares_policies_with_the_full_rerank_and_the_top_b_baseline() {
    use std::sync::Arc;

    use ragtune::core::{Candidate, Chunk, ScoredHit};
    use ragtune_eval::rerank::{RerankEvalOptions, evaluate_reranking};
    use ragtune_testkit::fakes::ScriptedReranker;

    // Ten queries of 20 candidates; the one relevant document sits at retrieval rank 15 and the reranker knows it.
    let mut reranker = ScriptedReranker::new().with_default(0.0);
    let mut queries = Vec::new();
    let mut qrels = std::collections::BTreeMap::new();
    for q in 0..10 {
        let cands: Vec<Candidate> = (0..20)
            .map(|i| {
                let id = format!("q{q}-d{i}");
                let hit = ScoredHit { chunk: Chunk::new(&id, &id, format!("text {id}")), score: 1.0 - i as f32 * 0.01 };
                Candidate::from_hit(hit, "bm25", i + 1)
            })
            .collect();
        reranker = reranker.with_score(format!("text q{q}-d14"), 9.0);
        qrels.insert(format!("q{q}"), [(format!("q{q}-d14"), 1)].into_iter().collect());
        queries.push((format!("q{q}"), format!("query {q}"), cands));
    }
    let opts = RerankEvalOptions {
        pool: 20,
        budgets: vec![0.25, 1.0],
        policies: vec![ragtune::rerank::RerankPolicy::Greedy, ragtune::rerank::RerankPolicy::Uncertainty],
        ..RerankEvalOptions::default()
    };
    let report = evaluate_reranking(&opts, Arc::new(reranker), &qrels, &queries, &mut |_| {}).await.unwrap();
    assert_eq!(report.queries, 10);
    assert!((report.full_ndcg_at_10 - 1.0).abs() < 1e-9, "the full rerank puts the relevant document first");
    assert!(report.retrieval_ndcg_at_10 < 0.5);
    assert_eq!(report.points.len(), 6, "baseline + 2 policies at 2 budgets");
    for p in &report.points {
        assert!(p.pairs_per_query <= p.budget * 20.0 + 1e-9, "{p:?} stays within its budget");
    }
    let at = |policy: &str, budget: f64| {
        report.points.iter().find(|p| p.policy == policy && (p.budget - budget).abs() < 1e-9).unwrap().ndcg_at_10
    };
    assert!(at("baseline-top-b", 0.25) < 0.5, "the first 5 by retrieval rank miss rank 15");
    assert!((at("greedy", 1.0) - 1.0).abs() < 1e-9 && (at("baseline-top-b", 1.0) - 1.0).abs() < 1e-9);
    assert!(ragtune_eval::rerank::rerank_table(&report).contains("baseline-top-b"));

    // Retrieval's weight at 1 keeps retrieval's order in every reranked head: full rerank, baseline and policies
    // all score as retrieval does (the pairs are still scored and counted).
    let blended = RerankEvalOptions { retrieval_weight: 1.0, ..opts.clone() };
    let reranker = queries
        .iter()
        .fold(ScriptedReranker::new().with_default(0.0), |r, (id, _, _)| r.with_score(format!("text {id}-d14"), 9.0));
    let report = evaluate_reranking(&blended, Arc::new(reranker), &qrels, &queries, &mut |_| {}).await.unwrap();
    assert!((report.full_ndcg_at_10 - report.retrieval_ndcg_at_10).abs() < 1e-9, "{report:?}");
    for p in &report.points {
        assert!((p.ndcg_at_10 - report.retrieval_ndcg_at_10).abs() < 1e-9, "{p:?}");
    }
    let bad = RerankEvalOptions { retrieval_weight: 2.0, ..opts };
    assert!(bad.validate().unwrap_err().to_string().contains("retrieval weight must be between 0 and 1"));
}

/// A long document over three paragraphs, a short one, and passage judgements for the third paragraph.
fn long_docs(dir: &std::path::Path) {
    let filler = |word: &str| vec![word; 14].join(" ");
    let long = format!("{} end.\n\n{} end.\n\n{} zebra.", filler("alpha"), filler("beta"), filler("gamma"));
    std::fs::create_dir_all(dir.join("qrels/passages")).unwrap();
    let corpus = [
        serde_json::json!({"_id": "d1", "title": "Long", "text": long, "metadata": {"format": "text"}}),
        serde_json::json!({"_id": "d2", "title": "Short", "text": "delta zebra crossing"}),
    ];
    let lines: Vec<String> = corpus.iter().map(ToString::to_string).collect();
    std::fs::write(dir.join("corpus.jsonl"), lines.join("\n")).unwrap();
    std::fs::write(dir.join("queries.jsonl"), "{\"_id\": \"q1\", \"text\": \"gamma zebra\"}\n").unwrap();
    std::fs::write(dir.join("qrels/test.tsv"), "q1\td1\t1\n").unwrap();
    let third = format!("{} zebra.", filler("gamma"));
    let passage = serde_json::json!({"_id": "d1#p2", "doc_id": "d1", "text": third});
    std::fs::write(dir.join("passages.jsonl"), format!("{passage}\n")).unwrap();
    std::fs::write(dir.join("qrels/passages/test.tsv"), "q1\td1#p2\t1\n").unwrap();
}

#[tokio::test]
async fn long_documents_are_chunked_scored_from_passages_and_judged_per_passage() {
    use ragtune_eval::retrieval::{DocScore, EvalChunking};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("long");
    long_docs(&data);
    let mut opts = EvalOptions::new(&data);
    opts.cache_dir = dir.path().join("cache");
    opts.top_k = 10;
    opts.chunker.chunk_size = 20;
    opts.chunker.chunk_overlap = 5;

    let chunked = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert_eq!(chunked.config["chunking"], "passages/size=20/overlap=5/section=1000");
    assert_eq!(chunked.config["doc_score"], "max");
    assert!(chunked.passages.unwrap() > 2, "{:?}", chunked.passages);
    assert_eq!(chunked.metrics["mrr@10"], 1.0);
    let level = chunked.passage_level.as_ref().expect("passage qrels are scored");
    assert_eq!(level.queries, 1);
    assert_eq!(level.metrics["mrr@10"], 1.0, "{level:?}");
    assert!(level.unlocated.is_empty());

    // Another aggregation is another report config, on the same cached index.
    opts.doc_score = DocScore::Sum(2);
    let summed = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert!(summed.index_cached);
    assert_eq!(summed.config["doc_score"], "sum:2");

    // Whole documents: another index, no passage level, and the config baselines were made with.
    opts.chunking = EvalChunking::Whole;
    let whole = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert!(!whole.index_cached);
    assert_eq!(whole.config["chunking"], "whole-documents");
    assert!(whole.config.get("doc_score").is_none());
    assert_eq!(whole.passages, Some(2));
    assert!(whole.passage_level.is_none());

    // Plain text has no header paths: the header boost changes nothing but the report's config.
    opts.chunking = EvalChunking::Passages;
    opts.doc_score = DocScore::Max;
    opts.header_boost = 0.5;
    let boosted = run_eval(&opts, &mut |_| {}).await.unwrap();
    assert_eq!(boosted.config["header_boost"], 0.5);
    assert_eq!(boosted.metrics, chunked.metrics);
    assert_eq!(boosted.passage_level, chunked.passage_level);
}
