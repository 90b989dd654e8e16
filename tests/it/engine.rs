//! The engine on the embedded store: indexing, re-indexing, persistence, determinism.

use ragtune::core::{ChunkKind, Ctx, Document, Query, VectorStore};
use ragtune::{Chunking, Engine};

use crate::engine_in;

fn render(hits: &[ragtune::core::Candidate]) -> String {
    hits.iter().map(|c| format!("{} {:.4}", c.chunk.id, c.score)).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn reindexing_a_document_replaces_all_its_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = engine_in(dir.path()).await;
    let cfg = ragtune::ingest::ChunkerConfig { chunk_size: 5, chunk_overlap: 1, max_section_size: 50 };
    let long = Document::new("doc", "one two three four five six seven eight nine ten eleven twelve thirteen");
    engine.index_documents(&[long], Chunking::Sections(cfg), &mut |_, _| {}).await.unwrap();
    let before = engine.store().stats(&Ctx::new()).await.unwrap();
    assert!(before.chunks > 3, "{before:?}");
    let short = Document::new("doc", "fourteen fifteen");
    engine.index_documents(&[short], Chunking::Sections(cfg), &mut |_, _| {}).await.unwrap();
    let after = engine.store().stats(&Ctx::new()).await.unwrap();
    assert_eq!((after.documents, after.chunks), (1, 2), "one section and one passage remain");
    assert!(engine.search(Query::new("thirteen")).await.unwrap().hits.is_empty());
    let hits = engine.search(Query::new("fifteen")).await.unwrap().hits;
    assert_eq!(hits[0].chunk.kind, ChunkKind::Passage);
    let parent = hits[0].chunk.parent_id.clone().expect("a passage of a section knows its parent");
    let fetched = engine.store().get(&Ctx::new(), &[parent]).await.unwrap();
    assert_eq!(fetched[0].as_ref().map(|c| c.kind), Some(ChunkKind::Section));
}

#[tokio::test]
async fn rankings_are_deterministic_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let docs: Vec<Document> = (0..50)
        .map(|i| Document::new(format!("d{i:02}"), format!("shared words {} topic{}", "filler ".repeat(i % 7), i % 5)))
        .collect();
    let first = {
        let mut engine = engine_in(dir.path()).await;
        engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
        render(&engine.search(Query::new("shared topic3").with_top_k(20)).await.unwrap().hits)
    };
    let engine: Engine = engine_in(dir.path()).await;
    let again = render(&engine.search(Query::new("shared topic3").with_top_k(20)).await.unwrap().hits);
    assert_eq!(first, again);
    // Equal scores are ordered by id.
    let lines: Vec<(&str, &str)> = again.lines().map(|l| l.split_once(' ').unwrap()).collect();
    for w in lines.windows(2) {
        assert!(w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0), "{w:?}");
    }
}

#[tokio::test]
async fn the_store_keeps_its_bm25_parameters() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut cfg = ragtune::Config::default();
        cfg.store.path = dir.path().join("store");
        cfg.bm25.k1 = 0.9;
        cfg.bm25.b = 0.4;
        let mut engine = Engine::open(cfg).await.unwrap();
        engine
            .index_documents(&[Document::new("a", "alpha beta gamma")], Chunking::WholeDocuments, &mut |_, _| {})
            .await
            .unwrap();
    }
    // Reopened with default parameters, the engine encodes with those the store was built with.
    let engine = engine_in(dir.path()).await;
    let cfg = engine.encoder().expect("the store has a sparse space").config();
    assert_eq!((cfg.k1, cfg.b, cfg.avg_doc_len), (0.9, 0.4, 3.0));
}

#[tokio::test]
async fn the_header_boost_lifts_passages_under_matching_headings_and_is_traced() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ragtune::Config::default();
    cfg.store.path = dir.path().join("store");
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    let mut md = Document::new("guide.md", "# Linux Install\nUse the script for linux.\n");
    md.metadata.insert("format".into(), ragtune::ingest::FORMAT_MARKDOWN.into());
    let notes = Document::new("notes", "install linux ".repeat(6));
    let weak = Document::new("weak", format!("install {}", "filler ".repeat(30)));
    let docs = [md, notes, weak];
    let chunking = Chunking::Auto(ragtune::ingest::ChunkerConfig::default());
    let search = |engine: &Engine| {
        let engine = engine.clone();
        async move { engine.search(Query::new("install linux").with_top_k(5)).await.unwrap() }
    };
    let plain_ranking = {
        let mut engine = Engine::open(cfg.clone()).await.unwrap();
        engine.index_documents(&docs, chunking, &mut |_, _| {}).await.unwrap();
        let r = search(&engine).await;
        assert!(r.trace.iter().all(|e| e.stage != "header_boost"), "off by default");
        render(&r.hits)
    };
    assert!(plain_ranking.starts_with("notes "), "{plain_ranking}");
    cfg.search.header_boost = 1.0;
    let engine = Engine::open(cfg).await.unwrap();
    let first = search(&engine).await;
    let event = first.trace.iter().find(|e| e.stage == "header_boost").expect("a header_boost event");
    assert_eq!(event.action, "boost");
    let boosted = event.detail["boosted"].as_array().unwrap();
    // The heading `Linux Install` has exactly the query's keywords (Jaccard 1): the passage gains the whole spread
    // of the list, so it passes the best hit; the others have no header path.
    assert_eq!(boosted.len(), 1, "{boosted:?}");
    assert_eq!(boosted[0]["jaccard"], 1.0);
    assert_eq!(boosted[0]["chunk"], first.hits[0].chunk.id.as_str());
    assert_eq!(first.hits[0].chunk.doc_id, "guide.md", "{}\nwithout the boost:\n{plain_ranking}", render(&first.hits));
    assert_eq!(render(&search(&engine).await.hits), render(&first.hits), "deterministic");
}
