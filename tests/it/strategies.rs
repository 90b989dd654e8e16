//! Dense, hybrid and automatic strategies through the engine, with a fake embedder (the real model is tested in
//! `ragtune-embed` and by the SciFact evaluations).

use std::sync::Arc;

use ragtune::core::{Ctx, Document, Embedder, ErrorKind, Query, VectorStore};
use ragtune::{Chunking, Config, Engine, Strategy};
use ragtune_testkit::fakes::HashEmbedder;

fn config(dir: &std::path::Path) -> Config {
    let mut cfg = Config::default();
    cfg.store.path = dir.join("store");
    cfg
}

fn docs() -> Vec<Document> {
    vec![
        Document::new("fruit", "apples pears and plums grow in orchards"),
        Document::new("market", "the stock market fell sharply on monday"),
        Document::new("garden", "a garden of apples"),
    ]
}

#[tokio::test]
async fn dense_and_hybrid_retrieve_with_provenance_from_both_strategies() {
    let dir = tempfile::tempdir().unwrap();
    let embedder: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(64));
    let mut engine = Engine::open_with_embedder(config(dir.path()), Some(embedder)).await.unwrap();
    let report = engine.index_documents(&docs(), Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    assert_eq!((report.store.dense_vectors, report.store.sparse_vectors), (3, 3));

    let dense = engine.search_with(Query::new("apples").with_top_k(2), Strategy::Dense).await.unwrap();
    assert!(dense.hits.iter().all(|c| c.sources.contains_key("dense")));
    let hybrid = engine.search(Query::new("apples orchards").with_top_k(3)).await.unwrap();
    assert_eq!(hybrid.trace[0].stage, "route");
    assert_eq!(hybrid.trace[0].action, "hybrid", "auto resolves to hybrid when dense vectors exist");
    let top = &hybrid.hits[0];
    assert_eq!(top.chunk.id, "fruit");
    assert!(top.sources.contains_key("bm25") && top.sources.contains_key("dense"), "{:?}", top.sources);
    assert!(hybrid.trace.iter().any(|e| e.action == "hybrid" && e.detail.contains_key("fusion")));
}

#[tokio::test]
async fn without_an_embedder_auto_falls_back_to_bm25_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::open_with_embedder(config(dir.path()), None).await.unwrap();
    engine.index_documents(&docs(), Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    let out = engine.search(Query::new("apples")).await.unwrap();
    assert_eq!(out.trace[0].action, "bm25");
    assert!(out.trace[0].detail.contains_key("fallback"), "{:?}", out.trace[0]);
    let err = engine.search_with(Query::new("apples"), Strategy::Dense).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.to_string().contains("`dense` retrieval is not possible"), "{err}");
}

#[tokio::test]
async fn a_store_refuses_another_embedding_model() {
    let dir = tempfile::tempdir().unwrap();
    {
        let e: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(64));
        let mut engine = Engine::open_with_embedder(config(dir.path()), Some(e)).await.unwrap();
        engine.index_documents(&docs(), Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    }
    let other: Arc<dyn Embedder> = Arc::new(HashEmbedder::new(32));
    let err = Engine::open_with_embedder(config(dir.path()), Some(other)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Mismatch);
    assert!(err.to_string().contains("64 dimensions"), "{err}");
    // The store itself is intact and still searchable lexically.
    let engine = Engine::open_with_embedder(config(dir.path()), None).await.unwrap();
    assert_eq!(engine.store().stats(&Ctx::new()).await.unwrap().dense_vectors, 3);
    assert_eq!(engine.search_with(Query::new("market"), Strategy::Bm25).await.unwrap().hits[0].chunk.id, "market");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_model_makes_auto_hybrid_and_finds_paraphrases() {
    if !crate::models_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.embedding.mode = ragtune::EmbeddingMode::On;
    let mut engine = Engine::open(cfg).await.unwrap();
    let docs = vec![
        Document::new("physician", "The physician prescribed antibiotics for the bacterial infection."),
        Document::new("finance", "Quarterly earnings beat analyst expectations."),
        Document::new("weather", "Heavy rain is expected across the region tomorrow."),
    ];
    let report = engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    assert_eq!(report.store.dense_vectors, 3);
    assert_eq!(report.store.dense_spec.as_ref().map(|s| s.dim), Some(384));
    // No word in common with the right document: only the dense side can find it.
    let dense = engine.search_with(Query::new("doctor gave medicine").with_top_k(1), Strategy::Dense).await.unwrap();
    assert_eq!(dense.hits[0].chunk.id, "physician");
    let auto = engine.search(Query::new("doctor gave medicine for an infection").with_top_k(3)).await.unwrap();
    assert_eq!(auto.trace[0].action, "hybrid");
    assert_eq!(auto.hits[0].chunk.id, "physician");
    assert!(auto.trace.iter().any(|e| e.stage == "embed"), "the embedding call is traced with its cost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_dense_vectors_is_explained_until_it_has_some() {
    if !crate::models_provisioned() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let doc = |id: &str, text: &str| Document::new(id, text);
    {
        // Indexed without the model: BM25 only.
        let mut cfg = config(dir.path());
        cfg.embedding.mode = ragtune::EmbeddingMode::Off;
        let mut engine = Engine::open(cfg).await.unwrap();
        let docs = [doc("market", "the stock market fell sharply"), doc("rain", "heavy rain tomorrow")];
        engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    }
    let mut cfg = config(dir.path());
    cfg.embedding.mode = ragtune::EmbeddingMode::On;
    let mut engine = Engine::open(cfg).await.unwrap();
    for _ in 0..2 {
        let e = engine.search_with(Query::new("stock market"), Strategy::Dense).await.unwrap_err();
        assert!(e.to_string().contains("holds no dense vectors"), "{e}");
        let auto = engine.search(Query::new("stock market")).await.unwrap();
        assert_eq!(auto.trace[0].action, "bm25", "auto falls back to BM25 and says why");
        assert!(auto.trace[0].detail["fallback"].as_str().unwrap().contains("no dense vectors"));
    }
    // Indexed again with the model: dense retrieval works at once, and keeps working.
    let docs = [doc("market", "the stock market fell sharply"), doc("rain", "heavy rain tomorrow")];
    engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    for _ in 0..2 {
        let dense = engine.search_with(Query::new("shares dropped").with_top_k(1), Strategy::Dense).await.unwrap();
        assert_eq!(dense.hits[0].chunk.id, "market");
        assert_eq!(engine.search(Query::new("stock market")).await.unwrap().trace[0].action, "hybrid");
    }
}
