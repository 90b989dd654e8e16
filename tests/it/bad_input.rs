//! Bad input gets a clear error and loses nothing else.

use ragtune::core::{Document, ErrorKind, Query};
use ragtune::{Chunking, Engine};

use crate::engine_in;

async fn indexed(dir: &std::path::Path) -> Engine {
    let mut engine = engine_in(dir).await;
    let docs = vec![Document::new("a", "alpha particles and beta decay"), Document::new("b", "gamma rays")];
    engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    engine
}

#[tokio::test]
async fn empty_and_huge_queries_are_refused_and_the_engine_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let engine = indexed(dir.path()).await;
    let err = engine.search(Query::new("")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(err.to_string(), "the query is empty");
    let err = engine.search(Query::new("beta ".repeat(20 * 1024))).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.to_string().contains("102400 bytes long"), "{err}");
    let ok = engine.search(Query::new("beta decay")).await.unwrap();
    assert_eq!(ok.hits[0].chunk.id, "a");
}

#[tokio::test]
async fn a_malformed_jsonl_line_is_reported_with_file_and_line_and_the_rest_is_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("docs.jsonl");
    std::fs::write(
        &file,
        "{\"id\": \"1\", \"text\": \"first document about rivers\"}\n{\"id\": \"2\", \"text\": \n{\"id\": \"3\", \"text\": \"third document about mountains\"}\n",
    )
    .unwrap();
    let mut engine = engine_in(dir.path()).await;
    let report = engine.index_path(&file, &[], &mut |_, _| {}).await.unwrap();
    assert_eq!(report.documents, 2);
    assert_eq!(report.issues.len(), 1, "{:?}", report.issues);
    assert!(report.issues[0].contains("docs.jsonl:2"), "{:?}", report.issues);
    assert_eq!(engine.search(Query::new("mountains")).await.unwrap().hits[0].chunk.doc_id, "3");
}

#[tokio::test]
async fn invalid_utf8_is_reported_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("good.md"), "# Good\n\nReadable text about lakes.").unwrap();
    std::fs::write(docs.join("bad.txt"), b"caf\xe9 latin-1 text").unwrap();
    let mut engine = engine_in(dir.path()).await;
    let report = engine.index_path(&docs, &[], &mut |_, _| {}).await.unwrap();
    assert_eq!(report.documents, 1);
    assert!(report.issues.iter().any(|i| i.contains("bad.txt") && i.contains("UTF-8")), "{:?}", report.issues);
}

#[tokio::test]
async fn missing_files_and_empty_corpora_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = engine_in(dir.path()).await;
    let err = engine.index_path(&dir.path().join("nope"), &[], &mut |_, _| {}).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("nope"), "{err}");

    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let err = engine.index_path(&empty, &[], &mut |_, _| {}).await.unwrap_err();
    assert!(err.to_string().contains("no documents found"), "{err}");
    let err = engine.index_documents(&[], Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);

    let beir = dir.path().join("beir");
    std::fs::create_dir_all(beir.join("qrels")).unwrap();
    std::fs::write(beir.join("corpus.jsonl"), "").unwrap();
    std::fs::write(beir.join("queries.jsonl"), "{\"_id\": \"q\", \"text\": \"x\"}\n").unwrap();
    std::fs::write(beir.join("qrels/test.tsv"), "query-id\tcorpus-id\tscore\r\nq\td\t1\r\n").unwrap();
    let err = ragtune::ingest::load_beir(&beir, "test").unwrap_err();
    assert!(err.to_string().contains("no documents found"), "{err}");
    let err = ragtune::ingest::load_beir(&beir, "dev").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("test"), "the message lists the available splits: {err}");
}

#[tokio::test]
async fn a_huge_document_is_chunked_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = engine_in(dir.path()).await;
    let mut text = String::from("# Huge\n\n");
    for i in 0..200_000 {
        text.push_str(&format!("word{} ", i % 5000));
        if i % 50 == 49 {
            text.push_str("end.\n\n");
        }
    }
    text.push_str("needle");
    let mut doc = Document::new("huge.md", text);
    doc.metadata.insert("format".into(), "markdown".into());
    let report = engine
        .index_documents(&[doc], Chunking::Auto(ragtune::ingest::ChunkerConfig::default()), &mut |_, _| {})
        .await
        .unwrap();
    assert!(report.passages > 1000, "{report:?}");
    let hits = engine.search(Query::new("needle").with_top_k(1)).await.unwrap().hits;
    assert!(hits[0].chunk.text.contains("needle"));
    assert_eq!(hits[0].chunk.header_path, vec!["Huge".to_owned()]);
}
